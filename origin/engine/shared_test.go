package engine

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// twoEngines opens the database file twice (as two processes would: separate connections, group
// committers and caches) with an engine on each, both on the real clock.
func twoEngines(t *testing.T, cfg Config) (*store.Store, []*Engine) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "shared.db")
	var engines []*Engine
	var first *store.Store
	for range 2 {
		st, err := store.Open(context.Background(), store.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if first == nil {
			first = st
		}
		c := cfg
		c.AllowNetworks, c.PollInterval = loopback, 5*time.Millisecond
		eng, err := New(st, c, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		engines = append(engines, eng)
	}
	return first, engines
}

// drainAll runs every engine's Drain concurrently.
func drainAll(t *testing.T, engines []*Engine, opts DrainOptions) []DrainResult {
	t.Helper()
	results := make([]DrainResult, len(engines))
	errs := make([]error, len(engines))
	var wg sync.WaitGroup
	for i, eng := range engines {
		wg.Go(func() { results[i], errs[i] = eng.Drain(context.Background(), opts) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return results
}

// TestTwoEnginesNeverSendOneDeliveryConcurrently drains one database with two engines and checks
// that no delivery is ever at the subscriber twice at the same time, and none is lost.
func TestTwoEnginesNeverSendOneDeliveryConcurrently(t *testing.T) {
	t.Parallel()
	const total = 300
	var (
		mu       sync.Mutex
		inFlight = map[string]int{}
		seen     = map[string]int{}
		overlap  []string
	)
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		id := r.req.URL.Path + "/" + r.header.Get(wire.HeaderWebhookID) // one path per subscriber
		mu.Lock()
		inFlight[id]++
		seen[id]++
		if inFlight[id] > 1 {
			overlap = append(overlap, id)
		}
		mu.Unlock()
		time.Sleep(time.Millisecond) // hold the request open so overlaps would show
		mu.Lock()
		inFlight[id]--
		mu.Unlock()
		w.WriteHeader(200)
	})
	st, engines := twoEngines(t, Config{Workers: 8, BatchSize: 8})
	ctx := context.Background()
	for i := range 3 {
		if _, err := st.CreateSubscriber(ctx, store.SubscriberInput{ID: fmt.Sprintf("s%d", i), URL: fmt.Sprintf("%s/s%d", k.URL, i), Events: []string{"*"},
			RatePerSec: 100000, Burst: 100000, MaxInFlight: 16}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range total / 3 {
		if _, err := st.Emit(ctx, store.EmitInput{ID: fmt.Sprintf("e%d", i), Type: "t", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	res := drainAll(t, engines, DrainOptions{For: 60 * time.Second, UntilIdle: true})
	stats, _ := st.Stats(ctx, time.Now())
	if stats.Depth != 0 {
		t.Fatalf("%d deliveries left: %+v", stats.Depth, stats)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Fatalf("deliveries sent by both engines at once: %v", overlap)
	}
	if len(seen) != total {
		t.Fatalf("%d deliveries reached the subscribers, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 { // no lease expired: no duplicates either
			t.Fatalf("%s arrived %d times, want once", id, n)
		}
	}
	t.Logf("engine A claimed %d, engine B %d", res[0].Claimed, res[1].Claimed)
}

// TestRateLimitSharedAcrossEngines checks on the real clock that two engines together never send a
// subscriber more than burst + rate × elapsed.
func TestRateLimitSharedAcrossEngines(t *testing.T) {
	t.Parallel()
	const rate, burst, total = 40.0, 5, 60
	var mu sync.Mutex
	var arrivals []time.Time
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		mu.Lock()
		arrivals = append(arrivals, r.at)
		mu.Unlock()
		w.WriteHeader(200)
	})
	st, engines := twoEngines(t, Config{})
	ctx := context.Background()
	// The bucket starts full when the subscriber is created: the window starts before that.
	start := time.Now()
	if _, err := st.CreateSubscriber(ctx, store.SubscriberInput{ID: "s", URL: k.URL, Events: []string{"*"}, RatePerSec: rate, Burst: burst, MaxInFlight: 100}); err != nil {
		t.Fatal(err)
	}
	for i := range total {
		if _, err := st.Emit(ctx, store.EmitInput{ID: fmt.Sprintf("e%d", i), Type: "t", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	drainAll(t, engines, DrainOptions{For: 30 * time.Second, UntilIdle: true})
	mu.Lock()
	defer mu.Unlock()
	if len(arrivals) != total {
		t.Fatalf("%d arrived, want %d", len(arrivals), total)
	}
	for i, at := range arrivals {
		limit := burst + rate*at.Sub(start).Seconds()
		if float64(i+1) > limit {
			t.Fatalf("arrival %d at %s: more than burst + rate × elapsed = %.1f", i+1, at.Sub(start), limit)
		}
	}
}
