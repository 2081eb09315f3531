package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/labstack/echo/v4"
)

// deliveryStatuses are the values ?status= accepts.
var deliveryStatuses = []store.Status{store.StatusPending, store.StatusLeased, store.StatusDelivered,
	store.StatusDead, store.StatusSuperseded, store.StatusHeld}

// ParseStatus validates a delivery status; empty means any.
func ParseStatus(s string) (store.Status, error) {
	for _, st := range deliveryStatuses {
		if string(st) == s || s == "" {
			return store.Status(s), nil
		}
	}
	return "", fmt.Errorf("%q is not one of pending, leased, delivered, dead, superseded, held", s)
}

// parseTimeRange reads the optional bounds of a range [from, to) (ParseTimeBound, CheckTimeRange);
// an error is a 422 naming the bound at fault, from for a range no time is in.
func parseTimeRange(from, to string) (f, t time.Time, err error) {
	if f, err = ParseTimeBound(from); err != nil {
		return f, t, invalid("from", err)
	}
	if t, err = ParseTimeBound(to); err != nil {
		return f, t, invalid("to", err)
	}
	if err = CheckTimeRange("from", "to", f, t); err != nil {
		return f, t, invalid("from", err)
	}
	return f, t, nil
}

// ParseTimeBound reads an optional bound of a time range, in RFC 3339; empty is the zero time, no
// bound. One before 1970 is an error: nothing is stored before, and year 1, the zero time, would
// read as no bound.
func ParseTimeBound(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2006-01-02T15:04:05Z)", s)
	}
	if !t.After(time.Unix(0, 0)) {
		return time.Time{}, fmt.Errorf("%q is not after 1970-01-01T00:00:00Z", s)
	}
	return t, nil
}

// CheckTimeRange refuses a range [from, to) that no time is in, which would match nothing
// without saying why (the store's replay refuses it too); a zero bound is open. The error names
// both bounds, as fromName and toName (the API's from, the CLI's --from), with their values.
func CheckTimeRange(fromName, toName string, from, to time.Time) error {
	if !from.IsZero() && !to.IsZero() && !to.After(from) {
		return fmt.Errorf("%s (%s) must be before %s (%s)", fromName, from.Format(time.RFC3339Nano), toName, to.Format(time.RFC3339Nano))
	}
	return nil
}

// ParseOverlap reads a rotation overlap window ("0s" ends the old secret at once); empty means
// DefaultOverlap.
func ParseOverlap(s string) (time.Duration, error) {
	if s == "" {
		return DefaultOverlap, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > store.MaxRotationOverlap {
		return 0, fmt.Errorf("%q is not a duration from 0s to %s", s, store.MaxRotationOverlap)
	}
	return d, nil
}

// listDeliveries handles GET /v1/deliveries?status=&subscriber=&event=&from=&to=&cursor=&limit=.
func (s *Server) listDeliveries(c echo.Context) error {
	q := c.QueryParams() // checkQuery has refused unknown and repeated ones
	f := store.DeliveryFilter{SubscriberID: q.Get("subscriber"), EventID: q.Get("event"), Cursor: q.Get("cursor")}
	var err error
	if f.Status, err = ParseStatus(q.Get("status")); err != nil {
		return invalid("status", err)
	}
	if f.From, f.To, err = parseTimeRange(q.Get("from"), q.Get("to")); err != nil {
		return err
	}
	if l := q.Get("limit"); l != "" {
		if f.Limit, err = strconv.Atoi(l); err != nil || f.Limit < 1 || f.Limit > store.MaxPageSize {
			return invalid("limit", fmt.Errorf("%q is not a number from 1 to %d", l, store.MaxPageSize))
		}
	}
	page, err := s.store.ListDeliveries(c.Request().Context(), f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewDeliveryPage(&page))
}

func (s *Server) getDelivery(c echo.Context) error {
	d, err := s.store.GetDelivery(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewDelivery(d))
}

func (s *Server) retryDelivery(c echo.Context) error {
	d, err := s.store.RetryDelivery(c.Request().Context(), c.Param("id"), s.store.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewDelivery(d))
}
