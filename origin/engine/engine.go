// Package engine delivers the origin's queued webhooks: it claims due deliveries from the store,
// sends them (directly to subscribers or through the edge), and settles the outcomes.
//
// One Engine runs either as a daemon (Start/Stop) or as a bounded drain for cron (Drain). Several
// engines, in one process or many, may work on one database at once: claiming, rate limits and
// circuit breakers live in the store's transactions.
package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edgehook/edgehook/internal/h1"
	"github.com/edgehook/edgehook/origin/store"
)

// Engine claims, sends and settles deliveries.
type Engine struct {
	st   *store.Store
	cfg  Config
	log  *slog.Logger
	m    *metrics
	http *senders
	pace *pacer
	// userAgent is every request's User-Agent value (read only).
	userAgent []string
	// wake is signalled by Wake (coalesced, like the store's emit wake-up), and subsChanged
	// counts its calls, so that every run reads the active subscribers again after one.
	wake        chan struct{}
	subsChanged atomic.Uint64
	bodies      bodies

	mu      sync.Mutex
	stop    context.CancelFunc // stops the daemon's claiming; nil when not running
	stopped chan struct{}      // closed when the daemon has finished
	grace   chan time.Duration // Stop hands the daemon its grace period
	daemon  *run               // whose error Stop returns
}

// New builds an engine over st. Its metrics are registered on reg (nil: not exported).
func New(st *store.Store, cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Engine, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	e := &Engine{st: st, cfg: cfg, log: logger, http: newSenders(&cfg), pace: newPacer(), userAgent: []string{cfg.UserAgent()},
		wake: make(chan struct{}, 1), bodies: bodies{budget: int64(cfg.BodyBudget)}}
	if e.m, err = newMetrics(st, cfg.Now, &e.bodies.held, reg); err != nil {
		return nil, err
	}
	return e, nil
}

// Start runs the engine in the background until Stop is called or ctx is cancelled (which stops
// claiming and then behaves like Stop with the configured grace). Starting a running engine is a
// no-op.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stop != nil {
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	e.stop, e.stopped, e.grace = cancel, make(chan struct{}), make(chan time.Duration, 1)
	r := e.newRun(false, e.grace)
	e.daemon = r
	stopped := e.stopped
	go func() {
		defer close(stopped)
		r.loop(runCtx, true)
	}()
	return nil
}

// Stop stops claiming, lets sends in flight finish until ctx's deadline (or StopGrace when ctx has
// none), cancels the rest, returns their leases unsent, writes every outcome and returns, with an
// error if outcomes could not be written, as Drain's. It is idempotent and safe to call on an engine
// that was never started.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	stop, stopped, grace, r := e.stop, e.stopped, e.grace, e.daemon
	e.stop = nil
	e.mu.Unlock()
	if stop == nil {
		return nil
	}
	g := e.cfg.StopGrace
	if d, ok := ctx.Deadline(); ok {
		g = time.Until(d)
	}
	grace <- g
	stop()
	select {
	case <-stopped:
	case <-ctx.Done():
		<-stopped // the run cancels its sends at the deadline and finishes quickly
	}
	e.http.closeIdle()
	return r.err
}

// Wake tells the engine that a write other than an emit may have made deliveries due or changed
// which subscribers are active: a subscriber created, changed, paused, resumed or deleted, a
// delivery retried or replayed. A running engine then claims at once, with its count of active
// subscribers read again, instead of at its next poll. It never blocks, and wakes coalesce.
// Emits need no call (the store wakes the engine for them); writes by other processes are
// still seen only at the poll.
func (e *Engine) Wake() {
	e.subsChanged.Add(1)
	signal(e.wake)
}

// DrainOptions bound a Drain.
type DrainOptions struct {
	For       time.Duration // stop claiming after this long (0: no limit other than ctx)
	UntilIdle bool          // return as soon as nothing is due and nothing is in flight
}

// DrainResult counts what a Drain did.
type DrainResult struct {
	Claimed   int
	Delivered int
	Retried   int // failed and rescheduled (including throttled and edge-coalesced)
	Dead      int
	Released  int // returned unsent at the end
	Held      int // held after a 410 with their subscriber, now disabled
	// Superseded: outcomes written superseded (a newer event with the delivery's coalesce key came
	// while it was in flight), in none of the above.
	Superseded int
	Stale      int   // outcomes that came back after their lease was lost (expired, or the subscriber deleted): not written, and in none of the above
	Pruned     int64 // finished deliveries deleted past the retention window, at the start
	Idle       bool  // it stopped because nothing was due
}

// Drain runs the engine in the foreground for a bounded time (for cron on hosts without a process
// manager): until opts.For elapses, ctx is cancelled, or (UntilIdle) the queue has nothing due.
// Sends in flight at the end get StopGrace to finish. It may run while a daemon or other drains
// work on the same database. Its error is that of the last write of outcomes that failed, if any
// (their deliveries are sent again once their leases expire).
func (e *Engine) Drain(ctx context.Context, opts DrainOptions) (DrainResult, error) {
	if opts.For < 0 {
		return DrainResult{}, errors.New("drain: for: must not be negative")
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if opts.For > 0 {
		runCtx, cancel = context.WithTimeout(runCtx, opts.For)
		defer cancel()
	}
	grace := make(chan time.Duration, 1)
	grace <- e.cfg.StopGrace
	r := e.newRun(opts.UntilIdle, grace)
	r.loop(runCtx, false)
	e.http.closeIdle()
	return r.result(), r.err
}

// closeIdle closes the keep-alive connections of both transports.
func (s *senders) closeIdle() {
	for _, t := range []*h1.Transport{s.direct, s.edge} {
		t.CloseIdleConnections()
	}
}
