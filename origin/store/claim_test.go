package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func settle(t testing.TB, s *Store, now time.Time, items ...Settlement) int {
	t.Helper()
	written, err := s.Settle(context.Background(), now, CircuitPolicy{Threshold: 3, BaseCooldown: time.Minute, MaxCooldown: 10 * time.Minute}, items)
	if err != nil {
		t.Fatal(err)
	}
	return len(written.Stale)
}

func done(c Claimed, r Result) Settlement {
	return Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID, Result: r}
}

func emitN(t testing.TB, s *Store, prefix string, n int) {
	t.Helper()
	for i := 0; i < n; i += MaxBatchEvents {
		var batch []EmitInput
		for j := i; j < min(n, i+MaxBatchEvents); j++ {
			batch = append(batch, EmitInput{ID: fmt.Sprintf("%s-%d", prefix, j), Type: prefix + ".t", Body: []byte(`{}`)})
		}
		if _, err := s.EmitBatch(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
}

func bySub(res ClaimResult) map[string]int {
	m := map[string]int{}
	for _, c := range res.Deliveries {
		m[c.Subscriber.ID]++
	}
	return m
}

func TestClaimIsFairAcrossSubscribers(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "big", Events: []string{"big.*"}, RatePerSec: 1000, Burst: 1000, MaxInFlight: 1000})
	mustSub(t, s, SubscriberInput{ID: "small", Events: []string{"small.*"}})
	emitN(t, s, "big", 1000)
	mustEmit(t, s, "small-1", "small.t", `{}`)
	got := bySub(claim(t, s, clk.Now(), 16))
	if got["small"] != 1 || got["big"] != 15 {
		t.Fatalf("claimed %v; the subscriber with one delivery must get it in the same claim", got)
	}
}

// TestClaimServesMoreSubscribersThanOneStatement: past claimChunk subscribers a claim runs several
// statements per kind, and each subscriber still gets its share, twice (the second claim runs the
// prepared statements).
func TestClaimServesMoreSubscribersThanOneStatement(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	n := claimChunk*2 + 3
	for i := range n {
		mustSub(t, s, SubscriberInput{ID: fmt.Sprintf("s%02d", i)})
	}
	emitN(t, s, "x", 10)
	for range 2 {
		got := bySub(claim(t, s, clk.Now(), 2*n))
		if len(got) != n {
			t.Fatalf("claimed for %d subscribers, want %d: %v", len(got), n, got)
		}
		for id, k := range got {
			if k != 2 {
				t.Fatalf("claimed %d for %s, want 2 each: %v", k, id, got)
			}
		}
		s.stmtMu.Lock()
		prepared := s.stmts[dueRowsSQL("attempts = 0", claimChunk)] != nil
		s.stmtMu.Unlock()
		if !prepared {
			t.Fatal("the claim statement was not prepared after its first use")
		}
	}
}

func TestClaimPrefersFirstAttempts(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "old", "t", `{}`)
	c := claim(t, s, clk.Now(), 1).Deliveries[0]
	settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: clk.Now()})
	clk.Advance(time.Second)
	mustEmit(t, s, "new", "t", `{}`)
	got := claim(t, s, clk.Now(), 1).Deliveries
	if len(got) != 1 || got[0].Event.ID != "new" {
		t.Fatalf("claimed %v, want the first attempt before the older retry", got)
	}
	if got := claim(t, s, clk.Now(), 1).Deliveries; len(got) != 1 || got[0].Event.ID != "old" || got[0].Attempts != 1 {
		t.Fatalf("then the retry: %+v", got)
	}
}

func TestClaimTokenBucket(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 2, Burst: 3, MaxInFlight: 100})
	emitN(t, s, "x", 20)
	start := clk.Now()
	total := 0
	for step := range 20 {
		res := claim(t, s, clk.Now(), 100)
		total += len(res.Deliveries)
		if limit := 3 + 2*clk.Now().Sub(start).Seconds(); float64(total) > limit {
			t.Fatalf("step %d: %d claimed after %s, limit %.1f", step, total, clk.Now().Sub(start), limit)
		}
		if len(res.Deliveries) == 0 && !res.Waiting && total < 20 {
			t.Fatalf("step %d: rate-limited but not Waiting", step)
		}
		for _, c := range res.Deliveries {
			settle(t, s, clk.Now(), done(c, ResultDelivered))
		}
		clk.Advance(250 * time.Millisecond)
	}
	// 3 at once, then 2 per second: at 4.75 s the bucket allowed 3 + 9.5 → 12.
	if total != 12 {
		t.Fatalf("claimed %d in 4.75 s, want 12 (burst 3 + 2/s)", total)
	}
	// At 5 s the bucket has allowed 13: one more, and it is empty, the next token 500 ms away.
	res := claim(t, s, clk.Now(), 100)
	if len(res.Deliveries) != 1 || !res.Waiting || res.NextToken != 500*time.Millisecond {
		t.Fatalf("claimed %d, waiting %v, next token in %s; want 1, true, 500ms", len(res.Deliveries), res.Waiting, res.NextToken)
	}
}

func TestClaimInFlightCapAndPause(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", MaxInFlight: 2})
	emitN(t, s, "x", 5)
	first := claim(t, s, clk.Now(), 10)
	if len(first.Deliveries) != 2 {
		t.Fatalf("claimed %d, in-flight cap 2", len(first.Deliveries))
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 || !res.Waiting {
		t.Fatalf("at the cap: %+v", res)
	}
	pause := clk.Now().Add(30 * time.Second) // within the one-minute lease of the other
	c := first.Deliveries[0]
	settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: pause, PauseUntil: pause})
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 || res.Waiting {
		t.Fatalf("paused subscriber was claimed or reported waiting: %+v", res)
	}
	clk.Advance(30 * time.Second)
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 1 {
		t.Fatalf("after the pause: %d claimed, want 1 (one still in flight)", len(res.Deliveries))
	}
}

