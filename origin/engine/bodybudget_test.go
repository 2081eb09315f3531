package engine

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// budgetSink is a subscriber endpoint that holds every request a while and notes, as each one
// arrives, the bodies it has in flight and the engine's gauge of the body bytes it holds.
type budgetSink struct {
	*sink
	mu       sync.Mutex
	inFlight int
	arrivals []arrival
	seen     map[string]int // subscriber path and event id
}

// arrival is what a request found when it arrived.
type arrival struct {
	body, inFlight int   // its body's length; the requests at the sink, itself included
	gauge          int64 // edgehook_claimed_body_bytes
}

func newBudgetSink(e *env) *budgetSink {
	b := &budgetSink{seen: map[string]int{}}
	b.sink = newSink(e.t, func(w http.ResponseWriter, r *recorded) {
		b.mu.Lock()
		b.inFlight++
		b.arrivals = append(b.arrivals, arrival{body: len(r.body), inFlight: b.inFlight, gauge: e.gauge("edgehook_claimed_body_bytes")})
		b.seen[r.req.URL.Path+" "+r.header.Get(wire.HeaderWebhookID)]++
		b.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // the sends block: the engine holds their bodies meanwhile
		b.mu.Lock()
		b.inFlight--
		b.mu.Unlock()
		w.WriteHeader(200)
	})
	return b
}

// gauge reads a gauge of the engine's registry.
func (e *env) gauge(name string) int64 {
	families, err := e.reg.Gather()
	if err != nil {
		e.t.Error(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return int64(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	e.t.Errorf("no gauge %s", name)
	return 0
}

// jsonOfSize is a JSON object of exactly n bytes.
func jsonOfSize(n int) string { return `{"p":"` + strings.Repeat("x", n-8) + `"}` }

// budgetEnv is an engine with a body budget of 4 MiB, and subscribers s0 … s(n-1) of every event
// at the returned sink, each at its own path.
func budgetEnv(t *testing.T, subscribers int) (*env, *budgetSink) {
	e := newEnvWith(t, store.Options{MaxBodyBytes: 8 << 20}, Config{BodyBudget: 4 << 20})
	k := newBudgetSink(e)
	for i := range subscribers {
		e.sub(store.SubscriberInput{ID: fmt.Sprintf("s%d", i), URL: fmt.Sprintf("%s/s%d", k.URL, i), MaxInFlight: store.DefaultMaxInFlight})
	}
	return e, k
}

// check fails the test unless every event reached every subscriber once, and the bodies the
// engine held (its gauge) and those at the sink stayed within the 4 MiB budget, but for one body
// larger than the budget, which must then have been alone.
func (k *budgetSink) check(t *testing.T, subscribers int, events []string) {
	t.Helper()
	const budget = 4 << 20
	k.mu.Lock()
	defer k.mu.Unlock()
	for i := range subscribers {
		for _, id := range events {
			if n := k.seen[fmt.Sprintf("/s%d %s", i, id)]; n != 1 {
				t.Errorf("s%d got %s %d times, want once", i, id, n)
			}
		}
	}
	if len(k.arrivals) != subscribers*len(events) {
		t.Errorf("the sink got %d requests, want %d", len(k.arrivals), subscribers*len(events))
	}
	for i, a := range k.arrivals {
		alone := a.body > budget && a.inFlight == 1 && a.gauge == int64(a.body)
		if !alone && (a.body > budget || a.gauge > budget || a.inFlight*(1<<20) > budget) {
			t.Errorf("request %d (%d bytes) arrived with %d requests at the sink and %d body bytes held; the budget is %d, a larger body goes alone",
				i, a.body, a.inFlight, a.gauge, budget)
		}
	}
}

// TestBodyBudgetBoundsTheBodiesInFlight: 1 MiB events to 6 subscribers at the default in-flight
// cap would all be claimed at once (24 MiB); with a 4 MiB budget no more than four are held, and
// every delivery still arrives.
func TestBodyBudgetBoundsTheBodiesInFlight(t *testing.T) {
	t.Parallel()
	const subscribers = 6
	e, k := budgetEnv(t, subscribers)
	var events []string
	for i := range 4 {
		events = append(events, fmt.Sprintf("e%d", i))
		e.emit(events[i], "t", jsonOfSize(1<<20))
	}
	if res := e.drain(); res.Delivered != subscribers*len(events) {
		t.Fatalf("delivered %d, want %d: %+v", res.Delivered, subscribers*len(events), res)
	}
	k.check(t, subscribers, events)
	most := int64(0)
	for _, a := range k.arrivals {
		most = max(most, a.gauge)
	}
	if most < 2<<20 {
		t.Errorf("at most %d body bytes were held: the budget of 4 MiB should let several 1 MiB bodies go at once", most)
	}
	if held := e.gauge("edgehook_claimed_body_bytes"); held != 0 {
		t.Errorf("%d body bytes still held after the drain", held)
	}
}

// TestBodyLargerThanTheBudgetIsSentAlone: an event of 6 MiB, past the 4 MiB budget, among 1 MiB
// ones, to three subscribers, in a daemon: the large body is claimed once nothing else is held,
// sent alone, and every delivery arrives (none waits for ever behind it).
func TestBodyLargerThanTheBudgetIsSentAlone(t *testing.T) {
	t.Parallel()
	const subscribers = 3
	e, k := budgetEnv(t, subscribers)
	events := []string{"small-0", "large", "small-1", "small-2"}
	for _, id := range events {
		size := 1 << 20
		if id == "large" {
			size = 6 << 20
		}
		e.emit(id, "t", jsonOfSize(size))
	}
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); len(k.received()) < subscribers*len(events) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if err := e.eng.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	k.check(t, subscribers, events)
	large := 0
	for _, a := range k.arrivals {
		if a.body == 6<<20 {
			large++
		}
	}
	if large != subscribers {
		t.Errorf("the large body arrived whole %d times, want %d", large, subscribers)
	}
}
