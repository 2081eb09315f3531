package harness_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/wire"
)

// subscriber is a real HTTP server on 127.0.0.1 that counts what it receives.
func subscriber(t *testing.T, status int) (url string, received *atomic.Int64) {
	received = new(atomic.Int64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		received.Add(1)
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, received
}

func outcome(r *relay.Response) string { return r.Header.Get(wire.HeaderOutcome) }

func TestHostForwardsThenDeduplicates(t *testing.T) {
	url, received := subscriber(t, 204)
	e := newHost(t, harness.NewUpstream(loopback), 2, 10*time.Second)
	e.addSubscriber(t, "sub_1", url)
	ctx := context.Background()

	first := e.host.Handle(ctx, signedRequest("del_1", "sub_1", []byte(`{"n":1}`), time.Now()))
	if first.Status != 204 || outcome(first) != string(wire.OutcomeForwarded) {
		t.Fatalf("first: %d %q (%s), want 204 forwarded", first.Status, outcome(first), first.Detail)
	}
	again := e.host.Handle(ctx, signedRequest("del_1", "sub_1", []byte(`{"n":1}`), time.Now()))
	if again.Status != 200 || outcome(again) != string(wire.OutcomeDuplicate) {
		t.Fatalf("retry: %d %q (%s), want 200 duplicate", again.Status, outcome(again), again.Detail)
	}
	if n := received.Load(); n != 1 {
		t.Fatalf("subscriber received %d requests, want 1", n)
	}
	if _, _, found := e.dedup.Lookup(wire.DedupKey("del_1")); !found {
		t.Fatal("no dedup mark after a 2xx")
	}
}

// gateUpstream blocks every call until release is closed and records the most calls in flight.
type gateUpstream struct {
	release  chan struct{}
	inFlight atomic.Int64
	most     atomic.Int64
	arrived  chan struct{}
}

func (g *gateUpstream) Do(ctx context.Context, _ *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	n := g.inFlight.Add(1)
	defer g.inFlight.Add(-1)
	for m := g.most.Load(); n > m && !g.most.CompareAndSwap(m, n); m = g.most.Load() {
	}
	g.arrived <- struct{}{}
	<-g.release
	return &relay.UpstreamResponse{Status: 200, Header: relay.Header{}}, nil
}

// With a pool of 2, at most two requests are inside the module at once, and all complete.
func TestHostPoolBoundsConcurrency(t *testing.T) {
	const pool, requests = 2, 20
	up := &gateUpstream{release: make(chan struct{}), arrived: make(chan struct{}, requests)}
	e := newHost(t, up, pool, 10*time.Second)
	e.addSubscriber(t, "sub_1", "http://127.0.0.1:1/unused")

	var wg sync.WaitGroup
	statuses := make([]int, requests)
	for i := range requests {
		wg.Go(func() {
			id := "del_" + string(rune('a'+i))
			statuses[i] = e.host.Handle(context.Background(), signedRequest(id, "sub_1", []byte("{}"), time.Now())).Status
		})
	}
	for range pool { // both instances are busy at once...
		<-up.arrived
	}
	close(up.release) // ...then everything drains
	wg.Wait()
	if m := up.most.Load(); m != pool {
		t.Errorf("at most %d upstream calls were in flight, want %d", m, pool)
	}
	for i, s := range statuses {
		if s != 200 {
			t.Errorf("request %d: status %d, want 200", i, s)
		}
	}
}

// scriptedUpstream runs the next function of its script on each call.
type scriptedUpstream struct {
	mu     sync.Mutex
	script []func(ctx context.Context) (*relay.UpstreamResponse, error)
}

func (s *scriptedUpstream) Do(ctx context.Context, _ *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	s.mu.Lock()
	next := s.script[0]
	s.script = s.script[1:]
	s.mu.Unlock()
	return next(ctx)
}

func ok(context.Context) (*relay.UpstreamResponse, error) {
	return &relay.UpstreamResponse{Status: 200, Header: relay.Header{}}, nil
}

// A request whose instance traps gets 500 rejected:edge_crashed, as from the Worker's loader when
// its Go instance dies; the single instance is replaced and the next request is relayed.
func TestHostReplacesTrappedInstance(t *testing.T) {
	trap := func(context.Context) (*relay.UpstreamResponse, error) { panic("host function failure") }
	up := &scriptedUpstream{script: []func(context.Context) (*relay.UpstreamResponse, error){trap, ok}}
	e := newHost(t, up, 1, time.Minute)
	e.addSubscriber(t, "sub_1", "http://127.0.0.1:1/unused")

	failed := e.host.Handle(context.Background(), signedRequest("del_1", "sub_1", []byte("{}"), time.Now()))
	if failed.Status != 500 || outcome(failed) != "rejected:edge_crashed" || !strings.Contains(failed.Detail, "host function failure") {
		t.Fatalf("trapped call: %d %q %q, want 500 rejected:edge_crashed, the panic in the detail", failed.Status, outcome(failed), failed.Detail)
	}
	next := e.host.Handle(context.Background(), signedRequest("del_2", "sub_1", []byte("{}"), time.Now()))
	if next.Status != 200 || outcome(next) != string(wire.OutcomeForwarded) {
		t.Fatalf("next call: %d %q (%s), want 200 forwarded", next.Status, outcome(next), next.Detail)
	}
}

// A call ends at its deadline even when the upstream ignores the record's timeout: either wazero
// closes the instance (a bare 500; it is replaced) or the guest gets there first and answers
// upstream_timeout. Without the deadline this test would hang. The next request is relayed.
func TestHostCallDeadline(t *testing.T) {
	for _, uninterruptible := range []bool{false, true} {
		t.Run(fmt.Sprintf("uninterruptible=%v", uninterruptible), func(t *testing.T) {
			block := func(ctx context.Context) (*relay.UpstreamResponse, error) {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			up := &scriptedUpstream{script: []func(context.Context) (*relay.UpstreamResponse, error){block, ok}}
			e := newHostWith(t, up, 1, 2*time.Second, uninterruptible)
			e.addSubscriber(t, "sub_1", "http://127.0.0.1:1/unused")

			cut := e.host.Handle(context.Background(), signedRequest("del_1", "sub_1", []byte("{}"), time.Now()))
			killed := cut.Status == 500 && outcome(cut) == "" && strings.Contains(cut.Detail, "deadline")
			answered := cut.Status == 504 && outcome(cut) == string(wire.OutcomeUpstreamTimeout)
			if !killed && !answered {
				t.Fatalf("cut call: %d %q %q, want a bare 500 naming the deadline or 504 upstream_timeout", cut.Status, outcome(cut), cut.Detail)
			}
			next := e.host.Handle(context.Background(), signedRequest("del_2", "sub_1", []byte("{}"), time.Now()))
			if next.Status != 200 || outcome(next) != string(wire.OutcomeForwarded) {
				t.Fatalf("next call: %d %q (%s), want 200 forwarded", next.Status, outcome(next), next.Detail)
			}
		})
	}
}

// The upstream's own timeout reaches the relay as a timeout: 504 upstream_timeout.
func TestHostUpstreamTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	e := newHost(t, harness.NewUpstream(loopback), 1, 10*time.Second)
	entry, err := wire.SubscriberEntry("slow", &wire.SubscriberRecord{URL: srv.URL, TimeoutMS: 100, Active: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = e.subscribers.Put(context.Background(), entry.Key, entry.Value, 0)

	resp := e.host.Handle(context.Background(), signedRequest("del_1", "slow", []byte("{}"), time.Now()))
	if resp.Status != 504 || outcome(resp) != string(wire.OutcomeUpstreamTimeout) {
		t.Fatalf("%d %q (%s), want 504 upstream_timeout", resp.Status, outcome(resp), resp.Detail)
	}
}

func TestNewHostRejectsBadSettings(t *testing.T) {
	good := harness.HostConfig{WASM: []byte("\x00asm\x01\x00\x00\x00"), Pool: 1, CallTimeout: time.Second, Relay: relayConfig(), Logger: quiet}
	for _, tc := range []struct {
		name  string
		edit  func(c *harness.HostConfig)
		wants string
	}{
		{"pool", func(c *harness.HostConfig) { c.Pool = 0 }, "pool"},
		{"timeout", func(c *harness.HostConfig) { c.CallTimeout = 0 }, "call timeout"},
		{"secret", func(c *harness.HostConfig) { c.Relay.Secrets = nil }, relay.EnvSecret},
		{"fractional tolerance", func(c *harness.HostConfig) { c.Relay.Tolerance = 1500 * time.Millisecond }, relay.EnvTolerance},
		{"deps", func(c *harness.HostConfig) {}, "Deps.Subscribers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			_, err := harness.NewHost(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wants)
			}
		})
	}
}

func TestNewHostRejectsAModuleWithoutTheExports(t *testing.T) {
	e := newHost(t, harness.NewUpstream(loopback), 1, time.Second) // only for valid Deps
	_, err := harness.NewHost(context.Background(), harness.HostConfig{
		WASM: []byte("\x00asm\x01\x00\x00\x00"), CacheDir: cacheDir, Pool: 1, CallTimeout: time.Second, Relay: relayConfig(),
		Deps:   relay.Deps{Subscribers: e.subscribers, Dedup: e.dedup, Upstream: harness.NewUpstream(loopback), Clock: e.clock},
		Logger: quiet,
	})
	if err == nil || !strings.Contains(err.Error(), "edgehook_buffer") {
		t.Fatalf("err = %v, want one naming the missing export", err)
	}
}

// A module built for another version of the host ABI (an old build/relay.wasm beside a new
// edgehook) is refused at start with the import named and the way out, not with wazero's words.
// The edits keep every length, so the module stays well formed.
func TestNewHostRejectsAModuleForAnotherABI(t *testing.T) {
	e := newHost(t, harness.NewUpstream(loopback), 1, time.Second)                          // only for valid Deps
	now := slices.Concat([]byte{byte(len(abi.NowFunc))}, []byte(abi.NowFunc), []byte{0, 2}) // import edgehook.now, type ()→i64
	for _, tc := range []struct {
		name, wants string
		edit        []byte
	}{
		{"other signature", "imports edgehook.now as (i32) -> (i32), but this edgehook provides () -> (i64)",
			slices.Concat(now[:len(now)-1], []byte{0})}, // type (i32)→i32
		{"unknown import", "imports edgehook.nox, which this edgehook does not provide",
			slices.Concat([]byte{3}, []byte("nox"), []byte{0, 2})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wasm := wasmModule(returning(nil), nil)
			edited := bytes.Replace(wasm, now, tc.edit, 1)
			if bytes.Equal(edited, wasm) {
				t.Fatal("the test module no longer imports edgehook.now as expected")
			}
			_, err := harness.NewHost(context.Background(), harness.HostConfig{
				WASM: edited, CacheDir: cacheDir, Pool: 1, CallTimeout: time.Second, Relay: relayConfig(),
				Deps:   relay.Deps{Subscribers: e.subscribers, Dedup: e.dedup, Upstream: harness.NewUpstream(loopback), Clock: e.clock},
				Logger: quiet,
			})
			if err == nil || !strings.Contains(err.Error(), tc.wants) || !strings.Contains(err.Error(), "make edge-wasm") {
				t.Fatalf("err = %v, want one saying it %s and how to rebuild", err, tc.wants)
			}
		})
	}
}