// TestExpiredLeasesAreLookedForOncePerInterval: a claim looks for expired leases only when
// rescueInterval of claim time has passed since the last look, so a lease that expired in between
// waits for the next look.
func TestExpiredLeasesAreLookedForOncePerInterval(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "e", "t", `{}`)
	short := func() []Claimed {
		res, err := s.Claim(context.Background(), ClaimParams{Now: clk.Now(), Limit: 1, LeaseDuration: rescueInterval / 4})
		if err != nil {
			t.Fatal(err)
		}
		return res.Deliveries
	}
	if got := short(); len(got) != 1 { // looks (the first claim), then leases
		t.Fatalf("first claim took %d", len(got))
	}
	clk.Advance(rescueInterval / 2) // the lease has expired, the next look is not due
	if got := short(); len(got) != 0 {
		t.Fatalf("claimed %d before the next look for expired leases", len(got))
	}
	clk.Advance(rescueInterval / 2)
	if got := short(); len(got) != 1 {
		t.Fatalf("claimed %d once the look was due, want the expired lease", len(got))
	}
}

func TestExpiredLeaseIsReclaimedAndStaleSettleIgnored(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "e", "t", `{}`)
	old := claim(t, s, clk.Now(), 1).Deliveries[0]
	if res := claim(t, s, clk.Now(), 1); len(res.Deliveries) != 0 {
		t.Fatal("a leased delivery was claimed twice")
	}
	clk.Advance(time.Minute) // the lease ends
	again := claim(t, s, clk.Now(), 1).Deliveries
	if len(again) != 1 || again[0].Seq != old.Seq || again[0].LeaseToken == old.LeaseToken {
		t.Fatalf("expired lease not reclaimed with a new token: %+v", again)
	}
	if stale := settle(t, s, clk.Now(), done(old, ResultDelivered)); stale != 1 {
		t.Fatalf("settle with the lost lease: stale = %d, want 1", stale)
	}
	d, err := s.GetDelivery(context.Background(), old.DeliveryID)
	if err != nil || d.Status != StatusLeased {
		t.Fatalf("the old owner overwrote the new one: %+v %v", d, err)
	}
	if stale := settle(t, s, clk.Now(), done(again[0], ResultDelivered)); stale != 0 {
		t.Fatal("the new owner's settle was refused")
	}
}

func TestSettleAndClaimInOneTransaction(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", MaxInFlight: 2})
	mustSub(t, s, SubscriberInput{ID: "b", Events: []string{"b.*"}})
	emitN(t, s, "a", 4) // a.t events: for a only
	first := claim(t, s, clk.Now(), 10).Deliveries
	if len(first) != 2 {
		t.Fatalf("claimed %d, want a's cap of 2", len(first))
	}
	emitN(t, s, "b", 3) // for a and b
	policy := CircuitPolicy{Threshold: 3, BaseCooldown: time.Minute, MaxCooldown: 10 * time.Minute}
	ok := done(first[0], ResultDelivered)
	ok.Attempt = &Attempt{At: clk.Now(), Status: 200, Outcome: "delivered"}
	lost := done(first[1], ResultDelivered)
	lost.LeaseToken = "stale" // a lease taken over: changes nothing, and must not stop the claim
	written, res, err := s.SettleAndClaim(context.Background(), clk.Now(), policy, []Settlement{ok, lost},
		ClaimParams{Now: clk.Now(), Limit: 10, LeaseDuration: time.Minute})
	if stale := written.Stale; err != nil || len(stale) != 1 || stale[0] != lost.Seq {
		t.Fatalf("stale = %v, err = %v; want [%d], nil", stale, err, lost.Seq)
	}
	bySub := map[string]int{}
	for _, c := range res.Deliveries {
		bySub[c.Subscriber.ID]++
		if c.Seq == first[0].Seq || c.Seq == first[1].Seq {
			t.Fatalf("delivery %d claimed again", c.Seq)
		}
	}
	// a got back the one place its settle freed (the stale one still holds the other); b all 3.
	if bySub["a"] != 1 || bySub["b"] != 3 || !res.Waiting {
		t.Fatalf("claimed %v (waiting %v), want a:1 b:3 with a's due work left waiting", bySub, res.Waiting)
	}
	d, err := s.GetDelivery(context.Background(), first[0].DeliveryID)
	if err != nil || d.Status != StatusDelivered || len(d.AttemptLog) != 1 || d.AttemptLog[0].Number != 1 {
		t.Fatalf("settled delivery: %+v %v", d, err)
	}
	if d, err := s.GetDelivery(context.Background(), first[1].DeliveryID); err != nil || d.Status != StatusLeased {
		t.Fatalf("the stale settlement changed its delivery: %+v %v", d, err)
	}
	if got := counts(t, s, "a"); got[StatusDelivered] != 1 || got[StatusLeased] != 2 || got[StatusPending] != 4 {
		t.Fatalf("a's counts %v, want delivered 1, leased 2, pending 4", got)
	}
	// A bad batch writes nothing, neither the settle nor the claim.
	twice := done(res.Deliveries[0], ResultDelivered)
	if _, _, err := s.SettleAndClaim(context.Background(), clk.Now(), policy, []Settlement{twice, twice},
		ClaimParams{Now: clk.Now(), Limit: 10, LeaseDuration: time.Minute}); err == nil {
		t.Fatal("a delivery settled twice in one batch was accepted")
	}
	if got := counts(t, s, "b"); got[StatusLeased] != 3 || got[StatusDelivered] != 0 {
		t.Fatalf("b's counts after a refused batch: %v", got)
	}
	// With nothing to settle it is a claim, with Claim's rules (a is at its cap).
	if _, res, err := s.SettleAndClaim(context.Background(), clk.Now(), policy, nil,
		ClaimParams{Now: clk.Now(), Limit: 10, LeaseDuration: time.Minute}); err != nil || len(res.Deliveries) != 0 {
		t.Fatalf("claim past the caps: %d, %v", len(res.Deliveries), err)
	}
}

