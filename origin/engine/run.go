package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// settleGather bounds how long the completer waits for more outcomes before it writes a batch. It
// is short so that the writer settles (and claims again) what came back while the rest of the
// sends are still out, and the sends and the writes overlap; batches still grow, because each
// takes whatever came back during the previous transaction. A 2 ms gather made them take turns:
// the drain ran about a third slower and a steady 12,000 deliveries/s built a backlog. At 200 µs
// transactions carried fewer outcomes each, and the origin spent about 8 % more CPU per delivery.
const settleGather = 500 * time.Microsecond

// settleEnough is a batch the completer writes without waiting for more: a transaction costs
// about half a millisecond whatever its size, which this many outcomes share well enough, and
// while the writer is busy the next batch is piling up anyway. Waiting the whole gather every
// time left the one writer idle for about a sixth of a drain.
const settleEnough = 32

// slowSend is how long a send may go unanswered before the completer stops waiting for it: a
// loopback or nearby subscriber answers within a few milliseconds, and a send still open after
// this (a stuck or slow subscriber) would otherwise make every settle wait the whole gather.
const slowSend = 20 * time.Millisecond

// run is one execution of the claim → send → settle loop (a daemon's life or one drain).
//
// A delivery occupies one of Workers slots from its claim until its outcome is written, so
// "nothing in flight" means every outcome is in the database.
type run struct {
	e         *Engine
	untilIdle bool
	grace     <-chan time.Duration

	sendCtx     context.Context // cancelled when the stop grace runs out
	cancelSends context.CancelFunc

	outcomes chan store.Settlement
	// carried is an outcome take kept for the next batch: a second one of a delivery already in
	// the batch (sent again by a claim of this run after its lease ran out mid-send), which the
	// store takes once per batch. The completer's alone.
	carried *store.Settlement
	slots   chan struct{} // one token per delivery in flight
	// jobs hands claimed deliveries to long-lived senders: a goroutine per delivery cost its
	// creation and, as each one's stack grew to what a send needs, a copy of it every time. There
	// are as many senders as deliveries were ever in flight at once (guarded by writer), so one is
	// always free for a job, and a large Workers costs nothing until it is used.
	jobs     chan store.Claimed
	senders  int
	freed    chan struct{} // signalled when the completer frees slots
	sends    sync.WaitGroup
	slow     atomic.Int64  // sends in flight for longer than slowSend
	complete chan struct{} // closed when the completer has written everything
	// writer is held while a claim or a settle batch is formed and written. The store has one
	// writer connection, so the loop and the completer take turns on it anyway; deciding what to
	// write only once the turn has come lets each take everything that piled up during the
	// other's transaction (without it, most settles wrote one outcome each).
	writer sync.Mutex
	// flying counts this run's deliveries in flight by subscriber, with the subscriber's in-flight
	// cap (guarded by writer), so that freed slots wake the loop for a claim only when they can
	// help: a subscriber the claims held back for its deliveries in flight is released
	// (capFreed), not any settle at all (freed).
	flying   map[string]*flight
	capFreed chan struct{}
	// active is the set of active subscribers, read at activeRead when the engine's subsChanged
	// was activeGen (by the loop only): when this run holds every one of them back, a new emit
	// has nothing a claim could take.
	active     map[string]bool
	activeRead time.Time
	activeGen  uint64
	// A settle that frees slots claims in the same transaction (one turn on the writer, not two)
	// when the loop, waiting, would claim on that settle: claimOn says when that is (set by the
	// loop before it waits, guarded by writer). The result goes to the loop through settleClaim
	// (guarded by writer) and a signal on settleClaimed, in place of freed and capFreed.
	claimOn       claimTrigger
	claimCtx      context.Context // the loop's: a settle claims only while the loop runs
	settleClaim   claimOutcome
	settleClaimed chan struct{}

	mu  sync.Mutex
	res DrainResult
	err error // the last settle that failed: Drain and Stop return it
}

// flight is one subscriber's deliveries in flight in a run, and its in-flight cap.
type flight struct{ n, cap int }

