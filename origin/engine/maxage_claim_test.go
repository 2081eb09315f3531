package engine

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// TestNoAttemptAfterTheMaxAgeBehindAnOpenCircuit: PROTOCOL.md §5 now says "No attempt
// comes after --max-age". retry() brings the next attempt forward to the max age, but nothing
// stops a claim that comes later: here the first failure opens the circuit for 2 h (max age 1 h),
// the delivery is not claimable until the cool-down ends, and is then sent as the probe at age 2 h.
func TestNoAttemptAfterTheMaxAgeBehindAnOpenCircuit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 100, BackoffBase: time.Second, BackoffCap: time.Second,
		CircuitThreshold: 1, CircuitCooldown: 2 * time.Hour, CircuitMaxCooldown: 2 * time.Hour})
	var mu sync.Mutex
	var ages []time.Duration
	emitted := e.clk.Now()
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		mu.Lock()
		ages = append(ages, e.clk.Now().Sub(emitted))
		first := len(ages) == 1
		mu.Unlock()
		if first {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(200)
	})
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	e.drain()
	for range 3 {
		e.clk.Advance(50 * time.Minute)
		e.drain()
	}
	mu.Lock()
	defer mu.Unlock()
	for i, age := range ages {
		if age >= time.Hour {
			t.Errorf("attempt %d was sent at age %s, past the max age of 1h", i+1, age)
		}
	}
}
