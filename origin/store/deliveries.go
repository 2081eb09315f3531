package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DeliveryID renders the public id of the delivery of seq, a row or not (deliverySeqOf).
func (s *Store) DeliveryID(seq int64) string {
	return "dlv_" + s.storeID + "_" + strconv.FormatInt(seq, 10)
}

// deliverySeq parses a public delivery id of this store: only as DeliveryID renders it, so that
// one delivery has one id (ParseInt alone took "+42" and "042" for 42).
func (s *Store) deliverySeq(id string) (int64, error) {
	rest, ok := strings.CutPrefix(id, "dlv_"+s.storeID+"_")
	seq, err := strconv.ParseInt(rest, 10, 64)
	if !ok || err != nil || seq <= 0 || strconv.FormatInt(seq, 10) != rest {
		return 0, fmt.Errorf("delivery %q: %w", id, ErrNotFound)
	}
	return seq, nil
}

const deliveryColumns = `d.seq, e.id, e.type, d.subscriber_id, d.status, d.reason, d.coalesce_key, d.attempts, d.next_attempt_at,
	d.last_status, d.last_error, d.created_at, d.updated_at, d.delivered_at, d.lease_expires_at, e.created_at`

func (s *Store) scanDelivery(row rowScanner) (Delivery, int64, error) {
	var (
		d                                               Delivery
		seq, next, created, updated, dlv, leaseTo, evAt int64
		status                                          string
	)
	err := row.Scan(&seq, &d.EventID, &d.EventType, &d.SubscriberID, &status, &d.Reason, &d.CoalesceKey, &d.Attempts, &next,
		&d.LastStatus, &d.LastError, &created, &updated, &dlv, &leaseTo, &evAt)
	if err != nil {
		return Delivery{}, 0, err
	}
	if created == 0 { // a compact delivered row (migration 0014)
		created, next, dlv = evAt, evAt, updated
	}
	d.ID, d.Status = s.DeliveryID(seq), Status(status)
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMS(next), fromMS(created), fromMS(updated)
	d.DeliveredAt, d.LeaseExpiresAt = fromMS(dlv), fromMS(leaseTo)
	return d, seq, nil
}

// MaxPageSize bounds DeliveryFilter.Limit.
const MaxPageSize = 1000

