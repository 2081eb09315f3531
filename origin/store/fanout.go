package store

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Fan-out at claim (migration 0009): an event stores its fanout, the set of subscribers it is for,
// and a claim leases each subscriber's deliveries as a range of events past its cursor, then moves
// the cursor over them (migration 0011: leases); each becomes a row when it settles (or when the
// backlog cap or a disable settles it without a claim). A subscriber's cursor is the last event
// seq up to which its deliveries are rows or leased.

// ordinalBits is how many low bits of a delivery seq hold its subscriber's ordinal.
const ordinalBits = 20

// maxOrdinals is how many subscribers a database can ever create: ordinals are not given twice.
const maxOrdinals = 1 << ordinalBits

// deliverySeqOf is the seq of the delivery of an event to a subscriber, a row or not.
func deliverySeqOf(eventSeq, ordinal int64) int64 { return eventSeq<<ordinalBits | ordinal }

// fanoutIDs caches the ids of fanouts by their ordinals' key, for emit. A prune deletes the fanouts
// no event is of any more (pruneFanouts), and an event written under a deleted id would go to
// nobody: the cache holds only ids read back from the database at fanouts version ver (meta
// fanouts_version, changed by every prune that deletes one, in any process), and is emptied when
// a transaction reads another version (at).
type fanoutIDs struct {
	mu    sync.Mutex
	ver   string
	byKey map[string]int64
}

// at empties the cache unless ver, the fanouts version read inside the caller's write transaction,
// is the one its ids were read at.
func (c *fanoutIDs) at(ver string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ver != c.ver {
		c.ver, c.byKey = ver, map[string]int64{}
	}
}

// fanoutKey renders a fanout's ordinals, ascending, as stored.
func fanoutKey(ordinals []int64) string {
	b, _ := json.Marshal(ordinals)
	return string(b)
}

