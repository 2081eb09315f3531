package engine

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgehook/edgehook/origin/store"
)

// TestAStaleOutcomeIsNotCountedInTheMetrics: an outcome that comes back after its lease was
// taken over is stale: the store keeps nothing of it and the delivery is the other claim's
// (TestAnOutcomeAfterItsLeaseExpiredIsStaleNotDelivered checks the drain's counts). The Prometheus
// counters must agree with the store: the late 200 is not a delivery, and the late 500 at the
// last attempt did not dead-letter anything. They are counted when the answer is decided, before
// the settle finds the outcome stale, so edgehook_deliveries_delivered_total and
// edgehook_deliveries_dead_total (alerted on in docs/deploy.md) count deliveries the store does
// not have as delivered or dead (and the other claim counts them once more).
func TestAStaleOutcomeIsNotCountedInTheMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
	}{{"delivered", http.StatusOK}, {"dead", http.StatusInternalServerError}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{MaxAttempts: 1})
			arrived, answer := make(chan struct{}), make(chan struct{})
			k := newSink(t, func(w http.ResponseWriter, r *recorded) {
				close(arrived)
				<-answer
				w.WriteHeader(tc.status)
			})
			e.sub(store.SubscriberInput{ID: "a", URL: k.URL})
			e.emit("e1", "t", `{}`)
			done := make(chan DrainResult)
			go func() {
				res, err := e.eng.Drain(context.Background(), DrainOptions{For: 20 * time.Second, UntilIdle: true})
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			<-arrived
			e.clk.Advance(2 * DefaultLeaseDuration)
			other, err := e.st.Claim(context.Background(), store.ClaimParams{Now: e.clk.Now(), Limit: 10, LeaseDuration: DefaultLeaseDuration})
			close(answer)
			if err != nil || len(other.Deliveries) != 1 {
				t.Fatalf("the other process claimed %d deliveries (%v), want the expired one", len(other.Deliveries), err)
			}
			res := <-done
			if res.Stale != 1 {
				t.Fatalf("%+v, want the outcome stale", res)
			}
			if d := e.only(); d.Status != store.StatusLeased {
				t.Fatalf("the delivery is %s, want still leased by the other claim", d.Status)
			}
			delivered := testutil.ToFloat64(e.eng.m.delivered.WithLabelValues("a"))
			dead := testutil.ToFloat64(e.eng.m.dead.WithLabelValues("a", store.ReasonMaxAttempts))
			if delivered != 0 || dead != 0 {
				t.Fatalf("metrics after a stale outcome: deliveries_delivered_total %v, deliveries_dead_total %v; the store has it leased by another claim, want 0 and 0 (drain result %+v)",
					delivered, dead, res)
			}
		})
	}
}
