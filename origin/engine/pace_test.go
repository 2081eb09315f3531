package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

func TestPacerHoldsBackSendsTheBucketHasNoTokenFor(t *testing.T) {
	p := newPacer()
	sub := &store.Subscriber{ID: "s", RatePerSec: 50, Burst: 2} // a token every 20 ms
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i, c := range []struct {
		at   int
		want time.Duration
	}{
		{0, 0}, {0, 0}, // the burst
		{20, 0},                     // a token refilled: claimed and sent on time
		{35, 5 * time.Millisecond},  // sent 5 ms early against the bucket (the one before it was late): waits
		{60, 0},                     // the reservation above counted from 40 ms
		{61, 19 * time.Millisecond}, // back to back: one token time apart
	} {
		if got := p.reserve(sub, at(c.at)); got != c.want {
			t.Fatalf("send %d at %d ms: wait %s, want %s", i, c.at, got, c.want)
		}
	}
	other := &store.Subscriber{ID: "o", RatePerSec: 0.5, Burst: 1} // its next token is 2 s away
	if got := p.reserve(other, at(61)); got != 0 {
		t.Fatalf("another subscriber's bucket is its own: wait %s", got)
	}
	if got := p.reserve(other, at(61)); got != maxPace {
		t.Fatalf("a wait is bounded by maxPace: got %s", got)
	}
}

// TestPacerRefillsAfterTheClockWentBack: with the clock set back, a bucket refills from the new
// readings on, instead of holding every send back (up to maxPace each) until the clock has caught
// up with the old ones.
func TestPacerRefillsAfterTheClockWentBack(t *testing.T) {
	p := newPacer()
	sub := &store.Subscriber{ID: "s", RatePerSec: 10, Burst: 2} // a token every 100 ms
	t0 := time.Unix(1_000_000, 0)
	back := t0.Add(-time.Hour)
	for i, c := range []struct {
		at   time.Time
		want time.Duration
	}{
		{t0, 0}, {t0, 0}, // the burst
		{back, 100 * time.Millisecond}, // the clock went back an hour: the bucket is still empty
		{back.Add(time.Second), 0},     // a second later it has refilled
		{back.Add(time.Second), 0},     // to its burst
		{back.Add(time.Second), 100 * time.Millisecond},
	} {
		if got := p.reserve(sub, c.at); got != c.want {
			t.Fatalf("send %d at %s: wait %s, want %s", i, c.at.Sub(t0), got, c.want)
		}
	}
}

func TestPacerForgetsFullBuckets(t *testing.T) {
	p := newPacer()
	t0 := time.Unix(1_000_000, 0)
	for i := range minSweep - 1 {
		p.reserve(&store.Subscriber{ID: fmt.Sprint(i), RatePerSec: 10, Burst: 1}, t0)
	}
	busy := &store.Subscriber{ID: "busy", RatePerSec: 1, Burst: 5}
	for range 5 {
		p.reserve(busy, t0) // its bucket empty: still owed its refill
	}
	if len(p.buckets) != minSweep {
		t.Fatalf("%d buckets before the sweep, want %d", len(p.buckets), minSweep)
	}
	// A second later the first ones have refilled (1 token at 10/s); the busy one has not (1 of 5).
	p.reserve(&store.Subscriber{ID: "new", RatePerSec: 10, Burst: 1}, t0.Add(time.Second))
	if _, ok := p.buckets["busy"]; !ok || len(p.buckets) != 2 {
		t.Fatalf("after the sweep: %d buckets (busy kept: %v), want busy and new", len(p.buckets), ok)
	}
	if got := p.reserve(busy, t0.Add(time.Second)); got != 0 {
		t.Fatalf("the busy bucket refilled 1 token in 1 s: wait %s, want none", got)
	}
	if got := p.reserve(busy, t0.Add(time.Second)); got != time.Second {
		t.Fatalf("then it is empty: wait %s, want 1s", got)
	}
}
