package engine

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// TestAResumeAfterAHoldLongerThanTheMaxAgeSendsEveryDelivery: a subscriber paused by the operator,
// or disabled by a 410, for longer than --max-age, then resumed. Its deliveries all waited for the
// same decision of the operator, yet the retries among them died unsent at once (max_age), while
// its first attempts were sent, and died at their first failure (max age already past: no retry).
// A pause must not mean a drop: once resumed, every delivery has its max age again, counted from
// the resume, to be sent and retried.
func TestAResumeAfterAHoldLongerThanTheMaxAgeSendsEveryDelivery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, hold := range map[string]int{"paused": http.StatusInternalServerError, "disabled": http.StatusGone} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 100, BackoffBase: time.Minute, BackoffCap: time.Minute})
			var answer atomic.Int32 // the sink's status
			answer.Store(int32(hold))
			k := newSink(t, func(w http.ResponseWriter, _ *recorded) { w.WriteHeader(int(answer.Load())) })
			e.sub(store.SubscriberInput{ID: "s", URL: k.URL})
			e.emit("e1", "t", `{}`)
			e.drain() // e1 failed: a retry (disabled by its 410: held)
			if name == "paused" {
				if _, err := e.st.PauseSubscriber(ctx, "s", "maintenance"); err != nil {
					t.Fatal(err)
				}
				e.emit("e2", "t", `{}`) // a first attempt, never tried
			}
			e.clk.Advance(2 * time.Hour)
			if _, err := e.st.ResumeSubscriber(ctx, "s"); err != nil {
				t.Fatal(err)
			}
			answer.Store(http.StatusInternalServerError) // not fixed yet: each one fails once more
			e.drain()
			answer.Store(http.StatusOK)
			e.clk.Advance(2 * time.Minute)
			e.drain()
			page, err := e.st.ListDeliveries(ctx, store.DeliveryFilter{})
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range page.Deliveries {
				if d.Status != store.StatusDelivered {
					t.Errorf("%s, resumed 2h later (max age 1h), failing once more, then fixed: delivery of %s %s (%q), %d attempts, last error %q; want delivered",
						name, d.EventID, d.Status, d.Reason, d.Attempts, d.LastError)
				}
			}
		})
	}
}