// signalClock is the system clock that also reports each reading on read.
type signalClock struct{ read chan struct{} }

func (c signalClock) Now() time.Time {
	c.read <- struct{}{}
	return time.Now()
}

// A guest spinning in a loop of its own, which never calls the host, still reaches the host often
// enough (internal/fuel) for the host's garbage collector to stop the world and for the call to
// end when its context does. Uninterruptible, neither would happen: the guest would run until
// the call's deadline, a minute here, holding the collection up, and the test would fail on the
// detail, which would name the deadline instead of the cancellation.
func TestHostStopsASpinningGuest(t *testing.T) {
	clk := signalClock{make(chan struct{}, 1)}
	h, err := harness.NewHost(context.Background(), harness.HostConfig{
		WASM: wasmModule(spinning, nil), CacheDir: cacheDir, Pool: 1, CallTimeout: time.Minute, Relay: relayConfig(),
		Deps:   relay.Deps{Subscribers: memkv.New(clk), Dedup: memkv.New(clk), Upstream: harness.NewUpstream(loopback), Clock: clk},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan *relay.Response)
	go func() { done <- h.Handle(ctx, &relay.Request{Method: "POST", Header: relay.Header{}}) }()
	<-clk.read // the guest is in, about to spin
	runtime.GC()
	cancel()
	resp := <-done
	if resp.Status != 500 || outcome(resp) != "" || !strings.Contains(resp.Detail, "context canceled") {
		t.Fatalf("spinning call: %d %q %q, want a bare 500 naming the cancellation", resp.Status, outcome(resp), resp.Detail)
	}
	// The instance is replaced: the next call spins too, until its context ends.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	go func() { done <- h.Handle(ctx, &relay.Request{Method: "POST", Header: relay.Header{}}) }()
	<-clk.read
	if resp := <-done; resp.Status != 500 || !strings.Contains(resp.Detail, "deadline") {
		t.Fatalf("second spinning call: %d %q, want a bare 500 naming the deadline", resp.Status, resp.Detail)
	}
}

// Requests one after another all go to the instance that served the last one (its memory is in
// the CPU's caches), not to each of the pool's instances in turn.
func TestHostReusesTheLastInstance(t *testing.T) {
	resp := abi.EncodeResponse(nil, &relay.Response{Header: relay.Header{}})
	clk := relay.SystemClock{}
	h, err := harness.NewHost(context.Background(), harness.HostConfig{
		WASM: wasmModule(counting(resp), resp), CacheDir: cacheDir, Pool: 3, CallTimeout: time.Minute, Relay: relayConfig(),
		Deps:   relay.Deps{Subscribers: memkv.New(clk), Dedup: memkv.New(clk), Upstream: harness.NewUpstream(loopback), Clock: clk},
		Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	for want := 201; want <= 205; want++ { // the instance's count of its calls, plus 200
		if got := h.Handle(context.Background(), &relay.Request{Method: "POST", Header: relay.Header{}}).Status; got != want {
			t.Fatalf("status %d, want %d: the call went to another instance", got, want)
		}
	}
}

// The host sends an instance KV results equal to its last ones as abi.CodeSame, and the guest
// reuses its copy: with one instance, a run of deliveries to one subscriber, then to another,
// then a duplicate and back, each must still reach (or be answered for) the right subscriber.
func TestHostKVResultsRepeatedAndChanged(t *testing.T) {
	url1, received1 := subscriber(t, 204)
	url2, received2 := subscriber(t, 202)
	e := newHost(t, harness.NewUpstream(loopback), 1, 10*time.Second)
	e.addSubscriber(t, "sub_1", url1)
	e.addSubscriber(t, "sub_2", url2)
	ctx := context.Background()
	for i, c := range []struct {
		delivery, subscriber string
		status               int
		outcome              wire.Outcome
	}{
		{"del_a", "sub_1", 204, wire.OutcomeForwarded},
		{"del_b", "sub_1", 204, wire.OutcomeForwarded},
		{"del_c", "sub_2", 202, wire.OutcomeForwarded},
		{"del_d", "sub_2", 202, wire.OutcomeForwarded},
		{"del_d", "sub_2", 200, wire.OutcomeDuplicate},
		{"del_e", "sub_2", 202, wire.OutcomeForwarded},
		{"del_f", "sub_1", 204, wire.OutcomeForwarded},
	} {
		resp := e.host.Handle(ctx, signedRequest(c.delivery, c.subscriber, []byte(`{}`), time.Now()))
		if resp.Status != c.status || outcome(resp) != string(c.outcome) {
			t.Fatalf("request %d (%s to %s): %d %q (%s), want %d %s", i, c.delivery, c.subscriber, resp.Status, outcome(resp), resp.Detail, c.status, c.outcome)
		}
	}
	if n1, n2 := received1.Load(), received2.Load(); n1 != 3 || n2 != 3 {
		t.Fatalf("subscribers received %d and %d requests, want 3 and 3", n1, n2)
	}
}

// An upstream answer too large for the guest's buffer is left with the host and taken into a
// larger one (abi.UpstreamFunc); smaller answers after it are written straight into that buffer.
func TestHostUpstreamAnswerLargerThanTheGuestBuffer(t *testing.T) {
	body := []byte(strings.Repeat("b", wire.MaxExcerptBytes))
	answer := func(status int, extra int) func(context.Context) (*relay.UpstreamResponse, error) {
		return func(context.Context) (*relay.UpstreamResponse, error) {
			h := relay.Header{{Name: "x-padding", Value: strings.Repeat("p", extra)}, {Name: "content-type", Value: "text/plain"}}
			return &relay.UpstreamResponse{Status: status, Header: h, Body: body}, nil
		}
	}
	up := &scriptedUpstream{script: []func(context.Context) (*relay.UpstreamResponse, error){answer(201, 10), answer(202, 8000), answer(203, 10)}}
	e := newHost(t, up, 1, 10*time.Second)
	e.addSubscriber(t, "sub_1", "http://127.0.0.1:1/unused")
	for i, want := range []int{201, 202, 203} {
		resp := e.host.Handle(context.Background(), signedRequest(fmt.Sprintf("del_%d", i), "sub_1", []byte("{}"), time.Now()))
		if resp.Status != want || outcome(resp) != string(wire.OutcomeForwarded) || string(resp.Body) != string(body) ||
			resp.Header.Get("content-type") != "text/plain" {
			t.Fatalf("answer %d: %d %q, %d bytes of body, content-type %q (%s); want %d forwarded with the subscriber's body",
				i, resp.Status, outcome(resp), len(resp.Body), resp.Header.Get("content-type"), resp.Detail, want)
		}
	}
}