// held tells whether a claim takes none of the subscriber's deliveries for those it has in flight
// in this run (the store's rule).
func (f *flight) held() bool { return store.HeldForInFlight(f.n, f.cap) }

// bodies counts the event body bytes of the engine's deliveries claimed and not yet sent, which
// budget (Config.BodyBudget) bounds, and the body of the delivery at which the last claim stopped
// for them (ClaimResult.WantBytes). A send gives its bytes back when it ends: the body is garbage
// from then on.
type bodies struct {
	budget     int64
	held, want atomic.Int64
}

// full tells whether a claim now would take nothing for the budget: bytes are held, and none or
// fewer than the last claim wanted are free (with none held, a claim takes any body, alone).
func (b *bodies) full() bool {
	held := b.held.Load()
	return held > 0 && (held >= b.budget || held+b.want.Load() > b.budget)
}

// claimTrigger is which settles the waiting loop would claim on.
type claimTrigger int

const (
	claimOnNone     claimTrigger = iota // the loop waits for a wake-up or the poll, or is stopping
	claimOnCapFreed                     // a settle that releases a subscriber this run held back
	claimOnAny                          // any settle
)

// claimOutcome is one claim's result as the loop decides what to do next with it.
type claimOutcome struct {
	res   store.ClaimResult
	err   error
	limit int // what was asked
}

func (e *Engine) newRun(untilIdle bool, grace <-chan time.Duration) *run {
	sendCtx, cancel := context.WithCancel(context.Background())
	return &run{e: e, untilIdle: untilIdle, grace: grace, sendCtx: sendCtx, cancelSends: cancel,
		outcomes: make(chan store.Settlement, e.cfg.Workers), slots: make(chan struct{}, e.cfg.Workers), jobs: make(chan store.Claimed, e.cfg.Workers),
		freed: make(chan struct{}, 1), complete: make(chan struct{}), flying: map[string]*flight{}, capFreed: make(chan struct{}, 1),
		settleClaimed: make(chan struct{}, 1)}
}

