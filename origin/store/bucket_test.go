package store

import (
	"context"
	"testing"
	"time"
)

// TestNoNextTokenWhileTheCircuitHoldsASubscriberBack: a subscriber whose circuit opened while one of its
// deliveries was still in flight cools down; claims then hold it back because the previous
// delivery is still out (no probe may go), not because of its bucket, which is full. The claim
// must not report the bucket's next token as due in a millisecond: the engine polls at NextToken,
// and would claim (a write transaction) every millisecond until that delivery settles.
func TestNoNextTokenWhileTheCircuitHoldsASubscriberBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 1, Burst: 2, MaxInFlight: 4})
	emitN(t, s, "x", 5)
	cs := claim(t, s, clk.Now(), 10).Deliveries // the burst: 2 in flight, leased a minute
	if len(cs) != 2 {
		t.Fatalf("claimed %d, want the burst of 2", len(cs))
	}
	fail := done(cs[0], ResultRetry)
	fail.NextAttemptAt, fail.Circuit = clk.Now(), CircuitFailure
	pol := CircuitPolicy{Threshold: 1, BaseCooldown: 10 * time.Second, MaxCooldown: time.Minute}
	if _, err := s.Settle(ctx, clk.Now(), pol, []Settlement{fail}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(11 * time.Second) // cooled down; cs[1] is still in flight, the bucket is full again
	res := claim(t, s, clk.Now(), 10)
	if len(res.Deliveries) != 0 {
		t.Fatalf("claimed %d while the previous delivery is out, want no probe", len(res.Deliveries))
	}
	if res.NextToken > 0 && res.NextToken < 500*time.Millisecond {
		t.Fatalf("NextToken %s with a full bucket (2 tokens): the claim says the bucket limits a subscriber its open circuit holds back", res.NextToken)
	}
	settle(t, s, clk.Now(), done(cs[1], ResultDelivered))
}

// TestARateChangeIsNotRetroactive: a subscriber limited to one delivery every 10 s has an
// empty bucket; 10 s later it has earned one token. Raising its rate then must not credit the
// past 10 s at the new rate: the bucket holds the one token earned, and the new rate applies from
// the change on.
func TestARateChangeIsNotRetroactive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 0.1, Burst: 10, MaxInFlight: 100})
	emitN(t, s, "x", 30)
	var all []Claimed
	first := claim(t, s, clk.Now(), 100).Deliveries
	if len(first) != 10 {
		t.Fatalf("claimed %d, want the burst of 10", len(first))
	}
	all = append(all, first...)
	clk.Advance(10 * time.Second) // one token earned at 0.1/s
	rate := 100.0
	if _, err := s.UpdateSubscriber(ctx, "a", SubscriberPatch{RatePerSec: &rate}); err != nil {
		t.Fatal(err)
	}
	got := claim(t, s, clk.Now(), 100).Deliveries
	all = append(all, got...)
	for _, c := range all {
		settle(t, s, clk.Now(), done(c, ResultDelivered))
	}
	if len(got) > 1 {
		t.Fatalf("claimed %d right after the rate change, want the 1 token earned at the old rate: the new rate was applied to the 10 s before it", len(got))
	}
}

// TestASlowBucketsNextTokenIsFarOff: rate_per_sec only has to be above 0. For a bucket
// that earns a token every ~300 years, the next token is not a millisecond away (the
// float-to-Duration conversion overflows and the 1 ms floor hides it).
func TestASlowBucketsNextTokenIsFarOff(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 1e-10, Burst: 1, MaxInFlight: 10})
	emitN(t, s, "x", 2)
	first := claim(t, s, clk.Now(), 10).Deliveries
	if len(first) != 1 {
		t.Fatalf("claimed %d, want the burst of 1", len(first))
	}
	res := claim(t, s, clk.Now(), 10)
	settle(t, s, clk.Now(), done(first[0], ResultDelivered))
	if len(res.Deliveries) != 0 || !res.Waiting || res.NextToken < time.Hour {
		t.Fatalf("claimed %d, waiting %v, next token in %s; want none, waiting, the next token centuries away", len(res.Deliveries), res.Waiting, res.NextToken)
	}
}

// TestNextTokenAfterTheClockWentBackALittle: the clock is set back 30 s, less than clockSlack, so
// the empty bucket refills nothing until the clock reads its last refill again. The claim must
// say its next token is that far off, not one refill interval (1 ms at 1,000/s) away: the engine
// claims again at NextToken, and would run an empty write transaction every millisecond for 30 s.
func TestNextTokenAfterTheClockWentBackALittle(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", RatePerSec: 1000, Burst: 2, MaxInFlight: 100})
	emitN(t, s, "x", 10)
	first := claim(t, s, clk.Now(), 10).Deliveries
	if len(first) != 2 {
		t.Fatalf("claimed %d, want the burst of 2", len(first))
	}
	clk.Advance(-30 * time.Second)
	res := claim(t, s, clk.Now(), 10)
	for _, c := range first {
		settle(t, s, clk.Now(), done(c, ResultDelivered))
	}
	if len(res.Deliveries) != 0 || !res.Waiting || res.NextToken < 30*time.Second {
		t.Fatalf("claimed %d, waiting %v, next token in %s; want none, waiting, the next token 30 s away",
			len(res.Deliveries), res.Waiting, res.NextToken)
	}
}
