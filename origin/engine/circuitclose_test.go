package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// TestARecoveredSubscriberGetsItsRetriesAtOnce: a subscriber down long enough to open its circuit
// left two deliveries backing off for up to 6 hours (the default --backoff-cap). Once it answers
// again and the probe closes the circuit, they are sent in the same drain, not as each backoff
// ends.
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
	close(healthy)
	e.clk.Advance(time.Minute) // the cool-down: e2 is the probe
	e.drain()
	st, err := e.st.Stats(context.Background(), e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Subscribers[0].Counts; c[store.StatusDelivered] != 4 || len(k.received()) != 6 {
		t.Fatalf("after the probe closed the circuit: %v, %d requests; want all 4 delivered at once, the 2 retries among them (6 requests)",
			c, len(k.received()))
	}
}
