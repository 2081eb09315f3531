// Package api is edgehook's HTTP API: echo routes under /v1, strict JSON in and out, bearer-token
// auth, request ids, access logs and Prometheus metrics. It holds no SQL: every read and write goes
// through the store, and every failure leaves through one error type (Error) mapped in one place.
package api

import (
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Defaults for Options.
const (
	DefaultBodyLimit      = 256 << 10
	DefaultBatchBodyLimit = 8 << 20
	// EnvelopeAllowance is what a request body may hold beyond its limit (BodyLimit or
	// BatchBodyLimit): the JSON around an event's data, so that BodyLimit bounds the data itself,
	// as `edgehook emit` takes it. An envelope's strings are short (an id and a type of 128 bytes,
	// a coalesce key of 200: under 3 KiB with every byte escaped); the rest is room for white space.
	EnvelopeAllowance = 16 << 10
	// MaxBatch is the most events one POST /v1/events/batch may carry.
	MaxBatch = 1000
)

// Options configure a Server. Store and Registry are required.
type Options struct {
	Store Store
	// Tokens are the accepted bearer tokens; empty turns authentication off (only sensible on a
	// loopback address, which the command line enforces).
	Tokens []string
	// BodyLimit bounds an event's data, in either route (413 naming the field), and, with
	// EnvelopeAllowance added, a request body; BatchBodyLimit, with EnvelopeAllowance added,
	// bounds the body of POST /v1/events/batch instead. Zero means the default (for
	// BatchBodyLimit, BodyLimit if larger, so that an event of the largest data goes by batch too).
	BodyLimit      int64
	BatchBodyLimit int64
	Logger         *slog.Logger
	// Registry receives the API's own metrics and is what GET /metrics serves; the caller
	// registers the engine's metrics and the Go and process collectors on it too.
	Registry *prometheus.Registry
	// Wake, when set, is called by each successful request that may have made deliveries due or
	// changed which subscribers are active (creating, changing, pausing, resuming or deleting a
	// subscriber, retrying or replaying deliveries), before its answer is sent, so an engine in
	// the same process acts on it at once instead of at its next poll (serve passes
	// engine.Engine.Wake). Emits need none: the store wakes an engine in its process for them.
	Wake func()
}

// Server is the HTTP API. It is an http.Handler.
type Server struct {
	e      *echo.Echo
	store  Store
	log    *slog.Logger
	auth   *tokenSet
	limits limits
	wake   func()
}

type limits struct{ body, batch int64 }

// MaxBody is the largest request body the server takes: what an http.Server in front of it bounds
// its reads by (httpserve.New).
func (s *Server) MaxBody() int64 { return max(s.limits.body, s.limits.batch) + EnvelopeAllowance }

// New builds the server and its routes.
func New(o Options) (*Server, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BodyLimit <= 0 {
		o.BodyLimit = DefaultBodyLimit
	}
	if o.BatchBodyLimit <= 0 {
		o.BatchBodyLimit = max(DefaultBatchBodyLimit, o.BodyLimit)
	}
	m, err := newHTTPMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	if o.Wake == nil {
		o.Wake = func() {}
	}
	s := &Server{e: echo.New(), store: o.Store, log: o.Logger, auth: newTokenSet(o.Tokens), limits: limits{o.BodyLimit, o.BatchBodyLimit}, wake: o.Wake}
	s.e.HideBanner, s.e.HidePort = true, true
	s.e.HTTPErrorHandler = s.errorHandler
	s.e.Use(assignRequestID, s.accessLog(m), s.authenticate, s.limitBody, unescapeParams)

	// The probes also answer HEAD, which monitors and load balancers often send.
	s.e.GET("/healthz", s.healthz)
	s.e.HEAD("/healthz", s.healthz)
	s.e.GET("/readyz", s.readyz)
	s.e.HEAD("/readyz", s.readyz)
	s.e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(o.Registry, promhttp.HandlerOpts{Registry: o.Registry})))

	// Every /v1 route refuses query parameters it does not read (checkQuery): a route-level
	// middleware, so that an unknown route or method still answers 404 or 405.
	v1 := s.e.Group("/v1")
	v1.POST("/events", s.emit, checkQuery)
	v1.POST("/events/batch", s.emitBatch, checkQuery)
	v1.GET("/events/:id", s.getEvent, checkQuery)
	v1.GET("/stats", s.stats, checkQuery)

	v1.POST("/subscribers", s.createSubscriber, checkQuery, s.wakeEngine)
	v1.GET("/subscribers", s.listSubscribers, checkQuery)
	v1.GET("/subscribers/:id", s.getSubscriber, checkQuery)
	v1.PATCH("/subscribers/:id", s.updateSubscriber, checkQuery, s.wakeEngine)
	v1.DELETE("/subscribers/:id", s.deleteSubscriber, checkQuery, s.wakeEngine)
	v1.POST("/subscribers/:id/pause", s.pauseSubscriber, checkQuery, s.wakeEngine)
	v1.POST("/subscribers/:id/resume", s.resumeSubscriber, checkQuery, s.wakeEngine)
	v1.POST("/subscribers/:id/rotate-secret", s.rotateSecret, checkQuery)
	v1.POST("/subscribers/:id/replay", s.replayDead, checkQuery, s.wakeEngine)

	v1.GET("/deliveries", s.listDeliveries, checkQuery)
	v1.GET("/deliveries/:id", s.getDelivery, checkQuery)
	v1.POST("/deliveries/:id/retry", s.retryDelivery, checkQuery, s.wakeEngine)
	return s, nil
}

// wakeEngine calls Options.Wake when the route answers with a success status (its write has
// committed), just before the answer is sent: a client that has it knows the engine was woken.
func (s *Server) wakeEngine(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Response()
		r.Before(func() {
			if r.Status < http.StatusMultipleChoices {
				s.wake()
			}
		})
		return next(c)
	}
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.ServeHTTP(w, r) }

// Route is one method and path the server answers, as written in docs/openapi.yaml
// ("/v1/subscribers/{id}").
type Route struct{ Method, Path string }

// Routes lists every route the server answers.
func (s *Server) Routes() []Route {
	var out []Route
	for _, r := range s.e.Routes() {
		out = append(out, Route{Method: r.Method, Path: openAPIPath(r.Path)})
	}
	return out
}

// openAPIPath turns echo's ":id" parameters into OpenAPI's "{id}".
func openAPIPath(p string) string {
	b := []byte{}
	for i := 0; i < len(p); i++ {
		if p[i] != ':' {
			b = append(b, p[i])
			continue
		}
		j := i + 1
		for j < len(p) && p[j] != '/' {
			j++
		}
		b = append(b, '{')
		b = append(b, p[i+1:j]...)
		b = append(b, '}')
		i = j - 1
	}
	return string(b)
}