// TestSettleAndClaimTakesAReleasedDeliveryAgain: a delivery that the settle returns to the queue
// due at once is a candidate for the claim in the same transaction, though its subscriber had no
// other pending delivery.
func TestSettleAndClaimTakesAReleasedDeliveryAgain(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", MaxInFlight: 1})
	emitN(t, s, "a", 1)
	first := claim(t, s, clk.Now(), 10).Deliveries
	if len(first) != 1 {
		t.Fatalf("claimed %d, want 1", len(first))
	}
	_, res, err := s.SettleAndClaim(context.Background(), clk.Now(), CircuitPolicy{}, []Settlement{done(first[0], ResultRelease)},
		ClaimParams{Now: clk.Now(), Limit: 10, LeaseDuration: time.Minute})
	if err != nil || len(res.Deliveries) != 1 || res.Deliveries[0].Seq != first[0].Seq {
		t.Fatalf("claimed %+v, %v; want the released delivery again", res.Deliveries, err)
	}
	if got := counts(t, s, "a"); got[StatusLeased] != 1 || got[StatusPending] != 0 {
		t.Fatalf("a's counts %v, want 1 leased", got)
	}
}

// TestStatsCountsTheLastMinutesDeliveries: Stats' delivered in the last minute counts settles by
// second and subscriber; old seconds are trimmed by a later settle, and go with their subscriber.
func TestStatsCountsTheLastMinutesDeliveries(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	emitN(t, s, "x", 5)
	deliver := func(n int) {
		t.Helper()
		var items []Settlement
		seen := map[string]int{}
		for _, c := range claim(t, s, clk.Now(), n).Deliveries {
			r := ResultDelivered
			if seen[c.Subscriber.ID]++; c.Subscriber.ID == "b" && seen["b"] == 2 {
				r = ResultDead // not counted
			}
			items = append(items, done(c, r))
		}
		settle(t, s, clk.Now(), items...)
	}
	last := func(at time.Time) map[string]int64 {
		t.Helper()
		st, err := s.Stats(context.Background(), at)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, ss := range st.Subscribers {
			m[ss.SubscriberID] = ss.DeliveredLast
		}
		return m
	}
	deliver(4) // two of a delivered, of b one delivered and one dead
	clk.Advance(30 * time.Second)
	deliver(2) // one of each
	if got := last(clk.Now()); got["a"] != 3 || got["b"] != 2 {
		t.Fatalf("delivered in the last minute %v, want a:3 b:2", got)
	}
	if got := last(clk.Now().Add(45 * time.Second)); got["a"] != 1 || got["b"] != 1 {
		t.Fatalf("45 s later: %v, want only the second settle's a:1 b:1", got)
	}
	clk.Advance(3 * time.Minute)
	deliver(2)
	var old, rows int
	if err := s.r.QueryRow(`SELECT count(*) FILTER (WHERE second < ?), count(*) FROM delivered_by_second`, clk.Now().Unix()-deliveredKeep).Scan(&old, &rows); err != nil || old != 0 {
		t.Fatalf("%d seconds older than the kept %d s left after a settle (%v)", old, deliveredKeep, err)
	}
	if err := s.DeleteSubscriber(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := s.r.QueryRow(`SELECT count(*) FROM delivered_by_second WHERE subscriber_id = 'a'`).Scan(&left); err != nil || rows == 0 || left != 0 {
		t.Fatalf("a deleted subscriber keeps %d seconds of %d (%v)", left, rows, err)
	}
}

func TestCircuitBreaker(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 10)
	fail := func(c Claimed) Settlement {
		return Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: clk.Now(), Circuit: CircuitFailure}
	}
	for range 3 { // threshold 3
		c := claim(t, s, clk.Now(), 1).Deliveries[0]
		settle(t, s, clk.Now(), fail(c))
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 {
		t.Fatalf("open circuit let %d through", len(res.Deliveries))
	}
	clk.Advance(time.Minute) // first cool-down
	probe := claim(t, s, clk.Now(), 10).Deliveries
	if len(probe) != 1 || !probe[0].Probe {
		t.Fatalf("after the cool-down want exactly one probe, got %d", len(probe))
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 {
		t.Fatal("a second probe went out while the first was in flight")
	}
	settle(t, s, clk.Now(), fail(probe[0]))
	clk.Advance(time.Minute)
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 {
		t.Fatal("the cool-down did not grow after a failed probe")
	}
	clk.Advance(time.Minute) // 2 minutes: the second cool-down
	probe = claim(t, s, clk.Now(), 10).Deliveries
	if len(probe) != 1 {
		t.Fatalf("second probe: %d", len(probe))
	}
	settle(t, s, clk.Now(), Settlement{Seq: probe[0].Seq, LeaseToken: probe[0].LeaseToken, SubscriberID: "a", Result: ResultDelivered, Circuit: CircuitSuccess})
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) < 2 {
		t.Fatalf("closed circuit: %d claimed", len(res.Deliveries))
	}
}

// openCircuitCooledDown opens a store with subscriber a, five deliveries queued, whose circuit
// three failures opened and whose cool-down has passed: the next claim takes a probe.
func openCircuitCooledDown(t *testing.T) (*Store, *clock) {
	t.Helper()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 5)
	for range 3 { // threshold 3: the circuit opens
		c := claim(t, s, clk.Now(), 1).Deliveries[0]
		settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: clk.Now(), Circuit: CircuitFailure})
	}
	clk.Advance(time.Minute) // the cool-down
	return s, clk
}

