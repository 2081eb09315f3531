package store

import (
	"slices"
	"testing"
	"time"
)

// TestAClosedCircuitBringsItsRetriesForward: subscriber a failed three deliveries, each backed off
// for an hour, and its circuit opened; once the probe succeeds, those retries are due at once,
// not as each backoff ends (hours at the default --backoff-cap), since the subscriber answers
// again. A success on a circuit that never opened moves nothing: b's delivery that failed alone
// (a poison payload) keeps its backoff.
func TestAClosedCircuitBringsItsRetriesForward(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"t"}})
	mustSub(t, s, SubscriberInput{ID: "b", Events: []string{"u"}})
	for _, id := range []string{"a1", "a2", "a3"} {
		mustEmit(t, s, id, "t", `{}`)
	}
	mustEmit(t, s, "b1", "u", `{}`)
	mustEmit(t, s, "b2", "u", `{}`)
	claimed := map[string]Claimed{}
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		claimed[c.Event.ID] = c
	}
	failed := func(id string) Settlement {
		it := done(claimed[id], ResultRetry)
		it.NextAttemptAt, it.Status, it.Circuit = clk.Now().Add(time.Hour), 500, CircuitFailure
		return it
	}
	settle(t, s, clk.Now(), failed("a1"), failed("a2"), failed("a3"), failed("b1")) // threshold 3: a's circuit opens
	delivered := done(claimed["b2"], ResultDelivered)
	delivered.Circuit = CircuitSuccess
	settle(t, s, clk.Now(), delivered)
	if a, b := readLimiter(t, s, "a"), readLimiter(t, s, "b"); a.Circuit != "open" || b.Circuit != "closed" {
		t.Fatalf("circuits a %q, b %q; want a open, b closed", a.Circuit, b.Circuit)
	}

	clk.Advance(time.Minute) // the cool-down
	mustEmit(t, s, "a4", "t", `{}`)
	probe := claim(t, s, clk.Now(), 10).Deliveries
	if len(probe) != 1 || !probe[0].Probe || probe[0].Event.ID != "a4" {
		t.Fatalf("after the cool-down claimed %d, want a4 as the probe", len(probe))
	}
	ok := done(probe[0], ResultDelivered)
	ok.Circuit = CircuitSuccess
	settle(t, s, clk.Now(), ok)

	var got []string
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		got = append(got, c.Event.ID)
	}
	if want := []string{"a1", "a2", "a3"}; !slices.Equal(got, want) {
		t.Errorf("claimed %v once the probe closed a's circuit, want %v: a's retries at once, b's still backing off", got, want)
	}
	if q := readQueue(t, s)["b/b1"]; q.Status != "pending" || q.NextAttemptAt != ms(clk.Now().Add(59*time.Minute)) {
		t.Errorf("b/b1: %+v; want pending, still due an hour after its failure", q)
	}
}
