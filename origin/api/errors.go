package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
	"github.com/labstack/echo/v4"
)

// Stable error codes of the API's error body.
const (
	CodeBadRequest       = "bad_request"
	CodeUnauthorized     = "unauthorized"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeConflict         = "conflict"
	CodeInvalidState     = "invalid_state" // a 409: the object's state does not allow the operation
	CodeTooLarge         = "body_too_large"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeInvalid          = "invalid"
	CodeQueueFull        = "queue_full"
	CodeUnavailable      = "unavailable"
	CodeInternal         = "internal"
)

// StatusClientClosed is the status recorded (access log, edgehook_http_requests_total) for a
// request whose client went away before its answer; nothing is sent.
const StatusClientClosed = 499

// Error is the one error type that reaches the HTTP boundary: it carries its status and the JSON
// body {code, message, field}. Handlers return it (or a store error that ToError maps to it), and
// the server's error handler writes it; nothing else writes an error response.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the offending request field (a JSON path, a query parameter or a path
	// parameter), when there is one.
	Field string `json:"field,omitempty"`
	// RetryAfter, when positive, is sent as the Retry-After header (in whole seconds, rounded up).
	RetryAfter time.Duration `json:"-"`
	// Err is the cause, logged for 5xx errors and never sent.
	Err error `json:"-"`
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
	if e.Field != "" {
		msg += " (field " + e.Field + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// errorf builds an *Error with a formatted message.
func errorf(status int, code, field, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// invalid is a 422 naming the field.
func invalid(field string, err error) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Code: CodeInvalid, Field: field, Message: err.Error()}
}

// tooLarge is the 413 for the request body (field "") or an event's data (its field) over limit
// bytes.
func tooLarge(field string, limit int64) *Error {
	return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, field, "%s is over the limit of %d bytes", subjectOf(field), limit)
}

// ToError maps any error to the *Error sent to the client: an *Error as is, echo's routing errors,
// a *wire.FieldError as a 422, and the store's sentinel errors (see mapStoreError); anything else is
// a 500 whose cause is logged but not sent.
func ToError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if e := mapStoreError(err); e != nil {
		return e
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		switch he.Code {
		case http.StatusNotFound:
			return errorf(he.Code, CodeNotFound, "", "no such route")
		case http.StatusMethodNotAllowed:
			return errorf(he.Code, CodeMethodNotAllowed, "", "method not allowed on this route")
		case http.StatusRequestEntityTooLarge:
			return errorf(he.Code, CodeTooLarge, "", "request body is too large")
		}
		return &Error{Status: he.Code, Code: CodeBadRequest, Message: http.StatusText(he.Code), Err: err}
	}
	var fe *wire.FieldError
	if errors.As(err, &fe) {
		return invalid(fe.Field, fe.Err)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge("", mbe.Limit)
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error", Err: err}
}

// errorHandler is the echo HTTPErrorHandler: it writes ToError(err) and logs server-side failures
// with the request id (the cause never carries payloads or secrets: the store does not put them
// in errors).
func (s *Server) errorHandler(err error, c echo.Context) {
	e := ToError(err)
	gone := c.Request().Context().Err() != nil && !c.Response().Committed
	if gone && (errors.Is(err, context.Canceled) || e.Code == CodeUnavailable) {
		// The client went away while the handler waited (for the database's lock, most often): no
		// answer reaches anyone, and the wait is no failure of the server's (an emit whose
		// transaction had begun waits for it, and may then fail on the lock: busy for the client
		// that gave up on it). Recorded as 499, as nginx does, so that an alert on 5xx is not
		// paged by clients' timeouts.
		s.log.Info("client went away before the answer", "request_id", requestID(c), "route", c.Path(), "err", err)
		c.Response().WriteHeader(StatusClientClosed)
		return
	}
	if e.Status >= 500 {
		s.log.Error("request failed", "request_id", requestID(c), "status", e.Status, "code", e.Code, "err", e.Err)
	}
	if c.Response().Committed {
		return
	}
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		c.Response().Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	if err := c.JSON(e.Status, e); err != nil {
		s.log.Warn("writing an error response failed", "request_id", requestID(c), "err", err)
	}
}
