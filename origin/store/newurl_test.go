package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"
)

// limiterOf is a subscriber's limiter row: the bucket, the Retry-After pause and the breaker.
type limiterOf struct {
	Tokens                  float64
	RefilledAt, PausedUntil int64
	Failures                int
	Circuit                 string
	CircuitUntil            int64
	CircuitOpens            int
}

func readLimiter(t *testing.T, s *Store, id string) limiterOf {
	t.Helper()
	var l limiterOf
	if err := s.r.QueryRow(`SELECT tokens, refilled_at, paused_until, consecutive_failures, circuit, circuit_until, circuit_opens
		FROM limiter WHERE subscriber_id = ?`, id).Scan(&l.Tokens, &l.RefilledAt, &l.PausedUntil, &l.Failures, &l.Circuit,
		&l.CircuitUntil, &l.CircuitOpens); err != nil {
		t.Fatal(err)
	}
	return l
}

// queued is what a delivery's claim depends on.
type queued struct {
	Status                    string
	Attempts                  int
	NextAttemptAt             int64
	LeaseToken                string
	LeaseExpiresAt, UpdatedAt int64
}

// readQueue returns every delivery, a row or not (all_deliveries), by "subscriber/event id".
func readQueue(t *testing.T, s *Store) map[string]queued {
	t.Helper()
	rows, err := s.r.Query(`SELECT d.subscriber_id, e.id, d.status, d.attempts, d.next_attempt_at, d.lease_token, d.lease_expires_at,
		d.updated_at FROM all_deliveries d JOIN events e ON e.seq = d.event_seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]queued{}
	for rows.Next() {
		var sub, event string
		var q queued
		if err := rows.Scan(&sub, &event, &q.Status, &q.Attempts, &q.NextAttemptAt, &q.LeaseToken, &q.LeaseExpiresAt, &q.UpdatedAt); err != nil {
			t.Fatal(err)
		}
		out[sub+"/"+event] = q
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// claimedOfAAndB opens a store with subscriber a (at https://old.example.com/hook, events "t")
// and b (events "other"), emits events e1 to en for a and o1 for b, and claims every delivery:
// their claims by event id.
func claimedOfAAndB(t *testing.T, n int) (*Store, *clock, map[string]Claimed) {
	t.Helper()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", URL: "https://old.example.com/hook", Events: []string{"t"}})
	mustSub(t, s, SubscriberInput{ID: "b", Events: []string{"other"}})
	for i := 1; i <= n; i++ {
		mustEmit(t, s, fmt.Sprintf("e%d", i), "t", `{}`)
	}
	mustEmit(t, s, "o1", "other", `{}`)
	claimed := map[string]Claimed{}
	for _, c := range claim(t, s, clk.Now(), n+1).Deliveries {
		claimed[c.Event.ID] = c
	}
	if len(claimed) != n+1 {
		t.Fatalf("claimed %d deliveries, want %d", len(claimed), n+1)
	}
	return s, clk, claimed
}

// TestANewURLIsNotHeldToTheOldOnesFailures: subscriber a's old endpoint opened its circuit (three
// failures), paused it with a Retry-After and left two retries backed off by hours. A patch that
// keeps the URL (a new rate, or the URL it has) leaves all of that; a new URL resets the pause
// and the circuit and makes the retries due now, and touches nothing else: not the bucket, not a
// row in flight (leased) or a range leased, not the first attempts with a row (released, or
// rescheduled by the edge an hour on) or without one (a fanout's), not another subscriber's retry.
func TestANewURLIsNotHeldToTheOldOnesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, claimed := claimedOfAAndB(t, 6)
	now := clk.Now()
	failed := func(event string, next time.Duration) Settlement {
		it := done(claimed[event], ResultRetry)
		it.NextAttemptAt, it.Status, it.Circuit = now.Add(next), 500, CircuitFailure
		return it
	}
	// e4 fails, due at once, and is claimed again: a row in flight (status 'leased').
	settle(t, s, now, failed("e4", 0))
	if again := claim(t, s, now, 10).Deliveries; len(again) != 1 || again[0].Event.ID != "e4" {
		t.Fatalf("claimed %d deliveries again, want e4's retry", len(again))
	}
	throttled := failed("e2", 2*time.Hour)
	throttled.Status, throttled.PauseUntil = 503, now.Add(30*time.Minute)
	rescheduled := done(claimed["e3"], ResultReschedule)
	rescheduled.NextAttemptAt = now.Add(time.Hour)
	settle(t, s, now, failed("e1", time.Hour), throttled, rescheduled, done(claimed["e5"], ResultRelease),
		failed("o1", time.Hour)) // e6 stays leased in its range
	mustEmit(t, s, "e7", "t", `{}`) // a fanout delivery: no row
	if l := readLimiter(t, s, "a"); l.Circuit != "open" || l.PausedUntil != ms(now.Add(30*time.Minute)) {
		t.Fatalf("before the change: %+v; want the circuit open and a pause of 30 minutes", l)
	}

	clk.Advance(time.Second)
	now = clk.Now()
	queue := readQueue(t, s)
	var limiter limiterOf
	rate, same := 50.0, "https://old.example.com/hook"
	for _, p := range []SubscriberPatch{{RatePerSec: &rate}, {URL: &same}} {
		before := readLimiter(t, s, "a")
		if _, err := s.UpdateSubscriber(ctx, "a", p); err != nil {
			t.Fatal(err)
		}
		limiter = readLimiter(t, s, "a")
		if l := limiter; l.PausedUntil != before.PausedUntil || l.Failures != before.Failures || l.Circuit != before.Circuit ||
			l.CircuitUntil != before.CircuitUntil || l.CircuitOpens != before.CircuitOpens {
			t.Errorf("a patch that keeps the URL changed the pause or the circuit: %+v, was %+v", l, before)
		}
		if got := readQueue(t, s); !maps.Equal(got, queue) {
			t.Errorf("a patch that keeps the URL changed deliveries:\n got %+v\nwant %+v", got, queue)
		}
		if res := claim(t, s, now, 10); len(res.Deliveries) != 0 {
			t.Errorf("after a patch that keeps the URL, %d claimed, want none (the circuit is open)", len(res.Deliveries))
		}
	}

	url := "https://new.example.com/hook"
	if _, err := s.UpdateSubscriber(ctx, "a", SubscriberPatch{URL: &url}); err != nil {
		t.Fatal(err)
	}
	// The bucket as the last patch left it (the same millisecond: no refill); the rest reset.
	wantLimiter := limiterOf{Tokens: limiter.Tokens, RefilledAt: limiter.RefilledAt, Circuit: "closed"}
	if got := readLimiter(t, s, "a"); got != wantLimiter {
		t.Errorf("limiter after a new URL:\n got %+v\nwant %+v", got, wantLimiter)
	}
	want := maps.Clone(queue)
	for _, k := range []string{"a/e1", "a/e2"} {
		q := want[k]
		if q.Status != "pending" || q.Attempts != 1 || q.NextAttemptAt <= ms(now) {
			t.Fatalf("%s before the change: %+v; want a retry not due yet", k, q)
		}
		q.NextAttemptAt, q.UpdatedAt = ms(now), ms(now)
		want[k] = q
	}
	if q := want["a/e4"]; q.Status != "leased" || q.LeaseToken == "" || q.Attempts != 1 {
		t.Fatalf("a/e4 before the change: %+v; want a retry in flight", q)
	}
	got := readQueue(t, s)
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			t.Errorf("after a new URL, %s:\n got %+v\nwant %+v", k, got[k], want[k])
		}
	}
	if len(got) != len(want) {
		t.Errorf("after a new URL: %d deliveries, want %d", len(got), len(want))
	}
	var taken []string
	for _, c := range claim(t, s, now, 10).Deliveries {
		taken = append(taken, c.Subscriber.ID+"/"+c.Event.ID)
	}
	slices.Sort(taken)
	if want := []string{"a/e1", "a/e2", "a/e5", "a/e7"}; !slices.Equal(taken, want) {
		t.Errorf("after a new URL the claim took %v, want %v: the retries and the first attempts due", taken, want)
	}
}

// TestAStaleFailureIsDueAtOnceUncounted: sends made before subscriber a's URL changed fail after
// it: e1 at its first attempt (leased as part of a range), backed off an hour; e2 at its second
// (a row leased), dead for its attempts; e3 dead for its age. A failure of the endpoint the
// operator replaced costs the delivery neither a backoff nor an attempt: e1 and e2 are due now
// with the attempts they had, the failure logged (numbered 0, uncounted) and their last status;
// e3 stays dead (age is age). Subscriber b, unchanged, keeps its failure's backoff and count.
func TestAStaleFailureIsDueAtOnceUncounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk, claimed := claimedOfAAndB(t, 3)
	now := clk.Now()
	failed := func(event string, r Result) Settlement {
		c := claimed[event]
		it := done(c, r)
		it.Status, it.Error, it.Sent, it.Circuit = 500, "subscriber answered 500", c.Subscriber, CircuitFailure
		it.Attempt = &Attempt{At: now, Status: 500, Outcome: "http_5xx", Error: it.Error}
		return it
	}
	settle(t, s, now, failed("e2", ResultRetry))
	again := claim(t, s, now, 10).Deliveries
	if len(again) != 1 || again[0].Event.ID != "e2" || again[0].Attempts != 1 {
		t.Fatalf("claimed %+v again, want e2's second attempt", again)
	}
	claimed["e2"] = again[0]

	clk.Advance(time.Second)
	url := "https://new.example.com/hook"
	if _, err := s.UpdateSubscriber(ctx, "a", SubscriberPatch{URL: &url}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	now = clk.Now()
	e1, o1 := failed("e1", ResultRetry), failed("o1", ResultRetry)
	e1.NextAttemptAt, o1.NextAttemptAt = now.Add(time.Hour), now.Add(time.Hour)
	e2, e3 := failed("e2", ResultDead), failed("e3", ResultDead)
	e2.Reason, e3.Reason = ReasonMaxAttempts, ReasonMaxAge
	written, err := s.Settle(ctx, now, CircuitPolicy{Threshold: 1, BaseCooldown: time.Hour, MaxCooldown: time.Hour},
		[]Settlement{e1, e2, e3, o1})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{e1.Seq, e2.Seq}; !slices.Equal(written.Outdated, want) {
		t.Errorf("settled outdated %v, want e1 and e2 %v", written.Outdated, want)
	}
	got := readQueue(t, s)
	for k, want := range map[string]struct {
		status   string
		attempts int
		next     int64
	}{
		"a/e1": {"pending", 0, ms(now)},
		"a/e2": {"pending", 1, ms(now)},
		"a/e3": {"dead", 1, got["a/e3"].NextAttemptAt},
		"b/o1": {"pending", 1, ms(now.Add(time.Hour))},
	} {
		if q := got[k]; q.Status != want.status || q.Attempts != want.attempts || q.NextAttemptAt != want.next {
			t.Errorf("%s: %s, %d attempts, due at %d; want %s, %d, due at %d (now %d)",
				k, q.Status, q.Attempts, q.NextAttemptAt, want.status, want.attempts, want.next, ms(now))
		}
	}
	for event, numbers := range map[string][]int{"e1": {0}, "e2": {1, 0}} {
		d, err := s.GetDelivery(ctx, claimed[event].DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		var logged []int
		for _, a := range d.AttemptLog {
			if a.Status != 500 {
				t.Errorf("%s: attempt %+v, want status 500", event, a)
			}
			logged = append(logged, a.Number)
		}
		if !slices.Equal(logged, numbers) || d.LastStatus != 500 {
			t.Errorf("%s: attempts logged numbered %v, last status %d; want %v (the stale one uncounted), 500", event, logged, d.LastStatus, numbers)
		}
	}
	if l := readLimiter(t, s, "a"); l.Circuit != "closed" || l.Failures != 0 {
		t.Errorf("a's limiter %+v, want the circuit closed without failures: the failures are the old URL's", l)
	}
}
