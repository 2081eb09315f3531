package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Result is what a settlement does to a delivery.
type Result int

// Settlement results.
const (
	// ResultDelivered: acknowledged; counts an attempt.
	ResultDelivered Result = iota + 1
	// ResultRetry: failed; due again at NextAttemptAt; counts an attempt. Held instead when the
	// subscriber is disabled.
	ResultRetry
	// ResultReschedule: due again at NextAttemptAt without counting an attempt (edge coalesced).
	ResultReschedule
	// ResultDead: given up, with Reason; counts an attempt.
	ResultDead
	// ResultRelease: returned unsent (graceful stop); due at once, no attempt counted.
	ResultRelease
	// ResultDeadUnsent: given up before it reached the subscriber (claimed past its max age,
	// held past it by the edge's coalescing or by an edge fault), with Reason and Error; no
	// attempt counted (an Attempt given is logged uncounted), and last_status stays the last
	// attempt's.
	ResultDeadUnsent
)

// countsAttempt tells whether a settlement of r counts an attempt against the delivery.
func (r Result) countsAttempt() bool {
	return r == ResultDelivered || r == ResultRetry || r == ResultDead
}

// CircuitEffect is what a settlement tells the subscriber's circuit breaker.
type CircuitEffect int

// Circuit effects.
const (
	CircuitNone    CircuitEffect = iota // no news about the subscriber's health
	CircuitSuccess                      // closes the circuit, resets the failure count
	CircuitFailure                      // counts a consecutive failure; may open the circuit
)

// CircuitPolicy configures the breaker: after Threshold consecutive failures (or a failed probe)
// the circuit opens for BaseCooldown·2^(openings-1), at most MaxCooldown; then one probe is let
// through.
type CircuitPolicy struct {
	Threshold    int
	BaseCooldown time.Duration
	MaxCooldown  time.Duration
}

// Settlement is the outcome of one claimed delivery.
type Settlement struct {
	Seq           int64
	LeaseToken    string
	SubscriberID  string
	Result        Result
	NextAttemptAt time.Time // for ResultRetry and ResultReschedule
	Reason        string    // for ResultDead and ResultDeadUnsent
	Status        int       // HTTP status of the attempt, 0 if none
	Error         string    // last error, '' on success
	Attempt       *Attempt  // logged when non-nil (Number is filled in here)
	// Subscriber effects.
	PauseUntil time.Time // Retry-After on 429/503: the whole subscriber waits until then
	Disable    string    // non-empty: disable the subscriber with this reason (410)
	// Sent is the subscriber as the send was made (nil: not known, taken as current). A send
	// made before the subscriber's last change (its UpdatedAt older: a new URL, a resume) says
	// nothing of it as it is now: its Disable, PauseUntil and Circuit are not applied, so that a
	// late 410, Retry-After or timeout from a URL the operator has replaced does not undo the fix;
	// and if it failed, it costs the delivery neither a backoff nor an attempt
	// (Settled.Outdated), if the change is to what sends are made with (sendsAlike). After a
	// change that sends nothing differently (a rate, a pause) a failure is news of the same
	// endpoint, and costs the delivery as any: taken off it, a config script re-applying the rate
	// during every send had a failing endpoint sent to in a loop, at no cost, until the max age.
	Sent    *Subscriber
	Circuit CircuitEffect
	// Refund: no request was made for it (dead unsent before its send), so the token of the
	// subscriber's bucket its claim spent goes back, for the next delivery to use.
	Refund bool
}

// Settled is what a settle did not write as asked, by delivery (Seq).
type Settled struct {
	// Stale: their lease was lost (it expired and was taken over, or the subscriber was deleted);
	// nothing of them was written.
	Stale []int64
	// Superseded: written superseded instead of going back to the queue or dying, since a newer
	// event with their coalesce key came while they were in flight.
	Superseded []int64
	// Held: settled unsent (ResultRetry, ResultReschedule) but written held, not due again, since
	// their subscriber is disabled, by this settle's 410 or before.
	Held []int64
	// Outdated: failures of a send made before the subscriber's last change (Settlement.Sent),
	// written due at once with the attempt logged but not counted (numbered 0), whatever their
	// Result asked: a retry after a backoff or a Retry-After, or dead at the last attempt or by a
	// Retry-After past the last call (one dead of its max age otherwise stays dead). Held instead
	// if the subscriber is disabled (also in Held).
	Outdated []int64
	// Disabled: the subscribers this settle disabled (a 410 from the subscriber as it still is).
	Disabled []string
	// Circuits: the subscribers whose circuit breaker the settle opened or closed. The pending
	// retries of those closed by their probe were made due now (dueRetriesNowSQL).
	Circuits []CircuitChange
}

// CircuitChange is a subscriber's circuit breaker opened or closed by a settle.
type CircuitChange struct {
	SubscriberID string
	Opened       bool      // false: closed again, by a success
	Failures     int       // consecutive failures, when opened
	Opens        int       // openings in a row without a success, when opened
	Until        time.Time // the end of the cool-down, when opened
}

