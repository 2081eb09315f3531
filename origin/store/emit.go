package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/edgehook/edgehook/shared/wire"
)

// emitReq is one caller's Emit or EmitBatch waiting for the group committer.
type emitReq struct {
	ctx     context.Context // the caller's: one gone before the transaction begins is not written
	events  []EmitInput
	field   string   // the events' field in errors: "events" for a batch, "" for one event
	hashes  [][]byte // bodyHash of each event, computed by the caller, not the committer
	results []EmitResult
	err     error
	done    chan struct{}
	// state is who has the request: emitQueued until the committer takes it into a transaction
	// (emitTaken) or its caller gives up first (emitWithdrawn), whichever comes first.
	state atomic.Int32
}

// The states of an emitReq.
const (
	emitQueued int32 = iota
	emitTaken
	emitWithdrawn
)

// Emit stores one event and a delivery for every matching subscriber that is not disabled. It
// returns after the transaction carrying it has committed (see EmitBatch). Most deliveries become
// rows only when they settle (fanout.go); they are pending, and counted, from the commit on.
func (s *Store) Emit(ctx context.Context, in EmitInput) (EmitResult, error) {
	res, err := s.emit(ctx, []EmitInput{in}, "")
	if err != nil {
		return EmitResult{}, err
	}
	return res[0], nil
}

// EmitBatch stores several events atomically: all or none. Validation errors name the field as
// "events[i].<field>".
//
// Event ids are idempotency keys: an id already stored with the same type, body and coalesce key
// returns the original result with Duplicate set; with any of them different it is ErrConflict.
// Past the global cap the error is a *QueueFullError (errors.Is ErrQueueFull).
//
// Concurrent calls share one transaction (group commit): a single committer goroutine takes every
// request waiting, writes them in one transaction (leaving out a request that fails on its own, so
// one caller's conflict does not fail the others) and commits once, so throughput is not one fsync
// per event. Each caller returns only after that commit.
func (s *Store) EmitBatch(ctx context.Context, ins []EmitInput) ([]EmitResult, error) {
	if len(ins) == 0 {
		return nil, fieldErrf("events", "at least one event is required")
	}
	if len(ins) > MaxBatchEvents {
		return nil, fieldErrf("events", "%d events, at most %d per batch", len(ins), MaxBatchEvents)
	}
	return s.emit(ctx, ins, "events")
}