// loop claims and dispatches until ctx is done (or idle), then shuts down in order: stop
// claiming, wait for sends up to the grace, cancel the rest, write every outcome. It prunes old
// rows once at the start (so cron-run drains keep the database bounded too) and, for a daemon,
// every PruneInterval, beside the claims: before them, a large backlog past the retention (a
// lowered --retention, a first run after a pause) held every send back, a cron drain's whole --for.
func (r *run) loop(ctx context.Context, daemon bool) {
	r.claimCtx = ctx
	go r.completer()
	var pruning sync.WaitGroup
	var pruneBusy atomic.Bool // one prune at a time: a tick during a long one has nothing to add
	prune := func() {
		if pruneBusy.CompareAndSwap(false, true) {
			pruning.Go(func() {
				defer pruneBusy.Store(false)
				r.prune(ctx)
			})
		}
	}
	prune()
	var pruneTick <-chan time.Time
	if daemon {
		t := time.NewTicker(r.e.cfg.PruneInterval)
		defer t.Stop()
		pruneTick = t.C
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	var last claimOutcome
	claimed := false // last came from a settle's claim: decide on it without claiming first
	for ctx.Err() == nil {
		if !claimed {
			if len(r.slots) == cap(r.slots) || r.e.bodies.full() {
				r.writer.Lock()
				r.claimOn = claimOnAny
				r.writer.Unlock()
				select {
				case <-r.freed:
				case <-r.settleClaimed:
					last, claimed = r.takeSettleClaim(), true
				case <-ctx.Done():
				}
				continue
			}
			if last = r.claim(ctx); last.limit == 0 {
				continue // a settle's claim took the free slots meanwhile: wait for one
			}
			if last.err != nil {
				if ctx.Err() != nil {
					break
				}
				r.e.log.Error("claim failed", "err", last.err)
				r.e.m.claimErrors.Inc()
			}
		}
		claimed = false
		res, err := last.res, last.err
		if len(res.Deliveries) > 0 && len(res.Deliveries) == last.limit || res.WantBytes > 0 {
			continue // probably more due: claim again at once, or once sends free the bytes it wants
		}
		if r.untilIdle && err == nil && len(res.Deliveries) == 0 && !res.Waiting && len(r.slots) == 0 {
			r.count(func(d *DrainResult) { d.Idle = true })
			break
		}
		wait := r.e.cfg.PollInterval
		if res.NextToken > 0 {
			wait = min(wait, res.NextToken)
		}
		// Settles matter to a drain that watches for idle, and when the claim left due work
		// behind. If it took everything due, claiming again on every settle would be an empty
		// write transaction in the way of the next emit's commit: only new emits (the wake-up)
		// or the poll can bring more. If what it left is explained by subscribers this run holds
		// at their in-flight cap (a stuck one, say), only a settle of theirs can help; buckets
		// have the NextToken timer, and caps held by other processes the poll.
		var freed <-chan struct{}
		on := claimOnNone
		wake := r.e.st.Wake()
		active := r.activeSubscribers(ctx)
		r.writer.Lock()
		held := r.held(active)
		switch {
		case err != nil || r.untilIdle || res.Waiting && held == 0:
			freed, on = r.freed, claimOnAny
		case res.Waiting:
			freed, on = r.capFreed, claimOnCapFreed
		}
		// While this run holds every active subscriber back (a backlog), the deliveries of new
		// emits wait for a settle to release one: claiming on each emit's wake-up would be an
		// empty transaction (most claims were, at 1,000 emits/s). That settle wakes the loop, and
		// so does Engine.Wake, which may mean a new or resumed subscriber this run holds none of.
		if held > 0 && active != nil && held >= len(active) {
			wake, freed, on = nil, r.capFreed, claimOnCapFreed
		}
		r.claimOn = on
		r.writer.Unlock()
		poll.Reset(wait)
		select {
		case <-poll.C:
		case <-wake:
		case <-r.e.wake:
		case <-freed:
		case <-r.settleClaimed:
			last, claimed = r.takeSettleClaim(), true
		case <-pruneTick:
			prune()
			r.forgetGone(ctx)
		case <-ctx.Done():
		}
	}
	r.shutdown()
	pruning.Wait() // cut by ctx, or to its end after an idle drain
}

// claim claims whatever slots are free, once its turn on the writer has come: when settles keep
// the writer busy, claims grow with the slots they freed meanwhile, and claim and settle
// transactions alternate with the sends of one batch overlapping the writes of another.
func (r *run) claim(ctx context.Context) claimOutcome {
	r.writer.Lock()
	defer r.writer.Unlock()
	for _, ch := range []<-chan struct{}{r.freed, r.capFreed, r.settleClaimed} {
		drop(ch) // stale: this claim sees those slots free (slots freed later signal again)
	}
	drop(r.e.st.Wake())
	out := claimOutcome{limit: min(cap(r.slots)-len(r.slots), r.e.cfg.BatchSize)}
	if out.limit == 0 || r.e.bodies.full() { // the loop saw room, and a settle's claim took it first
		out.limit = 0
		return out
	}
	out.res, out.err = r.e.st.Claim(ctx, r.claimParams(out.limit))
	r.dispatch(out.res)
	return out
}

func (r *run) claimParams(limit int) store.ClaimParams {
	return store.ClaimParams{Now: r.e.cfg.Now(), Limit: limit, LeaseDuration: r.e.cfg.LeaseDuration,
		MaxBytes: r.e.bodies.budget, HeldBytes: r.e.bodies.held.Load()}
}

// dispatch takes a slot and the body's bytes for each claimed delivery and sends it. The caller
// holds writer.
func (r *run) dispatch(res store.ClaimResult) {
	r.e.bodies.want.Store(res.WantBytes)
	for _, c := range res.Deliveries {
		f := r.flying[c.Subscriber.ID]
		if f == nil {
			f = &flight{}
			r.flying[c.Subscriber.ID] = f
		}
		f.n, f.cap = f.n+1, c.Subscriber.MaxInFlight
		r.e.bodies.held.Add(int64(len(c.Event.Body)))
		r.slots <- struct{}{}
		if r.senders < len(r.slots) {
			r.senders++
			go r.sender()
		}
		r.sends.Add(1)
		r.jobs <- c // never blocks: a job holds a slot, and there are as many places as slots
	}
	r.count(func(d *DrainResult) { d.Claimed += len(res.Deliveries) })
}

// takeSettleClaim returns the result of the claim a settle made.
func (r *run) takeSettleClaim() claimOutcome {
	r.writer.Lock()
	defer r.writer.Unlock()
	return r.settleClaim
}

// shutdown waits for sends up to the grace, cancels the rest and waits for the completer.
func (r *run) shutdown() {
	r.writer.Lock()
	r.claimOn = claimOnNone // settles claim no more, so nothing is dispatched after this
	r.writer.Unlock()
	close(r.jobs)
	grace := r.e.cfg.StopGrace // the daemon's ctx was cancelled without a Stop
	select {
	case grace = <-r.grace:
	default:
	}
	done := make(chan struct{})
	go func() {
		r.sends.Wait()
		close(done)
	}()
	t := time.NewTimer(grace)
	select {
	case <-done:
	case <-t.C:
		r.cancelSends()
		<-done
	}
	t.Stop()
	r.cancelSends()
	close(r.outcomes)
	<-r.complete
}

// sender sends the jobs it is handed until there are no more.
func (r *run) sender() {
	for c := range r.jobs {
		r.send(c)
	}
}

// send delivers one claimed delivery and queues its outcome. Past slowSend it counts in slow
// until its outcome is ready.
func (r *run) send(c store.Claimed) {
	defer r.sends.Done()
	var state atomic.Int32 // 0 sending, 1 counted in slow, 2 answered
	timer := time.AfterFunc(slowSend, func() {
		if state.CompareAndSwap(0, 1) {
			r.slow.Add(1)
		}
	})
	out := r.e.deliver(r.sendCtx, c)
	r.e.bodies.held.Add(-int64(len(c.Event.Body)))
	timer.Stop()
	if state.Swap(2) == 1 {
		r.slow.Add(-1)
	}
	r.outcomes <- out
}

// completer writes outcomes in batches. A settle costs a transaction whatever its size, so it
// first waits up to settleGather for the outcomes of sends still in flight (a claimed batch sent
// over loopback does not answer all at once) until it has settleEnough, then, once its turn on the
// writer has come, also takes whatever queued up meanwhile.
func (r *run) completer() {
	defer close(r.complete)
	gather := time.NewTimer(0)
	defer gather.Stop()
	// One buffer for every batch: the store keeps none of a batch once it is written.
	buf := make([]store.Settlement, 0, r.e.cfg.SettleBatch)
	for {
		first, ok := r.nextOutcome()
		if !ok {
			return
		}
		gather.Reset(settleGather)
		batch := r.take(append(buf[:0], first), gather.C)
		r.writer.Lock()
		batch = r.take(batch, nil)
		released := r.land(batch)
		if r.claimCtx.Err() == nil && (r.claimOn == claimOnAny || r.claimOn == claimOnCapFreed && released) && !r.e.bodies.full() {
			if r.settleAndClaim(batch) {
				r.writer.Unlock()
				signal(r.settleClaimed)
				continue
			}
		} else {
			r.settle(batch)
		}
		r.writer.Unlock()
		for range batch {
			<-r.slots
		}
		signal(r.freed)
		if released {
			signal(r.capFreed)
		}
	}
}

// settleAndClaim settles a batch and claims the slots it frees in one transaction, dispatches
// what it claimed and leaves the result for the loop. If that transaction fails, the batch is
// settled alone (with settle's retries) and it reports false: the caller frees the slots and
// signals the loop as after any settle. The caller holds writer.
func (r *run) settleAndClaim(batch []store.Settlement) bool {
	out := claimOutcome{limit: min(cap(r.slots)-len(r.slots)+len(batch), r.e.cfg.BatchSize)}
	var written store.Settled
	drop(r.e.st.Wake())
	written, out.res, out.err = r.e.st.SettleAndClaim(context.Background(), r.e.cfg.Now(), r.policy(), batch, r.claimParams(out.limit))
	if out.err != nil {
		r.e.log.Warn("settle and claim failed; settling alone", "err", out.err)
		r.e.m.claimErrors.Inc() // its claim is lost, as a failed claim of the loop's is
		r.settle(batch)
		return false
	}
	r.settled(batch, written)
	for range batch {
		<-r.slots
	}
	r.dispatch(out.res)
	r.settleClaim = out
	return true
}

// land takes a settled batch off the subscribers' counts in flight and reports whether it
// released one that was held back (flight.held). The caller holds writer.
func (r *run) land(batch []store.Settlement) (released bool) {
	var wasHeld []*flight
	for _, it := range batch {
		f := r.flying[it.SubscriberID]
		if f.held() && !slices.Contains(wasHeld, f) {
			wasHeld = append(wasHeld, f)
		}
		if f.n--; f.n == 0 {
			delete(r.flying, it.SubscriberID)
		}
	}
	for _, f := range wasHeld {
		released = released || !f.held()
	}
	return released
}

// held counts the subscribers of active (every one, if nil) that this run holds back
// (flight.held). The caller holds writer.
func (r *run) held(active map[string]bool) int {
	n := 0
	for id, f := range r.flying {
		if f.held() && (active == nil || active[id]) {
			n++
		}
	}
	return n
}

// activeSubscribers returns the ids of the active subscribers, read again after a Wake (which
// API changes call) or once a poll interval has passed (a change by another process is noticed
// by then); nil if they cannot be read.
func (r *run) activeSubscribers(ctx context.Context) map[string]bool {
	gen := r.e.subsChanged.Load()
	if now := time.Now(); gen != r.activeGen || now.Sub(r.activeRead) >= r.e.cfg.PollInterval {
		subs, err := r.e.st.ListSubscribers(ctx)
		if err != nil {
			return nil
		}
		r.active, r.activeRead, r.activeGen = map[string]bool{}, now, gen
		for _, s := range subs {
			if s.State == store.StateActive {
				r.active[s.ID] = true
			}
		}
	}
	return r.active
}

// drop takes a pending signal off ch, if there is one. A claim drops the store's wake-up: it sees
// every emit committed before it, and an emit committed after signals again. Left pending, it
// woke the loop for an empty claim transaction after the claim that had taken the emit.
func drop(ch <-chan struct{}) {
	select {
	case <-ch:
	default:
	}
}

// signal wakes whoever waits on ch, without blocking (signals coalesce).
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// nextOutcome returns the outcome carried over from the last batch, else the next to arrive; false
// once the senders are done.
func (r *run) nextOutcome() (store.Settlement, bool) {
	if it := r.carried; it != nil {
		r.carried = nil
		return *it, true
	}
	it, ok := <-r.outcomes
	return it, ok
}

// take adds queued outcomes to batch, up to SettleBatch. Until wait fires it also waits for those
// of sends still in flight (every slot held but not in batch is one), unless they are all slow
// or the batch has settleEnough. A second outcome of a delivery in the batch ends it, carried.
func (r *run) take(batch []store.Settlement, wait <-chan time.Time) []store.Settlement {
	for len(batch) < r.e.cfg.SettleBatch && r.carried == nil {
		if int64(len(r.slots)-len(batch)) <= r.slow.Load() || len(batch) >= settleEnough {
			wait = nil
		}
		var it store.Settlement
		ok := true
		if wait != nil {
			select {
			case it, ok = <-r.outcomes:
			case <-wait:
				wait = nil
				continue
			}
		} else {
			select {
			case it, ok = <-r.outcomes:
			default:
				return batch
			}
		}
		if !ok {
			return batch
		}
		if slices.ContainsFunc(batch, func(b store.Settlement) bool { return b.Seq == it.Seq }) {
			r.carried = &it
			return batch
		}
		batch = append(batch, it)
	}
	return batch
}

// settle writes a batch, retrying briefly: a lost batch is not lost work (the leases expire and
// the deliveries are sent again) but it costs duplicates.
func (r *run) settle(batch []store.Settlement) {
	var err error
	for try := 0; try < 3; try++ {
		var written store.Settled
		written, err = r.e.st.Settle(context.Background(), r.e.cfg.Now(), r.policy(), batch)
		if err == nil {
			r.settled(batch, written)
			return
		}
		time.Sleep(time.Duration(try+1) * 100 * time.Millisecond)
	}
	r.e.log.Error("settle failed; the leases will expire and the deliveries be sent again", "count", len(batch), "err", err)
	r.mu.Lock()
	r.err = fmt.Errorf("writing outcomes: %w", err)
	r.mu.Unlock()
}

func (r *run) policy() store.CircuitPolicy {
	return store.CircuitPolicy{Threshold: r.e.cfg.CircuitThreshold, BaseCooldown: r.e.cfg.CircuitCooldown, MaxCooldown: r.e.cfg.CircuitMaxCooldown}
}

// settled counts a batch written, but for the outcomes of the stale deliveries, which had lost
// their lease (the store kept none of them: the deliveries are another claim's now, or their
// subscriber is gone), and of those written superseded (counted by the store as such).
func (r *run) settled(batch []store.Settlement, written store.Settled) {
	stale := written.Stale
	r.e.m.staleSettles.Add(float64(len(stale)))
	var lost map[int64]bool // nil, and read as empty, in nearly every batch
	if len(stale) > 0 {
		r.e.log.Warn("outcomes arrived after their lease was lost (it expired and was taken over, or the subscriber was deleted)", "count", len(stale))
	}
	if n := len(stale) + len(written.Superseded); n > 0 {
		lost = make(map[int64]bool, n)
		for _, seq := range stale {
			lost[seq] = true
		}
		for _, seq := range written.Superseded {
			lost[seq] = true
		}
	}
	r.logCircuits(written.Circuits)
	// A circuit closed again by its probe made its subscriber's retries due now (store.Settled.Circuits):
	// claimed now, not at the poll.
	if slices.ContainsFunc(written.Circuits, func(c store.CircuitChange) bool { return !c.Opened }) {
		signal(r.e.wake)
	}
	var held map[int64]bool // none in the common case: no allocation per settle
	for _, seq := range written.Held {
		if held == nil {
			held = make(map[int64]bool, len(written.Held))
		}
		held[seq] = true
	}
	// Failures of sends made before their subscriber's last change, written due now whatever
	// their Result asked (a retry later, or dead): retried, and claimed now, not at the poll.
	var renewed map[int64]bool
	for _, seq := range written.Outdated {
		if renewed == nil {
			renewed = make(map[int64]bool, len(written.Outdated))
			signal(r.e.wake)
		}
		renewed[seq] = true
	}
	r.logGone(batch, written.Disabled, held, lost)
	r.logDead(batch, lost, renewed)
	// The counters of results, here and not when an answer is decided: a stale outcome is none
	// of them (the store kept nothing of it; the claim that took the delivery over counts it).
	m := r.e.m
	r.count(func(d *DrainResult) {
		d.Stale += len(stale)
		d.Superseded += len(written.Superseded)
		for _, it := range batch {
			if lost[it.Seq] {
				continue
			}
			result := it.Result
			if renewed[it.Seq] {
				result = store.ResultRetry
			}
			switch result {
			case store.ResultDelivered:
				d.Delivered++
				m.delivered.WithLabelValues(it.SubscriberID).Inc()
			case store.ResultRetry, store.ResultReschedule:
				if held[it.Seq] { // with its subscriber, disabled: not scheduled again
					d.Held++
					continue
				}
				d.Retried++
				if result == store.ResultRetry {
					m.retried.WithLabelValues(it.SubscriberID).Inc()
				}
			case store.ResultDead, store.ResultDeadUnsent:
				d.Dead++
				m.dead.WithLabelValues(it.SubscriberID, it.Reason).Inc()
			case store.ResultRelease:
				d.Released++
			}
		}
	})
}

// logCircuits logs the circuits a settle opened or closed: an open circuit holds all of a
// subscriber's deliveries back, which the operator should not have to find in a gauge.
func (r *run) logCircuits(changes []store.CircuitChange) {
	for _, c := range changes {
		if c.Opened {
			r.e.log.Warn("circuit opened: the subscriber's deliveries wait until its cool-down ends, then one probe is sent",
				"subscriber", c.SubscriberID, "consecutive_failures", c.Failures, "openings", c.Opens, "until", c.Until.UTC())
		} else {
			r.e.log.Info("circuit closed: the subscriber answered again", "subscriber", c.SubscriberID)
		}
	}
}

// logGone logs the subscribers a settle disabled after a 410, and the 410s it did not apply: sent
// before the subscriber was changed (a new URL, a resume), they do not undo the change. A 410 at
// a delivery's last attempt leaves it dead, not held, whether applied or not.
func (r *run) logGone(batch []store.Settlement, disabled []string, held, lost map[int64]bool) {
	for _, id := range disabled {
		r.e.log.Warn("subscriber disabled: it answered 410 Gone; its deliveries are held", "subscriber", id)
	}
	for i := range batch {
		if it := &batch[i]; it.Disable != "" && !held[it.Seq] && !lost[it.Seq] && !slices.Contains(disabled, it.SubscriberID) {
			r.e.log.Info("a 410 Gone was not applied: the subscriber was changed after its send; as any failure of such a send, after a change of its URL, secrets or other send settings it counts no attempt, and the delivery is due again at once unless past its max age",
				"subscriber", it.SubscriberID, "delivery", r.e.st.DeliveryID(it.Seq))
		}
	}
}

// logDead logs the deliveries of a batch that died (but for those in lost or renewed, which did
// not): one line per subscriber and reason, with the count, the first one's id and its last
// error, so a subscriber failing for good does not write a line per delivery.
func (r *run) logDead(batch []store.Settlement, lost, renewed map[int64]bool) {
	type group struct{ sub, reason string }
	var order []group
	first := map[group]*store.Settlement{}
	count := map[group]int{}
	for i := range batch {
		it := &batch[i]
		if it.Result != store.ResultDead && it.Result != store.ResultDeadUnsent || lost[it.Seq] || renewed[it.Seq] {
			continue
		}
		g := group{it.SubscriberID, it.Reason}
		if count[g] == 0 {
			order = append(order, g)
			first[g] = it
		}
		count[g]++
	}
	for _, g := range order {
		r.e.log.Warn("deliveries dead-lettered: retry or replay them once the subscriber is fixed",
			"subscriber", g.sub, "reason", g.reason, "count", count[g], "delivery", r.e.st.DeliveryID(first[g].Seq), "last_error", first[g].Error)
	}
}

// prune applies the retention window, until ctx (the loop's) ends: a long prune at the start of
// a cron drain held it past its --for and past a SIGTERM. What it leaves, the next prune does.
func (r *run) prune(ctx context.Context) {
	n, err := r.e.st.Prune(ctx, r.e.cfg.Now().Add(-r.e.cfg.Retention))
	// Counted also when cut short: the transactions before the cut are committed.
	r.count(func(d *DrainResult) { d.Pruned += n })
	if err != nil {
		if ctx.Err() == nil {
			r.e.log.Error("prune failed", "err", err)
		}
		return
	}
	if n > 0 {
		r.e.log.Info("pruned old deliveries", "count", n)
	}
}

// forgetGone drops the metric series of deleted subscribers: a daemon's, at each prune tick (a
// drain's process ends before they could pile up).
func (r *run) forgetGone(ctx context.Context) {
	subs, err := r.e.st.ListSubscribers(ctx)
	if err != nil {
		return
	}
	live := make(map[string]bool, len(subs))
	for _, s := range subs {
		live[s.ID] = true
	}
	r.e.m.forgetGone(func(id string) bool { return live[id] })
}

func (r *run) count(f func(*DrainResult)) {
	r.mu.Lock()
	f(&r.res)
	r.mu.Unlock()
}

func (r *run) result() DrainResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.res
}