// Settle applies outcomes in one transaction (the engine batches them). Every update checks the
// lease token, so a worker whose lease expired and was re-claimed cannot overwrite the new owner;
// such settlements are skipped, and listed as stale.
//
// The whole batch is an UPDATE … FROM (VALUES …) and an INSERT of attempts (prepared statements
// of padChunks rows, padded), then at most one read and one write of the limiter rows touched: the number
// of statements, not of rows, is what a batch costs.
func (s *Store) Settle(ctx context.Context, now time.Time, policy CircuitPolicy, items []Settlement) (out Settled, err error) {
	if len(items) == 0 {
		return Settled{}, nil
	}
	rows, err := newSettleRows(items)
	if err != nil {
		return Settled{}, err
	}
	var superseded int64
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		moves := countDeltas{}
		if out, err = s.settleTx(ctx, tx, now, policy, items, rows, moves); err != nil {
			return err
		}
		superseded = moves.total(StatusSuperseded)
		return moves.write(ctx, s, tx)
	})
	if err == nil {
		s.counters.add(superseded, 0)
	}
	return out, err
}

// SettleAndClaim settles items as Settle does and then claims as Claim does, in one write
// transaction: an engine whose settle frees slots refills them without waiting for a second turn
// on the writer. A stale settlement (lost lease) is skipped and listed, as in Settle; it does not
// stop the claim. With no items it is a Claim.
func (s *Store) SettleAndClaim(ctx context.Context, now time.Time, policy CircuitPolicy, items []Settlement, p ClaimParams) (out Settled, res ClaimResult, err error) {
	rows, err := newSettleRows(items)
	if err != nil {
		return Settled{}, ClaimResult{}, err
	}
	c, err := s.newClaim(p)
	if err != nil {
		return Settled{}, ClaimResult{}, err
	}
	var superseded int64
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		moves := countDeltas{} // the settle's and the claim's, written once
		if len(items) > 0 {
			if out, err = s.settleTx(ctx, tx, now, policy, items, rows, moves); err != nil {
				return err
			}
		}
		superseded = moves.total(StatusSuperseded)
		res, err = s.claimTx(ctx, tx, c, moves)
		return err
	})
	if err != nil {
		return Settled{}, ClaimResult{}, err
	}
	s.claimed(c)
	s.counters.add(superseded+res.superseded, 0)
	return out, res, nil
}

