package engine

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// TestARecoveredSubscriberGetsItsRetriesAtOnce: a subscriber down long enough to open its circuit
// and fail its first probe left three deliveries backing off for up to 6 hours (the default
// --backoff-cap). Once it answers again and a probe closes the circuit, they are sent in the same
// drain, not as each backoff ends.
func TestARecoveredSubscriberGetsItsRetriesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{CircuitThreshold: 2, CircuitCooldown: time.Minute, CircuitMaxCooldown: time.Hour,
		BackoffBase: 6 * time.Hour, BackoffCap: 6 * time.Hour})
	healthy := make(chan struct{})
	k := newSink(t, failingUntil(healthy))
	e.sub(store.SubscriberInput{URL: k.URL, MaxInFlight: 1})
	for i := range 4 {
		e.emit(fmt.Sprintf("e%d", i), "t", `{}`)
	}
	e.drain()
	if n := len(k.received()); n != 2 {
		t.Fatalf("sink got %d requests, want 2 (the circuit opens after 2 failures)", n)
	}
	e.clk.Advance(time.Minute) // the cool-down: e2 is the probe, and fails
	e.drain()
	if n := len(k.received()); n != 3 {
		t.Fatalf("sink got %d requests, want 3 (the first probe after 2 failures)", n)
	}
	close(healthy)
	e.clk.Advance(2 * time.Minute) // the doubled cool-down: e3 is the probe
	e.drain()
	st, err := e.st.Stats(context.Background(), e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Subscribers[0].Counts; c[store.StatusDelivered] != 4 || len(k.received()) != 7 {
		t.Fatalf("after the probe closed the circuit: %v, %d requests; want all 4 delivered at once, the 3 retries among them (7 requests)",
			c, len(k.received()))
	}
}

// TestAPoisonPayloadKeepsItsBackoffAcrossCloses: p1 fails whatever the subscriber's health (a
// payload it refuses); the events after it are delivered, each answer held until p1's failure
// is settled, which opens the circuit (a threshold of 1). Each such success, of a send out since before the
// circuit opened, closes it again: that is no news of a recovery, so p1 keeps the hour's backoff
// its failure earned (the clock does not move) and is sent once. Pulled forward by each close,
// it was sent again whenever the events left room, and spent its attempts in a second.
func TestAPoisonPayloadKeepsItsBackoffAcrossCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{CircuitThreshold: 1, CircuitCooldown: time.Hour, CircuitMaxCooldown: time.Hour, MaxAttempts: 12})
	stats := func() store.SubscriberStats {
		st, err := e.st.Stats(context.Background(), e.clk.Now())
		if err != nil {
			t.Error(err)
			return store.SubscriberStats{}
		}
		return st.Subscribers[0]
	}
	ctx := context.Background()
	p1 := func() (*store.Delivery, error) {
		page, err := e.st.ListDeliveries(ctx, store.DeliveryFilter{EventID: "p1"})
		if err != nil || len(page.Deliveries) != 1 {
			return nil, fmt.Errorf("p1's deliveries: %d (%v)", len(page.Deliveries), err)
		}
		return &page.Deliveries[0], nil
	}
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		if r.header.Get(wire.HeaderWebhookID) == "p1" {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		// Until p1's failure is settled, however slow the machine: a success settled before it
		// would leave the circuit open for the hour, the other events unsent. A bound, not a wait.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if d, err := p1(); err == nil && d.Attempts > 0 {
				break
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	e.sub(store.SubscriberInput{URL: k.URL, MaxInFlight: 2})
	e.emit("p1", "t", `{}`)
	for i := range 6 {
		e.emit(fmt.Sprintf("g%d", i), "t", `{}`)
	}
	if err := e.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.eng.Stop(ctx)
	waitUntil(t, "the 6 events to be delivered", func() bool { return stats().Counts[store.StatusDelivered] == 6 })
	time.Sleep(50 * time.Millisecond) // a p1 pulled forward by the last close would be out by now
	d, err := p1()
	if err != nil {
		t.Fatal(err)
	}
	if sent := len(k.received()); d.Attempts != 1 || sent != 7 {
		t.Fatalf("p1 is %s after %d attempts, %d requests in all; want 1 attempt, 7 requests: its backoff (an hour) kept",
			d.Status, d.Attempts, sent)
	}
}