// TestAReleasedProbeIsTakenAgainAtOnce: the circuit's probe returned unsent (a stop, or a
// restart, released it) told nothing about the subscriber: the next claim sends a probe again,
// instead of leaving the circuit probing, with nothing in flight, until the released lease would
// have ended.
func TestAReleasedProbeIsTakenAgainAtOnce(t *testing.T) {
	t.Parallel()
	s, clk := openCircuitCooledDown(t)
	probe := claim(t, s, clk.Now(), 10).Deliveries
	if len(probe) != 1 || !probe[0].Probe {
		t.Fatalf("after the cool-down want one probe, got %d", len(probe))
	}
	settle(t, s, clk.Now(), done(probe[0], ResultRelease))
	clk.Advance(time.Second) // the released lease had 59 s to run
	again := claim(t, s, clk.Now(), 10).Deliveries
	if len(again) != 1 || !again[0].Probe {
		t.Fatalf("after the probe's release want one probe again, got %d", len(again))
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 {
		t.Fatal("a second probe went out while the first was in flight")
	}
}

// TestAThrottledProbeIsTakenAgainAfterThePause: a probe answered 429 or 503 with Retry-After
// (or rescheduled by the edge) said nothing about the subscriber's health: the next probe goes
// once the pause is over, not only once the first probe's lease would have ended.
func TestAThrottledProbeIsTakenAgainAfterThePause(t *testing.T) {
	t.Parallel()
	s, clk := openCircuitCooledDown(t)
	for i, r := range []Result{ResultRetry, ResultReschedule} {
		probe := claim(t, s, clk.Now(), 10).Deliveries
		if len(probe) != 1 || !probe[0].Probe {
			t.Fatalf("probe %d: want one probe, got %d", i, len(probe))
		}
		it := done(probe[0], r)
		it.NextAttemptAt, it.PauseUntil = clk.Now().Add(2*time.Second), clk.Now().Add(2*time.Second)
		if r == ResultReschedule { // the edge's coalescing: no pause
			it.PauseUntil = time.Time{}
		}
		settle(t, s, clk.Now(), it)
		if r == ResultRetry {
			if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 {
				t.Fatalf("a probe went out during the Retry-After pause")
			}
		}
		clk.Advance(3 * time.Second) // the pause is over; the probe's lease had 57 s to run
	}
	if again := claim(t, s, clk.Now(), 10).Deliveries; len(again) != 1 || !again[0].Probe {
		t.Fatalf("after the pause want one probe again, got %d", len(again))
	}
}

// TestAProbeWithoutNewsIsFollowedAtOnce: a probe settled with no effect on the circuit — the
// edge's duplicate (delivered before, no news of the subscriber's health) or a failure that is not
// the subscriber's (an address refused) — left the circuit probing, with nothing in flight, until
// the probe's lease would have ended: the next probe waited up to a lease.
func TestAProbeWithoutNewsIsFollowedAtOnce(t *testing.T) {
	t.Parallel()
	for _, r := range []Result{ResultDelivered, ResultRetry} {
		s, clk := openCircuitCooledDown(t)
		probe := claim(t, s, clk.Now(), 10).Deliveries
		if len(probe) != 1 || !probe[0].Probe {
			t.Fatalf("result %d: after the cool-down want one probe, got %d", r, len(probe))
		}
		it := done(probe[0], r)
		it.NextAttemptAt = clk.Now().Add(time.Hour)
		settle(t, s, clk.Now(), it)
		clk.Advance(time.Second) // the probe's lease had 59 s to run
		if again := claim(t, s, clk.Now(), 10).Deliveries; len(again) != 1 || !again[0].Probe {
			t.Errorf("result %d: after a probe settled without news want one probe again, got %d", r, len(again))
		}
	}
}

// TestHeldDeliveriesCarryTheDisableReason: every delivery held while its subscriber is disabled
// carries the reason it was disabled with (types.go), whichever way it came to be held: the
// disable itself, a settle returning it unsent, the rescue of its expired lease, a manual retry.
func TestHeldDeliveriesCarryTheDisableReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 4)
	cs := claim(t, s, clk.Now(), 3).Deliveries
	dead := done(cs[2], ResultDead)
	dead.Reason = ReasonMaxAttempts
	settle(t, s, clk.Now(), dead)
	if _, err := s.setState(ctx, "a", StateDisabled, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	retry := done(cs[0], ResultRetry)
	retry.NextAttemptAt = clk.Now()
	settle(t, s, clk.Now(), retry)
	clk.Advance(2 * time.Minute) // cs[1]'s lease ends
	claim(t, s, clk.Now(), 10)
	if _, err := s.RetryDelivery(ctx, cs[2].DeliveryID, clk.Now()); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListDeliveries(ctx, DeliveryFilter{SubscriberID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range page.Deliveries {
		if d.Status != StatusHeld || d.Reason != "410 Gone" {
			t.Errorf("%s (event %s): %s %q, want held \"410 Gone\"", d.ID, d.EventID, d.Status, d.Reason)
		}
	}
	if len(page.Deliveries) != 4 {
		t.Fatalf("%d deliveries, want 4", len(page.Deliveries))
	}
}

func TestGoneHoldsDeliveriesUntilResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 4)
	cs := claim(t, s, clk.Now(), 2).Deliveries
	gone := Settlement{Seq: cs[0].Seq, LeaseToken: cs[0].LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: clk.Now(), Status: 410, Disable: "410 Gone", Sent: cs[0].Subscriber}
	settle(t, s, clk.Now(), gone)
	sub, _ := s.GetSubscriber(ctx, "a")
	if sub.State != StateDisabled || sub.StateReason != "410 Gone" {
		t.Fatalf("subscriber %s %q, want disabled", sub.State, sub.StateReason)
	}
	// The other one in flight comes back failed after the disable: held too.
	settle(t, s, clk.Now(), Settlement{Seq: cs[1].Seq, LeaseToken: cs[1].LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: clk.Now()})
	if c := counts(t, s, "a"); c[StatusHeld] != 4 || c[StatusPending] != 0 {
		t.Fatalf("counts %v, want all 4 held", c)
	}
	if res := mustEmit(t, s, "later", "x.t", `{}`); res.Deliveries != 0 {
		t.Fatal("a disabled subscriber got a new delivery")
	}
	if _, err := s.ResumeSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 4 {
		t.Fatalf("after resume %d claimed, want the 4 held", len(res.Deliveries))
	}
}

