package engine

import (
	"net/http"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// TestAThrottledDeliveryBacksOffAsAFailure: a subscriber's rate limiter answers every request 429
// with Retry-After: 1. Each answer is an attempt (TestNoAttemptAfterTheMaxAge), and each was
// retried at its Retry-After alone: the delivery spent its 10 attempts in 9 seconds and was dead,
// where 500s would have spread them over the backoff. The subscriber is paused for its Retry-After
// exactly; the delivery waits the later of that and the backoff the attempt earns as a failure.
// With a backoff of up to an hour each, the 9 waits come to under an hour in one run of 9!
// (362,880).
func TestAThrottledDeliveryBacksOffAsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAttempts: 10, BackoffBase: time.Hour, BackoffCap: time.Hour})
	k := newSink(t, status(429, "Retry-After", "1"))
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	start := e.clk.Now()
	for n := 1; n < 10; n++ {
		e.drain()
		answered := e.clk.Now() // the clock does not move during a drain
		d := e.only()
		if d.Status != store.StatusPending || d.Attempts != n {
			t.Fatalf("after %d answers 429 Retry-After: 1 in %s: %s (%q) with %d attempts, want pending",
				n, answered.Sub(start), d.Status, d.Reason, d.Attempts)
		}
		if p := e.pausedFor(); p != time.Second {
			t.Fatalf("after attempt %d the subscriber is paused for %s, want its Retry-After, 1s", n, p)
		}
		if wait := d.NextAttemptAt.Sub(answered); wait < time.Second || wait > time.Hour {
			t.Fatalf("attempt %d is retried in %s, want between its Retry-After (1s) and its backoff's ceiling (1h)", n, wait)
		}
		e.clk.Advance(d.NextAttemptAt.Sub(answered))
	}
	e.drain()
	d := e.only()
	if took := e.clk.Now().Sub(start); took < time.Hour || d.Status != store.StatusDead || d.Reason != store.ReasonMaxAttempts || d.Attempts != 10 {
		t.Fatalf("a subscriber answering 429 Retry-After: 1 had the delivery's 10 attempts in %s, then it was %s (%q) after %d; "+
			"want them spread by the backoff as for a failure (an hour at least), then dead by max_attempts", took, d.Status, d.Reason, d.Attempts)
	}
}

// TestAThrottledRetryComesByTheLastCall: a Retry-After that ends before the last call, with the
// attempt's backoff past it, is retried at the last call as any failure is; only a wait the
// subscriber asked for past the last call makes the delivery dead (TestNoAttemptAfterTheMaxAge).
func TestAThrottledRetryComesByTheLastCall(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, BackoffBase: 2 * time.Hour, BackoffCap: 2 * time.Hour})
	now := e.clk.Now()
	c := store.Claimed{AgeFrom: now.Add(-50 * time.Minute), Attempts: 1, Subscriber: &store.Subscriber{ID: "s"}}
	last := c.AgeFrom.Add(time.Hour - time.Minute)
	throttled := response{status: http.StatusTooManyRequests, retryAfter: "60"}
	for range 20 { // the backoff is random, up to 2 h, so mostly past the last call, 9 min away
		set := e.eng.decide(c, throttled, now)
		if set.Result != store.ResultRetry || set.NextAttemptAt.Before(now.Add(time.Minute)) || set.NextAttemptAt.After(last) {
			t.Fatalf("429 Retry-After: 60, 10 min before the max age: result %d (%q) at %s, want a retry after the minute's pause, by the last call %s",
				set.Result, set.Reason, set.NextAttemptAt, last)
		}
	}
}