// ListDeliveries returns one page of deliveries matching f, newest first.
func (s *Store) ListDeliveries(ctx context.Context, f DeliveryFilter) (DeliveryPage, error) {
	if f.Limit < 0 || f.Limit > MaxPageSize {
		return DeliveryPage{}, fieldErrf("limit", "%d must be 1 to %d", f.Limit, MaxPageSize)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	var where, fanWhere []string
	var args, fanArgs []any
	add := func(cond string, arg any) { where, args = append(where, cond), append(args, arg) }
	// Bounds of the walk over events that only the fanout query needs (see fanoutPageSQL).
	addFan := func(cond string, arg any) { fanWhere, fanArgs = append(fanWhere, cond), append(fanArgs, arg) }
	if f.Status != "" {
		if !f.Status.valid() {
			return DeliveryPage{}, fieldErrf("status", "%q is not a delivery status", f.Status)
		}
		// The indexes' conditions, literally, so the planner may use them (see settledSQL).
		switch f.Status {
		case StatusPending:
			add("d.status = ?", string(f.Status))
		case StatusLeased:
			add("d.status = 'leased' AND d.status = ?", string(f.Status))
		case StatusDelivered:
			// Most deliveries are delivered: newest first, the table itself finds a page of them
			// soonest. Through deliveries_status_settled every delivered row would be sorted.
			add("+d.status = ?", string(f.Status))
		default: // status is only d's
			add("d.status = ? AND "+subSettledSQL, string(f.Status))
		}
	}
	if f.SubscriberID != "" {
		add("d.subscriber_id = ?", f.SubscriberID)
		addFan("d.event_seq > (SELECT cursor FROM limiter WHERE subscriber_id = ?)", f.SubscriberID)
	}
	if f.EventID != "" {
		add("e.id = ? AND "+eventRowsSQL("d", "e.seq"), f.EventID)
	}
	// A delivery is created with its event (a compact row stores 0 for it).
	if !f.From.IsZero() {
		add("e.created_at >= ?", msBound(f.From))
	}
	if !f.To.IsZero() {
		add("e.created_at < ?", msBound(f.To))
	}
	if f.Cursor != "" {
		c, err := strconv.ParseInt(f.Cursor, 10, 64)
		if err != nil || c <= 0 {
			return DeliveryPage{}, fieldErrf("cursor", "%q is not a cursor from a previous page", f.Cursor)
		}
		add("d.seq < ?", c)
		addFan("d.event_seq <= ?", c>>ordinalBits)
	}
	cond := ""
	if len(where) > 0 {
		cond = ` AND ` + strings.Join(where, " AND ")
	}
	// One read transaction: a claim committing between the two queries would move a delivery
	// from the second to the first.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return DeliveryPage{}, err
	}
	defer tx.Rollback()
	list, err := s.listPage(ctx, tx, rowsPageSQL+cond+` ORDER BY d.seq DESC LIMIT ?`, append(slices.Clone(args), f.Limit+1))
	if err != nil {
		return DeliveryPage{}, err
	}
	if f.Status == "" || f.Status == StatusPending {
		fanCond := cond
		if len(fanWhere) > 0 {
			fanCond += ` AND ` + strings.Join(fanWhere, " AND ")
		}
		fanned, err := s.listPage(ctx, tx, fanoutPageSQL+fanCond+fanoutPageOrder, append(append(args, fanArgs...), f.Limit+1))
		if err != nil {
			return DeliveryPage{}, err
		}
		list = mergeNewestFirst(list, fanned)
	}
	if f.Status == "" || f.Status == StatusLeased {
		leased, err := s.listPage(ctx, tx, leasedPageSQL+cond+` ORDER BY d.seq DESC LIMIT ?`, append(slices.Clone(args), f.Limit+1))
		if err != nil {
			return DeliveryPage{}, err
		}
		list = mergeNewestFirst(list, leased)
	}
	var page DeliveryPage
	for i, d := range list {
		if i == f.Limit {
			page.NextCursor = strconv.FormatInt(list[i-1].seq, 10)
			break
		}
		page.Deliveries = append(page.Deliveries, d.Delivery)
	}
	return page, nil
}

// rowsPageSQL lists delivery rows; the caller adds conditions (AND …), the order and the limit.
const rowsPageSQL = `SELECT ` + deliveryColumns + ` FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE 1`

// eventRowsSQL is the condition that a row d of deliveries is of the event of seq ev (an SQL
// expression), in the terms its two places are found by (migration 0013): the range of the
// table's key that holds the event in its seqs, and deliveries_event_legacy for the rows whose seq
// does not. A condition on d.event_seq alone reads the whole table.
func eventRowsSQL(d, ev string) string {
	return `(` + d + `.seq >= ` + ev + ` << ` + fmt.Sprint(ordinalBits) + ` AND ` + d + `.seq < (` + ev + ` + 1) << ` + fmt.Sprint(ordinalBits) +
		` OR ` + d + `.event_seq = ` + ev + ` AND ` + d + `.seq >> ` + fmt.Sprint(ordinalBits) + ` <> ` + d + `.event_seq)`
}

// leasedPageSQL lists the leased deliveries that are not rows (migration 0011); the caller adds
// conditions, the order and the limit. They are a few claims' worth, read from the leases.
const leasedPageSQL = `SELECT ` + deliveryColumns + ` FROM leased_deliveries d JOIN events e ON e.seq = d.event_seq WHERE 1`