// TestAnExpiredLeaseOfADisabledSubscriberIsHeld: a delivery whose lease expires after its
// subscriber was disabled (its sender crashed) goes back as held, as its settle would have put
// it, not pending: a disabled subscriber's queue is held until it is resumed.
func TestAnExpiredLeaseOfADisabledSubscriberIsHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 3)
	lost := claim(t, s, clk.Now(), 1).Deliveries[0] // its sender never settles
	if _, err := s.setState(ctx, "a", StateDisabled, "410 Gone"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute) // the lease ends; the next claim looks for expired leases
	claim(t, s, clk.Now(), 10)
	if c := counts(t, s, "a"); c[StatusHeld] != 3 || c[StatusPending] != 0 || c[StatusLeased] != 0 {
		t.Fatalf("counts %v after the rescue, want all 3 held", c)
	}
	if d, err := s.GetDelivery(ctx, lost.DeliveryID); err != nil || d.Status != StatusHeld {
		t.Fatalf("the rescued delivery: %+v %v, want held", d, err)
	}
	if _, err := s.ResumeSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 3 {
		t.Fatalf("after resume %d claimed, want the 3 held", len(res.Deliveries))
	}
}

func TestRetryReplayListAndPrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 5)
	cs := claim(t, s, clk.Now(), 5).Deliveries
	for i, c := range cs {
		r := ResultDead
		if i == 0 {
			r = ResultDelivered
		}
		it := done(c, r)
		it.Reason, it.Status, it.Error = ReasonMaxAttempts, 500, "boom"
		it.Attempt = &Attempt{At: clk.Now(), Status: 500, Outcome: "http_5xx", Error: "boom", Excerpt: "oops"}
		settle(t, s, clk.Now(), it)
	}
	d, err := s.GetDelivery(ctx, cs[1].DeliveryID)
	if err != nil || d.Status != StatusDead || d.LastStatus != 500 || len(d.AttemptLog) != 1 || d.AttemptLog[0].Excerpt != "oops" || d.AttemptLog[0].Number != 1 {
		t.Fatalf("dead delivery: %+v %v", d, err)
	}
	if _, err := s.RetryDelivery(ctx, cs[0].DeliveryID, clk.Now()); !errors.Is(err, ErrInvalidState) {
		t.Fatalf("retrying a delivered delivery: %v", err)
	}
	if _, err := s.RetryDelivery(ctx, "dlv_nope_1", clk.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	// An id is the one DeliveryID renders: no other spelling of its number reaches the delivery.
	prefix, num, _ := strings.Cut(strings.TrimPrefix(cs[1].DeliveryID, "dlv_"), "_")
	for _, alias := range []string{"+" + num, "0" + num, " " + num} {
		if _, err := s.GetDelivery(ctx, "dlv_"+prefix+"_"+alias); !errors.Is(err, ErrNotFound) {
			t.Errorf("the alias %q of %s: %v, want ErrNotFound", alias, cs[1].DeliveryID, err)
		}
	}
	d, err = s.RetryDelivery(ctx, cs[1].DeliveryID, clk.Now())
	if err != nil || d.Status != StatusPending || d.Attempts != 0 {
		t.Fatalf("retry: %+v %v", d, err)
	}
	r, err := s.ReplayDead(ctx, "a", time.Time{}, clk.Now().Add(time.Second), clk.Now())
	if err != nil || r != (Replayed{Pending: 3}) {
		t.Fatalf("replay: %+v %v, want 3 pending", r, err)
	}
	// Pagination walks every delivery once, newest first.
	var seen []string
	cursor := ""
	for range 10 {
		page, err := s.ListDeliveries(ctx, DeliveryFilter{SubscriberID: "a", Limit: 2, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Deliveries {
			seen = append(seen, d.EventID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if strings.Join(seen, ",") != "x-4,x-3,x-2,x-1,x-0" {
		t.Fatalf("pages gave %v", seen)
	}
	if _, err := s.ListDeliveries(ctx, DeliveryFilter{Status: "weird"}); fieldOf(err) != "status" {
		t.Fatalf("bad status filter: %v", err)
	}
	// Retention: only the delivered one is old and finished.
	clk.Advance(48 * time.Hour)
	pruned, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour))
	if err != nil || pruned != 1 {
		t.Fatalf("prune: %d %v, want 1", pruned, err)
	}
	if _, err := s.GetDelivery(ctx, cs[0].DeliveryID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pruned delivery still there: %v", err)
	}
	if _, err := s.GetEvent(ctx, "x-0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("orphan event not pruned: %v", err)
	}
	if _, err := s.GetEvent(ctx, "x-1"); err != nil {
		t.Fatalf("event with live deliveries pruned: %v", err)
	}
}

// TestPruneWalksTheDeliveredRowsInKeyOrder: delivered rows whose seq holds their event are not in
// deliveries_status_settled (migration 0013); prune finds them by walking the rows of the events
// older than the cutoff, more than one transaction's worth, and keeps the ones delivered since the
// cutoff and those of newer events.
func TestPruneWalksTheDeliveredRowsInKeyOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	for _, id := range []string{"a", "b"} {
		mustSub(t, s, SubscriberInput{ID: id, RatePerSec: MaxRatePerSec, Burst: MaxBurst, MaxInFlight: MaxMaxInFlight})
	}
	deliverAll := func(late func(Claimed) bool) (kept []Claimed) {
		t.Helper()
		for {
			cs := claim(t, s, clk.Now(), 2*MaxMaxInFlight).Deliveries
			if len(cs) == 0 {
				return kept
			}
			var items []Settlement
			for _, c := range cs {
				it := done(c, ResultDelivered)
				if late != nil && late(c) {
					it = done(c, ResultRetry)
					it.NextAttemptAt = clk.Now().Add(47 * time.Hour)
					kept = append(kept, c)
				}
				items = append(items, it)
			}
			settle(t, s, clk.Now(), items...)
		}
	}
	emitN(t, s, "old", pruneChunk) // two rows per event: two transactions' worth and more
	late := deliverAll(func(c Claimed) bool { return c.Event.ID == "old-7" && c.Subscriber.ID == "a" })
	clk.Advance(48 * time.Hour) // the late one is due, and delivered now
	emitN(t, s, "new", 3)
	deliverAll(nil)

	pruned, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour))
	if want := int64(2*pruneChunk - 1); err != nil || pruned != want {
		t.Fatalf("prune: %d %v, want %d", pruned, err, want)
	}
	if d, err := s.GetDelivery(ctx, late[0].DeliveryID); err != nil || d.Status != StatusDelivered {
		t.Fatalf("the delivery of an old event delivered since the cutoff: %+v %v, want kept", d, err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries`); n != 1+2*3 {
		t.Fatalf("%d rows left, want the late one and the new events' 6", n)
	}
	if p := queryPlan(t, s, prunableDeliveredSQL, 1, 0, 1<<40); !strings.Contains(p, "SEARCH deliveries USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)") {
		t.Errorf("plan of prune's delivered rows %q, want a walk of a range of the key", p)
	}
}

// TestPruneWalksPastAnEventFromAClockAhead: two processes share a file, one with its clock two
// hours ahead, and it emits an event between the other's. A day and an hour later every delivery
// was delivered 25 hours ago, and a prune with a day's retention deletes the rows of the events
// the right clock created. The walk of the delivered rows ended at the event created first from
// the cutoff on, the one from the clock ahead, and so left out the rows of every event after it.
func TestPruneWalksPastAnEventFromAClockAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	s, clk := open(t, Options{Path: path})
	ahead, _ := open(t, Options{Path: path, Now: func() time.Time { return clk.Now().Add(2 * time.Hour) }})
	mustSub(t, s, SubscriberInput{ID: "s"})
	mustEmit(t, s, "x-0", "t", `{}`)
	mustEmit(t, ahead, "ahead", "t", `{}`)
	for _, id := range []string{"x-1", "x-2", "x-3"} {
		mustEmit(t, s, id, "t", `{}`)
	}
	cs := claim(t, s, clk.Now(), 10).Deliveries
	var items []Settlement
	var gone []string // the deliveries of the events the right clock created
	for _, c := range cs {
		items = append(items, done(c, ResultDelivered))
		if c.Event.ID != "ahead" {
			gone = append(gone, c.DeliveryID)
		}
	}
	settle(t, s, clk.Now(), items...)
	if n := countRows(t, s, `SELECT count(*) FROM deliveries WHERE status = 'delivered' AND created_at = 0`); n != 5 {
		t.Fatalf("%d compact delivered rows, want 5", n)
	}
	clk.Advance(25 * time.Hour)
	if n, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil || n != 5 {
		t.Fatalf("prune: %d %v, want the 5 deliveries delivered 25 hours ago", n, err)
	}
	for _, id := range gone {
		if _, err := s.GetDelivery(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("delivery %s, created and delivered 25 hours ago, kept by a prune with a day's retention: %v", id, err)
		}
	}
	if _, err := s.GetEvent(ctx, "ahead"); err != nil {
		t.Errorf("the event from the clock ahead, created less than a day ago by its clock: %v", err)
	}
}

// TestDueQueriesUseIndexes pins the query plans that must stay cheap with a million rows pending:
// claiming, coalescing, the rescue of expired leases, pruning (its events in order from where the
// last transaction stopped), backlog trimming (and disabling) and replay search the partial indexes
// instead of scanning deliveries.
func TestDueQueriesUseIndexes(t *testing.T) {
	t.Parallel()
	s, _ := open(t, Options{})
	for _, tc := range []struct {
		query string
		args  []any
		index string
	}{
		{dueRowsSQL("attempts = 0", 2), []any{"a", 1, 10, "b", 1, 10}, "deliveries_due_first"},
		{dueRowsSQL("attempts > 0", 2), []any{"a", 1, 10, "b", 1, 10}, "deliveries_due_retry"},
		{supersedeSQL, []any{1, `[["a","k"]]`}, "deliveries_coalesce"},
		{markInFlightSQL, []any{ReasonNewerEvent, `[["a","k"]]`}, "deliveries_leased"},
		{supersedeHeldSQL, []any{1, `[["a","k"]]`}, "deliveries_sub_settled"},
		{`SELECT 1 FROM deliveries WHERE ` + expiredSQL, []any{1}, "deliveries_leased"},
		{prunableSQL, []any{1}, "deliveries_status_settled"},
		{prunableEventsSQL, []any{1, 0, 0}, "events_created"},
		{pendingRowsSQL("attempts = 0"), []any{1, 1, "a", 10}, "deliveries_due_first"},
		{pendingRowsSQL("attempts > 0"), []any{1, 1, "a", 10}, "deliveries_due_retry"},
		{dueRetriesNowSQL, []any{1, "a"}, "deliveries_due_retry"},
		{`SELECT ` + hasFanoutSQL, []any{1, 0}, "fanouts_last"},
		{`SELECT 1 FROM deliveries WHERE ` + diedBetweenSQL, []any{1, "a", 1, 2}, "deliveries_sub_settled"},
	} {
		joined := queryPlan(t, s, tc.query, tc.args...)
		if !strings.Contains(joined, "INDEX "+tc.index+" ") || strings.Contains(joined, "TEMP B-TREE") {
			t.Errorf("plan for %q is %q, want a search on %s without a sort", tc.query, joined, tc.index)
		}
	}
}

// queryPlan returns SQLite's plan for q, its steps joined by "; ".
func queryPlan(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	rows, err := s.r.Query(`EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

// TestTwoHandlesShareLeasesAndBuckets opens the file twice, as two processes would, and checks a
// delivery is never leased by both and the token bucket is shared.
func TestTwoHandlesShareLeasesAndBuckets(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shared.db")
	a, clk := open(t, Options{Path: path})
	b, _ := open(t, Options{Path: path, Now: clk.Now})
	mustSub(t, a, SubscriberInput{ID: "s", RatePerSec: 1, Burst: 4, MaxInFlight: 100})
	emitN(t, b, "x", 10)
	got := len(claim(t, a, clk.Now(), 3).Deliveries) + len(claim(t, b, clk.Now(), 10).Deliveries)
	if got != 4 {
		t.Fatalf("two handles claimed %d together, want the shared burst of 4", got)
	}
}

// TestStaleClockDoesNotRefillTwice: a process that read the clock before another's claim (and
// then waited for the lock) must not be credited the same time again.
func TestStaleClockDoesNotRefillTwice(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 1, Burst: 2, MaxInFlight: 100})
	emitN(t, s, "x", 10)
	t0 := clk.Now()
	for _, step := range []struct {
		at    time.Duration
		limit int
		want  int
	}{
		{0, 1, 1},               // bucket 2 → 1
		{2 * time.Second, 1, 1}, // refilled to 2 → 1
		{time.Second, 1, 1},     // a stale reading: no refill, 1 → 0
		{2 * time.Second, 10, 0},
	} {
		if got := len(claim(t, s, t0.Add(step.at), step.limit).Deliveries); got != step.want {
			t.Fatalf("claim at +%s: %d, want %d", step.at, got, step.want)
		}
	}
}

// TestABucketRefillsAfterTheClockWentBack: a clock set back (by an hour, say) must not stop a
// subscriber's bucket from refilling until it reads the time of the last claim again; a reading a
// little older than the last claim (TestStaleClockDoesNotRefillTwice) still refills nothing.
func TestABucketRefillsAfterTheClockWentBack(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 10, Burst: 2, MaxInFlight: 100})
	emitN(t, s, "x", 10)
	if got := len(claim(t, s, clk.Now(), 10).Deliveries); got != 2 {
		t.Fatalf("claimed %d, want the burst of 2", got)
	}
	clk.Advance(-time.Hour)
	if got := len(claim(t, s, clk.Now(), 10).Deliveries); got != 0 {
		t.Fatalf("claimed %d at once after the clock went back, want 0: the bucket is empty", got)
	}
	clk.Advance(time.Second) // 10 tokens' worth, clamped at the burst
	if got := len(claim(t, s, clk.Now(), 10).Deliveries); got != 2 {
		t.Fatalf("claimed %d a second after the clock went back an hour, want the burst of 2", got)
	}
}

