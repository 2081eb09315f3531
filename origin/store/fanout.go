package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Fan-out at claim (migration 0009): an event stores its fanout, the set of subscribers it is for,
// and each subscriber's delivery becomes a row when a claim leases it (or when the backlog cap or a
// disable settles it). A subscriber's cursor is the last event seq up to which that happened.

// ordinalBits is how many low bits of a delivery seq hold its subscriber's ordinal.
const ordinalBits = 20

// maxOrdinals is how many subscribers a database can ever create: ordinals are not given twice.
const maxOrdinals = 1 << ordinalBits

// deliverySeqOf is the seq of the delivery of an event to a subscriber, a row or not.
func deliverySeqOf(eventSeq, ordinal int64) int64 { return eventSeq<<ordinalBits | ordinal }

// fanouts caches the fanouts, which never change once written: by their ordinals' key for emit,
// and by ordinal for claims.
type fanouts struct {
	mu        sync.Mutex
	byKey     map[string]int64
	byOrdinal map[int64][]int64
	loaded    int64 // the largest fanout id in byOrdinal
}

// fanoutKey renders a fanout's ordinals, ascending, as stored.
func fanoutKey(ordinals []int64) string {
	b, _ := json.Marshal(ordinals)
	return string(b)
}

// fanoutID returns the id of the fanout of ordinals (ascending), writing it in tx if it is new. A
// new one is cached only once a later transaction reads it back, committed.
func (s *Store) fanoutID(ctx context.Context, tx *sql.Tx, key string) (int64, error) {
	s.fanouts.mu.Lock()
	id, ok := s.fanouts.byKey[key]
	s.fanouts.mu.Unlock()
	if ok {
		return id, nil
	}
	err := s.queryRow(ctx, tx, `SELECT id FROM fanouts WHERE ordinals = ?`, key).Scan(&id)
	if err == nil {
		s.fanouts.mu.Lock()
		s.fanouts.byKey[key] = id
		s.fanouts.mu.Unlock()
		return id, nil
	}
	if err != sql.ErrNoRows {
		return 0, err
	}
	if err := s.queryRow(ctx, tx, `INSERT INTO fanouts(ordinals) VALUES (?) RETURNING id`, key).Scan(&id); err != nil {
		return 0, err
	}
	_, err = s.exec(ctx, tx, `INSERT INTO fanout_members(fanout, ordinal) SELECT ?1, value FROM json_each(?2)`, id, key)
	return id, err
}

