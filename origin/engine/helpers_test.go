package engine

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/edgehook/edgehook/origin/internal/testclock"

	"github.com/edgehook/edgehook/origin/store"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(runCrashChild())
	}
	goleak.VerifyTestMain(m)
}

// loopback is the allow-list every test needs: sinks listen on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}

// clock is the settable clock shared by a test's store and engine.
type clock = testclock.Clock

func newClock() *clock { return testclock.New(time.Now().Truncate(time.Second)) }

// env is one test's database, clock and engine, and the registry of the engine's metrics.
type env struct {
	t   *testing.T
	st  *store.Store
	clk *clock
	eng *Engine
	reg *prometheus.Registry
}

// newEnv opens a store in t.TempDir() and an engine over it with the fake clock. Backoff is long
// by default so a failed delivery is not due again until the test advances the clock.
func newEnv(t *testing.T, cfg Config) *env {
	t.Helper()
	return newEnvWith(t, store.Options{}, cfg)
}

// newEnvWith is newEnv with the store opened with opts (its path and clock are newEnv's).
func newEnvWith(t *testing.T, opts store.Options, cfg Config) *env {
	t.Helper()
	clk := newClock()
	opts.Path, opts.Now = filepath.Join(t.TempDir(), "edgehook.db"), clk.Now
	st, err := store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if cfg.AllowNetworks == nil {
		cfg.AllowNetworks = loopback
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase, cfg.BackoffCap = time.Hour, 2*time.Hour
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	cfg.Version = "test"
	cfg.Now = clk.Now
	reg := prometheus.NewRegistry()
	eng, err := New(st, cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, st: st, clk: clk, eng: eng, reg: reg}
}

func (e *env) sub(in store.SubscriberInput) *store.Subscriber {
	e.t.Helper()
	if in.Events == nil {
		in.Events = []string{"*"}
	}
	if in.RatePerSec == 0 {
		in.RatePerSec, in.Burst = 1000, 1000
	}
	if in.MaxInFlight == 0 {
		in.MaxInFlight = 100
	}
	sub, err := e.st.CreateSubscriber(context.Background(), in)
	if err != nil {
		e.t.Fatal(err)
	}
	return sub
}

func (e *env) emit(id, typ, body string) {
	e.t.Helper()
	if _, err := e.st.Emit(context.Background(), store.EmitInput{ID: id, Type: typ, Body: []byte(body)}); err != nil {
		e.t.Fatal(err)
	}
}

// drain runs the engine until nothing is due, bounded at 20 s.
func (e *env) drain() DrainResult {
	e.t.Helper()
	res, err := e.eng.Drain(context.Background(), DrainOptions{For: 20 * time.Second, UntilIdle: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if !res.Idle {
		e.t.Fatalf("drain did not reach idle: %+v", res)
	}
	return res
}

// drainInBackground runs the drain of drain in its own goroutine and hands over its result.
func (e *env) drainInBackground() <-chan DrainResult {
	done := make(chan DrainResult, 1)
	go func() {
		res, err := e.eng.Drain(context.Background(), DrainOptions{For: 20 * time.Second, UntilIdle: true})
		if err != nil {
			e.t.Error(err)
		}
		done <- res
	}()
	return done
}

// only returns the single delivery of the database.
func (e *env) only() *store.Delivery {
	e.t.Helper()
	page, err := e.st.ListDeliveries(context.Background(), store.DeliveryFilter{})
	if err != nil || len(page.Deliveries) != 1 {
		e.t.Fatalf("want one delivery, got %d (%v)", len(page.Deliveries), err)
	}
	d, err := e.st.GetDelivery(context.Background(), page.Deliveries[0].ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}

// pausedFor is how much longer the database's single subscriber is paused by a Retry-After.
func (e *env) pausedFor() time.Duration {
	e.t.Helper()
	st, err := e.st.Stats(context.Background(), e.clk.Now())
	if err != nil || len(st.Subscribers) != 1 {
		e.t.Fatalf("want one subscriber's stats, got %d (%v)", len(st.Subscribers), err)
	}
	if p := st.Subscribers[0].PausedUntil; !p.IsZero() {
		return p.Sub(e.clk.Now())
	}
	return 0
}

// sink is a subscriber endpoint on loopback that records what it receives.
type sink struct {
	*httptest.Server
	mu       sync.Mutex
	requests []*recorded
	handle   func(w http.ResponseWriter, r *recorded)
}

type recorded struct {
	header http.Header
	body   []byte
	at     time.Time
	req    *http.Request
}

func newSink(t testing.TB, handle func(w http.ResponseWriter, r *recorded)) *sink {
	s := &sink{handle: handle}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec := &recorded{header: r.Header.Clone(), body: body, at: time.Now(), req: r}
		s.mu.Lock()
		s.requests = append(s.requests, rec)
		s.mu.Unlock()
		if s.handle != nil {
			s.handle(w, rec)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) received() []*recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*recorded(nil), s.requests...)
}

// failingUntil answers 500 until healthy is closed, then 200.
func failingUntil(healthy <-chan struct{}) func(w http.ResponseWriter, r *recorded) {
	return func(w http.ResponseWriter, _ *recorded) {
		select {
		case <-healthy:
			w.WriteHeader(200)
		default:
			w.WriteHeader(500)
		}
	}
}

func status(code int, headers ...string) func(w http.ResponseWriter, r *recorded) {
	return func(w http.ResponseWriter, _ *recorded) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, "answer body")
	}
}
