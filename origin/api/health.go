package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// healthz answers while the process serves HTTP.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 only while the database can be written, and 503 with Retry-After
// otherwise, whatever the error: a probe is documented to answer one of the two.
func (s *Server) readyz(c echo.Context) error {
	if err := s.store.Ping(c.Request().Context()); err != nil {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, RetryAfter: defaultUnavailableRetry,
			Message: "the database cannot be written", Err: err}
	}
	return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
}

// stats handles GET /v1/stats.
func (s *Server) stats(c echo.Context) error {
	st, err := s.store.Stats(c.Request().Context(), s.store.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewStats(&st))
}