// fanoutsOf returns the fanouts each ordinal is in, reading the fanouts written since the last call
// (by any process) inside tx first.
func (s *Store) fanoutsOf(ctx context.Context, tx *sql.Tx) (map[int64][]int64, error) {
	var newest int64
	if err := s.queryRow(ctx, tx, `SELECT coalesce(max(id), 0) FROM fanouts`).Scan(&newest); err != nil {
		return nil, err
	}
	s.fanouts.mu.Lock()
	defer s.fanouts.mu.Unlock()
	if newest == s.fanouts.loaded {
		return s.fanouts.byOrdinal, nil
	}
	rows, err := s.query(ctx, tx, `SELECT fanout, ordinal FROM fanout_members WHERE fanout > ? ORDER BY fanout`, s.fanouts.loaded)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	// A new map: callers may still read the one returned before.
	next := make(map[int64][]int64, len(s.fanouts.byOrdinal))
	for k, v := range s.fanouts.byOrdinal {
		next[k] = v
	}
	for rows.Next() {
		var fanout, ordinal int64
		if err := rows.Scan(&fanout, &ordinal); err != nil {
			return nil, err
		}
		next[ordinal] = append(slices.Clip(next[ordinal]), fanout)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	s.fanouts.byOrdinal, s.fanouts.loaded = next, newest
	return next, nil
}

// fanoutTake is one subscriber's part in fanoutRows: up to n of its oldest deliveries that are not
// rows yet, past its cursor.
type fanoutTake struct {
	sub             string
	ordinal, cursor int64
	n               int64
}

// fanoutState is what the rows fanoutRows writes are: leased by a claim (token and lease set),
// dead by the backlog cap, or held by a disable.
type fanoutState struct {
	status            Status
	reason, lastError string
	token             string
	leaseUntil, now   int64
}

// allFanout is a fanoutTake.n for every delivery of the subscriber.
const allFanout = 1 << 62

// fanoutRows writes the rows of takes' deliveries in state st and returns them; the caller moves
// each subscriber's cursor past them. The searches of one statement are bounded (fanoutChunk) by padding, and a
// subscriber's searches (one per fanout it is in) always share a statement: its take is the n
// oldest of their union, so every event up to its new cursor is taken.
func (s *Store) fanoutRows(ctx context.Context, tx *sql.Tx, takes []fanoutTake, st fanoutState) ([]claimedRow, error) {
	byOrdinal, err := s.fanoutsOf(ctx, tx)
	if err != nil {
		return nil, err
	}
	var out []claimedRow
	var args []any
	searches, several := 0, false
	flush := func() error {
		if searches == 0 {
			return nil
		}
		width := 1
		for width < searches {
			width *= 2
		}
		for ; searches < width; searches++ {
			args = append(args, nil, nil, 0, nil, 0, 0)
		}
		rows, err := s.query(ctx, tx, fanoutRowsSQL(width, several), append([]any{string(st.status), st.reason, st.lastError, st.token, st.leaseUntil, st.now}, args...)...)
		if err != nil {
			return fmt.Errorf("fan out: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var r claimedRow
			if err := rows.Scan(&r.seq, &r.eventSeq, &r.attempts, &r.coalesceKey, &r.ageFrom, &r.subID); err != nil {
				return err
			}
			out = append(out, r)
		}
		args, searches, several = args[:0], 0, false
		return rows.Err()
	}
	for _, t := range takes {
		fs := byOrdinal[t.ordinal]
		if len(fs) == 0 || t.n <= 0 {
			continue
		}
		if searches > 0 && searches+len(fs) > fanoutChunk {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		for _, f := range fs {
			args = append(args, t.sub, t.ordinal, t.n, f, t.cursor, t.n)
			searches++
		}
		several = several || len(fs) > 1
	}
	return out, flush()
}

// fanoutRowsOf writes up to n (allFanout: all) of one subscriber's deliveries that are not rows
// yet in state st (dead or held), and counts them out of pending.
func (s *Store) fanoutRowsOf(ctx context.Context, tx *sql.Tx, sub string, n int64, st fanoutState) ([]claimedRow, error) {
	t := fanoutTake{sub: sub, n: n}
	err := s.queryRow(ctx, tx, `SELECT s.ordinal, l.cursor FROM subscribers s JOIN limiter l ON l.subscriber_id = s.id WHERE s.id = ?`, sub).
		Scan(&t.ordinal, &t.cursor)
	if err != nil {
		return nil, err
	}
	rows, err := s.fanoutRows(ctx, tx, []fanoutTake{t}, st)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	var newest int64
	for _, r := range rows {
		newest = max(newest, r.eventSeq)
	}
	if _, err := s.exec(ctx, tx, `UPDATE limiter SET cursor = ? WHERE subscriber_id = ?`, newest, sub); err != nil {
		return nil, err
	}
	c := countDeltas{}
	c.move(sub, StatusPending, st.status, int64(len(rows)))
	return rows, c.write(ctx, s, tx)
}

// fanoutChunk is how many searches one fanoutRows statement holds, unless one subscriber has more.
const fanoutChunk = 16

// fanoutRowsSQL inserts the deliveries found by n searches, each (subscriber, ordinal, limit,
// fanout, cursor, limit) the next events of one fanout past the cursor. With several searches for
// one subscriber (several), a window keeps the oldest limit of each. The first six parameters are
// the rows' status, reason, last error, lease token, lease expiry, and now. A row's due time, age
// and creation are its event's. The fanout and the limit are bound as (? + 0): deciding that the
// partial index applies (fanout <> 0) compared the value bound to a bare fanout = ?, and a bare
// LIMIT ? is read by the planner; either marks the statement to be compiled again at every run (a
// third of a claim's CPU).
func fanoutRowsSQL(n int, several bool) string {
	search := `SELECT ? AS sub, ? AS ord, ? AS lim, seq AS eseq FROM (SELECT seq FROM events INDEXED BY events_fanout
		WHERE fanout = (? + 0) AND fanout <> 0 AND seq > ? ORDER BY seq LIMIT (? + 0))`
	searches := make([]string, n)
	for i := range searches {
		searches[i] = search
	}
	found := strings.Join(searches, " UNION ALL ")
	if several {
		found = `SELECT sub, ord, eseq FROM (SELECT sub, ord, lim, eseq, row_number() OVER (PARTITION BY sub ORDER BY eseq) AS rn
			FROM (` + found + `)) WHERE rn <= lim`
	}
	return `INSERT INTO deliveries(seq, event_seq, subscriber_id, status, reason, last_error, next_attempt_at, age_from, lease_token,
			lease_expires_at, created_at, updated_at)
		SELECT (a.eseq << ` + fmt.Sprint(ordinalBits) + `) | a.ord, a.eseq, a.sub, ?1, ?2, ?3, e.created_at, e.created_at, ?4, ?5, e.created_at, ?6
		FROM (` + found + `) AS a JOIN events e ON e.seq = a.eseq
		RETURNING seq, event_seq, attempts, coalesce_key, age_from, subscriber_id`
}

// hasFanoutSQL tells whether the subscriber of ordinal ?1 has a delivery that is not a row yet,
// past its cursor ?2.
const hasFanoutSQL = `EXISTS (SELECT 1 FROM fanout_members m JOIN events e INDEXED BY events_fanout ON e.fanout = m.fanout AND e.fanout <> 0 AND e.seq > ?2
	WHERE m.ordinal = ?1)`

// fanoutOldestSQL is the creation time of the oldest event past the cursor (l.cursor) of the
// subscriber s, 0 if none: one index seek per fanout it is in.
const fanoutOldestSQL = `coalesce((SELECT e.created_at FROM events e WHERE e.seq = (SELECT min((SELECT min(seq) FROM events INDEXED BY events_fanout
	WHERE fanout = m.fanout AND fanout <> 0 AND seq > l.cursor)) FROM fanout_members m WHERE m.ordinal = s.ordinal)), 0)`