// fanoutID returns the id of the fanout of key (fanoutKey), writing it in tx if it is new. tx has
// brought the cache to its fanouts version (matchingSubscribers).
func (s *Store) fanoutID(ctx context.Context, tx *sql.Tx, key string) (int64, error) {
	s.fanoutIDs.mu.Lock()
	id, ok := s.fanoutIDs.byKey[key]
	s.fanoutIDs.mu.Unlock()
	if ok {
		return id, nil
	}
	err := s.queryRow(ctx, tx, `SELECT id FROM fanouts WHERE ordinals = ?`, key).Scan(&id)
	if err == nil {
		s.fanoutIDs.mu.Lock()
		s.fanoutIDs.byKey[key] = id
		s.fanoutIDs.mu.Unlock()
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

// A fanout lives as long as its events: Prune deletes the events no delivery needs any more, then
// the fanouts no event is of, with their members. That loses no delivery: a fanout's pending
// deliveries are its events past its members' cursors (the view fanout_deliveries), and Prune
// keeps every event with one pending. So a fanout whose newest event (last_seq) is past the cursor
// of one of its subscribers still has that event; one with no event has nothing pending for
// anyone. Its set of subscribers may come back with a later event: emit writes the fanout again,
// under a new id (AUTOINCREMENT, migration 0010: never a deleted one).

// deadFanoutsSQL lists the fanouts no event is of, with their member counts: a seek of
// events_fanout each, not a scan of events.
const deadFanoutsSQL = `SELECT id, json_array_length(ordinals) FROM fanouts f
	WHERE NOT EXISTS (SELECT 1 FROM events INDEXED BY events_fanout WHERE fanout = f.id AND fanout <> 0)`

// deleteFanoutsSQL deletes the fanouts of a JSON array of ids, members first.
var deleteFanoutsSQL = [...]string{`DELETE FROM fanout_members WHERE fanout IN (SELECT value FROM json_each(?))`,
	`DELETE FROM fanouts WHERE id IN (SELECT value FROM json_each(?))`}

// pruneFanouts deletes fanouts no event is of, with their members, about pruneChunk rows at most
// (at least one fanout), and returns how many rows it deleted. Emit's caches of fanout ids, in
// every process, are dropped by the new fanouts version.
func (s *Store) pruneFanouts(ctx context.Context, tx *sql.Tx) (int64, error) {
	rows, err := s.query(ctx, tx, deadFanoutsSQL)
	if err != nil {
		return 0, err
	}
	var ids []int64
	var n int64
	for n < pruneChunk && rows.Next() {
		var id, members int64
		if err := rows.Scan(&id, &members); err != nil {
			rows.Close()
			return 0, err
		}
		ids, n = append(ids, id), n+1+members
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return 0, err
	}
	list, _ := json.Marshal(ids)
	for _, q := range deleteFanoutsSQL {
		if _, err := s.exec(ctx, tx, q, string(list)); err != nil {
			return 0, err
		}
	}
	// Random, as the subscribers version (bumpSubscribersVersion).
	_, err = s.exec(ctx, tx, `INSERT INTO meta(key, value) VALUES ('fanouts_version', hex(randomblob(8)))
		ON CONFLICT(key) DO UPDATE SET value = excluded.value`)
	return n, err
}

// markFanoutsSQL records the newest event of fanouts (id, event seq), skipping the padding.
var markFanoutsSQL = chunkSQL(2, func(values string) string {
	return `UPDATE fanouts SET last_seq = max(last_seq, j.column2) FROM (` + values + `) AS j WHERE fanouts.id = j.column1`
})

// fanoutTake is one subscriber's part in a fanout search: up to n of its oldest deliveries that
// are not rows yet, past its cursor, in the fanouts it is in that have events past it. The
// searches (fanoutFound, settleFanout) take it with its fanouts set by liveFanouts.
type fanoutTake struct {
	sub             string
	ordinal, cursor int64
	n               int64
	fanouts         []int64 // set by liveFanouts
}

// liveFanouts sets the fanouts of each take: those of its ordinal with an event past its cursor.
// A subscriber joins a new fanout whenever the set of subscribers an event matches changes, and
// fanouts stay as long as their events (retention); most are long past every cursor.
func (s *Store) liveFanouts(ctx context.Context, tx *sql.Tx, takes []fanoutTake) error {
	if len(takes) == 0 {
		return nil
	}
	oldest := takes[0].cursor
	ordinals := make([]int64, len(takes))
	for i, t := range takes {
		oldest, ordinals[i] = min(oldest, t.cursor), t.ordinal
	}
	list, _ := json.Marshal(ordinals)
	// From the fanouts with events past the oldest cursor: a subscriber's memberships grow with
	// every change of the subscribers (until a prune), its live fanouts do not.
	rows, err := s.query(ctx, tx, `SELECT m.ordinal, f.id, f.last_seq FROM fanouts f INDEXED BY fanouts_last CROSS JOIN fanout_members m ON m.fanout = f.id
		WHERE f.last_seq > ?1 AND m.ordinal IN (SELECT value FROM json_each(?2))`, oldest, string(list))
	if err != nil {
		return err
	}
	defer rows.Close()
	type live struct{ id, last int64 }
	byOrdinal := map[int64][]live{}
	for rows.Next() {
		var ordinal int64
		var f live
		if err := rows.Scan(&ordinal, &f.id, &f.last); err != nil {
			return err
		}
		byOrdinal[ordinal] = append(byOrdinal[ordinal], f)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i := range takes {
		t := &takes[i]
		t.fanouts = t.fanouts[:0]
		for _, f := range byOrdinal[t.ordinal] {
			if f.last > t.cursor {
				t.fanouts = append(t.fanouts, f.id)
			}
		}
		slices.Sort(t.fanouts)
	}
	return nil
}

// fanoutSearch is one statement's worth of fanout searches: a query whose rows are (subscriber,
// ordinal, event seq), the n oldest of each subscriber's, with its arguments.
type fanoutSearch struct {
	sql  string
	args []any
}

// fanoutSearches groups takes (after liveFanouts) into searches of at most fanoutChunk fanouts
// each. A subscriber's fanouts share one statement, whose window keeps the oldest n of their
// union, so every event up to the newest taken is taken; one in more than fanoutChunk fanouts has
// a statement of its own that scans the events past its cursor instead.
func fanoutSearches(takes []fanoutTake) []fanoutSearch {
	var out []fanoutSearch
	var args []any
	n, several := 0, false
	flush := func() {
		if n == 0 {
			return
		}
		width := 1
		for width < n {
			width *= 2
		}
		for ; n < width; n++ {
			args = append(args, nil, nil, 0, nil, 0, 0)
		}
		out = append(out, fanoutSearch{fanoutFoundSQL(width, several), args})
		args, n, several = nil, 0, false
	}
	for _, t := range takes {
		switch {
		case t.n <= 0 || len(t.fanouts) == 0:
			continue
		case len(t.fanouts) > fanoutChunk:
			out = append(out, fanoutSearch{fanoutScanSQL, []any{t.sub, t.ordinal, t.cursor, t.ordinal, t.n}})
			continue
		case n+len(t.fanouts) > fanoutChunk:
			flush()
		}
		for _, f := range t.fanouts {
			args = append(args, t.sub, t.ordinal, t.n, f, t.cursor, t.n)
		}
		n += len(t.fanouts)
		several = several || len(t.fanouts) > 1
	}
	flush()
	return out
}

// fanoutChunk is how many fanouts one search statement holds.
const fanoutChunk = 16

// fanoutFoundSQL finds the events of n searches, each (subscriber, ordinal, limit, fanout, cursor,
// limit): the next events of one fanout past the cursor. With several searches for one subscriber
// (several), a window keeps the oldest limit of each. The fanout and the limit are bound as (? +
// 0): deciding that the partial index applies (fanout <> 0) compared the value bound to a bare
// fanout = ?, and a bare LIMIT ? is read by the planner; either marks the statement to be compiled
// again at every run (a third of a claim's CPU).
func fanoutFoundSQL(n int, several bool) string {
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
	return `SELECT sub, ord, eseq FROM (` + found + `)`
}

// fanoutScanSQL finds the next limit events past a cursor in any fanout of an ordinal: (subscriber,
// ordinal, cursor, ordinal, limit). It reads every event past the cursor until it has them.
const fanoutScanSQL = `SELECT ? AS sub, ? AS ord, seq AS eseq FROM events NOT INDEXED
	WHERE seq > ? AND fanout IN (SELECT fanout FROM fanout_members WHERE ordinal = ?) ORDER BY seq LIMIT (? + 0)`

// fanoutState is what the rows written from fanouts are: dead by the backlog cap, or held by a
// disable.
type fanoutState struct {
	status            Status
	reason, lastError string
	now               int64
}

// allFanout is a fanoutTake.n for every delivery of the subscriber.
const allFanout = 1 << 62

// fanoutInsertSQL inserts the deliveries found (a fanoutSearch's query) as rows. Its first four
// parameters are the rows' status, reason, last error and now; a row's due time, age and creation
// are its event's.
func fanoutInsertSQL(found string) string {
	return `INSERT INTO deliveries(seq, event_seq, subscriber_id, status, reason, last_error, next_attempt_at, age_from, created_at, updated_at)
		SELECT (a.eseq << ` + fmt.Sprint(ordinalBits) + `) | a.ord, a.eseq, a.sub, ?1, ?2, ?3, e.created_at, e.created_at, e.created_at, ?4
		FROM (` + found + `) AS a JOIN events e ON e.seq = a.eseq`
}

// fanoutFound returns the deliveries of takes (after liveFanouts) that are not rows yet, each
// take's oldest first, by subscriber, with their body lengths.
func (s *Store) fanoutFound(ctx context.Context, tx *sql.Tx, takes []fanoutTake) (map[string][]claimedRow, error) {
	out := map[string][]claimedRow{}
	for _, f := range fanoutSearches(takes) {
		rows, err := s.query(ctx, tx, fanoutFoundRowsSQL(f.sql), f.args...)
		if err != nil {
			return nil, fmt.Errorf("fan out: %w", err)
		}
		for rows.Next() {
			var r claimedRow
			if err := rows.Scan(&r.seq, &r.eventSeq, &r.attempts, &r.coalesceKey, &r.ageFrom, &r.subID, &r.bytes); err != nil {
				rows.Close()
				return nil, err
			}
			out[r.subID] = append(out[r.subID], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	for _, found := range out {
		slices.SortFunc(found, func(a, b claimedRow) int { return cmp.Compare(a.eventSeq, b.eventSeq) })
	}
	return out, nil
}

// fanoutFoundRowsSQL reads the deliveries a fanoutSearch finds as claimedRows, and the length of
// each one's body (from the row's header: octet_length does not load the body).
func fanoutFoundRowsSQL(found string) string {
	return `SELECT (a.eseq << ` + fmt.Sprint(ordinalBits) + `) | a.ord, a.eseq, 0, '', e.created_at, a.sub, octet_length(e.body)
		FROM (` + found + `) AS a JOIN events e ON e.seq = a.eseq`
}

// leaseFanouts leases the deliveries of takes that a claim took of those fanoutFound returned, a
// prefix of each take's, as ranges of events (migration 0011): one lease per subscriber, from its
// cursor through the newest event taken, which the caller then moves the cursor to
// (spendTokens). A second pass of a claim goes on from there, and its range joins the first's.
func (s *Store) leaseFanouts(ctx context.Context, tx *sql.Tx, takes []fanoutTake, taken []claimedRow, token string, leaseUntil, now int64) error {
	type span struct{ through, n int64 }
	spans := map[string]*span{}
	for _, r := range taken {
		sp := spans[r.subID]
		if sp == nil {
			sp = &span{}
			spans[r.subID] = sp
		}
		sp.through, sp.n = max(sp.through, r.eventSeq), sp.n+1
	}
	var list []any // subscriber, ordinal, after, through, count
	for _, t := range takes {
		if sp := spans[t.sub]; sp != nil {
			list = append(list, t.sub, t.ordinal, t.cursor, sp.through, sp.n)
		}
	}
	return s.execPadded(ctx, tx, &insertLeasesSQL, []any{token, now, leaseUntil}, list, 5)
}

// insertLeasesSQL writes leases: parameters the token, now and the expiry, then each subscriber,
// its ordinal, the range (after, through] and its count. A subscriber's second range in one claim
// starts where its first ended: the two are one.
var insertLeasesSQL = chunkSQL(5, func(values string) string {
	return `INSERT INTO leases(subscriber_id, token, ordinal, after_seq, through_seq, claimed_at, expires_at, remaining)
		SELECT v.column1, t.token, v.column2, v.column3, v.column4, t.now, t.exp, v.column5
		FROM (SELECT ? AS token, ? AS now, ? AS exp) AS t, (` + values + `) AS v WHERE v.column1 IS NOT NULL
		ON CONFLICT(subscriber_id, token) DO UPDATE SET through_seq = max(through_seq, excluded.through_seq),
			remaining = remaining + excluded.remaining`
})

func (st fanoutState) args() []any {
	return []any{string(st.status), st.reason, st.lastError, st.now}
}

// settleFanout writes the oldest t.n deliveries of one subscriber that are not rows yet as rows in
// state st (dead or held), moves its cursor to through (the newest of them, or any seq up to the
// next of its events), and counts them out of pending.
func (s *Store) settleFanout(ctx context.Context, tx *sql.Tx, t fanoutTake, st fanoutState, through int64) error {
	var n int64
	for _, f := range fanoutSearches([]fanoutTake{t}) {
		r, err := s.exec(ctx, tx, fanoutInsertSQL(f.sql), append(st.args(), f.args...)...)
		if err != nil {
			return fmt.Errorf("fan out: %w", err)
		}
		k, _ := r.RowsAffected()
		n += k
	}
	if n == 0 {
		return nil
	}
	if _, err := s.exec(ctx, tx, `UPDATE limiter SET cursor = max(cursor, ?) WHERE subscriber_id = ?`, through, t.sub); err != nil {
		return err
	}
	c := countDeltas{}
	c.move(t.sub, StatusPending, st.status, n)
	return c.write(ctx, s, tx)
}

// fanoutTakeOf reads one subscriber's ordinal, cursor and live fanouts.
func (s *Store) fanoutTakeOf(ctx context.Context, tx *sql.Tx, sub string, n int64) (fanoutTake, error) {
	takes := []fanoutTake{{sub: sub, n: n}}
	err := s.queryRow(ctx, tx, `SELECT s.ordinal, l.cursor FROM subscribers s JOIN limiter l ON l.subscriber_id = s.id WHERE s.id = ?`, sub).
		Scan(&takes[0].ordinal, &takes[0].cursor)
	if err != nil {
		return fanoutTake{}, err
	}
	return takes[0], s.liveFanouts(ctx, tx, takes)
}

// oldestFirst picks, of a subscriber's first-attempt rows and its deliveries that are not rows yet
// (oldest first), the n of the oldest events, in that order as long as bytes takes their bodies
// (nil: no bound): the rows' seqs, and how many of the others with the newest of their event seqs.
func oldestFirst(rows []dueRow, fanned []claimedRow, n int64, bytes *byteBudget) (seqs []int64, fan, through int64) {
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b dueRow) int { return cmp.Compare(a.eventSeq, b.eventSeq) })
	for int64(len(seqs))+fan < n && (len(rows) > 0 || int(fan) < len(fanned)) {
		if len(rows) > 0 && (int(fan) == len(fanned) || rows[0].eventSeq < fanned[fan].eventSeq) {
			if !bytes.take(rows[0].bytes) {
				break
			}
			seqs, rows = append(seqs, rows[0].seq), rows[1:]
			continue
		}
		if !bytes.take(fanned[fan].bytes) {
			break
		}
		through = fanned[fan].eventSeq
		fan++
	}
	return seqs, fan, through
}

// fanoutLive tells whether the subscriber of an ordinal has a delivery that is not a row yet past
// a cursor (SQL expressions): one of its fanouts has an event past it. It reads the fanouts
// written to since the cursor, not the subscriber's every membership (as liveFanouts).
func fanoutLive(ordinal, cursor string) string {
	return `EXISTS (SELECT 1 FROM fanouts f INDEXED BY fanouts_last CROSS JOIN fanout_members m ON m.fanout = f.id AND m.ordinal = ` +
		ordinal + ` WHERE f.last_seq > ` + cursor + `)`
}

// hasFanoutSQL is fanoutLive of ordinal ?1 and cursor ?2.
var hasFanoutSQL = fanoutLive("?1", "?2")

// fanoutOldestSQL is the creation time of the oldest event past the cursor (l.cursor) of the
// subscriber s, 0 if none: one index seek per fanout it is in with events past it.
const fanoutOldestSQL = `coalesce((SELECT e.created_at FROM events e WHERE e.seq = (SELECT min((SELECT min(seq) FROM events INDEXED BY events_fanout
	WHERE fanout = m.fanout AND fanout <> 0 AND seq > l.cursor)) FROM fanouts f INDEXED BY fanouts_last CROSS JOIN fanout_members m
	ON m.fanout = f.id AND m.ordinal = s.ordinal WHERE f.last_seq > l.cursor)), 0)`