// fanoutPageSQL and fanoutPageOrder list the deliveries that are not rows yet, around the
// caller's conditions: newest event first (the view's outer loop), then a partial sort of each
// event's few deliveries, so a page reads only as far back as it shows. Every such delivery is past
// its subscriber's cursor, in a fanout with events past it: the walk stops at the oldest cursor of
// the subscribers with such a fanout (at the newest event when none has).
var (
	fanoutPageSQL = `SELECT ` + deliveryColumns + ` FROM fanout_deliveries d JOIN events e ON e.seq = d.event_seq
		WHERE d.event_seq > coalesce((SELECT min(l.cursor) FROM limiter l JOIN subscribers s ON s.id = l.subscriber_id
			WHERE ` + fanoutLive("s.ordinal", "l.cursor") + `), (SELECT max(seq) FROM events), 0)`
	fanoutPageOrder = ` ORDER BY d.event_seq DESC, d.seq DESC LIMIT ?`
)

// listedDelivery is a delivery read for a page, with its seq.
type listedDelivery struct {
	Delivery
	seq int64
}

// listPage runs a listing query in tx.
func (s *Store) listPage(ctx context.Context, tx *sql.Tx, q string, args []any) ([]listedDelivery, error) {
	rows, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []listedDelivery
	for rows.Next() {
		d, seq, err := s.scanDelivery(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, listedDelivery{d, seq})
	}
	return out, rows.Err()
}

