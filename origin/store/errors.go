package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// Conditions callers branch on with errors.Is.
var (
	// ErrNotFound: no subscriber, delivery or event with that id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the id exists with different content (an event id re-emitted with another body
	// or type, a subscriber id taken).
	ErrConflict = errors.New("conflict")
	// ErrQueueFull: the global backlog cap is reached; see *QueueFullError for the retry delay.
	ErrQueueFull = errors.New("queue full")
	// ErrInvalidState: the operation does not apply to the object's current state (retrying a
	// delivered delivery, resuming an active subscriber is fine and not an error).
	ErrInvalidState = errors.New("invalid state")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
)

// SQLite primary result codes that callers branch on, as ResultCode returns them.
const (
	CodeBusy     = 5  // SQLITE_BUSY: another connection held the lock past the busy timeout
	CodeLocked   = 6  // SQLITE_LOCKED
	CodeReadOnly = 8  // SQLITE_READONLY: a write to a database this process may only read
	CodeIOErr    = 10 // SQLITE_IOERR
	CodeFull     = 13 // SQLITE_FULL: the disk is full
	CodeCantOpen = 14 // SQLITE_CANTOPEN
)

// ResultCode returns the SQLite primary result code that err carries, or 0 if it carries none.
// The driver's error exposes the extended code through Code(), whose low byte is the primary one;
// matching the method instead of the type keeps the driver out of the callers.
func ResultCode(err error) int {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		return coded.Code() & 0xff
	}
	return 0
}

// QueueFullError is returned by Emit when the global backlog cap is reached, and by RetryDelivery
// and ReplayDead when the deliveries they would queue do not fit under it. It wraps ErrQueueFull.
type QueueFullError struct {
	Depth int64 // deliveries pending or in flight
	Cap   int64 // the configured global cap
	// Queueing is how many deliveries a refused retry or replay would have queued (0 for an emit):
	// a replay can be refused well below the cap, and can need a narrower range to fit at all.
	Queueing   int64
	RetryAfter time.Duration // a suggested delay before trying again
}

func (e *QueueFullError) Error() string {
	if e.Queueing > 0 {
		return fmt.Sprintf("queue full: %d deliveries pending or in flight, cap %d, cannot take %d more; retry in %s",
			e.Depth, e.Cap, e.Queueing, e.RetryAfter)
	}
	return fmt.Sprintf("queue full: %d deliveries pending, cap %d; retry in %s", e.Depth, e.Cap, e.RetryAfter)
}

// Unwrap makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Unwrap() error { return ErrQueueFull }

// FieldError is the validation error type: it names the field at fault (for EmitBatch,
// "events[3].type"). It is the shared contract's type so the API maps every validation error alike.
type FieldError = wire.FieldError

func fieldErr(field string, err error) error { return &FieldError{Field: field, Err: err} }

func fieldErrf(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}
