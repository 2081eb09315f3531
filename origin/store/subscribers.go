package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// MaxRotationOverlap bounds how long a rotated-out secret stays valid.
const MaxRotationOverlap = 30 * 24 * time.Hour

// validate fills defaults and checks every field, returning a *FieldError naming the first bad one.
func (in *SubscriberInput) validate(creating bool) error {
	if creating {
		if in.ID == "" {
			in.ID = "sub_" + randomHex(8)
		}
		if err := wire.ValidateID(in.ID); err != nil {
			return fieldErr("id", err)
		}
	}
	if in.Profile == "" {
		in.Profile = ProfileStandard
	}
	if in.Mode == "" {
		in.Mode = ModeDirect
	}
	if in.RatePerSec == 0 {
		in.RatePerSec = DefaultRatePerSec
	}
	if in.Burst == 0 {
		in.Burst = DefaultBurst
	}
	if in.MaxInFlight == 0 {
		in.MaxInFlight = DefaultMaxInFlight
	}
	if in.TimeoutMS == 0 {
		in.TimeoutMS = DefaultTimeoutMS
	}
	if _, err := wire.ParsePatterns(in.Events); err != nil {
		var fe *FieldError // the pattern at fault: "events[1]"
		if errors.As(err, &fe) {
			return fieldErr("events"+fe.Field, fe.Err)
		}
		return fieldErr("events", err)
	}
	switch in.Profile {
	case ProfileStandard:
		if in.LegacyPrefix != "" {
			return fieldErrf("legacy_prefix", "only applies to the legacy profile")
		}
	case ProfileLegacy:
		if err := signature.ValidateLegacyPrefix(in.LegacyPrefix); err != nil {
			return fieldErr("legacy_prefix", err)
		}
		// Reserved like webhook-* (wire.ValidateHeader): the edge sets a record's headers after
		// the ones it forwards, so one of these would replace the origin's signature.
		ts, sig := signature.LegacyHeaders(in.LegacyPrefix)
		for name := range in.Headers {
			if strings.EqualFold(name, ts) || strings.EqualFold(name, sig) {
				return fieldErrf("headers."+name, "header name %q is reserved: the legacy profile signs with it", name)
			}
		}
	default:
		return fieldErrf("profile", "%q must be standard or legacy", in.Profile)
	}
	if in.Mode != ModeDirect && in.Mode != ModeEdge {
		return fieldErrf("mode", "%q must be direct or edge", in.Mode)
	}
	if math.IsNaN(in.RatePerSec) || in.RatePerSec <= 0 || in.RatePerSec > MaxRatePerSec {
		return fieldErrf("rate_per_sec", "%v must be above 0 and at most %v", in.RatePerSec, MaxRatePerSec)
	}
	if in.Burst < 1 || in.Burst > MaxBurst {
		return fieldErrf("burst", "%d must be 1 to %d", in.Burst, MaxBurst)
	}
	if in.MaxInFlight < 1 || in.MaxInFlight > MaxMaxInFlight {
		return fieldErrf("max_in_flight", "%d must be 1 to %d", in.MaxInFlight, MaxMaxInFlight)
	}
	// The edge record carries url, timeout, headers and the coalesce rule: one validation for both.
	rec := wire.SubscriberRecord{URL: in.URL, TimeoutMS: in.TimeoutMS, Headers: in.Headers, Coalesce: in.Coalesce, Active: true}
	return rec.Validate()
}

func (in *SubscriberInput) applyPatch(p SubscriberPatch) {
	if p.URL != nil {
		in.URL = *p.URL
	}
	if p.Events != nil {
		in.Events = *p.Events
	}
	if p.Profile != nil {
		in.Profile = *p.Profile
	}
	if p.LegacyPrefix != nil {
		in.LegacyPrefix = *p.LegacyPrefix
	}
	if p.Mode != nil {
		in.Mode = *p.Mode
	}
	if p.RatePerSec != nil {
		in.RatePerSec = *p.RatePerSec
	}
	if p.Burst != nil {
		in.Burst = *p.Burst
	}
	if p.MaxInFlight != nil {
		in.MaxInFlight = *p.MaxInFlight
	}
	if p.TimeoutMS != nil {
		in.TimeoutMS = *p.TimeoutMS
	}
	if p.Headers != nil {
		in.Headers = *p.Headers
	}
	if p.Coalesce != nil {
		in.Coalesce = *p.Coalesce
	}
}