// mergeNewestFirst merges two lists ordered by seq, newest first.
func mergeNewestFirst(a, b []listedDelivery) []listedDelivery {
	out := make([]listedDelivery, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].seq > b[0].seq {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

func (st Status) valid() bool {
	switch st {
	case StatusPending, StatusLeased, StatusDelivered, StatusDead, StatusSuperseded, StatusHeld:
		return true
	}
	return false
}

// GetDelivery returns one delivery with its attempt log, oldest attempt first.
func (s *Store) GetDelivery(ctx context.Context, id string) (*Delivery, error) {
	seq, err := s.deliverySeq(id)
	if err != nil {
		return nil, err
	}
	// One read transaction: a claim committing between the reads would move the delivery from the
	// second to the first.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	return s.getDelivery(ctx, tx, seq, id)
}

// getDelivery reads the delivery of seq (whose id is id) with its attempts in tx, or ErrNotFound.
func (s *Store) getDelivery(ctx context.Context, tx *sql.Tx, seq int64, id string) (*Delivery, error) {
	d, _, err := s.scanDelivery(tx.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.seq = ?`, seq))
	if errors.Is(err, sql.ErrNoRows) {
		d, err = s.fanoutDelivery(ctx, tx, seq)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delivery %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT at, number, status, latency_ms, outcome, error, excerpt FROM all_attempts WHERE delivery_seq = ? ORDER BY ord`, seq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var a Attempt
		var at int64
		if err := rows.Scan(&at, &a.Number, &a.Status, &a.LatencyMS, &a.Outcome, &a.Error, &a.Excerpt); err != nil {
			return nil, err
		}
		a.At = fromMS(at)
		d.AttemptLog = append(d.AttemptLog, a)
	}
	return &d, rows.Err()
}

// fanoutDelivery reads the delivery of seq that is not a row yet, pending or leased, or
// sql.ErrNoRows.
func (s *Store) fanoutDelivery(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, seq int64) (Delivery, error) {
	d, _, err := s.scanDelivery(q.QueryRowContext(ctx, `SELECT `+deliveryColumns+` FROM fanout_deliveries d JOIN events e ON e.seq = d.event_seq
		WHERE d.event_seq = ?1 AND d.seq = ?2
		UNION ALL SELECT `+deliveryColumns+` FROM leased_deliveries d JOIN events e ON e.seq = d.event_seq
		WHERE d.event_seq = ?1 AND d.seq = ?2`, seq>>ordinalBits, seq))
	return d, err
}

// GetEvent returns a stored event with its body.
func (s *Store) GetEvent(ctx context.Context, id string) (*Event, error) {
	var e Event
	var created int64
	err := s.r.QueryRowContext(ctx, `SELECT id, type, body, coalesce_key, created_at FROM events WHERE id = ?`, id).
		Scan(&e.ID, &e.Type, &e.Body, &e.CoalesceKey, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("event %q: %w", id, ErrNotFound)
	}
	e.CreatedAt = fromMS(created)
	return &e, err
}

// requeue is the SET clause that puts a finished delivery back in the queue, due at ?, with a
// fresh attempt count and age (a manual retry is a new chance, not the tail of the old one). A
// coalesced one whose key a newer event of its subscriber has is superseded instead: sent after
// that one, it would leave the subscriber with the older state.
var requeue = `status = CASE WHEN ` + hasNewerKeyed + ` THEN 'superseded' ELSE ` + unsentStatus + ` END,
	reason = CASE WHEN ` + hasNewerKeyed + ` THEN '` + ReasonNewerEvent + `' ELSE ` + heldReason + ` END,
	attempts = 0, next_attempt_at = ?1, age_from = ?1, updated_at = ?1`

// hasNewerKeyed tells whether the row being updated has a coalesce key that a later event's
// delivery to its subscriber has too, through deliveries_key_events (migration 0015).
const hasNewerKeyed = `deliveries.coalesce_key <> '' AND EXISTS (SELECT 1 FROM deliveries n INDEXED BY deliveries_key_events
	WHERE n.subscriber_id = deliveries.subscriber_id AND n.coalesce_key = deliveries.coalesce_key AND n.coalesce_key <> ''
	AND n.event_seq > deliveries.event_seq)`

// checkRequeueCap refuses a requeue (a retry, a replay) whose queued deliveries, made pending in
// tx, took the queue past the global cap: each must find the queue below the cap, as each event an
// emit stores must, and the error is the *QueueFullError an emit gets. The caller's transaction
// then rolls back, so a replay that does not fit whole requeues none. The queue is counted as
// emits count it (pending or in flight, queue_counts) after the requeue, which the status triggers
// have counted in; the write lock keeps every other writer out until the commit.
func (s *Store) checkRequeueCap(ctx context.Context, tx *sql.Tx, queued int64) error {
	if queued == 0 { // held or superseded: nothing for the engine to send
		return nil
	}
	var depth int64
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(sum(n), 0) FROM queue_counts WHERE status IN ('pending', 'leased')`).Scan(&depth); err != nil {
		return err
	}
	if depth <= s.opts.GlobalCap {
		return nil
	}
	return &QueueFullError{Depth: depth - queued, Cap: s.opts.GlobalCap, Queueing: queued, RetryAfter: DefaultQueueFullRetry}
}

// RetryDelivery puts a dead (or held) delivery back in the queue, due at now. Delivered,
// superseded and queued deliveries are ErrInvalidState; one that would take the queue past the
// global cap is a *QueueFullError, and stays as it was.
func (s *Store) RetryDelivery(ctx context.Context, id string, now time.Time) (*Delivery, error) {
	seq, err := s.deliverySeq(id)
	if err != nil {
		return nil, err
	}
	var d *Delivery
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		var status string
		err := tx.QueryRowContext(ctx, `SELECT status FROM deliveries WHERE seq = ?`, seq).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			var fanned Delivery
			fanned, err = s.fanoutDelivery(ctx, tx, seq)
			status = string(fanned.Status)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if Status(status) != StatusDead && Status(status) != StatusHeld {
			return fmt.Errorf("delivery %q is %s; only dead or held deliveries can be retried: %w", id, status, ErrInvalidState)
		}
		if _, err = tx.ExecContext(ctx, `UPDATE deliveries SET `+requeue+` WHERE seq = ?2`, ms(now), seq); err != nil {
			return err
		}
		// As this transaction left it: after the commit an engine may have claimed it already.
		if d, err = s.getDelivery(ctx, tx, seq, id); err != nil || d.Status != StatusPending {
			return err
		}
		return s.checkRequeueCap(ctx, tx, 1)
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Replayed is what a replay did with the dead deliveries it took.
type Replayed struct {
	Pending    int64 // queued again, due at once
	Held       int64 // queued again, held while their subscriber is disabled
	Superseded int64 // not queued: a newer event with their coalesce key has a delivery
}

// ReplayDead requeues a subscriber's dead deliveries that died in [from, to) (zero bounds are
// open), due at now, and returns what became of them. If those it would make pending do not fit
// under the global cap it requeues none and returns a *QueueFullError.
func (s *Store) ReplayDead(ctx context.Context, subscriberID string, from, to, now time.Time) (Replayed, error) {
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return Replayed{}, fieldErrf("from", "must be before to")
	}
	hi := msBound(to)
	if to.IsZero() {
		hi = 1<<63 - 1
	}
	var out Replayed
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		out = Replayed{}
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM subscribers WHERE id = ?`, subscriberID).Scan(&exists); err != nil {
			return err
		}
		if exists == 0 {
			return fmt.Errorf("subscriber %q: %w", subscriberID, ErrNotFound)
		}
		rows, err := tx.QueryContext(ctx, `UPDATE deliveries SET `+requeue+` WHERE `+diedBetweenSQL+` RETURNING status`,
			ms(now), subscriberID, msBound(from), hi)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var status Status
			if err := rows.Scan(&status); err != nil {
				return err
			}
			switch status {
			case StatusHeld:
				out.Held++
			case StatusSuperseded:
				out.Superseded++
			default:
				out.Pending++
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return s.checkRequeueCap(ctx, tx, out.Pending)
	})
	if err != nil {
		return Replayed{}, err
	}
	return out, nil
}