// TestRoundRobinGoesOnAfterTheClockWentBack: claims serve the subscribers least recently claimed
// first. With the clock set back, the ones claimed since would always come before those whose
// last claim was before, which would then get nothing from claims smaller than their number
// until the clock caught up.
func TestRoundRobinGoesOnAfterTheClockWentBack(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	for _, id := range []string{"a", "b", "c"} {
		mustSub(t, s, SubscriberInput{ID: id, RatePerSec: MaxRatePerSec, Burst: MaxBurst, MaxInFlight: 100})
	}
	emitN(t, s, "x", 10)
	if got := bySub(claim(t, s, clk.Now(), 3)); len(got) != 3 {
		t.Fatalf("claimed %v, want one each", got)
	}
	clk.Advance(-time.Hour)
	served := map[string]int{}
	for range 3 {
		clk.Advance(time.Second)
		for id, n := range bySub(claim(t, s, clk.Now(), 1)) {
			served[id] += n
		}
	}
	if len(served) != 3 {
		t.Fatalf("three claims of one after the clock went back served %v, want each subscriber once", served)
	}
}

// TestSubscriberCacheSurvivesARollback: a transaction that changes a subscriber and loads emit's
// cache of subscribers (a settle's 410 disable, then its claim) may roll back; the next change
// committed must still reach emit.
func TestSubscriberCacheSurvivesARollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	boom := errors.New("rollback")
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.setStateTx(ctx, tx, "a", StateDisabled, "gone", 0); err != nil {
			return err
		}
		if _, err := s.matchingSubscribers(ctx, tx); err != nil { // as claimTx does after a settle
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	mustSub(t, s, SubscriberInput{ID: "b"}) // commits the same version number
	if res := mustEmit(t, s, "e1", "t", `{}`); res.Deliveries != 2 {
		t.Errorf("emit made %d deliveries, want 2 (a is active, b is new)", res.Deliveries)
	}
}

