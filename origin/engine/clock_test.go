package engine

import (
	"net/http"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// TestAPastRetryAfterDateDoesNotBurnEveryAttempt: a subscriber answers 429 with Retry-After as an
// HTTP-date 30 s ahead of its own clock, which is a minute behind the origin's (or the origin's
// clock was stepped forward): by the origin's clock the date is past. The subscriber asked to be
// left alone; the origin must not answer by retrying at once, again and again, until every attempt
// is spent and the delivery is dead within one drain and no time passing.
func TestAPastRetryAfterDateDoesNotBurnEveryAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAttempts: 10})
	var k *sink
	k = newSink(t, func(w http.ResponseWriter, r *recorded) {
		// The subscriber's clock is 60 s behind the origin's; it asks for 30 s.
		date := e.clk.Now().Add(-60 * time.Second).Add(30 * time.Second).UTC().Format(http.TimeFormat)
		status(429, "Retry-After", date)(w, r)
	})
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	e.drain() // the fake clock does not move
	d := e.only()
	if n := len(k.received()); n != 1 || d.Status != store.StatusPending || d.Attempts != 1 {
		t.Fatalf("429 with a Retry-After date in the past: the subscriber got %d requests with no time passing, "+
			"the delivery is %s after %d attempts (reason %q); want 1 request and a pending delivery backing off",
			n, d.Status, d.Attempts, d.Reason)
	}
	if !d.NextAttemptAt.After(e.clk.Now()) {
		t.Fatalf("next attempt at %s, not after now %s", d.NextAttemptAt, e.clk.Now())
	}
}