// CreateSubscriber validates in, stores the subscriber with a fresh secret and returns it. The
// secret is in the result's Secrets; callers show it once. An id already taken is ErrConflict.
func (s *Store) CreateSubscriber(ctx context.Context, in SubscriberInput) (*Subscriber, error) {
	if err := in.validate(true); err != nil {
		return nil, err
	}
	sec, err := signature.NewSecret()
	if err != nil {
		return nil, err
	}
	if err := s.finishHistory(ctx, in.ID); err != nil {
		return nil, err
	}
	now := ms(s.Now())
	return s.changeSubscriber(ctx, in.ID, func(tx *sql.Tx) error {
		var exists int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM subscribers WHERE id = ?`, in.ID).Scan(&exists); err != nil {
			return err
		}
		if exists > 0 {
			return fmt.Errorf("subscriber %q already exists: %w", in.ID, ErrConflict)
		}
		// Deleted meanwhile, since finishHistory above: its history's count triggers must not
		// land on this one's counts.
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM meta WHERE key = ?`, historyKeyPrefix+in.ID).Scan(&exists); err != nil {
			return err
		}
		if exists > 0 {
			return fmt.Errorf("subscriber %q is being deleted; try again in a moment: %w", in.ID, ErrConflict)
		}
		var ordinal int64
		if err := tx.QueryRowContext(ctx, `UPDATE meta SET value = value + 1 WHERE key = 'next_ordinal' RETURNING value - 1`).Scan(&ordinal); err != nil {
			return err
		}
		if ordinal >= maxOrdinals {
			return fmt.Errorf("this database has created %d subscribers, the most one can (delivery ids hold an ordinal of %d bits): %w",
				maxOrdinals, ordinalBits, ErrConflict)
		}
		events, headers, coalesce := encodeSettings(&in)
		if _, err := tx.ExecContext(ctx, `INSERT INTO subscribers(id, url, events, profile, legacy_prefix, mode, rate_per_sec,
			burst, max_in_flight, timeout_ms, headers, coalesce, created_at, updated_at, ordinal)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			in.ID, in.URL, events, in.Profile, in.LegacyPrefix, in.Mode, in.RatePerSec, in.Burst, in.MaxInFlight,
			in.TimeoutMS, headers, coalesce, now, now, ordinal); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO subscriber_secrets(subscriber_id, secret, created_at) VALUES (?, ?, ?)`,
			in.ID, sec.String(), now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO limiter(subscriber_id, tokens, refilled_at) VALUES (?, ?, ?)`,
			in.ID, in.Burst, now); err != nil {
			return err
		}
		return bumpSubscribersVersion(ctx, tx)
	})
}

func encodeSettings(in *SubscriberInput) (events, headers, coalesce string) {
	e, _ := json.Marshal(in.Events)
	h := []byte("{}")
	if len(in.Headers) > 0 {
		h, _ = json.Marshal(in.Headers)
	}
	if in.Coalesce != nil {
		c, _ := json.Marshal(in.Coalesce)
		coalesce = string(c)
	}
	return string(e), string(h), coalesce
}

// bumpSubscribersVersion invalidates every process's cache of subscribers used by emit. The new
// version is random, not the old one + 1: a transaction that changed a subscriber and loaded the
// cache (a settle's disable, then its claim) may still roll back, and the next change would give
// the same number again, which the cache would take for the list it holds.
func bumpSubscribersVersion(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, `UPDATE meta SET value = hex(randomblob(8)) WHERE key = 'subscribers_version'`)
	return err
}

const subscriberColumns = `id, url, events, profile, legacy_prefix, mode, rate_per_sec, burst, max_in_flight,
	timeout_ms, headers, coalesce, state, state_reason, created_at, updated_at, ordinal`

type rowScanner interface{ Scan(dest ...any) error }

func scanSubscriber(row rowScanner) (*Subscriber, error) {
	var (
		sub                       Subscriber
		events, headers, coalesce string
		createdAt, updatedAt      int64
		profile, mode, state      string
	)
	if err := row.Scan(&sub.ID, &sub.URL, &events, &profile, &sub.LegacyPrefix, &mode, &sub.RatePerSec, &sub.Burst,
		&sub.MaxInFlight, &sub.TimeoutMS, &headers, &coalesce, &state, &sub.StateReason, &createdAt, &updatedAt, &sub.ordinal); err != nil {
		return nil, err
	}
	sub.Profile, sub.Mode, sub.State = Profile(profile), Mode(mode), State(state)
	sub.CreatedAt, sub.UpdatedAt = fromMS(createdAt), fromMS(updatedAt)
	var list []string
	if err := json.Unmarshal([]byte(events), &list); err != nil {
		return nil, fmt.Errorf("subscriber %s: events: %w", sub.ID, err)
	}
	for _, p := range list {
		sub.Events = append(sub.Events, wire.Pattern(p))
	}
	if err := json.Unmarshal([]byte(headers), &sub.Headers); err != nil {
		return nil, fmt.Errorf("subscriber %s: headers: %w", sub.ID, err)
	}
	if len(sub.Headers) == 0 {
		sub.Headers = nil
	}
	if coalesce != "" {
		sub.Coalesce = new(wire.CoalesceRule)
		if err := json.Unmarshal([]byte(coalesce), sub.Coalesce); err != nil {
			return nil, fmt.Errorf("subscriber %s: coalesce: %w", sub.ID, err)
		}
	}
	return &sub, nil
}

// loadSecrets fills the secrets of subs (newest first) using q.
func loadSecrets(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, subs map[string]*Subscriber) error {
	rows, err := q.QueryContext(ctx, `SELECT subscriber_id, secret, created_at, expires_at FROM subscriber_secrets ORDER BY created_at DESC`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var id, text string
		var created, expires int64
		if err := rows.Scan(&id, &text, &created, &expires); err != nil {
			return err
		}
		sub := subs[id]
		if sub == nil {
			continue
		}
		sec, err := signature.ParseSecret(text)
		if err != nil {
			return fmt.Errorf("subscriber %s: stored secret: %w", id, err)
		}
		sub.Secrets = append(sub.Secrets, Secret{Secret: sec, CreatedAt: fromMS(created), ExpiresAt: fromMS(expires)})
	}
	return rows.Err()
}

// GetSubscriber returns one subscriber with its secrets, or ErrNotFound.
func (s *Store) GetSubscriber(ctx context.Context, id string) (*Subscriber, error) {
	// One read transaction: a rotation committing between the reads would pair the row with
	// another version's secrets.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	return getSubscriber(ctx, tx, id)
}

// changeSubscriber runs fn in a write transaction and answers with the subscriber as that
// transaction left it: read after the commit, another writer's change (or delete) could show in
// the answer instead of the caller's own.
func (s *Store) changeSubscriber(ctx context.Context, id string, fn func(tx *sql.Tx) error) (*Subscriber, error) {
	var sub *Subscriber
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		err := fn(tx)
		if err == nil {
			sub, err = getSubscriber(ctx, tx, id)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return sub, nil
}

// getSubscriber reads one subscriber with its secrets in tx, or ErrNotFound.
func getSubscriber(ctx context.Context, tx *sql.Tx, id string) (*Subscriber, error) {
	sub, err := scanSubscriber(tx.QueryRowContext(ctx, `SELECT `+subscriberColumns+` FROM subscribers WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("subscriber %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT secret, created_at, expires_at FROM subscriber_secrets WHERE subscriber_id = ? ORDER BY created_at DESC`, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var text string
		var created, expires int64
		if err := rows.Scan(&text, &created, &expires); err != nil {
			return nil, err
		}
		sec, err := signature.ParseSecret(text)
		if err != nil {
			return nil, fmt.Errorf("subscriber %s: stored secret: %w", id, err)
		}
		sub.Secrets = append(sub.Secrets, Secret{Secret: sec, CreatedAt: fromMS(created), ExpiresAt: fromMS(expires)})
	}
	return sub, rows.Err()
}

// ListSubscribers returns every subscriber, ordered by id, with secrets.
func (s *Store) ListSubscribers(ctx context.Context) ([]*Subscriber, error) {
	// One read transaction, as GetSubscriber: a delete committing between the subscribers' read
	// and their secrets' listed the subscriber without a secret, and one deleted and created
	// again paired the old row with the new subscriber's secrets.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	return s.listSubscribers(ctx, tx, "")
}

func (s *Store) listSubscribers(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, where string) ([]*Subscriber, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+subscriberColumns+` FROM subscribers `+where+` ORDER BY id`)
	if err != nil {
		return nil, err
	}
	var list []*Subscriber
	byID := map[string]*Subscriber{}
	for rows.Next() {
		sub, err := scanSubscriber(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		list = append(list, sub)
		byID[sub.ID] = sub
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return list, loadSecrets(ctx, q, byID)
}

// UpdateSubscriber applies patch to the subscriber's settings (validated as a whole) and returns it.
//
// A patch that changes the URL also drops, in the same transaction, what the old endpoint earned:
// the Retry-After pause and the circuit breaker are reset (as by a resume), and the subscriber's
// pending retries are due at once (dueRetriesNowSQL), so that an operator who points a failing
// subscriber at a working endpoint does not wait for a cool-down or hours of backoff. The token
// bucket stays: the rate is the subscriber's, not the URL's. Deliveries in flight keep their lease:
// they were sent to the old URL, and their settlement decides what becomes of them.
func (s *Store) UpdateSubscriber(ctx context.Context, id string, patch SubscriberPatch) (*Subscriber, error) {
	now := ms(s.Now())
	return s.changeSubscriber(ctx, id, func(tx *sql.Tx) error {
		cur, err := scanSubscriber(tx.QueryRowContext(ctx, `SELECT `+subscriberColumns+` FROM subscribers WHERE id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("subscriber %q: %w", id, ErrNotFound)
		}
		if err != nil {
			return err
		}
		in := SubscriberInput{URL: cur.URL, Profile: cur.Profile, LegacyPrefix: cur.LegacyPrefix, Mode: cur.Mode,
			RatePerSec: cur.RatePerSec, Burst: cur.Burst, MaxInFlight: cur.MaxInFlight, TimeoutMS: cur.TimeoutMS,
			Headers: cur.Headers, Coalesce: cur.Coalesce}
		for _, p := range cur.Events {
			in.Events = append(in.Events, string(p))
		}
		in.applyPatch(patch)
		if err := in.validate(false); err != nil {
			return err
		}
		events, headers, coalesce := encodeSettings(&in)
		if _, err := tx.ExecContext(ctx, `UPDATE subscribers SET url = ?, events = ?, profile = ?, legacy_prefix = ?, mode = ?,
			rate_per_sec = ?, burst = ?, max_in_flight = ?, timeout_ms = ?, headers = ?, coalesce = ?, updated_at = max(?, updated_at + 1) WHERE id = ?`,
			in.URL, events, in.Profile, in.LegacyPrefix, in.Mode, in.RatePerSec, in.Burst, in.MaxInFlight, in.TimeoutMS,
			headers, coalesce, now, id); err != nil {
			return err
		}
		// The bucket is first brought up to now at the old rate and burst (as spendTokens would),
		// so that the new rate applies from now on, not to the time since the last claim; a
		// smaller burst then clamps it at once.
		if _, err := tx.ExecContext(ctx, `UPDATE limiter SET tokens = min(?1, ?2, tokens + ?3 * max(0, ?4 - refilled_at) / 1000.0),
				refilled_at = max(refilled_at, ?4) WHERE subscriber_id = ?5`, in.Burst, cur.Burst, cur.RatePerSec, now, id); err != nil {
			return err
		}
		if in.URL != cur.URL {
			if err := resetPauseAndCircuit(ctx, tx, id); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, dueRetriesNowSQL, now, id); err != nil {
				return err
			}
		}
		return bumpSubscribersVersion(ctx, tx)
	})
}

// DeleteSubscriber removes a subscriber with its secrets, limiter row, deliveries and their
// attempts (events stay until the retention prune). Foreign keys are not enforced (see Open): the
// children go here; the deliveries' attempts, queue_counts and delivered_by_second go by trigger
// (migrations 0008 and 0006). A delivery of it in flight meanwhile settles as stale (settleSQL
// matches no row), so no attempt is logged for it.
//
// The subscriber and its queue (every delivery not delivered, found through the indexes by
// subscriber) go in one transaction, which also records its delivered history as to be deleted
// (meta deleted_history:<id>). That history, in no index by subscriber (migration 0006), goes
// after it in transactions of deleteWindow rows of the table each: one scan of a history of
// millions held the writer, and every emit, for seconds. What a failure or a stop leaves of it is
// finished by the next Prune, or before the id is created again (CreateSubscriber), so that no
// count trigger of an old row ever lands on a new subscriber's counts; a failure here is not the
// caller's.
func (s *Store) DeleteSubscriber(ctx context.Context, id string) error {
	var through int64 // the history's bound, as recorded
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM subscribers WHERE id = ?`, id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("subscriber %q: %w", id, ErrNotFound)
		}
		// Rows a version-8 binary wrote on the file after migration 0009 have seqs from 2^62 on,
		// past the bound below, and only such rows do: few, found by seq. Left to the retention
		// prune, their count triggers would land on a subscriber created again under id.
		for _, q := range append([]string{`DELETE FROM subscriber_secrets WHERE subscriber_id = ?1`,
			`DELETE FROM limiter WHERE subscriber_id = ?1`,
			`DELETE FROM leases WHERE subscriber_id = ?1`,
			`DELETE FROM deliveries WHERE seq >= ` + strconv.FormatInt(olderBinarySeqs, 10) + ` AND subscriber_id = ?1`},
			deleteQueueSQL[:]...) {
			if _, err := tx.ExecContext(ctx, q, id); err != nil {
				return err
			}
		}
		// The largest seq a delivery of an event stored by now can have (fanout.go): a subscriber
		// created under id later has only larger ones. A record may be there already if an older
		// binary, which knows none, created the id again: the larger bound covers both histories.
		var next int64
		if err := s.queryRow(ctx, tx, readSeqMarksSQL).Scan(&next); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, `INSERT INTO meta(key, value) VALUES (?1, ?2)
			ON CONFLICT(key) DO UPDATE SET value = max(CAST(value AS INTEGER), excluded.value) RETURNING value`,
			historyKeyPrefix+id, deliverySeqOf(next-1, maxOrdinals-1)).Scan(&through); err != nil {
			return err
		}
		return bumpSubscribersVersion(ctx, tx)
	})
	if err != nil {
		return err
	}
	_ = s.deleteHistory(ctx, id, through) // what it leaves, Prune or CreateSubscriber finishes
	return nil
}

// olderBinarySeqs is where the seqs of the rows a version-8 binary writes on a file of version 9
// or later start (migration 0009's deliveries mark).
const olderBinarySeqs = 1 << 62

// historyKeyPrefix keys, in meta, the delivered history of a deleted subscriber still to delete:
// the value is the largest seq of it (DeleteSubscriber).
const historyKeyPrefix = "deleted_history:"

// deleteQueueSQL deletes the deliveries of subscriber ?1 that are not delivered, each status
// through its index (the conditions repeat the partial indexes' literally).
var deleteQueueSQL = [...]string{
	`DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries INDEXED BY deliveries_due_first
		WHERE subscriber_id = ?1 AND status = 'pending' AND attempts = 0)`,
	`DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries INDEXED BY deliveries_due_retry
		WHERE subscriber_id = ?1 AND status = 'pending' AND attempts > 0)`,
	`DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries INDEXED BY deliveries_leased
		WHERE status = 'leased' AND subscriber_id = ?1)`,
	`DELETE FROM deliveries WHERE seq IN (SELECT seq FROM deliveries INDEXED BY deliveries_sub_settled
		WHERE subscriber_id = ?1 AND ` + subSettledSQL + `)`,
}

// deleteWindow is how many deliveries, in seq order, a transaction of a deleted subscriber's
// history reads: tens of milliseconds of the writer.
const deleteWindow = 20000

// historyWindowSQL reads the next deleteWindow deliveries past seq ?1, up to seq ?2.
var historyWindowSQL = `SELECT seq, subscriber_id FROM deliveries WHERE seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ` +
	strconv.Itoa(deleteWindow)

// finishHistory deletes the delivered history recorded for the deleted subscriber id, if any, one
// window of the table per transaction, and then its record. If a transaction fails, the record
// stays for the next try.
func (s *Store) finishHistory(ctx context.Context, id string) error {
	var through int64
	switch err := s.r.QueryRowContext(ctx, `SELECT value FROM meta WHERE key = ?`, historyKeyPrefix+id).Scan(&through); {
	case errors.Is(err, sql.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("the delivered deliveries of deleted subscriber %q: %w", id, err)
	}
	return s.deleteHistory(ctx, id, through)
}

// deleteHistory is finishHistory once it has read the record, of the history up to seq through.
// Its last transaction removes that record only: by then another process may have finished it,
// the id been created and deleted again, and the record be that later history's, past through.
func (s *Store) deleteHistory(ctx context.Context, id string, through int64) error {
	key := historyKeyPrefix + id
	for after := int64(-1); ; {
		done := false
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			var last sql.NullInt64
			if err := s.queryRow(ctx, tx, `SELECT max(seq) FROM (`+historyWindowSQL+`)`, after, through).Scan(&last); err != nil {
				return err
			}
			if !last.Valid {
				done = true
				_, err := s.exec(ctx, tx, `DELETE FROM meta WHERE key = ? AND value = ?`, key, through)
				return err
			}
			_, err := s.exec(ctx, tx, `DELETE FROM deliveries WHERE seq IN (SELECT seq FROM (`+historyWindowSQL+`) WHERE subscriber_id = ?3)`, after, through, id)
			after = last.Int64
			return err
		})
		if err != nil {
			return fmt.Errorf("the delivered deliveries of deleted subscriber %q could not all be deleted yet: %w", id, err)
		}
		if done {
			return nil
		}
	}
}

// finishHistories finishes every deleted subscriber's history still recorded (Prune), each one
// whatever became of the others.
func (s *Store) finishHistories(ctx context.Context) error {
	rows, err := s.r.QueryContext(ctx, `SELECT substr(key, ?1 + 1), value FROM meta WHERE substr(key, 1, ?1) = ?2`, len(historyKeyPrefix), historyKeyPrefix)
	if err != nil {
		return err
	}
	type history struct {
		id      string
		through int64
	}
	var histories []history
	for rows.Next() {
		var h history
		if err := rows.Scan(&h.id, &h.through); err != nil {
			rows.Close()
			return err
		}
		histories = append(histories, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var errs []error
	for _, h := range histories {
		errs = append(errs, s.deleteHistory(ctx, h.id, h.through))
	}
	return errors.Join(errs...)
}

// PauseSubscriber stops sending to a subscriber; its deliveries keep queueing. reason is recorded.
// A disabled subscriber paused queues new events again (while the endpoint is being fixed); the
// deliveries it held stay held until a resume.
func (s *Store) PauseSubscriber(ctx context.Context, id, reason string) (*Subscriber, error) {
	return s.setState(ctx, id, StatePaused, reason)
}

// ResumeSubscriber makes a paused or disabled subscriber active again: held deliveries become
// pending and are due at once; the Retry-After pause and the circuit breaker are reset. The max
// age of every delivery waiting for it counts from the resume (subscribers.resumed_at): a pause or
// a disable held them all alike, and must not make the retries among them too old to send.
func (s *Store) ResumeSubscriber(ctx context.Context, id string) (*Subscriber, error) {
	return s.setState(ctx, id, StateActive, "")
}

// setState changes a subscriber's state in one transaction with its consequences for deliveries.
func (s *Store) setState(ctx context.Context, id string, state State, reason string) (*Subscriber, error) {
	now := ms(s.Now())
	return s.changeSubscriber(ctx, id, func(tx *sql.Tx) error {
		return s.setStateTx(ctx, tx, id, state, reason, now)
	})
}

func (s *Store) setStateTx(ctx context.Context, tx *sql.Tx, id string, state State, reason string, now int64) error {
	// SET reads the row as it was: only a resume of a subscriber that was not active moves resumed_at.
	res, err := tx.ExecContext(ctx, `UPDATE subscribers SET state = ?1, state_reason = ?2,
		resumed_at = CASE WHEN ?1 = 'active' AND state <> 'active' THEN ?3 ELSE resumed_at END,
		updated_at = max(?3, updated_at + 1) WHERE id = ?4`, state, reason, now, id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("subscriber %q: %w", id, ErrNotFound)
	}
	switch state {
	case StateDisabled:
		for _, kind := range []string{"attempts > 0", "attempts = 0"} {
			if _, err = tx.ExecContext(ctx, `UPDATE deliveries SET status = 'held', reason = ?1, updated_at = ?2
				WHERE seq IN (`+pendingRowsSQL(kind)+`)`, reason, now, id, -1); err != nil {
				return err
			}
		}
		var t fanoutTake
		if t, err = s.fanoutTakeOf(ctx, tx, id, allFanout); err != nil {
			return err
		}
		var through int64
		if err = tx.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM events`).Scan(&through); err != nil {
			return err
		}
		err = s.settleFanout(ctx, tx, t, fanoutState{status: StatusHeld, reason: reason, now: now}, through)
	case StateActive:
		// A held row keeps an earlier due time: among first attempts, due order stays event order
		// (the backlog cap and claims take the earliest due first).
		if _, err = tx.ExecContext(ctx, `UPDATE deliveries SET status = 'pending', reason = '', next_attempt_at = min(next_attempt_at, ?1), updated_at = ?1
			WHERE subscriber_id = ?2 AND status = 'held' AND `+subSettledSQL, now, id); err != nil {
			return err
		}
		err = resetPauseAndCircuit(ctx, tx, id)
	}
	if err != nil {
		return err
	}
	return bumpSubscribersVersion(ctx, tx)
}

// resetPauseAndCircuit clears subscriber id's Retry-After pause and closes its circuit breaker,
// forgetting its failures and openings (a resume, a new URL). The token bucket is left as it is.
func resetPauseAndCircuit(ctx context.Context, tx *sql.Tx, id string) error {
	_, err := tx.ExecContext(ctx, `UPDATE limiter SET paused_until = 0, consecutive_failures = 0, circuit = 'closed',
		circuit_until = 0, circuit_opens = 0 WHERE subscriber_id = ?`, id)
	return err
}

// dueRetriesNowSQL makes the pending retries of subscriber ?2 due at ?1 at the latest:
// next_attempt_at = min(next_attempt_at, ?1), for a new URL (UpdateSubscriber) and a circuit
// closed again by its probe's success (settleSubscribers). Only rows of status 'pending' with attempts > 0
// are retries waiting: a leased row is 'leased', and a fanout delivery without a row (fanout.go)
// is a first attempt, due from its emit on. First attempts are due in event order already and are
// left so; held, dead and delivered rows are not waiting to be sent. The rows are found through
// deliveries_due_retry, whose condition is repeated literally, from the first not yet due: the
// retries made due together tie on next_attempt_at, and the index then orders them by seq, that
// is by event.
const dueRetriesNowSQL = `UPDATE deliveries SET next_attempt_at = ?1, updated_at = ?1 WHERE seq IN (SELECT seq FROM deliveries
	INDEXED BY deliveries_due_retry WHERE subscriber_id = ?2 AND status = 'pending' AND attempts > 0 AND next_attempt_at > ?1)`

// RotateSecret adds a new current secret and makes the current ones expire after overlap (0: at
// once). Until then deliveries carry a signature by each (see ProfileLegacy for the legacy profile).
// It moves updated_at on, and returns the subscriber with the new secret first.
func (s *Store) RotateSecret(ctx context.Context, id string, overlap time.Duration) (*Subscriber, error) {
	if overlap < 0 || overlap > MaxRotationOverlap {
		return nil, fieldErrf("overlap", "%s must be 0 to %s", overlap, MaxRotationOverlap)
	}
	sec, err := signature.NewSecret()
	if err != nil {
		return nil, err
	}
	now := s.Now()
	return s.changeSubscriber(ctx, id, func(tx *sql.Tx) error {
		// A change as any other: a send signed before it, refused for a secret it ends, says
		// nothing of the subscriber now (Settlement.Sent).
		res, err := tx.ExecContext(ctx, `UPDATE subscribers SET updated_at = max(?, updated_at + 1) WHERE id = ?`, ms(now), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("subscriber %q: %w", id, ErrNotFound)
		}
		expiry := max(ms(now.Add(overlap)), 1)
		if _, err := tx.ExecContext(ctx, `UPDATE subscriber_secrets SET expires_at = ? WHERE subscriber_id = ? AND (expires_at = 0 OR expires_at > ?)`,
			expiry, id, expiry); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM subscriber_secrets WHERE subscriber_id = ? AND expires_at <> 0 AND expires_at <= ?`, id, ms(now)); err != nil {
			return err
		}
		// created_at must order the new secret first even within one millisecond.
		var newest int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(created_at), 0) FROM subscriber_secrets WHERE subscriber_id = ?`, id).Scan(&newest); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO subscriber_secrets(subscriber_id, secret, created_at) VALUES (?, ?, ?)`,
			id, sec.String(), max(ms(now), newest+1)); err != nil {
			return err
		}
		return bumpSubscribersVersion(ctx, tx)
	})
}

// matchingSubscribers returns the cached non-disabled subscribers, reloading them inside tx when
// any process changed a subscriber since the last load. The same read brings emit's other cache,
// of fanout ids, to the fanouts version of tx (fanoutIDs).
func (s *Store) matchingSubscribers(ctx context.Context, tx *sql.Tx) ([]*Subscriber, error) {
	var ver, fanoutsVer string
	if err := s.queryRow(ctx, tx, `SELECT value, coalesce((SELECT value FROM meta WHERE key = 'fanouts_version'), '')
		FROM meta WHERE key = 'subscribers_version'`).Scan(&ver, &fanoutsVer); err != nil {
		return nil, err
	}
	s.fanoutIDs.at(fanoutsVer)
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	if ver == s.subsVer && s.subsList != nil {
		return s.subsList, nil
	}
	list, err := s.listSubscribers(ctx, tx, `WHERE state <> '`+string(StateDisabled)+`'`)
	if err != nil {
		return nil, err
	}
	if list == nil {
		list = []*Subscriber{}
	}
	s.subsVer, s.subsList = ver, list
	return list, nil
}
