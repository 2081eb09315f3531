package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/edgehook/edgehook/origin/store"
)

// SQLite primary result codes that mean "cannot write now".
var unavailableCodes = map[int]bool{store.CodeBusy: true, store.CodeLocked: true, store.CodeReadOnly: true,
	store.CodeIOErr: true, store.CodeFull: true, store.CodeCantOpen: true}

// mapStoreError maps the store's errors; nil when err is none of them.
func mapStoreError(err error) *Error {
	switch {
	case errors.Is(err, store.ErrQueueFull):
		retry, msg := defaultQueueFullRetry, "the delivery queue is full; retry later"
		if qf := (*store.QueueFullError)(nil); errors.As(err, &qf) {
			if qf.RetryAfter > 0 {
				retry = qf.RetryAfter
			}
			if qf.Queueing > 0 { // an operator's retry or replay: how far it is from fitting
				msg = qf.Error()
			}
		}
		return &Error{Status: http.StatusTooManyRequests, Code: CodeQueueFull, RetryAfter: retry, Message: msg}
	case errors.Is(err, store.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, "", "%v", err)
	case errors.Is(err, store.ErrConflict):
		field := "" // an emit's conflict names the event's id: "events[3].id"
		if fe := (*store.FieldError)(nil); errors.As(err, &fe) {
			field, err = fe.Field, fe.Err
		}
		return errorf(http.StatusConflict, CodeConflict, field, "%v", err)
	case errors.Is(err, store.ErrInvalidState):
		return errorf(http.StatusConflict, CodeInvalidState, "", "%v", err)
	case errors.Is(err, store.ErrClosed), errors.Is(err, context.DeadlineExceeded),
		unavailableCodes[store.ResultCode(err)]:
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: defaultUnavailableRetry,
			Message: "the database cannot be written right now; retry later", Err: err}
	}
	return nil
}
