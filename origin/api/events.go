package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/labstack/echo/v4"
)

// emit handles POST /v1/events.
func (s *Server) emit(c echo.Context) error {
	var req EventRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	in, err := s.eventInput(&req, "")
	if err != nil {
		return err
	}
	res, err := s.store.Emit(c.Request().Context(), in)
	if err != nil {
		return dataField(err)
	}
	out := NewEmitResult(res)
	if b, ok := emitResultJSON(out); ok && c.Request().URL.RawQuery == "" { // a query may ask ?pretty
		return c.JSONBlob(http.StatusAccepted, b)
	}
	return c.JSON(http.StatusAccepted, out)
}

// emitResultJSON writes r as c.JSON would, without reflection: the answer to every single emit.
// It declines (false) an id holding a byte encoding/json would escape; event ids never do.
func emitResultJSON(r EmitResult) ([]byte, bool) {
	for i := 0; i < len(r.ID); i++ {
		if c := r.ID[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return nil, false
		}
	}
	b := make([]byte, 0, 64+len(r.ID))
	b = append(b, `{"id":"`...)
	b = append(b, r.ID...)
	b = append(b, `","deliveries":`...)
	b = strconv.AppendInt(b, int64(r.Deliveries), 10)
	if r.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	if r.Superseded != 0 {
		b = append(b, `,"superseded":`...)
		b = strconv.AppendInt(b, int64(r.Superseded), 10)
	}
	return append(b, "}\n"...), true
}

// emitBatch handles POST /v1/events/batch: every event or none is written.
func (s *Server) emitBatch(c echo.Context) error {
	var req BatchRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	switch n := len(req.Events); {
	case req.Events == nil:
		return invalid("events", errRequired)
	case n == 0:
		return invalid("events", errors.New("is empty: send at least one event"))
	case n > MaxBatch:
		return invalid("events", fmt.Errorf("has %d events, the maximum is %d", n, MaxBatch))
	}
	ins := make([]store.EmitInput, len(req.Events))
	for i := range req.Events {
		in, err := s.eventInput(&req.Events[i], fmt.Sprintf("events[%d].", i))
		if err != nil {
			return err
		}
		ins[i] = in
	}
	res, err := s.store.EmitBatch(c.Request().Context(), ins)
	if err != nil {
		return dataField(err)
	}
	out := BatchResult{Results: make([]EmitResult, len(res))}
	for i, r := range res {
		out.Results[i] = NewEmitResult(r)
	}
	return c.JSON(http.StatusAccepted, out)
}

// eventInput converts an event of a request for the store, refusing data over the body limit: the
// limit is the data's, as for `edgehook emit`, the request's read leaving room for the JSON around it.
func (s *Server) eventInput(r *EventRequest, field string) (store.EmitInput, error) {
	if int64(len(r.Data)) > s.limits.body {
		return store.EmitInput{}, tooLarge(field+"data", s.limits.body)
	}
	return r.input(field)
}

// getEvent handles GET /v1/events/{id}: an event with its data, while retention keeps it.
func (s *Server) getEvent(c echo.Context) error {
	ev, err := s.store.GetEvent(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewEvent(ev))
}

// dataField names the store's "body" field (the event's bytes) as the request calls it: "data".
func dataField(err error) error {
	var fe *wire.FieldError
	if errors.As(err, &fe) {
		if prefix, ok := strings.CutSuffix(fe.Field, "body"); ok {
			return &wire.FieldError{Field: prefix + "data", Err: fe.Err}
		}
	}
	return err
}
