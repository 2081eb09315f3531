package store

import (
	"context"
	"database/sql"
	"fmt"
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
)

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
	Reason        string    // for ResultDead
	Status        int       // HTTP status of the attempt, 0 if none
	Error         string    // last error, '' on success
	Attempt       *Attempt  // logged when non-nil (Number is filled in here)
	// Subscriber effects.
	PauseUntil time.Time // Retry-After on 429/503: the whole subscriber waits until then
	Disable    string    // non-empty: disable the subscriber with this reason (410)
	Circuit    CircuitEffect
}

// Settle applies outcomes in one transaction (the engine batches them). Every update checks the
// lease token, so a worker whose lease expired and was re-claimed cannot overwrite the new owner;
// such settlements are skipped and counted in stale.
func (s *Store) Settle(ctx context.Context, now time.Time, policy CircuitPolicy, items []Settlement) (stale int, err error) {
	nowMS := ms(now)
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		stale = 0
		for i := range items {
			ok, err := settleOne(ctx, tx, &items[i], nowMS)
			if err != nil {
				return fmt.Errorf("settle delivery %d: %w", items[i].Seq, err)
			}
			if !ok {
				stale++
				continue
			}
			if err := settleSubscriber(ctx, tx, &items[i], now, policy); err != nil {
				return fmt.Errorf("settle subscriber %s: %w", items[i].SubscriberID, err)
			}
		}
		return nil
	})
	return stale, err
}

// unsentStatus is the status of a delivery going back to the queue: held if its subscriber is
// disabled, pending otherwise.
const unsentStatus = `CASE WHEN (SELECT state FROM subscribers WHERE id = deliveries.subscriber_id) = 'disabled' THEN 'held' ELSE 'pending' END`

func settleOne(ctx context.Context, tx *sql.Tx, it *Settlement, now int64) (bool, error) {
	var q string
	args := []any{}
	switch it.Result {
	case ResultDelivered:
		q = `status = 'delivered', attempts = attempts + 1, delivered_at = ?, last_status = ?, last_error = ''`
		args = append(args, now, it.Status)
	case ResultRetry:
		q = `status = ` + unsentStatus + `, attempts = attempts + 1, next_attempt_at = ?, last_status = ?, last_error = ?`
		args = append(args, ms(it.NextAttemptAt), it.Status, it.Error)
	case ResultReschedule:
		q = `status = ` + unsentStatus + `, next_attempt_at = ?, last_status = ?, last_error = ?`
		args = append(args, ms(it.NextAttemptAt), it.Status, it.Error)
	case ResultDead:
		q = `status = 'dead', reason = ?, attempts = attempts + 1, last_status = ?, last_error = ?`
		args = append(args, it.Reason, it.Status, it.Error)
	case ResultRelease:
		q = `status = ` + unsentStatus
	default:
		return false, fmt.Errorf("unknown result %d", it.Result)
	}
	args = append(args, now, it.Seq, it.LeaseToken)
	var attempts int
	err := tx.QueryRowContext(ctx, `UPDATE deliveries SET `+q+`, lease_token = '', lease_expires_at = 0, updated_at = ?
		WHERE seq = ? AND lease_token = ? AND status = 'leased' RETURNING attempts`, args...).Scan(&attempts)
	if err != nil {
		return false, ignoreNoRows(err)
	}
	if a := it.Attempt; a != nil {
		number := attempts
		if it.Result == ResultReschedule || it.Result == ResultRelease {
			number = 0
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO attempts(delivery_seq, number, at, status, latency_ms, outcome, error, excerpt)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, it.Seq, number, ms(a.At), a.Status, a.LatencyMS, a.Outcome, a.Error, a.Excerpt); err != nil {
			return false, err
		}
	}
	return true, nil
}

// settleSubscriber applies a settlement's effects on its subscriber: pause, disable, circuit.
func settleSubscriber(ctx context.Context, tx *sql.Tx, it *Settlement, now time.Time, policy CircuitPolicy) error {
	if !it.PauseUntil.IsZero() {
		if _, err := tx.ExecContext(ctx, `UPDATE limiter SET paused_until = max(paused_until, ?) WHERE subscriber_id = ?`,
			ms(it.PauseUntil), it.SubscriberID); err != nil {
			return err
		}
	}
	if it.Disable != "" {
		if err := setStateTx(ctx, tx, it.SubscriberID, StateDisabled, it.Disable, ms(now)); err != nil {
			return ignoreNotFound(err)
		}
	}
	switch it.Circuit {
	case CircuitSuccess:
		_, err := tx.ExecContext(ctx, `UPDATE limiter SET consecutive_failures = 0, circuit = 'closed', circuit_until = 0, circuit_opens = 0
			WHERE subscriber_id = ? AND (consecutive_failures <> 0 OR circuit <> 'closed')`, it.SubscriberID)
		return err
	case CircuitFailure:
		var failures, opens int
		var circuit string
		err := tx.QueryRowContext(ctx, `SELECT consecutive_failures, circuit, circuit_opens FROM limiter WHERE subscriber_id = ?`,
			it.SubscriberID).Scan(&failures, &circuit, &opens)
		if err != nil {
			return ignoreNoRows(err)
		}
		failures++
		until := int64(0)
		// A failed probe re-opens at once; an open circuit only counts (its cool-down is running).
		if circuit == "probing" || circuit == "closed" && policy.Threshold > 0 && failures >= policy.Threshold {
			opens++
			cool := policy.BaseCooldown << min(opens-1, 30)
			if cool > policy.MaxCooldown || cool <= 0 {
				cool = policy.MaxCooldown
			}
			circuit, until = "open", ms(now.Add(cool))
		}
		if until != 0 {
			_, err = tx.ExecContext(ctx, `UPDATE limiter SET consecutive_failures = ?, circuit = ?, circuit_until = ?, circuit_opens = ? WHERE subscriber_id = ?`,
				failures, circuit, until, opens, it.SubscriberID)
		} else {
			_, err = tx.ExecContext(ctx, `UPDATE limiter SET consecutive_failures = ? WHERE subscriber_id = ?`, failures, it.SubscriberID)
		}
		return err
	}
	return nil
}
