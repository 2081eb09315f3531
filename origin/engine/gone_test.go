package engine

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgehook/edgehook/origin/store"
)

// gate is a channel closed once, from the test or its cleanup.
type gate struct {
	ch   chan struct{}
	once sync.Once
}

func newGate(t *testing.T) *gate {
	g := &gate{ch: make(chan struct{})}
	t.Cleanup(g.open) // a failed test must not leave a sink's handler blocked
	return g
}

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// waitGate waits for g, bounded.
func waitGate(t *testing.T, g *gate, what string) {
	t.Helper()
	select {
	case <-g.ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// waitUntil polls cond every few milliseconds, bounded at 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestAStale410DoesNotUndoAnOperatorsFix (from a review of admin operations racing deliveries): a subscriber's old endpoint answers 410 to two sends in
// flight. The first 410 disables it (as documented); the operator then points it at its new URL
// and resumes it (PATCH url, POST resume: both acknowledged), and e1 is delivered there. Then the
// second send — made to the old URL before the fix — comes back 410 too. That answer is about a
// URL the subscriber no longer has, from before the resume, yet the settle disables the
// subscriber again: the operator's acknowledged resume is silently undone, every event emitted
// from then on is not queued for it at all (a disabled subscriber gets no new deliveries), and
// nothing is sent to the new URL until someone notices and resumes it a second time.
func TestAStale410DoesNotUndoAnOperatorsFix(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	arrived := map[string]*gate{"e1": newGate(t), "e2": newGate(t)}
	answer := map[string]*gate{"e1": newGate(t), "e2": newGate(t)}
	old := newSink(t, func(w http.ResponseWriter, r *recorded) {
		id := r.header.Get("webhook-id")
		if arrived[id] == nil {
			w.WriteHeader(http.StatusGone)
			return
		}
		arrived[id].open()
		<-answer[id].ch
		w.WriteHeader(http.StatusGone)
	})
	fresh := newSink(t, status(http.StatusNoContent))
	e.sub(store.SubscriberInput{ID: "a", URL: old.URL})
	e.emit("e1", "t", `{"n":1}`)
	e.emit("e2", "t", `{"n":2}`)
	done := e.drainInBackground()
	waitGate(t, arrived["e1"], "e1 to reach the old URL")
	waitGate(t, arrived["e2"], "e2 to reach the old URL")

	answer["e1"].open() // 410: the subscriber is disabled
	waitUntil(t, "the first 410 to disable the subscriber", func() bool {
		s, err := e.st.GetSubscriber(ctx, "a")
		return err == nil && s.State == store.StateDisabled
	})
	// The operator's fix, acknowledged.
	url := fresh.URL
	if _, err := e.st.UpdateSubscriber(ctx, "a", store.SubscriberPatch{URL: &url}); err != nil {
		t.Fatal(err)
	}
	if s, err := e.st.ResumeSubscriber(ctx, "a"); err != nil || s.State != store.StateActive {
		t.Fatalf("resume: %v, %+v", err, s)
	}
	e.eng.Wake()
	waitUntil(t, "e1 to be delivered to the new URL", func() bool { return len(fresh.received()) == 1 })

	answer["e2"].open() // the old URL's answer to a request sent before the fix
	res := <-done

	s, err := e.st.GetSubscriber(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r, err := e.st.Emit(ctx, store.EmitInput{ID: "e3", Type: "t", Body: []byte(`{"n":3}`)})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != store.StateActive || r.Deliveries != 1 {
		t.Fatalf("after the operator pointed the subscriber at %s and resumed it, a 410 from its old URL (to a send made before the fix) "+
			"left it %s (reason %q) and a new event got %d deliveries; want active and 1 (drain %+v)", fresh.URL, s.State, s.StateReason, r.Deliveries, res)
	}
}

// TestAFailureHeldWithItsDisabledSubscriberIsNotCountedRetried: two sends in flight; the first is
// answered 410, which disables the subscriber, and then the second 500. The store writes the
// second held (its subscriber is disabled: not due again until a resume), yet the drain result
// counts it retried and edgehook_deliveries_retried_total ("Failed attempts that were scheduled
// again (not a 410's, held with its subscriber)") goes up, as TestA410IsNotCountedRetried pins for
// the 410 itself.
func TestAFailureHeldWithItsDisabledSubscriberIsNotCountedRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	ctx := context.Background()
	arrived := map[string]*gate{"e1": newGate(t), "e2": newGate(t)}
	answer := map[string]*gate{"e1": newGate(t), "e2": newGate(t)}
	code := map[string]int{"e1": http.StatusGone, "e2": http.StatusInternalServerError}
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		id := r.header.Get("webhook-id")
		if arrived[id] == nil {
			w.WriteHeader(http.StatusOK)
			return
		}
		arrived[id].open()
		<-answer[id].ch
		w.WriteHeader(code[id])
	})
	e.sub(store.SubscriberInput{ID: "a", URL: k.URL})
	e.emit("e1", "t", `{"n":1}`)
	e.emit("e2", "t", `{"n":2}`)
	done := e.drainInBackground()
	waitGate(t, arrived["e1"], "e1 to arrive")
	waitGate(t, arrived["e2"], "e2 to arrive")
	answer["e1"].open()
	waitUntil(t, "the 410 to disable the subscriber", func() bool {
		s, err := e.st.GetSubscriber(ctx, "a")
		return err == nil && s.State == store.StateDisabled
	})
	answer["e2"].open()
	res := <-done
	page, err := e.st.ListDeliveries(ctx, store.DeliveryFilter{EventID: "e2"})
	if err != nil || len(page.Deliveries) != 1 || page.Deliveries[0].Status != store.StatusHeld {
		t.Fatalf("e2: %+v (%v), want one held delivery (the premise)", page.Deliveries, err)
	}
	if v := testutil.ToFloat64(e.eng.m.retried.WithLabelValues("a")); v != 0 || res.Retried != 0 || res.Held != 2 {
		t.Fatalf("both deliveries are held with their disabled subscriber, none scheduled again, but deliveries_retried_total{subscriber=\"a\"} = %v and the drain result says retried %d, held %d",
			v, res.Retried, res.Held)
	}
}

