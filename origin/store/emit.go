package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/edgehook/edgehook/shared/wire"
)

// emitReq is one caller's Emit or EmitBatch waiting for the group committer.
type emitReq struct {
	events  []EmitInput
	results []EmitResult
	err     error
	done    chan struct{}
}

// Emit stores one event and a delivery for every matching subscriber that is not disabled. It
// returns after the transaction carrying it has committed (see EmitBatch).
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
// Event ids are idempotency keys: an id already stored with the same type and body returns the
// original result with Duplicate set; with a different type or body it is ErrConflict. Past the
// global cap the error is a *QueueFullError (errors.Is ErrQueueFull).
//
// Concurrent calls share one transaction (group commit): a single committer goroutine takes every
// request waiting, writes them in one transaction with a savepoint each (so one caller's conflict
// does not fail the others) and commits once, so throughput is not one fsync per event. Each
// caller returns only after that commit.
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
	for i := range ins {
		prefix := ""
		if field != "" {
			prefix = fmt.Sprintf("%s[%d].", field, i)
		}
		if err := s.validateEmit(&ins[i], prefix); err != nil {
			return nil, err
		}
	}
	req := &emitReq{events: ins, done: make(chan struct{})}
	select {
	case s.emits <- req:
		s.enqueued.Add(1)
	case <-s.stop:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Once queued the request is committed or failed whatever ctx does; a caller that gives up
	// early may retry with the same ids, which is idempotent.
	select {
	case <-req.done:
		return req.results, req.err
	case <-s.done:
		return nil, ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *Store) validateEmit(in *EmitInput, prefix string) error {
	if err := wire.ValidateID(in.ID); err != nil {
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
	if !json.Valid(in.Body) {
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
	for {
		select {
		case r := <-s.emits:
			s.commitGroup(s.gather(r))
		case <-s.stop:
			for {
				select {
				case r := <-s.emits:
					s.commitGroup(s.gather(r))
				default:
					return
				}
			}
		}
	}
}

// gather collects the requests already waiting behind first, up to MaxBatchEvents events.
func (s *Store) gather(first *emitReq) []*emitReq {
	group, n := []*emitReq{first}, len(first.events)
	for n < MaxBatchEvents {
		select {
		case r := <-s.emits:
			group, n = append(group, r), n+len(r.events)
		default:
			return group
		}
	}
	return group
}

// errRequestOnly rolls back a group of one request that failed on its own (conflict, queue full):
// the request keeps its own error.
var errRequestOnly = errors.New("the only request failed")

// commitGroup writes a group in one transaction and answers every request. Each request of a
// larger group runs under a savepoint, so one caller's conflict does not fail the others.
func (s *Store) commitGroup(group []*emitReq) {
	// Not the callers' contexts: one caller giving up must not abort the others' transaction.
	ctx := context.Background()
	var superseded, overflow int64
	created := 0
	savepoints := len(group) > 1
	exec := func(tx *sql.Tx, q string) error {
		if !savepoints {
			return nil
		}
		_, err := tx.ExecContext(ctx, q)
		return err
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		superseded, overflow, created = 0, 0, 0
		subs, err := s.matchingSubscribers(ctx, tx)
		if err != nil {
			return err
		}
		var depth int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(n), 0) FROM queue_counts WHERE status IN ('pending', 'leased')`).Scan(&depth); err != nil {
			return err
		}
		for _, r := range group {
			r.results, r.err = nil, nil
			if err := exec(tx, `SAVEPOINT emit`); err != nil {
				return err
			}
			results, d, sup, err := s.emitTx(ctx, tx, r.events, subs, depth)
			switch {
			case err != nil && !isRequestError(err):
				return err
			case err != nil && !savepoints:
				r.err = err
				return errRequestOnly
			case err != nil:
				if err := exec(tx, `ROLLBACK TO emit`); err != nil {
					return err
				}
				r.err = err
			default:
				r.results, depth, superseded = results, depth+d, superseded+sup
				created += int(d)
			}
			if err := exec(tx, `RELEASE emit`); err != nil {
				return err
			}
		}
		overflow, err = s.trimBacklogs(ctx, tx)
		return err
	})
	for _, r := range group {
		if err != nil && err != errRequestOnly {
			r.results, r.err = nil, fmt.Errorf("emit: %w", err)
		}
		close(r.done)
	}
	if err == nil {
		s.commits.Add(1)
		s.counters.add(superseded, overflow)
		if created > 0 {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		}
	}
}

// isRequestError tells errors that fail one request from those that fail the whole transaction.
func isRequestError(err error) bool {
	var fe *FieldError
	return errors.Is(err, ErrConflict) || errors.Is(err, ErrQueueFull) || errors.As(err, &fe)
}

// emitTx writes one request's events; it returns the results, the deliveries created and how many
// older deliveries were superseded. The driver compiles each statement every time it runs, so the
// deliveries of the whole request are inserted by one statement (rows in a JSON array).
func (s *Store) emitTx(ctx context.Context, tx *sql.Tx, events []EmitInput, subs []*Subscriber, depth int64) ([]EmitResult, int64, int64, error) {
	now := ms(s.Now())
	results := make([]EmitResult, len(events))
	sums := make([][]byte, len(events))
	var created, superseded int64
	type newDelivery struct {
		Event  int64  `json:"e"`
		Sub    string `json:"s"`
		Key    string `json:"k"`
		Status Status `json:"st"`
	}
	var rows []newDelivery
	latest := map[[2]string]int{} // (subscriber, coalesce key) → index in rows of the newest
	seen := map[string]int{}      // event id → index in events, for an id repeated in one request
	for i, in := range events {
		sums[i] = bodyHash(in.Type, in.Body)
		if j, ok := seen[in.ID]; ok {
			if !bytes.Equal(sums[i], sums[j]) {
				return nil, 0, 0, fmt.Errorf("event %q appears twice with a different type or body: %w", in.ID, ErrConflict)
			}
			results[i] = EmitResult{EventID: in.ID, Deliveries: results[j].Deliveries, Duplicate: true}
			continue
		}
		seen[in.ID] = i
		seq, dup, err := s.insertEvent(ctx, tx, in, sums[i], depth+created, now)
		if err != nil {
			return nil, 0, 0, err
		}
		if dup != nil {
			results[i] = *dup
			continue
		}
		res := EmitResult{EventID: in.ID}
		var payload map[string]json.RawMessage // parsed at most once, for coalesce keys
		for _, sub := range subs {
			if !sub.Events.Match(in.Type) {
				continue
			}
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
			if key != "" {
				r, err := tx.ExecContext(ctx, supersedeSQL, now, sub.ID, key)
				if err != nil {
					return nil, 0, 0, err
				}
				n, _ := r.RowsAffected()
				if j, ok := latest[[2]string{sub.ID, key}]; ok && rows[j].Status == StatusPending {
					rows[j].Status = StatusSuperseded // an older event of this same request
					n++
				}
				res.Superseded += int(n)
				latest[[2]string{sub.ID, key}] = len(rows)
			}
			rows = append(rows, newDelivery{Event: seq, Sub: sub.ID, Key: key, Status: StatusPending})
			res.Deliveries++
		}
		created += int64(res.Deliveries)
		superseded += int64(res.Superseded)
		results[i] = res
	}
	if len(rows) > 0 {
		data, err := json.Marshal(rows)
		if err != nil {
			return nil, 0, 0, err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO deliveries(event_seq, subscriber_id, status, coalesce_key, next_attempt_at, age_from, created_at, updated_at)
			SELECT value->>'e', value->>'s', value->>'st', value->>'k', ?1, ?1, ?1, ?1 FROM json_each(?2)`, now, string(data)); err != nil {
			return nil, 0, 0, err
		}
	}
	return results, created, superseded, nil
}

// insertEvent stores a new event and returns its seq, or the result of the original emit when the
// id is already stored with the same content (dup), or ErrConflict, or a *QueueFullError.
func (s *Store) insertEvent(ctx context.Context, tx *sql.Tx, in EmitInput, sum []byte, depth, now int64) (seq int64, dup *EmitResult, err error) {
	full := depth >= s.opts.GlobalCap
	if !full {
		err = tx.QueryRowContext(ctx, `INSERT INTO events(id, type, body, body_hash, coalesce_key, created_at) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT(id) DO NOTHING RETURNING seq`, in.ID, in.Type, in.Body, sum, in.CoalesceKey, now).Scan(&seq)
		if !errors.Is(err, sql.ErrNoRows) {
			return seq, nil, err
		}
	}
	// The id exists (or the queue is full and it may exist): answer a re-emit from what is stored.
	var stored []byte
	err = tx.QueryRowContext(ctx, `SELECT seq, body_hash FROM events WHERE id = ?`, in.ID).Scan(&seq, &stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, nil, &QueueFullError{Depth: depth, Cap: s.opts.GlobalCap, RetryAfter: DefaultQueueFullRetry}
	case err != nil:
		return 0, nil, err
	case !bytes.Equal(stored, sum):
		return 0, nil, fmt.Errorf("event %q was already emitted with a different type or body: %w", in.ID, ErrConflict)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM deliveries WHERE event_seq = ?`, seq).Scan(&n); err != nil {
		return 0, nil, err
	}
	return seq, &EmitResult{EventID: in.ID, Deliveries: n, Duplicate: true}, nil
}

// supersedeSQL replaces a subscriber's pending deliveries with a coalesce key. Claimed ones are
// left alone: they may already be at the subscriber. The index is named: the planner would
// otherwise pick deliveries_sub_status and walk all of a big backlog.
const supersedeSQL = `UPDATE deliveries INDEXED BY deliveries_coalesce SET status = 'superseded', updated_at = ?
	WHERE subscriber_id = ? AND coalesce_key = ? AND status = 'pending' AND coalesce_key <> ''`

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
// cap, and returns how many. "Oldest" is least recently changed (for first attempts, the oldest
// emitted), which the (subscriber, status, updated_at) index yields without sorting the backlog.
func (s *Store) trimBacklogs(ctx context.Context, tx *sql.Tx) (int64, error) {
	rows, err := tx.QueryContext(ctx, `SELECT subscriber_id, n FROM queue_counts WHERE status = 'pending' AND n > ?`, s.opts.BacklogCap)
	if err != nil {
		return 0, err
	}
	over := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return 0, err
		}
		over[id] = n - s.opts.BacklogCap
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	var total int64
	for id, excess := range over {
		r, err := tx.ExecContext(ctx, `UPDATE deliveries SET status = 'dead', reason = ?, last_error = 'backlog cap reached', updated_at = ?
			WHERE seq IN (SELECT seq FROM deliveries WHERE subscriber_id = ? AND status = 'pending' ORDER BY updated_at, seq LIMIT ?)`,
			ReasonBacklogOverflow, ms(s.Now()), id, excess)
		if err != nil {
			return 0, err
		}
		n, _ := r.RowsAffected()
		total += n
	}
	return total, nil
}

func ignoreNoRows(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}
