package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// DefaultOverlap is how long the previous secret stays valid after a rotation when the request
// does not say: a day lets every receiver pick up the new secret.
const DefaultOverlap = 24 * time.Hour

func (s *Server) createSubscriber(c echo.Context) error {
	var req SubscriberRequest
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	if req.emptyID {
		return invalid("id", errEmptyID)
	}
	sub, err := s.store.CreateSubscriber(c.Request().Context(), req.Input())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, NewSubscriberWithSecret(sub))
}

func (s *Server) listSubscribers(c echo.Context) error {
	subs, err := s.store.ListSubscribers(c.Request().Context())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewSubscriberList(subs))
}

func (s *Server) getSubscriber(c echo.Context) error {
	sub, err := s.store.GetSubscriber(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewSubscriber(sub))
}

func (s *Server) updateSubscriber(c echo.Context) error {
	var req SubscriberUpdate
	if err := decodeJSON(c, &req); err != nil {
		return err
	}
	patch, err := req.Patch()
	if err != nil {
		return err
	}
	sub, err := s.store.UpdateSubscriber(c.Request().Context(), c.Param("id"), patch)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewSubscriber(sub))
}

func (s *Server) deleteSubscriber(c echo.Context) error {
	if err := s.store.DeleteSubscriber(c.Request().Context(), c.Param("id")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// pauseSubscriber handles POST /v1/subscribers/{id}/pause with an optional body.
func (s *Server) pauseSubscriber(c echo.Context) error {
	var req PauseRequest
	if err := decodeOptionalJSON(c, &req); err != nil {
		return err
	}
	reason, err := PauseReason(req.Reason)
	if err != nil {
		return invalid("reason", err)
	}
	sub, err := s.store.PauseSubscriber(c.Request().Context(), c.Param("id"), reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewSubscriber(sub))
}

func (s *Server) resumeSubscriber(c echo.Context) error {
	sub, err := s.store.ResumeSubscriber(c.Request().Context(), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewSubscriber(sub))
}

// rotateSecret handles POST /v1/subscribers/{id}/rotate-secret with an optional body.
func (s *Server) rotateSecret(c echo.Context) error {
	var req RotateRequest
	if err := decodeOptionalJSON(c, &req); err != nil {
		return err
	}
	overlap, err := ParseOverlap(req.Overlap)
	if err != nil {
		return invalid("overlap", err)
	}
	sub, err := s.store.RotateSecret(c.Request().Context(), c.Param("id"), overlap)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewSubscriberWithSecret(sub))
}

// replayDead handles POST /v1/subscribers/{id}/replay.
func (s *Server) replayDead(c echo.Context) error {
	var req ReplayRequest
	if err := decodeOptionalJSON(c, &req); err != nil {
		return err
	}
	from, to, err := parseTimeRange(req.From, req.To)
	if err != nil {
		return err
	}
	r, err := s.store.ReplayDead(c.Request().Context(), c.Param("id"), from, to, s.store.Now())
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, NewReplayResult(r))
}
