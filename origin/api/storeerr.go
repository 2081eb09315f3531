package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/edgehook/edgehook/origin/store"
)

// SQLite primary result codes that mean "cannot write now": busy, locked, read-only, I/O error,
// disk full, cannot open. The driver's error exposes them through Code(); matching the method
// instead of the type keeps the driver out of this package.
var unavailableCodes = map[int]bool{5: true, 6: true, 8: true, 10: true, 13: true, 14: true}

// mapStoreError maps the store's errors; nil when err is none of them.
func mapStoreError(err error) *Error {
	var coded interface{ Code() int }
	switch {
	case errors.Is(err, store.ErrQueueFull):
		retry := defaultQueueFullRetry
		if qf := (*store.QueueFullError)(nil); errors.As(err, &qf) && qf.RetryAfter > 0 {
			retry = qf.RetryAfter
		}
		return &Error{Status: http.StatusTooManyRequests, Code: CodeQueueFull, RetryAfter: retry,
			Message: "the delivery queue is full; retry later"}
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, "", "%v", err)
	case errors.Is(err, store.ErrConflict):
		return errorf(http.StatusConflict, CodeConflict, "", "%v", err)
	case errors.Is(err, store.ErrInvalidState):
		return errorf(http.StatusConflict, CodeInvalidState, "", "%v", err)
	case errors.Is(err, store.ErrClosed), errors.Is(err, context.DeadlineExceeded),
		errors.As(err, &coded) && unavailableCodes[coded.Code()&0xff]:
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: defaultUnavailableRetry,
			Message: "the database cannot be written right now; retry later", Err: err}
	}
	return nil
}
