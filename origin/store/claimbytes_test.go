package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// claimWithin claims as the engine does with a body budget of most bytes, holding held already.
func claimWithin(t *testing.T, s *Store, now time.Time, most, held int64) ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), ClaimParams{Now: now, Limit: 100, LeaseDuration: time.Minute, MaxBytes: most, HeldBytes: held})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// eventIDs lists the event ids of a claim's deliveries, in claim order.
func eventIDs(res ClaimResult) string {
	ids := make([]string, len(res.Deliveries))
	for i, c := range res.Deliveries {
		ids[i] = c.Event.ID
	}
	return strings.Join(ids, " ")
}

// sizedBody is a JSON object of exactly n bytes.
func sizedBody(n int) string { return `{"p":"` + strings.Repeat("x", n-8) + `"}` }

// TestClaimStopsAtTheBodyBudget: a claim takes a subscriber's deliveries oldest first while their
// bodies fit in the budget left, stops at the first that does not (leaving it and the rest
// pending, its fanout range leased only through the last one taken), takes nothing while the
// bytes held leave too little room, and takes a body larger than the whole budget when it holds
// nothing, alone. A released delivery (a row) and the fanout deliveries after it count alike.
func TestClaimStopsAtTheBodyBudget(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	for i, n := range []int{1000, 1000, 3000, 1000} {
		mustEmit(t, s, fmt.Sprintf("e%d", i), "t", sizedBody(n))
	}
	step := func(held int64, want string, wantBytes int64) ClaimResult {
		t.Helper()
		res := claimWithin(t, s, clk.Now(), 2500, held)
		if got := eventIDs(res); got != want || res.WantBytes != wantBytes {
			t.Fatalf("holding %d bytes of a budget of 2500, claimed [%s] and wants %d bytes; want [%s] and %d", held, got, res.WantBytes, want, wantBytes)
		}
		return res
	}
	first := step(0, "e0 e1", 3000).Deliveries
	if c := counts(t, s, "a"); c[StatusPending] != 2 || c[StatusLeased] != 2 {
		t.Fatalf("after a claim of 2 of 4: %v", c)
	}
	step(2000, "", 3000) // both still held: 500 bytes free
	settle(t, s, clk.Now(), done(first[0], ResultDelivered), done(first[1], ResultRelease))
	again := step(0, "e1", 3000).Deliveries // the released row, then e2 does not fit
	settle(t, s, clk.Now(), done(again[0], ResultDelivered))
	large := step(0, "e2", 1000).Deliveries // alone: then nothing fits
	if large[0].Attempts != 0 {
		t.Fatalf("the large delivery, held back twice, has %d attempts, want 0", large[0].Attempts)
	}
	settle(t, s, clk.Now(), done(large[0], ResultDelivered))
	last := step(0, "e3", 0).Deliveries
	settle(t, s, clk.Now(), done(last[0], ResultDelivered))
	if c := counts(t, s, "a"); c[StatusDelivered] != 4 {
		t.Fatalf("at the end: %v, want 4 delivered", c)
	}
}

// TestClaimBudgetKeepsALargeBodyFirst: a retry of a large body stopped by the budget is not passed
// over by another subscriber's small first attempts, which would keep bytes held and the large
// body waiting for as long as they come: the claims take nothing until it can go, alone if need
// be, and the small ones stay pending, untouched.
func TestClaimBudgetKeepsALargeBodyFirst(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"a.*"}})
	mustSub(t, s, SubscriberInput{ID: "b", Events: []string{"b.*"}})
	mustEmit(t, s, "large", "a.t", sizedBody(5000))
	c := claim(t, s, clk.Now(), 10).Deliveries[0]
	settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "a", Result: ResultRetry, NextAttemptAt: clk.Now().Add(30 * time.Second)})
	clk.Advance(time.Second)
	for i := range 5 {
		mustEmit(t, s, fmt.Sprintf("small-%d", i), "b.t", sizedBody(1000))
	}
	small := claim(t, s, clk.Now(), 1).Deliveries // b claims after a did: a comes first now
	clk.Advance(30 * time.Second)                 // the retry is due; b's lease has not run out
	if res := claimWithin(t, s, clk.Now(), 4000, 1000); len(res.Deliveries) != 0 || res.WantBytes != 5000 {
		t.Fatalf("with 3000 of 4000 bytes free: claimed [%s], wants %d bytes; want nothing, 5000 (the retry)", eventIDs(res), res.WantBytes)
	}
	if c := counts(t, s, "b"); c[StatusPending] != 4 {
		t.Fatalf("b's deliveries after the claim that stopped: %v, want 4 pending", c)
	}
	settle(t, s, clk.Now(), done(small[0], ResultDelivered))
	res := claimWithin(t, s, clk.Now(), 4000, 0)
	if eventIDs(res) != "large" || res.Deliveries[0].Attempts != 1 || res.WantBytes != 1000 {
		t.Fatalf("holding nothing: claimed [%s], wants %d bytes; want the retry alone, then 1000", eventIDs(res), res.WantBytes)
	}
}