// TestASubscriberWithDeliveriesInFlightIsClaimedForInChunks: once a subscriber has deliveries in
// flight, a claim takes more for it only when half its in-flight cap is free (it waits as at its
// cap meanwhile, and the claim says so); with nothing in flight, or when its bucket is what limits
// it, a claim takes what it can.
func TestASubscriberWithDeliveriesInFlightIsClaimedForInChunks(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", MaxInFlight: 4})
	emitN(t, s, "x", 10)
	first := claim(t, s, clk.Now(), 10)
	if len(first.Deliveries) != 4 {
		t.Fatalf("claimed %d, want the cap of 4", len(first.Deliveries))
	}
	settle(t, s, clk.Now(), done(first.Deliveries[0], ResultDelivered))
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 0 || !res.Waiting {
		t.Fatalf("with 1 of 4 places free: claimed %d (waiting %v), want none, waiting", len(res.Deliveries), res.Waiting)
	}
	settle(t, s, clk.Now(), done(first.Deliveries[1], ResultDelivered))
	second := claim(t, s, clk.Now(), 10)
	if len(second.Deliveries) != 2 {
		t.Fatalf("with 2 of 4 places free: claimed %d, want 2", len(second.Deliveries))
	}
	var rest []Settlement
	for _, c := range append(first.Deliveries[2:], second.Deliveries...) {
		rest = append(rest, done(c, ResultDelivered))
	}
	settle(t, s, clk.Now(), rest...)
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 4 {
		t.Fatalf("with nothing in flight: claimed %d, want the cap of 4", len(res.Deliveries))
	}

	// A bucket of one token a second, not the cap, limits b: each token is taken as it comes.
	mustSub(t, s, SubscriberInput{ID: "b", MaxInFlight: 4, RatePerSec: 1, Burst: 1})
	emitN(t, s, "y", 3)
	if got := bySub(claim(t, s, clk.Now(), 10))["b"]; got != 1 {
		t.Fatalf("claimed %d of b, want its one token", got)
	}
	clk.Advance(time.Second)
	if got := bySub(claim(t, s, clk.Now(), 10))["b"]; got != 1 {
		t.Fatalf("a second later, with one of b's in flight: claimed %d of b, want its next token", got)
	}
}