// TestA410AtTheLastAttemptIsTheLast: with --max-attempts 1, the one send is answered 410. A 410
// settles as a failure, and one at the last allowed attempt is final, whether it disables the
// subscriber or not: no send may count as a second attempt. "current": the subscriber as it was
// sent to answered; it is disabled, and the delivery must not wait held to be sent again after
// the resume. "stale": the 410 came after the operator pointed the subscriber at a new URL, so it
// is not applied and, the old URL's, counts no attempt: the new URL (answering 500) gets the one
// attempt allowed, and not a second once the backoff has passed.
func TestA410AtTheLastAttemptIsTheLast(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{false, true} {
		t.Run(map[bool]string{false: "current", true: "stale"}[stale], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{MaxAttempts: 1})
			ctx := context.Background()
			arrived, answer := newGate(t), newGate(t)
			old := newSink(t, func(w http.ResponseWriter, _ *recorded) {
				arrived.open()
				<-answer.ch
				w.WriteHeader(http.StatusGone)
			})
			fresh := newSink(t, status(http.StatusInternalServerError))
			e.sub(store.SubscriberInput{ID: "a", URL: old.URL})
			e.emit("e1", "t", `{}`)
			done := e.drainInBackground()
			waitGate(t, arrived, "e1 to be sent")
			if stale {
				url := fresh.URL
				if _, err := e.st.UpdateSubscriber(ctx, "a", store.SubscriberPatch{URL: &url}); err != nil {
					t.Fatal(err)
				}
			}
			answer.open()
			<-done
			if !stale {
				if _, err := e.st.ResumeSubscriber(ctx, "a"); err != nil {
					t.Fatal(err)
				}
			}
			e.clk.Advance(3 * time.Hour) // past any backoff (an hour to two)
			e.drain()

			d := e.only()
			want := map[bool]int{false: 0, true: 1}[stale] // the new URL's requests
			if n := len(fresh.received()); d.Status != store.StatusDead || d.Attempts != 1 || len(old.received()) != 1 || n != want {
				t.Fatalf("with --max-attempts 1, after a 410: delivery %s (reason %q) with %d attempts, requests to the old URL %d, "+
					"to the new %d; want dead with 1, 1, %d", d.Status, d.Reason, d.Attempts, len(old.received()), n, want)
			}
		})
	}
}
