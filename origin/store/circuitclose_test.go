package store

import (
	"slices"
	"testing"
	"time"
)

// openedCircuit emits a1–a3 for subscriber a and b1, b2 for b, fails a1–a3 and b1 (each backed
// off for an hour) and delivers b2: a's circuit opens (threshold 3), b's stays closed. It returns
// the store, its clock and a settle of a claimed delivery as failed or delivered.
func openedCircuit(t *testing.T) (*Store, *clock, func(c Claimed, ok bool)) {
	t.Helper()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"t"}})
	mustSub(t, s, SubscriberInput{ID: "b", Events: []string{"u"}})
	for _, id := range []string{"a1", "a2", "a3"} {
		mustEmit(t, s, id, "t", `{}`)
	}
	mustEmit(t, s, "b1", "u", `{}`)
	mustEmit(t, s, "b2", "u", `{}`)
	outcome := func(c Claimed, ok bool) Settlement {
		if ok {
			it := done(c, ResultDelivered)
			it.Circuit = CircuitSuccess
			return it
		}
		it := done(c, ResultRetry)
		it.NextAttemptAt, it.Status, it.Circuit = clk.Now().Add(time.Hour), 500, CircuitFailure
		return it
	}
	var items []Settlement
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		items = append(items, outcome(c, c.Event.ID == "b2"))
	}
	settle(t, s, clk.Now(), items...)
	if a, b := readLimiter(t, s, "a"), readLimiter(t, s, "b"); a.Circuit != "open" || b.Circuit != "closed" {
		t.Fatalf("circuits a %q, b %q; want a open, b closed", a.Circuit, b.Circuit)
	}
	return s, clk, func(c Claimed, ok bool) { settle(t, s, clk.Now(), outcome(c, ok)) }
}

// probeAfterCooldown lets a's cool-down (cooldown) pass, emits id for a and returns it as the
// probe the claim takes.
func probeAfterCooldown(t *testing.T, s *Store, clk *clock, cooldown time.Duration, id string) Claimed {
	t.Helper()
	clk.Advance(cooldown)
	mustEmit(t, s, id, "t", `{}`)
	probe := claim(t, s, clk.Now(), 10).Deliveries
	if len(probe) != 1 || !probe[0].Probe || probe[0].Event.ID != id {
		t.Fatalf("after the cool-down claimed %d, want %s as the probe", len(probe), id)
	}
	return probe[0]
}

// claimedIDs claims what is due and returns the event ids.
func claimedIDs(t *testing.T, s *Store, clk *clock) []string {
	t.Helper()
	var got []string
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		got = append(got, c.Event.ID)
	}
	return got
}

// TestARecoveredCircuitBringsItsRetriesForward: subscriber a failed three deliveries, each backed
// off for an hour, its circuit opened, and its first probe failed too: an outage. Once a later
// probe succeeds, the retries are due at once, not as each backoff ends (hours at the default
// --backoff-cap), since the subscriber answers again. A success on a circuit that never opened
// moves nothing: b's delivery that failed alone (a poison payload) keeps its backoff.
func TestARecoveredCircuitBringsItsRetriesForward(t *testing.T) {
	t.Parallel()
	s, clk, settleOne := openedCircuit(t)
	settleOne(probeAfterCooldown(t, s, clk, time.Minute, "a4"), false) // re-opens for 2 min
	settleOne(probeAfterCooldown(t, s, clk, 2*time.Minute, "a5"), true)
	if got, want := claimedIDs(t, s, clk), []string{"a1", "a2", "a3", "a4"}; !slices.Equal(got, want) {
		t.Errorf("claimed %v once the probe closed a's circuit, want %v: a's retries at once, b's still backing off", got, want)
	}
	if q := readQueue(t, s)["b/b1"]; q.Status != "pending" || q.NextAttemptAt != ms(clk.Now().Add(57*time.Minute)) {
		t.Errorf("b/b1: %+v; want pending, still due an hour after its failure", q)
	}
}

// TestAFirstProbesSuccessLeavesTheRetriesTheirBackoff: a's circuit opened and its first probe
// succeeded: the failures that opened it were not an outage the probe recovered from, but as
// likely a few payloads the subscriber refuses (poison) among others it takes. They keep their
// backoff: pulled forward by each such close, they failed together again, opened the circuit
// again, and spent an attempt per cool-down (12 in about 6 minutes at the defaults).
func TestAFirstProbesSuccessLeavesTheRetriesTheirBackoff(t *testing.T) {
	t.Parallel()
	s, clk, settleOne := openedCircuit(t)
	settleOne(probeAfterCooldown(t, s, clk, time.Minute, "a4"), true)
	if a := readLimiter(t, s, "a"); a.Circuit != "closed" {
		t.Fatalf("a's circuit %q after its probe succeeded, want closed", a.Circuit)
	}
	if got := claimedIDs(t, s, clk); len(got) != 0 {
		t.Errorf("claimed %v after a's first probe succeeded, want nothing: a1–a3 back off for another 59 min", got)
	}
}