// settledSQL is the condition of deliveries_status_settled (migration 0013): neither pending nor
// leased, and not delivered unless its seq does not hold its event. The queries that use it
// repeat it literally (after status): the planner does not infer it from status = 'dead' or an IN
// list.
const settledSQL = `status <> 'pending' AND status <> 'leased' AND (status <> 'delivered' OR seq >> 20 <> event_seq)`

// subSettledSQL is the condition of deliveries_sub_settled (migration 0006), repeated likewise:
// settled and not delivered.
const subSettledSQL = `status <> 'pending' AND status <> 'leased' AND status <> 'delivered'`

// diedBetweenSQL selects the dead deliveries of subscriber ?2 last changed in [?3, ?4), through
// deliveries_sub_settled.
const diedBetweenSQL = `subscriber_id = ?2 AND status = 'dead' AND ` + subSettledSQL + ` AND updated_at >= ?3 AND updated_at < ?4`

// Stats returns the queue by subscriber (ordered by id) at now.
func (s *Store) Stats(ctx context.Context, now time.Time) (Stats, error) {
	var st Stats
	nowMS := ms(now)
	// One read transaction: a subscriber created, or a delivery settled, between the reads would
	// make the depth and the per-subscriber counts disagree.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return Stats{}, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `SELECT s.id, s.state, coalesce(l.paused_until, 0), coalesce(l.circuit, 'closed'), coalesce(l.circuit_until, 0),
			coalesce((SELECT min(next_attempt_at) FROM deliveries INDEXED BY deliveries_due_first WHERE subscriber_id = s.id AND status = 'pending' AND attempts = 0), 0),
			coalesce((SELECT min(next_attempt_at) FROM deliveries INDEXED BY deliveries_due_retry WHERE subscriber_id = s.id AND status = 'pending' AND attempts > 0), 0),
			`+fanoutOldestSQL+`
		FROM subscribers s LEFT JOIN limiter l ON l.subscriber_id = s.id ORDER BY s.id`)
	if err != nil {
		return Stats{}, err
	}
	byID := map[string]*SubscriberStats{}
	for rows.Next() {
		var ss SubscriberStats
		var state, circuit string
		var paused, circuitUntil, first, retry, fanned int64
		if err := rows.Scan(&ss.SubscriberID, &state, &paused, &circuit, &circuitUntil, &first, &retry, &fanned); err != nil {
			rows.Close()
			return Stats{}, err
		}
		ss.State, ss.Counts = State(state), map[Status]int64{}
		if paused > nowMS {
			ss.PausedUntil = fromMS(paused)
		}
		ss.CircuitOpen = circuit != "closed" && circuitUntil > nowMS
		var oldest int64
		for _, t := range []int64{first, retry, fanned} {
			if oldest == 0 || t != 0 && t < oldest {
				oldest = t
			}
		}
		if oldest != 0 && oldest <= nowMS {
			ss.OldestDueAge = time.Duration(nowMS-oldest) * time.Millisecond
		}
		st.Subscribers = append(st.Subscribers, ss)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Stats{}, err
	}
	for i := range st.Subscribers {
		byID[st.Subscribers[i].SubscriberID] = &st.Subscribers[i]
	}
	// The last minute in whole seconds of settling: the second it began in counts whole. Seconds
	// after now (written before the clock was set back) are not the last minute's.
	rows, err = tx.QueryContext(ctx, `SELECT subscriber_id, sum(n) FROM delivered_by_second WHERE second >= ? AND second <= ?
		GROUP BY subscriber_id`, (nowMS-time.Minute.Milliseconds())/1000, nowMS/1000)
	if err != nil {
		return Stats{}, err
	}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			rows.Close()
			return Stats{}, err
		}
		if ss := byID[id]; ss != nil {
			ss.DeliveredLast = n
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Stats{}, err
	}
	rows, err = tx.QueryContext(ctx, `SELECT subscriber_id, status, n FROM queue_counts WHERE n > 0`)
	if err != nil {
		return Stats{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, status string
		var n int64
		if err := rows.Scan(&id, &status, &n); err != nil {
			return Stats{}, err
		}
		if ss := byID[id]; ss != nil {
			ss.Counts[Status(status)] = n
		}
		if Status(status) == StatusPending || Status(status) == StatusLeased {
			st.Depth += n
		}
	}
	return st, rows.Err()
}

// inLeasedRangeSQL tells whether the event of seq ev (an SQL expression) is in the range of a
// lease ls for which cond holds (migration 0011). Leases are looked at only for an event past the
// oldest range: retention's events are older than any lease, nearly always.
func inLeasedRangeSQL(ev, cond string) string {
	return `(` + ev + ` > coalesce((SELECT min(after_seq) FROM leases), 1 << 62) AND EXISTS (SELECT 1 FROM leases ls
		WHERE ` + ev + ` > ls.after_seq AND ` + ev + ` <= ls.through_seq AND ` + cond + `))`
}

// notInLeasedRangeSQL is the condition that a row's delivery is not of an event in the range of a
// lease of its subscriber: without its row, leased_deliveries would hold such a delivery leased
// again, and its lease's rescue send it again. A delivery's seq holds its event and its
// subscriber's ordinal, so the row tells.
var notInLeasedRangeSQL = `NOT ` + inLeasedRangeSQL(`seq >> `+fmt.Sprint(ordinalBits), `ls.ordinal = seq & `+fmt.Sprint(maxOrdinals-1))

// prunableSQL selects the finished deliveries last changed before ?1 that are in
// deliveries_status_settled, but those of a lease's range.
var prunableSQL = `SELECT seq FROM deliveries WHERE status IN ('delivered', 'dead', 'superseded') AND ` + settledSQL + ` AND updated_at < ?1
	AND ` + notInLeasedRangeSQL

// prunableDeliveredSQL reads the next pruneChunk rows past seq ?2 and below seq ?3, in the table's
// order, each with whether prune deletes it: a delivered delivery last changed before the cutoff
// ?1, but one of a lease's range. deliveries_status_settled leaves those rows out (migration
// 0013), and their seqs hold their events: ?3 is the first seq past the events created before the
// cutoff (deliveredWalkEndSQL), and a delivery settles after its event is created.
var prunableDeliveredSQL = `SELECT seq, status = 'delivered' AND updated_at < ?1 AND ` + notInLeasedRangeSQL + `
	FROM deliveries WHERE seq > ?2 AND seq < ?3 ORDER BY seq LIMIT ` + strconv.Itoa(pruneChunk)

// deliveredWalkEndSQL is where pruneDelivered's walk ends: past the rows of the newest event (by
// seq) created before the cutoff ?1. Not at the event created first from the cutoff on: one
// emitted by a process whose clock ran ahead would end the walk before the rows of every event
// emitted after it, created before the cutoff though they were. Read once per prune, through
// events_created: the events older than the cutoff are few, those retention is about to delete
// or that a delivery still needs.
var deliveredWalkEndSQL = `SELECT coalesce(max(seq) + 1, 0) << ` + fmt.Sprint(ordinalBits) + `
	FROM events INDEXED BY events_created WHERE created_at < ?1`

// pruneDelivered deletes the delivered deliveries among the next rows of prunableDeliveredSQL past
// *after and below end, moves *after to the last it read and returns how many it read and
// deleted. Like pruneEvents, each transaction starts where the last stopped, so the rows that stay
// are read once per prune.
func (s *Store) pruneDelivered(ctx context.Context, tx *sql.Tx, cutoff, end int64, after *int64) (read, deleted int64, err error) {
	rows, err := s.query(ctx, tx, prunableDeliveredSQL, cutoff, *after, end)
	if err != nil {
		return 0, 0, err
	}
	var gone []int64
	for rows.Next() {
		var seq int64
		var prunable bool
		if err := rows.Scan(&seq, &prunable); err != nil {
			rows.Close()
			return 0, 0, err
		}
		*after, read = seq, read+1
		if prunable {
			gone = append(gone, seq)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(gone) == 0 {
		return read, 0, err
	}
	list, _ := json.Marshal(gone)
	res, err := s.exec(ctx, tx, `DELETE FROM deliveries WHERE seq IN (SELECT value FROM json_each(?))`, string(list))
	if err != nil {
		return read, 0, err
	}
	deleted, err = res.RowsAffected()
	return read, deleted, err
}

// pruneChunk bounds one prune transaction, so other writers are not blocked for long.
const pruneChunk = 2000

// pruneBodyBytes bounds the event bodies one prune transaction deletes, besides pruneChunk:
// SQLite reads every page of a body to free it (about 1 ms per MiB), so 2,000 bodies of 1 MiB held
// the write lock for 2 s, and larger ones past the busy timeout of the emits waiting for it.
const pruneBodyBytes = 32 << 20

// prunableEventsSQL reads the next pruneChunk events older than ?1 past the key (?2, ?3) of
// (created_at, seq), in that order through events_created, each with whether it can go: no
// delivery needs it, a row or not. A delivery leased as part of a range (migration 0011) has no
// row: the event stays while it is in the range of a lease of a subscriber of its fanout, each
// lease with one seek of the event's fanout's members (the fanout read there, so the walk stays
// on its covering index). Not through leased_deliveries: it walks every
// fanout of every lease's subscriber, and with the range of a subscriber lagging more than the
// retention, it made prune's transactions hold the write lock for seconds. The body's length is
// read for the events that can go alone, each with a seek of the table.
var prunableEventsSQL = `SELECT seq, created_at, prunable, CASE WHEN prunable THEN (SELECT octet_length(body) FROM events x WHERE x.seq = p.seq) ELSE 0 END
	FROM (SELECT seq, created_at, NOT EXISTS (SELECT 1 FROM deliveries d WHERE ` + eventRowsSQL("d", "e.seq") + `)
		AND NOT EXISTS (SELECT 1 FROM fanout_deliveries f WHERE f.event_seq = e.seq)
		AND NOT ` + inLeasedRangeSQL("e.seq", `EXISTS (SELECT 1 FROM fanout_members m
			WHERE m.fanout = (SELECT fanout FROM events x WHERE x.seq = e.seq) AND m.ordinal = ls.ordinal)`) + ` AS prunable
	FROM events e INDEXED BY events_created WHERE created_at < ?1 AND (created_at, seq) > (?2, ?3)
	ORDER BY created_at, seq LIMIT ` + strconv.Itoa(pruneChunk) + `) AS p ORDER BY created_at, seq`

// pruneEvents deletes the events no delivery needs among the next pruneChunk older than cutoff
// past *after, moves *after to the last it read, and returns how many it read. An event it deletes
// counts once more for each pruneBodyBytes/pruneChunk bytes of its body, and it stops reading at
// pruneChunk, so large bodies are deleted a few at a time. Each transaction starts where the last
// stopped: the events still needed (a paused subscriber's backlog) are read once per prune, not
// once per transaction: 100,000 of them made a prune of 200,000 others take 26–28 s, each
// transaction holding the write lock about 0.3 s; read once, 4–5 s.
func (s *Store) pruneEvents(ctx context.Context, tx *sql.Tx, cutoff int64, after *[2]int64) (int64, error) {
	rows, err := s.query(ctx, tx, prunableEventsSQL, cutoff, after[0], after[1])
	if err != nil {
		return 0, err
	}
	var n int64
	var unneeded []int64
	for n < pruneChunk && rows.Next() {
		var seq, created, size int64
		var prunable bool
		if err := rows.Scan(&seq, &created, &prunable, &size); err != nil {
			rows.Close()
			return 0, err
		}
		*after, n = [2]int64{created, seq}, n+1
		if prunable {
			unneeded, n = append(unneeded, seq), n+size/(pruneBodyBytes/pruneChunk)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(unneeded) == 0 {
		return n, err
	}
	list, _ := json.Marshal(unneeded)
	_, err = s.exec(ctx, tx, `DELETE FROM events WHERE seq IN (SELECT value FROM json_each(?))`, string(list))
	return n, err
}

// Prune first finishes the deleted subscribers' histories left (DeleteSubscriber). Then it deletes
// delivered, dead and superseded deliveries (their attempts go by trigger, migration 0008) last
// changed before cutoff: through deliveries_status_settled, then, for the delivered rows it leaves
// out, by walking the rows of the events older than cutoff (pruneDelivered). Then it deletes the
// events older than cutoff that no delivery references, a row or not (pruneEvents), then the
// fanouts no event is of any more (pruneFanouts). Each step runs in transactions of about
// pruneChunk rows. It returns the number of deliveries deleted, also with an error (ctx cut it short,
// say): those of the transactions committed before it.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	// A history that cannot be finished now does not hold up retention: its rows are a deleted
	// subscriber's, whose id is not given again until they are gone (CreateSubscriber).
	histErr := s.finishHistories(ctx)
	after := [2]int64{-1, 0} // before every event
	afterRow := int64(-1)    // before every row
	var walkEnd int64
	if err := s.r.QueryRowContext(ctx, deliveredWalkEndSQL, ms(cutoff)).Scan(&walkEnd); err != nil {
		return 0, fmt.Errorf("prune: %w", errors.Join(histErr, err))
	}
	// deliveries counts the committed transactions' alone: walked is the delivered walk's
	// transaction's until it commits.
	var deliveries, walked int64
	for _, step := range []struct {
		run   func(*sql.Tx) (int64, error) // reads or deletes up to about pruneChunk rows, returns how many
		total *int64                       // nil: not counted
	}{
		{func(tx *sql.Tx) (int64, error) {
			r, err := tx.ExecContext(ctx, `DELETE FROM deliveries WHERE seq IN (`+prunableSQL+` LIMIT `+strconv.Itoa(pruneChunk)+`)`, ms(cutoff))
			if err != nil {
				return 0, err
			}
			return r.RowsAffected()
		}, &deliveries},
		{func(tx *sql.Tx) (int64, error) {
			read, deleted, err := s.pruneDelivered(ctx, tx, ms(cutoff), walkEnd, &afterRow)
			walked = deleted
			return read, err
		}, nil},
		{func(tx *sql.Tx) (int64, error) { return s.pruneEvents(ctx, tx, ms(cutoff), &after) }, nil},
		{func(tx *sql.Tx) (int64, error) { return s.pruneFanouts(ctx, tx) }, nil},
	} {
		for {
			var n int64
			err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
				n, err = step.run(tx)
				return err
			})
			if err != nil {
				return deliveries, fmt.Errorf("prune: %w", errors.Join(histErr, err))
			}
			deliveries, walked = deliveries+walked, 0
			if step.total != nil {
				*step.total += n
			}
			if n < pruneChunk {
				break
			}
		}
	}
	if histErr != nil {
		return deliveries, fmt.Errorf("prune: %w", histErr)
	}
	return deliveries, nil
}