// newSettleRows checks a batch (each delivery once, known results) and turns it into settleRows.
func newSettleRows(items []Settlement) ([]settleRow, error) {
	rows := make([]settleRow, len(items))
	seen := make(map[int64]bool, len(items))
	for i := range items {
		if seen[items[i].Seq] {
			return nil, fmt.Errorf("settle: delivery %d appears twice in one batch", items[i].Seq)
		}
		seen[items[i].Seq] = true
		var err error
		if rows[i], err = newSettleRow(&items[i]); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// settleTx applies a checked batch in tx and returns what it did not write as asked. It adds the
// moves out of leased to moves, for the caller to write.
func (s *Store) settleTx(ctx context.Context, tx *sql.Tx, now time.Time, policy CircuitPolicy, items []Settlement, rows []settleRow, moves countDeltas) (Settled, error) {
	var out Settled
	items, rows, outdated, err := s.renewOutdated(ctx, tx, now, items, rows)
	if err != nil {
		return Settled{}, fmt.Errorf("settle: %w", err)
	}
	settled := countDeltas{}
	attempts := map[int64]int{}
	inlined := map[int64]bool{}
	// Leased ranges first: in a drain every settlement is of one, and nothing is left to update.
	if err := s.settleLeased(ctx, tx, rows, ms(now), attempts, inlined, settled); err != nil {
		return Settled{}, fmt.Errorf("settle: %w", err)
	}
	if err := s.settleDeliveries(ctx, tx, rows, ms(now), attempts, settled, &out.Superseded); err != nil {
		return Settled{}, fmt.Errorf("settle: %w", err)
	}
	if err := s.countDelivered(ctx, tx, settled, ms(now)); err != nil {
		return Settled{}, fmt.Errorf("settle: %w", err)
	}
	for k, n := range settled {
		moves[k] += n
	}
	if err := s.logAttempts(ctx, tx, items, attempts, inlined); err != nil {
		return Settled{}, fmt.Errorf("settle: attempts: %w", err)
	}
	for _, seq := range outdated { // those written back to the queue
		if _, ok := attempts[seq]; ok && !slices.Contains(out.Superseded, seq) {
			out.Outdated = append(out.Outdated, seq)
		}
	}
	var order []string
	bySub := map[string][]*Settlement{}
	for i := range items {
		it := &items[i]
		if _, ok := attempts[it.Seq]; !ok {
			out.Stale = append(out.Stale, it.Seq)
			continue
		}
		if bySub[it.SubscriberID] == nil {
			order = append(order, it.SubscriberID)
		}
		bySub[it.SubscriberID] = append(bySub[it.SubscriberID], it)
	}
	disabled, err := s.settleSubscribers(ctx, tx, order, bySub, now, policy, &out)
	if err != nil {
		return Settled{}, err
	}
	for id := range disabled {
		for _, it := range bySub[id] {
			if (it.Result == ResultRetry || it.Result == ResultReschedule) && !slices.Contains(out.Superseded, it.Seq) {
				out.Held = append(out.Held, it.Seq)
			}
		}
	}
	return out, nil
}

// renewOutdated returns items and rows with the failures of sends made before their subscriber's
// last change (Settlement.stale) of what sends are made with (Settlement.Sent) settled due now
// without counting an attempt (ResultReschedule), and their seqs. An endpoint the operator replaced, or a secret rotated out, says nothing of the
// subscriber now, so its failure must not back the delivery off nor spend one of its attempts
// (the send happened: it is logged, numbered 0, its status the delivery's last). A delivery dead
// of its max age stays dead, unless only the old endpoint's Retry-After made it so (a retry the
// engine claims past its max age dies unsent). The caller's slices are left as they are.
func (s *Store) renewOutdated(ctx context.Context, tx *sql.Tx, now time.Time, items []Settlement, rows []settleRow) ([]Settlement, []settleRow, []int64, error) {
	var subs []any
	for i := range items {
		if it := &items[i]; it.countedFailure() && it.Sent != nil && !slices.Contains(subs, any(it.SubscriberID)) {
			subs = append(subs, it.SubscriberID)
		}
	}
	if len(subs) == 0 { // the common case: successes, or failures of a send to the subscriber as it is
		return items, rows, nil, nil
	}
	updated := make(map[string]int64, len(subs))
	err := padded(len(subs), func(k, lo, hi int) error {
		res, err := s.query(ctx, tx, updatedAtSQL[k], padNulls(slices.Clone(subs[lo:hi]), k, hi-lo, 1)...)
		if err != nil {
			return err
		}
		defer res.Close()
		for res.Next() {
			var id string
			var at int64
			if err := res.Scan(&id, &at); err != nil {
				return err
			}
			updated[id] = at
		}
		return res.Err()
	})
	if err != nil {
		return nil, nil, nil, err
	}
	var outdated []int64
	current := map[string]*Subscriber{} // as the subscribers are now, read if a send needs comparing
	for i := range items {
		at, ok := updated[items[i].SubscriberID]
		if !ok || !items[i].countedFailure() || !items[i].stale(at) {
			continue
		}
		sent, cur := items[i].Sent, current[items[i].SubscriberID]
		if cur == nil {
			if cur, err = getSubscriber(ctx, tx, sent.ID); err != nil {
				return nil, nil, nil, err
			}
			current[sent.ID] = cur
		}
		if sendsAlike(sent, cur) {
			continue
		}
		if outdated == nil {
			items, rows = slices.Clone(items), slices.Clone(rows)
		}
		it := &items[i]
		it.Result, it.NextAttemptAt, it.Reason = ResultReschedule, now, ""
		if rows[i], err = newSettleRow(it); err != nil {
			return nil, nil, nil, err
		}
		outdated = append(outdated, it.Seq)
	}
	return items, rows, outdated, nil
}

// sendsAlike tells whether a send made as subscriber a is made as b alike: the same URL, mode,
// signing profile, timeout, headers and secrets.
func sendsAlike(a, b *Subscriber) bool {
	return a.URL == b.URL && a.Mode == b.Mode && a.Profile == b.Profile && a.LegacyPrefix == b.LegacyPrefix &&
		a.TimeoutMS == b.TimeoutMS && maps.Equal(a.Headers, b.Headers) && slices.EqualFunc(a.Secrets, b.Secrets, func(x, y Secret) bool {
		return x.Secret.String() == y.Secret.String() && x.ExpiresAt.Equal(y.ExpiresAt)
	})
}

// countedFailure tells whether the settlement counts a failed attempt that renewOutdated may take
// back: a retry, or dead for its attempts, or for its age by a Retry-After (PauseUntil) ending
// past the last call: that wait, a replaced endpoint's, is not applied either.
func (it *Settlement) countedFailure() bool {
	return it.Result == ResultRetry || it.Result == ResultDead &&
		(it.Reason == ReasonMaxAttempts || it.Reason == ReasonMaxAge && !it.PauseUntil.IsZero())
}

// updatedAtSQL reads the updated_at of the subscribers bound (padded with NULLs).
var updatedAtSQL = chunkSQL(1, func(values string) string {
	return `SELECT id, updated_at FROM subscribers WHERE id IN (` + values + `)`
})

// settleRow is one settlement as the batch UPDATE reads it (settleSQL's j, in this order).
type settleRow struct {
	Seq      int64
	Token    string
	Status   string // delivered | dead | unsent (pending, or held if the subscriber is disabled)
	Inc      int64  // 1 when the attempt counts
	Next     int64  // new next_attempt_at, 0 to keep
	Reason   string
	KeepLast int64 // 1: leave last_status and last_error (release); 2: leave last_status (dead unsent)
	Code     int64
	Error    string
	Sub      string // the subscriber, for a delivery leased as part of a range (settleLeasedSQL only)
	First    firstAttempt
}

// firstAttempt is the attempt a settle of a delivery leased as part of a range writes on the row
// it inserts (settleLeasedSQL, migration 0012): the delivery's first, if it counts one and has a
// record (At 0: none). Its status and error are the row's last ones: an attempt whose differ
// goes to attempts.
type firstAttempt struct {
	At      int64
	Latency int64
	Outcome string
	Excerpt string
}

func newSettleRow(it *Settlement) (settleRow, error) {
	r := settleRow{Seq: it.Seq, Token: it.LeaseToken, Code: int64(it.Status), Error: it.Error, Sub: it.SubscriberID}
	switch it.Result {
	case ResultDelivered:
		r.Status, r.Error = "delivered", ""
	case ResultRetry, ResultReschedule:
		r.Status, r.Next = "unsent", ms(it.NextAttemptAt)
	case ResultDead:
		r.Status, r.Reason = "dead", it.Reason
	case ResultDeadUnsent:
		r.Status, r.Reason, r.KeepLast = "dead", it.Reason, 2
	case ResultRelease:
		r.Status, r.KeepLast = "unsent", 1
	default:
		return r, fmt.Errorf("settle delivery %d: unknown result %d", it.Seq, it.Result)
	}
	if it.Result.countsAttempt() {
		r.Inc = 1
	}
	if a := it.Attempt; a != nil && r.Inc == 1 && int64(a.Status) == r.Code && a.Error == r.Error {
		r.First = firstAttempt{At: ms(a.At), Latency: a.LatencyMS, Outcome: a.Outcome, Excerpt: a.Excerpt}
	}
	return r, nil
}

// unsentStatusOf is the status of a delivery of subscriber sub (an SQL expression) going back to
// the queue: held if the subscriber is disabled, pending otherwise; unsentStatus that of a row
// being updated.
func unsentStatusOf(sub string) string {
	return `CASE WHEN (SELECT state FROM subscribers WHERE id = ` + sub + `) = 'disabled' THEN 'held' ELSE 'pending' END`
}

var unsentStatus = unsentStatusOf("deliveries.subscriber_id")

// heldReasonOf is the reason a delivery of subscriber sub going back to the queue has: the
// subscriber's disable reason if it is held, ” otherwise; heldReason that of a row being updated.
func heldReasonOf(sub string) string {
	return `coalesce((SELECT state_reason FROM subscribers WHERE id = ` + sub + ` AND state = 'disabled'), '')`
}

var heldReason = heldReasonOf("deliveries.subscriber_id")

// returnedStatus is the status of a delivery in flight that comes back unsent: superseded if a
// newer event with its coalesce key was emitted meanwhile (supersedeStored), else unsentStatus;
// returnedReason is its reason (a delivery in flight has none but that mark). diedStatus and
// diedReason are the same for one that dies: superseded, not dead, so that a replay of the dead
// leaves it.
var (
	returnedStatus, returnedReason = unlessMarked(unsentStatus, heldReason)
	diedStatus, diedReason         = unlessMarked(`'dead'`, `j.reason`)
)

// unlessMarked returns the status and reason SQL of a leased delivery that settles as status and
// reason (SQL expressions), unless a newer event with its key marked it (ReasonNewerEvent): then
// it is superseded and keeps the mark.
func unlessMarked(status, reason string) (string, string) {
	marked := `deliveries.reason = '` + ReasonNewerEvent + `'`
	return `CASE WHEN ` + marked + ` THEN 'superseded' ELSE ` + status + ` END`,
		`CASE WHEN ` + marked + ` THEN deliveries.reason ELSE ` + reason + ` END`
}

// settleDeliveries applies the rest of the batch (those not in done) to the rows leased with their
// token, adds them to done with their new attempt counts, the moves out of leased to c, and those
// written superseded to superseded.
// The unary + keeps the planner from driving the join from the status index (a scan of every
// leased row per batch row): it walks the batch and looks each delivery up by its primary key.
func (s *Store) settleDeliveries(ctx context.Context, tx *sql.Tx, batch []settleRow, now int64, done map[int64]int, c countDeltas, superseded *[]int64) error {
	var rest []settleRow
	for _, r := range batch {
		if _, ok := done[r.Seq]; !ok {
			rest = append(rest, r)
		}
	}
	return s.writeSettled(ctx, tx, &settleSQL, rest, false, now, done, c, func(seq int64, _ string, status Status) {
		if status == StatusSuperseded {
			*superseded = append(*superseded, seq)
		}
	})
}

// settleLeased writes the rows of the batch's deliveries that a lease of their subscriber with
// their token holds as part of its range (migration 0011): each in its final state, with its first
// attempt on it, in one insert. It adds them to done with their attempt counts, those whose
// attempt it wrote to inlined, and the moves out of leased to c, and takes them off their leases'
// counts, deleting the leases with none left. The rest are rows leased, for settleDeliveries, or
// stale: a lease that expired and was rescued, or a deleted subscriber's.
func (s *Store) settleLeased(ctx context.Context, tx *sql.Tx, batch []settleRow, now int64, done map[int64]int, inlined map[int64]bool, c countDeltas) error {
	bySeq := make(map[int64]*settleRow, len(batch))
	for i := range batch {
		bySeq[batch[i].Seq] = &batch[i]
	}
	settled := map[[2]string]int{} // (subscriber, token) → deliveries
	err := s.writeSettled(ctx, tx, &settleLeasedSQL, batch, true, now, done, c, func(seq int64, sub string, _ Status) {
		r := bySeq[seq]
		settled[[2]string{sub, r.Token}]++
		if r.First.At > 0 {
			inlined[seq] = true
		}
	})
	if err != nil || len(settled) == 0 {
		return err
	}
	var counts []any // subscriber, token, deliveries settled
	for k, n := range settled {
		counts = append(counts, k[0], k[1], n)
	}
	if err := s.execPadded(ctx, tx, &leasesSettledSQL, nil, counts, 3); err != nil {
		return err
	}
	_, err = s.exec(ctx, tx, `DELETE FROM leases WHERE remaining <= 0`)
	return err
}

// writeSettled runs stmts, settleSQL or settleLeasedSQL, over rows: parameters now, then each
// row's fields, and its subscriber and first attempt if ranged. It adds the deliveries settled to
// done with their attempt counts and the moves out of leased to c, and calls each, if not nil,
// with each one. A ranged chunk whose final statuses are known (none goes back to the queue, where
// the subscriber's state decides) is first inserted without RETURNING (insertAll); only if that
// leaves a row out does the chunk go through stmts, which tells which ones were written.
func (s *Store) writeSettled(ctx context.Context, tx *sql.Tx, stmts *[len(padChunks)]string, rows []settleRow, ranged bool, now int64,
	done map[int64]int, c countDeltas, each func(seq int64, sub string, status Status)) error {
	cols := 9
	if ranged {
		cols = 14
	}
	written := func(seq int64, attempts int, sub string, status Status) {
		done[seq] = attempts
		c.move(sub, StatusLeased, status, 1)
		if each != nil {
			each(seq, sub, status)
		}
	}
	var args []any // reused by every chunk
	return padded(len(rows), func(k, lo, hi int) error {
		args = append(args[:0], now)
		for _, r := range rows[lo:hi] {
			args = append(args, r.Seq, r.Token, r.Status, r.Inc, r.Next, r.Reason, r.KeepLast, r.Code, r.Error)
			if ranged {
				f := &r.First
				args = append(args, r.Sub, f.At, f.Latency, f.Outcome, f.Excerpt)
			}
		}
		args = padNulls(args, k, hi-lo, cols)
		if ranged && finalStatuses(rows[lo:hi]) {
			all, err := s.insertAll(ctx, tx, settleLeasedAllSQL[k], args, hi-lo)
			if err != nil {
				return err
			}
			if all {
				for _, r := range rows[lo:hi] {
					written(r.Seq, int(r.Inc), r.Sub, Status(r.Status)) // a new row: its attempts are r.Inc
				}
				return nil
			}
		}
		res, err := s.query(ctx, tx, stmts[k], args...)
		if err != nil {
			return err
		}
		defer res.Close()
		for res.Next() {
			var seq int64
			var attempts int
			var sub string
			var status Status
			if err := res.Scan(&seq, &attempts, &sub, &status); err != nil {
				return err
			}
			written(seq, attempts, sub, status)
		}
		return res.Err()
	})
}

// finalStatuses tells whether every row settles in a status of its own (delivered or dead).
func finalStatuses(rows []settleRow) bool {
	for _, r := range rows {
		if r.Status == "unsent" {
			return false
		}
	}
	return true
}

// insertAll runs q, an insert of n rows, and keeps what it wrote only if it wrote all n: otherwise
// it rolls it back and reports false. The insert returns no rows, which spares SQLite a table of
// them and Go a scan of each.
func (s *Store) insertAll(ctx context.Context, tx *sql.Tx, q string, args []any, n int) (bool, error) {
	if _, err := s.exec(ctx, tx, `SAVEPOINT insert_all`); err != nil {
		return false, err
	}
	res, err := s.exec(ctx, tx, q, args...)
	if err != nil {
		return false, err // the caller's transaction fails: no need to roll back to the savepoint
	}
	wrote, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	if wrote != int64(n) {
		if _, err := s.exec(ctx, tx, `ROLLBACK TO insert_all`); err != nil {
			return false, err
		}
	}
	_, err = s.exec(ctx, tx, `RELEASE insert_all`)
	return wrote == int64(n) && err == nil, err
}

// settleLeasedSQL inserts the rows of deliveries leased as part of a range: parameters now, then
// each settleRow's fields, its subscriber and its first attempt. The delivery must be of an event
// in the range of a lease of that subscriber with that token, in one of the subscriber's fanouts;
// one that has a row already (rescued, or settled) conflicts and is skipped. A delivered row is
// written compact (migration 0014): created_at 0, and without what its event and its settle's time
// hold. It returns the rows it wrote; settleLeasedAllSQL is the same insert returning nothing.
var (
	settleLeasedSQL = chunkSQL(14, func(values string) string {
		return insertLeasedSQL(values) + ` RETURNING seq, attempts, subscriber_id, status`
	})
	settleLeasedAllSQL = chunkSQL(14, insertLeasedSQL)
)

func insertLeasedSQL(values string) string {
	return `INSERT INTO deliveries(seq, event_seq, subscriber_id, status, reason, attempts, next_attempt_at, age_from,
			last_status, last_error, created_at, updated_at, delivered_at,
			first_at, first_status, first_latency_ms, first_outcome, first_error, first_excerpt)
		SELECT j.seq, e.seq, ls.subscriber_id,
			CASE j.status WHEN 'unsent' THEN ` + unsentStatusOf("ls.subscriber_id") + ` ELSE j.status END,
			CASE j.status WHEN 'dead' THEN j.reason WHEN 'delivered' THEN '' ELSE ` + heldReasonOf("ls.subscriber_id") + ` END, j.inc,
			CASE WHEN j.status = 'delivered' THEN 0 WHEN j.next > 0 THEN j.next ELSE e.created_at END,
			CASE WHEN j.status = 'delivered' THEN 0 ELSE e.created_at END,
			CASE WHEN j.keep_last > 0 THEN 0 ELSE j.code END, CASE WHEN j.keep_last = 1 THEN '' ELSE j.error END,
			CASE WHEN j.status = 'delivered' THEN 0 ELSE e.created_at END, t.now, 0,
			j.first_at, CASE WHEN j.first_at > 0 THEN j.code ELSE 0 END, j.first_latency,
			CASE WHEN j.status = 'delivered' AND j.first_outcome = 'delivered' THEN '' ELSE j.first_outcome END,
			CASE WHEN j.first_at > 0 THEN j.error ELSE '' END, j.first_excerpt
		FROM (SELECT ? AS now) AS t,
			(SELECT column1 AS seq, column2 AS token, column3 AS status, column4 AS inc, column5 AS next, column6 AS reason,
				column7 AS keep_last, column8 AS code, column9 AS error, column10 AS sub, column11 AS first_at, column12 AS first_latency,
				column13 AS first_outcome, column14 AS first_excerpt
			FROM (` + values + `)) AS j
			JOIN leases ls ON ls.subscriber_id = j.sub AND ls.token = j.token
			JOIN events e ON e.seq = j.seq >> ` + fmt.Sprint(ordinalBits) + `
		WHERE (j.seq & ` + fmt.Sprint(maxOrdinals-1) + `) = ls.ordinal AND e.seq > ls.after_seq AND e.seq <= ls.through_seq
			AND e.fanout <> 0 AND EXISTS (SELECT 1 FROM fanout_members m WHERE m.fanout = e.fanout AND m.ordinal = ls.ordinal)
		ON CONFLICT(seq) DO NOTHING`
}

// leasesSettledSQL takes settled deliveries off their leases' counts: each subscriber, token and
// count.
var leasesSettledSQL = chunkSQL(3, func(values string) string {
	return `UPDATE leases SET remaining = remaining - j.column3 FROM (` + values + `) AS j
		WHERE leases.subscriber_id = j.column1 AND leases.token = j.column2`
})

// deliveredKeep is how many seconds delivered_by_second keeps: Stats reads the last minute.
const deliveredKeep = 120

// countDelivered adds the deliveries a settle delivered to delivered_by_second, by subscriber in
// the second of now, and about once a minute deletes the seconds older than deliveredKeep.
func (s *Store) countDelivered(ctx context.Context, tx *sql.Tx, settled countDeltas, now int64) error {
	sec := now / 1000
	var list []any // subscriber, count
	for k, n := range settled {
		if k[1] == string(StatusDelivered) && n > 0 {
			list = append(list, k[0], n)
		}
	}
	if len(list) == 0 {
		return nil
	}
	if last := s.trimmedAt.Load(); sec-last >= 60 || sec < last {
		if _, err := s.exec(ctx, tx, `DELETE FROM delivered_by_second WHERE second < ?`, sec-deliveredKeep); err != nil {
			return err
		}
		s.trimmedAt.Store(sec) // if the transaction fails, the next trim is a minute late: harmless
	}
	return s.execPadded(ctx, tx, &countDeliveredSQL, []any{sec}, list, 2)
}

// countDeliveredSQL adds deliveries to delivered_by_second: parameters the second, then each
// subscriber and its count. WHERE: see writeCountsSQL.
var countDeliveredSQL = chunkSQL(2, func(values string) string {
	return `INSERT INTO delivered_by_second(second, subscriber_id, n) SELECT t.sec, v.column1, v.column2
		FROM (SELECT ? AS sec) AS t, (` + values + `) AS v WHERE v.column1 IS NOT NULL
		ON CONFLICT(second, subscriber_id) DO UPDATE SET n = n + excluded.n`
})

// settleSQL settles a chunk of padChunks rows: parameters now, then each settleRow's fields (a
// padding row's NULL seq matches no delivery).
var settleSQL = chunkSQL(9, func(values string) string {
	return `UPDATE deliveries SET
			status = CASE j.status WHEN 'unsent' THEN ` + returnedStatus + ` WHEN 'dead' THEN ` + diedStatus + ` ELSE j.status END,
			attempts = deliveries.attempts + j.inc,
			next_attempt_at = CASE WHEN j.next > 0 THEN j.next ELSE deliveries.next_attempt_at END,
			reason = CASE j.status WHEN 'dead' THEN ` + diedReason + ` WHEN 'delivered' THEN '' ELSE ` + returnedReason + ` END,
			last_status = CASE WHEN j.keep_last > 0 THEN deliveries.last_status ELSE j.code END,
			last_error = CASE WHEN j.keep_last = 1 THEN deliveries.last_error ELSE j.error END,
			delivered_at = CASE WHEN j.status = 'delivered' THEN t.now ELSE deliveries.delivered_at END,
			lease_token = '', lease_expires_at = 0, updated_at = t.now
		FROM (SELECT ? AS now) AS t, (SELECT column1 AS seq, column2 AS token, column3 AS status, column4 AS inc, column5 AS next,
				column6 AS reason, column7 AS keep_last, column8 AS code, column9 AS error FROM (` + values + `)) AS j
		WHERE deliveries.seq = j.seq AND deliveries.lease_token = j.token AND +deliveries.status = 'leased'
		RETURNING seq, attempts, subscriber_id, status`
})

// logAttempts inserts the attempt records of the settled items in one statement, but for those
// of inlined, which their rows hold.
func (s *Store) logAttempts(ctx context.Context, tx *sql.Tx, items []Settlement, done map[int64]int, inlined map[int64]bool) error {
	var list []any // 8 values per attempt
	for _, it := range items {
		attempts, ok := done[it.Seq]
		if a := it.Attempt; a != nil && ok && !inlined[it.Seq] {
			number := attempts
			if !it.Result.countsAttempt() {
				number = 0
			}
			list = append(list, it.Seq, number, ms(a.At), a.Status, a.LatencyMS, a.Outcome, a.Error, a.Excerpt)
		}
	}
	return s.execPadded(ctx, tx, &insertAttemptsSQL, nil, list, 8)
}

// insertAttemptsSQL inserts attempt records (delivery, number, at, status, latency, outcome,
// error, excerpt).
var insertAttemptsSQL = chunkSQL(8, func(values string) string {
	return `INSERT INTO attempts(delivery_seq, number, at, status, latency_ms, outcome, error, excerpt)
		SELECT * FROM (` + values + `) WHERE column1 IS NOT NULL`
})

// limiterState is the part of a subscriber's limiter row that settling changes.
type limiterState struct {
	ID       string `json:"id"`
	Failures int    `json:"failures"`
	Circuit  string `json:"circuit"`
	Until    int64  `json:"until"`
	Opens    int    `json:"opens"`
	Paused   int64  `json:"paused"`
	Refund   int    `json:"refund"` // tokens given back to the bucket (Settlement.Refund); read as 0
}

// settleSubscribers applies the effects of the settlements on their subscribers, in order: a
// disable (a 410 from the subscriber as it still is: out.Disabled), the latest Retry-After pause,
// and the circuit breaker folded over every success and failure (and a probe settled without news:
// see apply), adding the circuits it opened or closed to out.Circuits and making the pending
// retries of those its probe closed due now. The limiter rows are read with one statement and only the
// changed ones written with another: in the common case (successes on a closed circuit) nothing
// is written. It returns the subscribers disabled after the settle, whose deliveries going back
// to the queue were written held.
func (s *Store) settleSubscribers(ctx context.Context, tx *sql.Tx, order []string, bySub map[string][]*Settlement, now time.Time, policy CircuitPolicy, out *Settled) (map[string]bool, error) {
	for _, id := range order {
		for _, it := range bySub[id] {
			if it.Disable == "" {
				continue
			}
			applied, err := s.disableUnchanged(ctx, tx, id, it, ms(now))
			if err != nil {
				return nil, fmt.Errorf("settle subscriber %s: %w", id, err)
			}
			if applied {
				out.Disabled = append(out.Disabled, id)
				break
			}
		}
	}
	// Every settlement may change the limiter: a success or failure the circuit, a Retry-After the
	// pause, and any other a probe's (apply), so the row of each subscriber settled (order) is read.
	if len(order) == 0 {
		return nil, nil
	}
	var changed []limiterState
	var disabled map[string]bool
	var recovered []string // closed by a probe's success after a failed one: an outage ended
	args := make([]any, 0, len(order))
	err := padded(len(order), func(k, lo, hi int) error {
		args = args[:0]
		for _, id := range order[lo:hi] {
			args = append(args, id)
		}
		rows, err := s.query(ctx, tx, readLimitersSQL[k], padNulls(args, k, hi-lo, 1)...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var st limiterState
			var isDisabled bool
			var updated int64
			if err := rows.Scan(&st.ID, &st.Failures, &st.Circuit, &st.Until, &st.Opens, &st.Paused, &isDisabled, &updated); err != nil {
				return err
			}
			if isDisabled {
				if disabled == nil {
					disabled = map[string]bool{}
				}
				disabled[st.ID] = true
			}
			if next := st.apply(bySub[st.ID], updated, now, policy); next != st {
				changed = append(changed, next)
				if c, ok := circuitChange(st, next); ok {
					out.Circuits = append(out.Circuits, c)
					if !c.Opened && st.Circuit == "probing" && st.Opens > 1 {
						recovered = append(recovered, c.SubscriberID)
					}
				}
			}
		}
		return rows.Err()
	})
	if err != nil || len(changed) == 0 {
		return disabled, err
	}
	data, _ := json.Marshal(changed)
	// A refund is clamped at the burst, as a refill is.
	if _, err := s.exec(ctx, tx, `UPDATE limiter SET consecutive_failures = j.failures, circuit = j.circuit, circuit_until = j.until,
			circuit_opens = j.opens, paused_until = j.paused,
			tokens = CASE WHEN j.refund > 0 THEN min(tokens + j.refund, (SELECT burst FROM subscribers WHERE id = j.id)) ELSE tokens END
		FROM (SELECT value->>'id' AS id, value->>'failures' AS failures, value->>'circuit' AS circuit, value->>'until' AS until,
			value->>'opens' AS opens, value->>'paused' AS paused, value->>'refund' AS refund FROM jsonb_each(?)) AS j
		WHERE limiter.subscriber_id = j.id`, string(data)); err != nil {
		return disabled, err
	}
	// A circuit closed by a probe's success after at least one probe failed (circuit_opens > 1):
	// the subscriber is back from an outage, so the retries that backed off meanwhile (hours, at
	// the default cap) are due now, paced by its bucket and its in-flight cap. Only then: a
	// success of a send out since before the circuit opened, or of its first probe, says nothing
	// of a recovery (a few poison payloads, failing together as others succeed, opened it), and
	// on a circuit that stayed closed a delivery failing alone keeps its backoff: pulled forward
	// by each such close, poison payloads spent an attempt per cool-down.
	for _, id := range recovered {
		if _, err := s.exec(ctx, tx, dueRetriesNowSQL, ms(now), id); err != nil {
			return disabled, err
		}
	}
	return disabled, nil
}

// stale tells whether the send was made to the subscriber as it was before its last change
// (updated: its updated_at now; see Sent).
func (it *Settlement) stale(updated int64) bool {
	return it.Sent != nil && ms(it.Sent.UpdatedAt) != updated
}

// disableUnchanged disables subscriber id for it's 410 if the subscriber is active and unchanged
// since the send saw it (it.Sent; every change moves updated_at on), and tells whether it did.
// A deleted subscriber has nothing to disable.
func (s *Store) disableUnchanged(ctx context.Context, tx *sql.Tx, id string, it *Settlement, now int64) (bool, error) {
	var updated int64
	var state State
	err := tx.QueryRowContext(ctx, `SELECT updated_at, state FROM subscribers WHERE id = ?`, id).Scan(&updated, &state)
	if errors.Is(err, sql.ErrNoRows) || err == nil && (it.stale(updated) || state != StateActive) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, s.setStateTx(ctx, tx, id, StateDisabled, it.Disable, now)
}

// circuitChange tells whether a subscriber's circuit went from was to now open (a failed probe
// opens it again) or closed.
func circuitChange(was, now limiterState) (CircuitChange, bool) {
	c := CircuitChange{SubscriberID: now.ID}
	switch {
	case now.Circuit == "open" && now.Opens != was.Opens:
		c.Opened, c.Failures, c.Opens, c.Until = true, now.Failures, now.Opens, time.UnixMilli(now.Until)
	case now.Circuit == "closed" && was.Circuit != "closed":
	default:
		return c, false
	}
	return c, true
}

// readLimitersSQL reads the limiter rows of the subscribers bound (padded with NULLs).
var readLimitersSQL = chunkSQL(1, func(values string) string {
	return `SELECT l.subscriber_id, l.consecutive_failures, l.circuit, l.circuit_until, l.circuit_opens, l.paused_until,
		s.state = 'disabled', s.updated_at FROM limiter l JOIN subscribers s ON s.id = l.subscriber_id WHERE l.subscriber_id IN (` + values + `)`
})

// apply folds a subscriber's settlements, in order, into its limiter state; updated is the
// subscriber's updated_at, before which a send's news is stale (Settlement.Sent).
func (st limiterState) apply(items []*Settlement, updated int64, now time.Time, policy CircuitPolicy) limiterState {
	for _, it := range items {
		if it.Refund {
			st.Refund++
		}
		effect := it.Circuit
		if it.stale(updated) {
			effect = CircuitNone
		} else {
			st.Paused = max(st.Paused, ms(it.PauseUntil))
		}
		// While the circuit probes, its probe is the subscriber's one delivery in flight (the
		// claim takes it only with none). Settled with no news of the subscriber's health
		// (released or dead unsent, throttled with Retry-After, rescheduled by the edge, the
		// edge's duplicate, an address refused), the next claim may probe again, once a pause
		// allows, not only once the first probe's lease would have ended (circuit_until).
		if effect == CircuitNone && st.Circuit == "probing" {
			st.Until = min(st.Until, ms(now))
		}
		switch effect {
		case CircuitSuccess:
			st.Failures, st.Circuit, st.Until, st.Opens = 0, "closed", 0, 0
		case CircuitFailure:
			st.Failures++
			// A failed probe re-opens at once; an open circuit only counts (its cool-down runs).
			if st.Circuit == "probing" || st.Circuit == "closed" && policy.Threshold > 0 && st.Failures >= policy.Threshold {
				st.Opens++
				cool := policy.BaseCooldown << min(st.Opens-1, 30)
				if cool > policy.MaxCooldown || cool <= 0 {
					cool = policy.MaxCooldown
				}
				st.Circuit, st.Until = "open", ms(now.Add(cool))
			}
		}
	}
	return st
}