func (s *Store) emit(ctx context.Context, ins []EmitInput, field string) ([]EmitResult, error) {
	req := &emitReq{ctx: ctx, events: ins, field: field, hashes: make([][]byte, len(ins)), done: make(chan struct{})}
	for i := range ins {
		if err := s.validateEmit(&ins[i], req.prefix(i)); err != nil {
			return nil, err
		}
		req.hashes[i] = bodyHash(ins[i].Type, ins[i].Body)
	}
	select {
	case s.emits <- req:
		s.enqueued.Add(1)
	case <-s.stop:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// A caller that gives up before its request's transaction begins has it dropped (not stored);
	// once begun it is committed or failed whatever ctx does, and the caller hears which: told
	// ctx's error, an `edgehook emit` stopped by a signal while its transaction waited for another
	// process's lock exited 1, and its event was stored all the same (a PHP caller emitting it
	// again without an id stored it twice). The wait is bounded: the transaction commits or fails
	// within the busy timeout.
	select {
	case <-req.done:
		return req.results, req.err
	case <-s.done:
		// The committer may have answered this request just before it stopped: select picks at
		// random among ready cases, and a committed event must not be reported as refused.
		select {
		case <-req.done:
			return req.results, req.err
		default:
			return nil, ErrClosed
		}
	case <-ctx.Done():
		if req.state.CompareAndSwap(emitQueued, emitWithdrawn) {
			return nil, ctx.Err()
		}
		<-req.done
		return req.results, req.err
	}
}

func (s *Store) validateEmit(in *EmitInput, prefix string) error {
	if err := wire.ValidateEventID(in.ID); err != nil {
		return fieldErr(prefix+"id", err)
	}
	if err := wire.ValidateEventType(in.Type); err != nil {
		return fieldErr(prefix+"type", err)
	}
	if len(in.Body) > s.opts.MaxBodyBytes {
		return fieldErrf(prefix+"body", "%d bytes, the maximum is %d", len(in.Body), s.opts.MaxBodyBytes)
	}
	// encoding/json accepts invalid UTF-8 inside strings; JSON exchanged between systems must be
	// UTF-8 (RFC 8259 §8.1), and a subscriber's strict parser would refuse it on every retry.
	if !utf8.Valid(in.Body) {
		return fieldErrf(prefix+"body", "is not valid UTF-8")
	}
	if !in.BodyChecked.Covers(in.Body) && !wire.ValidJSON(in.Body) {
		return fieldErrf(prefix+"body", "is not valid JSON")
	}
	if err := wire.ValidateCoalesceKey(in.CoalesceKey); err != nil {
		return fieldErr(prefix+"coalesce_key", err)
	}
	return nil
}

// commitLoop is the group committer: it runs until Close, then commits what is still queued.
func (s *Store) commitLoop() {
	defer close(s.done)
	concurrent := false // the last group had several requests
	for {
		select {
		case r := <-s.emits:
			group := s.gather(r, concurrent)
			concurrent = len(group) > 1
			s.commitGroup(group)
		case <-s.stop:
			for {
				select {
				case r := <-s.emits:
					s.commitGroup(s.gather(r, false))
				default:
					return
				}
			}
		}
	}
}

// gatherWindow is how long a group stays open for more requests after its first when callers emit
// concurrently. Their requests reach the queue spread out by the work before it (a request's HTTP
// handling), and every commit has a fixed cost whatever its size: its statements, and the WAL
// frames of the pages every commit rewrites. Taking only what was already queued, make bench's 32
// single-event clients were committed about 4 events at a time. A millisecond suited the commits
// of one row per delivery; since an event is one row (fan-out at claim) half of it commits as
// often as the clients need: 11,300–11,700 events/s instead of 8,900–9,900 (make bench's emit,
// three alternated pairs on a quiet machine), at 16 % more commits and 8 % more CPU for 32 callers
// pacing 3,000 events/s between them (none at 300 or 1,000/s). An event is still acknowledged
// only after its group committed.
const gatherWindow = 500 * time.Microsecond

// gather collects the requests queued behind first, up to MaxBatchEvents events. When the last
// group had several requests (wait) it also waits up to gatherWindow for more; a lone caller is not
// delayed.
func (s *Store) gather(first *emitReq, wait bool) []*emitReq {
	group, n := []*emitReq{first}, len(first.events)
	var window <-chan time.Time // nil: take only what is queued
	if wait {
		t := time.NewTimer(gatherWindow)
		defer t.Stop()
		window = t.C
	}
	for n < MaxBatchEvents {
		select {
		case r := <-s.emits:
			group, n = append(group, r), n+len(r.events)
			continue
		default:
		}
		if window == nil {
			return group
		}
		select {
		case r := <-s.emits:
			group, n = append(group, r), n+len(r.events)
		case <-window: // take what is queued, then close the group
			window = nil
		case <-s.stop:
			window = nil
		}
	}
	return group
}

// commitGroup writes a group in one transaction and answers every request. A request that fails
// on its own (conflict, queue full) is left out of the write, so it does not fail the others.
//
// The whole group is written with a few statements whatever its size, each prepared once (see
// Store.exec): the group is planned in Go first (idempotency, conflicts, the global cap,
// coalescing), then its events and deliveries are bound into multi-row INSERTs (padded), its
// supersedes are one statement over a JSON array, and queue_counts gets one upsert. Arrays of
// objects are read with jsonb_each, not json_each: json_each renders each object back to JSON
// text, which every ->> then parses again; jsonb_each hands ->> the parsed binary form. No
// savepoint either: a savepoint makes SQLite copy every page it changes to the statement journal,
// once per savepoint.
func (s *Store) commitGroup(group []*emitReq) {
	if group = live(group); len(group) == 0 {
		return
	}
	// Not the callers' contexts: one caller giving up must not abort the others' transaction.
	ctx := context.Background()
	var superseded, overflow int64
	claimable := 0
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		subs, err := s.matchingSubscribers(ctx, tx)
		if err != nil {
			return err
		}
		p, err := s.newGroupPlan(ctx, tx, group, subs)
		if err != nil {
			return err
		}
		for _, r := range group {
			if r.err = p.check(r); r.err == nil {
				p.add(r)
			}
		}
		if err := p.write(ctx, tx, ms(s.Now())); err != nil {
			return err
		}
		superseded, claimable = p.superseded, p.claimable
		overflow, err = s.trimBacklogs(ctx, tx, p.pending)
		return err
	})
	// Counted, and the engine woken, before the callers hear of the commit: one that then reads
	// the counters sees its own, and one that then claims finds the wake-up taken with it.
	if err == nil {
		s.commits.Add(1)
		s.counters.add(superseded, overflow)
		// Deliveries to paused subscribers cannot be claimed: waking the engine for them only put
		// an empty claim transaction in the way of the next commit, once per commit.
		if claimable > 0 {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
	for _, r := range group {
		if err != nil {
			r.results, r.err = nil, fmt.Errorf("emit: %w", err)
		}
		close(r.done)
	}
}

// live answers and leaves out the requests whose callers have gone (a client that timed out while
// the database was locked, an interrupted CLI): not written, as their callers were told. It takes
// the others, whose callers now wait for their answer whatever their contexts do. An
// application that then sends the event again without its id stores it once, not twice.
func live(group []*emitReq) []*emitReq {
	kept := group[:0]
	for _, r := range group {
		// Withdrawn, its caller has gone too (emit): not taken once its ctx is done.
		if r.ctx.Err() != nil || !r.state.CompareAndSwap(emitQueued, emitTaken) {
			r.err = r.ctx.Err()
			close(r.done)
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

// storedEvent is an event id already in the database, or planned in the group being written.
type storedEvent struct {
	content
	seq        int64 // 0 for a planned one
	deliveries int   // for a stored one, known after countDuplicates
}

// content is what an event id stands for: its type and body (hashed together) and its coalesce
// key, which changes how the event is delivered. The id again with other content is a conflict,
// not a duplicate.
type content struct {
	hash []byte
	key  string
}

// differs names what of o differs from c, or returns "" for the same content.
func (c content) differs(o content) string {
	switch {
	case !bytes.Equal(c.hash, o.hash):
		return "type or body"
	case c.key != o.key:
		return "coalesce key"
	}
	return ""
}

// newDelivery is a delivery row to insert at emit: one with a coalesce key, which a newer event
// may supersede.
type newDelivery struct {
	Seq    int64
	Event  int64 // the event's seq
	Sub    string
	Key    string
	Status Status
}

// newEvent is an event row to insert.
type newEvent struct {
	Seq        int64
	ID, Type   string
	Body, Hash []byte
	Key        string
	Fanout     []int64 // the ordinals of the subscribers whose delivery is not a row, ascending
	fanoutKey  string  // fanoutKey(Fanout) if known when planned, else ""
	fanoutID   int64   // Fanout's id, 0 for none (set by write)
}

// resultRef points at one event's EmitResult inside a request.
type resultRef struct {
	r *emitReq
	i int
}

// groupPlan is what a group will write, decided in Go before any write.
type groupPlan struct {
	s          *Store
	subs       []*Subscriber
	cap        int64
	depth      int64                   // deliveries pending or in flight, with those planned
	pending    map[string]int64        // pending deliveries per subscriber, as the plan leaves them
	known      map[string]*storedEvent // event ids stored or planned
	nextSeq    int64                   // the seq of the next planned event
	events     []newEvent
	rows       []newDelivery
	fanned     map[string]int64        // deliveries per subscriber that are not rows
	latest     map[[2]string]int       // (subscriber, coalesce key) → index in rows of the newest
	firstKey   map[[2]string]resultRef // (subscriber, coalesce key) → the first event that supersedes stored rows
	dups       map[int64][]resultRef   // stored event seq → re-emits of it
	claimable  int                     // deliveries created for active subscribers
	superseded int64
	byType     map[string]*typeMatch // the subscribers each event type of the group matches
}

// typeMatch is what the subscribers give the group's events of one type, worked out once per
// group: a batch's events mostly share their type, and the group's one writer goroutine planned
// each against every subscriber, an allocation and two map writes per delivery.
type typeMatch struct {
	subs     []*Subscriber // the subscribers whose filter matches the type, in the plan's order
	plain    bool          // no coalesce rule among them applies to it: every event of the type has the same fanout
	ordinals []int64       // if plain, that fanout, ascending (shared by the events: read only)
	key      string        // if plain, fanoutKey(ordinals)
	active   int           // of subs, those active
	events   int64         // plain events of the type planned so far, counted into pending and fanned by write
}

// match returns the subscribers of an event type.
func (p *groupPlan) match(typ string) *typeMatch {
	if m, ok := p.byType[typ]; ok {
		return m
	}
	m := &typeMatch{plain: true}
	for _, sub := range p.subs {
		if !sub.Events.Match(typ) {
			continue
		}
		m.subs = append(m.subs, sub)
		if sub.State == StateActive {
			m.active++
		}
		if sub.Coalesce != nil && sub.Coalesce.Applies(typ) {
			m.plain = false
		}
	}
	if m.plain {
		for _, sub := range m.subs {
			m.ordinals = append(m.ordinals, sub.ordinal)
		}
		slices.Sort(m.ordinals)
		m.key = fanoutKey(m.ordinals)
	}
	p.byType[typ] = m
	return m
}

// newGroupPlan reads what planning needs: the queue depth, the backlogs, and which of the group's
// ids exist. The counts cannot change under the plan: the transaction holds the write lock.
func (s *Store) newGroupPlan(ctx context.Context, tx *sql.Tx, group []*emitReq, subs []*Subscriber) (*groupPlan, error) {
	p := &groupPlan{s: s, subs: subs, cap: s.opts.GlobalCap, known: map[string]*storedEvent{}, latest: map[[2]string]int{},
		firstKey: map[[2]string]resultRef{}, dups: map[int64][]resultRef{}, pending: map[string]int64{}, fanned: map[string]int64{},
		byType: map[string]*typeMatch{}}
	// New events take their seqs past the mark (migration 0007), so deliveries are planned with
	// their events' seqs, the INSERTs return nothing, and a seq deleted by a prune or with its
	// subscriber is never given again (a delivery's id is public, and made of it: fanout.go).
	if err := s.queryRow(ctx, tx, readSeqMarksSQL).Scan(&p.nextSeq); err != nil {
		return nil, err
	}
	counts, err := s.query(ctx, tx, `SELECT subscriber_id, status, n FROM queue_counts WHERE status IN ('pending', 'leased')`)
	if err != nil {
		return nil, err
	}
	for counts.Next() {
		var sub string
		var st Status
		var n int64
		if err := counts.Scan(&sub, &st, &n); err != nil {
			counts.Close()
			return nil, err
		}
		p.depth += n
		if st == StatusPending {
			p.pending[sub] = n
		}
	}
	counts.Close()
	if err := counts.Err(); err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range group {
		for _, in := range r.events {
			ids = append(ids, in.ID)
		}
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, tx, `SELECT id, seq, body_hash, coalesce_key FROM events WHERE id IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		e := &storedEvent{}
		if err := rows.Scan(&id, &e.seq, &e.hash, &e.key); err != nil {
			return nil, err
		}
		p.known[id] = e
	}
	return p, rows.Err()
}

// prefix is what the fields of event i start with in errors: "events[3]." in a batch.
func (r *emitReq) prefix(i int) string {
	if r.field == "" {
		return ""
	}
	return fmt.Sprintf("%s[%d].", r.field, i)
}

// check tells whether a request can be written as a whole: no id conflicts with a stored, planned
// or earlier event of the request, and every new event fits under the global cap. It changes
// nothing.
func (p *groupPlan) check(r *emitReq) error {
	seen := map[string]content{}
	depth := p.depth
	for i, in := range r.events {
		c := content{r.hashes[i], in.CoalesceKey}
		if prev, ok := seen[in.ID]; ok {
			if d := prev.differs(c); d != "" {
				return fieldErr(r.prefix(i)+"id", fmt.Errorf("event %q appears twice with a different %s: %w", in.ID, d, ErrConflict))
			}
			continue
		}
		seen[in.ID] = c
		if e, ok := p.known[in.ID]; ok {
			if d := e.differs(c); d != "" {
				return fieldErr(r.prefix(i)+"id", fmt.Errorf("event %q was already emitted with a different %s: %w", in.ID, d, ErrConflict))
			}
			continue
		}
		if depth >= p.cap {
			return &QueueFullError{Depth: depth, Cap: p.cap, RetryAfter: DefaultQueueFullRetry}
		}
		depth += int64(len(p.match(in.Type).subs))
	}
	return nil
}

// add plans a request that check accepted: its new events, one delivery per matching subscriber
// (a row if it has a coalesce key, else in the event's fanout), and the supersedes of coalescing.
func (p *groupPlan) add(r *emitReq) {
	r.results = make([]EmitResult, len(r.events))
	for i, in := range r.events {
		if e, ok := p.known[in.ID]; ok {
			r.results[i] = EmitResult{EventID: in.ID, Deliveries: e.deliveries, Duplicate: true}
			if e.seq != 0 {
				p.dups[e.seq] = append(p.dups[e.seq], resultRef{r, i}) // the count is read later
			}
			continue
		}
		sum := r.hashes[i]
		ev := p.nextSeq
		p.nextSeq++
		p.events = append(p.events, newEvent{Seq: ev, ID: in.ID, Type: in.Type, Body: in.Body, Hash: sum, Key: in.CoalesceKey})
		event := &p.events[len(p.events)-1]
		res := &r.results[i]
		res.EventID = in.ID
		m := p.match(in.Type)
		p.known[in.ID] = &storedEvent{content: content{sum, in.CoalesceKey}, deliveries: len(m.subs)}
		p.depth += int64(len(m.subs))
		if m.plain {
			event.Fanout, event.fanoutKey = m.ordinals, m.key
			res.Deliveries = len(m.subs)
			p.claimable += m.active
			m.events++
			continue
		}
		var payload map[string]json.RawMessage // parsed at most once, for coalesce keys
		for _, sub := range m.subs {
			key := ""
			if sub.Coalesce != nil && sub.Coalesce.Applies(in.Type) {
				key = in.CoalesceKey
				if key == "" {
					if payload == nil {
						payload = map[string]json.RawMessage{}
						json.Unmarshal(in.Body, &payload) // a non-object body has no keys: no coalescing
					}
					key = coalesceValue(payload[sub.Coalesce.Key])
				}
			}
			if sub.State == StateActive {
				p.claimable++
			}
			res.Deliveries++
			p.pending[sub.ID]++
			if key == "" {
				event.Fanout = append(event.Fanout, sub.ordinal)
				p.fanned[sub.ID]++
				continue
			}
			k := [2]string{sub.ID, key}
			if j, ok := p.latest[k]; ok {
				if p.rows[j].Status == StatusPending {
					p.rows[j].Status = StatusSuperseded // an older event of this group
					res.Superseded++
					p.pending[sub.ID]--
				}
			} else {
				p.firstKey[k] = resultRef{r, i} // stored pending rows are superseded on its behalf
			}
			p.latest[k] = len(p.rows)
			p.rows = append(p.rows, newDelivery{Seq: deliverySeqOf(ev, sub.ordinal), Event: ev, Sub: sub.ID, Key: key, Status: StatusPending})
		}
		slices.Sort(event.Fanout)
		p.superseded += int64(res.Superseded)
	}
}

// write stores the plan: the events with their fanouts, the supersedes of stored pending
// deliveries, the new delivery rows, the seq mark past them, and the delivery counts that
// re-emits of stored events report.
func (p *groupPlan) write(ctx context.Context, tx *sql.Tx, now int64) error {
	for _, m := range p.byType {
		for _, sub := range m.subs {
			p.pending[sub.ID] += m.events
			p.fanned[sub.ID] += m.events
		}
	}
	if err := p.countDuplicates(ctx, tx); err != nil {
		return err
	}
	ids := map[string]int64{}
	newest := map[int64]int64{} // fanout id → its newest event in the group
	for i := range p.events {
		e := &p.events[i]
		if len(e.Fanout) == 0 {
			continue
		}
		key := e.fanoutKey
		if key == "" {
			key = fanoutKey(e.Fanout)
		}
		id, ok := ids[key]
		if !ok {
			var err error
			if id, err = p.s.fanoutID(ctx, tx, key); err != nil {
				return err
			}
			ids[key] = id
		}
		e.fanoutID, newest[id] = id, e.Seq
	}
	marks := make([]any, 0, 2*len(newest))
	for id, seq := range newest {
		marks = append(marks, id, seq)
	}
	if err := p.s.execPadded(ctx, tx, &markFanoutsSQL, nil, marks, 2); err != nil {
		return err
	}
	// The ids were checked free inside this write transaction, and the seqs are past every one
	// handed out and every one stored: a conflict here is a bug, and fails the group.
	args := make([]any, 0, 1+7*padChunks[0])
	err := padded(len(p.events), func(k, lo, hi int) error {
		args = append(args[:0], now)
		for _, e := range p.events[lo:hi] {
			args = append(args, e.Seq, e.ID, e.Type, e.Body, e.Hash, e.Key, e.fanoutID)
		}
		_, err := p.s.exec(ctx, tx, insertEventsSQL[k], padNulls(args, k, hi-lo, 7)...)
		return err
	})
	if err != nil {
		return err
	}
	if err := p.supersedeStored(ctx, tx, now); err != nil {
		return err
	}
	// The rows go in in plan order: among deliveries due at once, a subscriber's are claimed in
	// due order, and their seqs follow their events'.
	err = padded(len(p.rows), func(k, lo, hi int) error {
		args = append(args[:0], now)
		for _, r := range p.rows[lo:hi] {
			args = append(args, r.Seq, r.Event, r.Sub, string(r.Status), r.Key)
		}
		_, err := p.s.exec(ctx, tx, insertDeliveriesSQL[k], padNulls(args, k, hi-lo, 5)...)
		return err
	})
	if err != nil {
		return err
	}
	if len(p.events) > 0 {
		if _, err := p.s.exec(ctx, tx, `UPDATE meta SET value = ? WHERE key = 'events_seq'`, p.nextSeq-1); err != nil {
			return err
		}
	}
	return p.countRows(ctx, tx)
}

// readSeqMarksSQL reads the next event seq, one past the mark (migration 0007, the last seq handed
// out) and past the largest stored: a binary from before 0007, still running on the file after a
// newer one migrated it, gives events the largest seq + 1 without moving the mark.
const readSeqMarksSQL = `SELECT max((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'events_seq'), (SELECT coalesce(max(seq), 0) FROM events)) + 1`

// insertSQL renders an INSERT into cols for every padChunks size: each row binds k values, followed
// by the expressions now (of t.now, the first parameter). Rows of NULLs, the padding of a chunk, are
// skipped. Bound values cost less than a JSON array read with ->> (a sixth of an emit's CPU, and an
// event body was escaped into JSON and parsed back); one execution per chunk, not one per size a
// group's rows break into, also spares SQLite journaling the pages each statement changes once per
// statement (a group of 18 single events ran 9 INSERTs).
func insertSQL(table, cols string, k int, now string) [len(padChunks)]string {
	return chunkSQL(k, func(values string) string {
		return `INSERT INTO ` + table + `(` + cols + `) SELECT v.*, ` + now + ` FROM (SELECT ? AS now) AS t, (` + values +
			`) AS v WHERE v.column1 IS NOT NULL`
	})
}

// valuesSQL is a VALUES list of n rows of k parameters (columns column1 … columnk). The parameters
// are anonymous: the driver looks every numbered one up by name, a walk of the statement's list
// of names each.
func valuesSQL(n, k int) string {
	row := "(?" + strings.Repeat(", ?", k-1) + ")"
	return "VALUES " + strings.Repeat(row+", ", n-1) + row
}

// insertEventsSQL inserts events (seq, id, type, body, hash, coalesce key, fanout id or 0).
var insertEventsSQL = insertSQL("events", "seq, id, type, body, body_hash, coalesce_key, fanout, created_at", 7, "t.now")

// insertDeliveriesSQL inserts deliveries (seq, event seq, subscriber, status, coalesce key) due
// now.
var insertDeliveriesSQL = insertSQL("deliveries",
	"seq, event_seq, subscriber_id, status, coalesce_key, next_attempt_at, age_from, created_at, updated_at", 5,
	"t.now, t.now, t.now, t.now")

// countRows adds the new deliveries, rows and fanouts, to queue_counts (no trigger counts inserts).
func (p *groupPlan) countRows(ctx context.Context, tx *sql.Tx) error {
	c := countDeltas{}
	for _, r := range p.rows {
		c.move(r.Sub, "", r.Status, 1)
	}
	for sub, n := range p.fanned {
		c.move(sub, "", StatusPending, n)
	}
	return c.write(ctx, p.s, tx)
}

// countDeliveriesSQL counts the deliveries of each event of a JSON list of seqs, a row or not:
// one kind at a time, because all_deliveries, a compound view, would be read whole for it.
var countDeliveriesSQL = `SELECT j.value, (SELECT count(*) FROM deliveries d WHERE ` + eventRowsSQL("d", "j.value") + `)
		+ (SELECT count(*) FROM fanout_deliveries f WHERE f.event_seq = j.value)
		+ (SELECT count(*) FROM leased_deliveries l WHERE l.event_seq = j.value)
	FROM json_each(?) j`

// countDuplicates fills in the delivery count of re-emitted stored events.
func (p *groupPlan) countDuplicates(ctx context.Context, tx *sql.Tx) error {
	if len(p.dups) == 0 {
		return nil
	}
	seqs := make([]int64, 0, len(p.dups))
	for seq := range p.dups {
		seqs = append(seqs, seq)
	}
	list, _ := json.Marshal(seqs)
	rows, err := p.s.query(ctx, tx, countDeliveriesSQL, string(list))
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var seq int64
		var n int
		if err := rows.Scan(&seq, &n); err != nil {
			return err
		}
		for _, ref := range p.dups[seq] {
			ref.r.results[ref.i].Deliveries = n
		}
	}
	return rows.Err()
}

// supersedeStored supersedes the stored pending and held deliveries of every (subscriber,
// coalesce key) the group emits, counted for the group's first event with that pair. Held ones
// are those of a disabled subscriber paused since, which emits match: its resume would otherwise
// queue them beside the newer ones. Those in flight are marked (ReasonNewerEvent) instead: one
// that comes back unsent, to be sent again, is superseded then (settleSQL, rescueExpired), and not
// sent after the newer event.
func (p *groupPlan) supersedeStored(ctx context.Context, tx *sql.Tx, now int64) error {
	if len(p.firstKey) == 0 {
		return nil
	}
	pairs := make([][2]string, 0, len(p.firstKey))
	for k := range p.firstKey {
		pairs = append(pairs, k)
	}
	data, _ := json.Marshal(pairs)
	if _, err := p.s.exec(ctx, tx, markInFlightSQL, ReasonNewerEvent, string(data)); err != nil {
		return err
	}
	for _, q := range []string{supersedeSQL, supersedeHeldSQL} {
		if err := p.supersede(ctx, tx, q, now, string(data)); err != nil {
			return err
		}
	}
	return nil
}

// supersede runs one of supersedeStored's statements and counts what it superseded.
func (p *groupPlan) supersede(ctx context.Context, tx *sql.Tx, q string, now int64, pairs string) error {
	rows, err := p.s.query(ctx, tx, q, now, pairs)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k [2]string
		var was Status
		if err := rows.Scan(&k[0], &k[1], &was); err != nil {
			return err
		}
		ref := p.firstKey[k]
		ref.r.results[ref.i].Superseded++
		p.superseded++
		if was == StatusPending {
			p.pending[k[0]]--
		}
	}
	return rows.Err()
}

// supersedeSQL replaces the pending deliveries with a coalesce key of the (subscriber, key) pairs
// in a JSON array. Claimed ones are left alone: they may already be at the subscriber. The index is
// named: the planner would otherwise pick deliveries_sub_status and walk all of a big backlog.
const supersedeSQL = `UPDATE deliveries INDEXED BY deliveries_coalesce SET status = 'superseded', updated_at = ?1
	FROM (SELECT value->>0 AS sub, value->>1 AS key FROM jsonb_each(?2)) AS j
	WHERE deliveries.subscriber_id = j.sub AND deliveries.coalesce_key = j.key AND deliveries.status = 'pending' AND deliveries.coalesce_key <> ''
	RETURNING deliveries.subscriber_id, deliveries.coalesce_key, 'pending'`

// supersedeHeldSQL is supersedeSQL for held deliveries, through deliveries_sub_settled: a seek to
// each subscriber's held ones, nearly always none.
const supersedeHeldSQL = `UPDATE deliveries INDEXED BY deliveries_sub_settled SET status = 'superseded', updated_at = ?1
	FROM (SELECT value->>0 AS sub, value->>1 AS key FROM jsonb_each(?2)) AS j
	WHERE deliveries.subscriber_id = j.sub AND deliveries.status = 'held' AND ` + subSettledSQL + ` AND deliveries.coalesce_key = j.key
	RETURNING deliveries.subscriber_id, deliveries.coalesce_key, 'held'`

// markInFlightSQL marks (?1) the deliveries in flight with a coalesce key of the (subscriber, key)
// pairs in a JSON array (?2), through deliveries_leased: the rows in flight, a few hundred at most.
const markInFlightSQL = `UPDATE deliveries INDEXED BY deliveries_leased SET reason = ?1
	FROM (SELECT value->>0 AS sub, value->>1 AS key FROM jsonb_each(?2)) AS j
	WHERE deliveries.status = 'leased' AND deliveries.subscriber_id = j.sub AND deliveries.coalesce_key = j.key AND deliveries.coalesce_key <> ''`

// pendingRowsSQL selects up to ?4 (-1: all) pending delivery rows of subscriber ?3 of one kind
// (attempts > 0: retries, attempts = 0: first attempts), earliest due first as its due index orders
// them without a sort (pending rows are in no other index by subscriber). The limit is (?4 + 0) so
// the prepared statement is not compiled again at every run (see dueRowsSQL).
func pendingRowsSQL(kind string) string {
	return `SELECT seq FROM deliveries INDEXED BY ` + dueIndex(kind) + ` WHERE subscriber_id = ?3 AND status = 'pending' AND ` + kind + `
		ORDER BY next_attempt_at LIMIT (?4 + 0)`
}

// bodyHash identifies an event's content for idempotent re-emits.
func bodyHash(eventType string, body []byte) []byte {
	h := sha256.New()
	h.Write([]byte(eventType))
	h.Write([]byte{0})
	h.Write(body)
	return h.Sum(nil)
}

// coalesceValue renders a top-level payload field as a coalesce key: a string as is, a number as
// written. Anything else, or a value that is not a valid key, means no coalescing.
func coalesceValue(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var key string
	switch raw[0] {
	case '"':
		if json.Unmarshal(raw, &key) != nil {
			return ""
		}
	default:
		if _, err := strconv.ParseFloat(string(raw), 64); err != nil {
			return ""
		}
		key = string(raw)
	}
	if wire.ValidateCoalesceKey(key) != nil {
		return ""
	}
	return key
}

// trimBacklogs dead-letters the oldest pending deliveries of every subscriber beyond the backlog
// cap, given the pending count of each, and returns how many, so a subscriber that is down keeps
// its newest events: retries first (they are of older events than nearly any first attempt), then
// first attempts, rows and fanout deliveries merged by event.
func (s *Store) trimBacklogs(ctx context.Context, tx *sql.Tx, pending map[string]int64) (int64, error) {
	var total int64
	now := ms(s.Now())
	for id, n := range pending {
		excess := n - s.opts.BacklogCap
		if excess <= 0 {
			continue
		}
		r, err := s.exec(ctx, tx, `UPDATE deliveries SET status = 'dead', reason = ?1, last_error = ?5, updated_at = ?2
			WHERE seq IN (`+pendingRowsSQL("attempts > 0")+`)`, ReasonBacklogOverflow, now, id, excess, backlogCapError)
		if err != nil {
			return 0, err
		}
		dead, _ := r.RowsAffected()
		total, excess = total+dead, excess-dead
		if excess <= 0 {
			continue
		}
		firsts, err := s.pendingFirsts(ctx, tx, id, excess)
		if err != nil {
			return 0, err
		}
		t, err := s.fanoutTakeOf(ctx, tx, id, excess)
		if err != nil {
			return 0, err
		}
		fanned, err := s.fanoutFound(ctx, tx, []fanoutTake{t})
		if err != nil {
			return 0, err
		}
		seqs, fan, through := oldestFirst(firsts, fanned[id], excess, nil)
		list, _ := json.Marshal(seqs)
		if _, err := s.exec(ctx, tx, `UPDATE deliveries SET status = 'dead', reason = ?1, last_error = ?3, updated_at = ?2
			WHERE seq IN (SELECT value FROM json_each(?4)) AND status = 'pending'`, ReasonBacklogOverflow, now, backlogCapError, string(list)); err != nil {
			return 0, err
		}
		t.n = fan
		st := fanoutState{status: StatusDead, reason: ReasonBacklogOverflow, lastError: backlogCapError, now: now}
		if err := s.settleFanout(ctx, tx, t, st, through); err != nil {
			return 0, err
		}
		total += int64(len(seqs)) + fan
	}
	return total, nil
}

// pendingFirsts returns up to n pending first-attempt rows of a subscriber, earliest due first.
func (s *Store) pendingFirsts(ctx context.Context, tx *sql.Tx, sub string, n int64) ([]dueRow, error) {
	rows, err := s.query(ctx, tx, `SELECT seq, event_seq FROM deliveries INDEXED BY deliveries_due_first
		WHERE subscriber_id = ?1 AND status = 'pending' AND attempts = 0 ORDER BY next_attempt_at LIMIT (?2 + 0)`, sub, n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dueRow
	for rows.Next() {
		var c dueRow
		if err := rows.Scan(&c.seq, &c.eventSeq); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// backlogCapError is the last error of a delivery the backlog cap dead-lettered.
const backlogCapError = "backlog cap reached"