// TestReplayBoundsAreExactBelowAMillisecond: a replay takes the deliveries that died in
// [from, to); times are stored in whole milliseconds, and a bound half a millisecond after a death
// must leave it out as a from and take it in as a to (rounded down, it did the opposite).
func TestReplayBoundsAreExactBelowAMillisecond(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	emitN(t, s, "x", 1)
	died := clk.Now() // whole milliseconds
	for _, c := range claim(t, s, clk.Now(), 2).Deliveries {
		it := done(c, ResultDead)
		it.Reason = ReasonMaxAttempts
		settle(t, s, died, it)
	}
	half := 500 * time.Microsecond
	// a: from is after the death, so nothing died in [died+0.5ms, no bound).
	if r, err := s.ReplayDead(ctx, "a", died.Add(half), time.Time{}, clk.Now()); err != nil || r != (Replayed{}) {
		t.Errorf("from %s (after the death at %s): replayed %+v, %v; want none", died.Add(half).Format(time.RFC3339Nano), died.Format(time.RFC3339Nano), r, err)
	}
	// b: to is after the death, so it died in [no bound, died+0.5ms).
	if r, err := s.ReplayDead(ctx, "b", time.Time{}, died.Add(half), clk.Now()); err != nil || r != (Replayed{Pending: 1}) {
		t.Errorf("to %s (after the death at %s): replayed %+v, %v; want 1 pending", died.Add(half).Format(time.RFC3339Nano), died.Format(time.RFC3339Nano), r, err)
	}
}

// TestA410AppliesOnlyToTheSubscriberAsItWasSent: a 410 disables its subscriber only if the
// subscriber is active and unchanged since the send saw it (Settlement.Sent). To a send made
// before a pause, a URL change, or in the same millisecond as a change, it is an ordinary
// failure: the pause stays a pause (a disable stops queueing new events), the new URL is tried.
func TestA410AppliesOnlyToTheSubscriberAsItWasSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "https://example.com/new"
	for name, change := range map[string]func(s *Store) error{
		"paused":      func(s *Store) error { _, err := s.PauseSubscriber(ctx, "a", "maintenance"); return err },
		"url changed": func(s *Store) error { _, err := s.UpdateSubscriber(ctx, "a", SubscriberPatch{URL: &url}); return err },
	} {
		s, clk := open(t, Options{})
		mustSub(t, s, SubscriberInput{ID: "a"})
		emitN(t, s, "x", 2)
		cs := claim(t, s, clk.Now(), 2).Deliveries
		if len(cs) != 2 {
			t.Fatalf("%s: claimed %d, want 2", name, len(cs))
		}
		if err := change(s); err != nil { // the clock has not moved: the same millisecond
			t.Fatal(err)
		}
		gone := done(cs[0], ResultRetry)
		gone.Disable, gone.Sent, gone.NextAttemptAt = "subscriber answered 410 Gone", cs[0].Subscriber, clk.Now()
		written, err := s.Settle(ctx, clk.Now(), CircuitPolicy{}, []Settlement{gone, done(cs[1], ResultRetry)})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := s.GetSubscriber(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if sub.State == StateDisabled || len(written.Disabled) != 0 || len(written.Held) != 0 || counts(t, s, "a")[StatusPending] != 2 {
			t.Errorf("%s after the send, then its 410: subscriber %s, settle %+v, statuses %v; want not disabled, both pending",
				name, sub.State, written, counts(t, s, "a"))
		}
	}
	// Unchanged, the 410 disables it, and both deliveries are held with it.
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 2)
	cs := claim(t, s, clk.Now(), 2).Deliveries
	gone := done(cs[0], ResultRetry)
	gone.Disable, gone.Sent, gone.NextAttemptAt = "subscriber answered 410 Gone", cs[0].Subscriber, clk.Now()
	written, err := s.Settle(ctx, clk.Now(), CircuitPolicy{}, []Settlement{gone, done(cs[1], ResultRetry)})
	if err != nil || len(written.Disabled) != 1 || len(written.Held) != 2 || counts(t, s, "a")[StatusHeld] != 2 {
		t.Errorf("a 410 from the subscriber as it is: settle %+v (%v), statuses %v; want it disabled, both held", written, err, counts(t, s, "a"))
	}
}
