package api

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// assignRequestID takes a well-formed X-Request-Id from the client (so a caller can correlate) or
// makes one, and echoes it in the response. A malformed one is replaced, so logs never carry
// arbitrary client bytes.
func assignRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if id == "" || wire.ValidateID(id) != nil {
			var b [12]byte
			_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
			id = hex.EncodeToString(b[:])
		}
		c.Response().Header()[headerRequestID] = []string{id}
		return next(c)
	}
}

// requestID is the id assignRequestID put in the response header: reading it back there saves
// echo's per-request context map.
func requestID(c echo.Context) string {
	if v := c.Response().Header()[headerRequestID]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// headerRequestID is echo.HeaderXRequestID in canonical form, so the header map is used without
// canonicalising the key on every request.
var headerRequestID = http.CanonicalHeaderKey(echo.HeaderXRequestID)

// httpMetrics are the API's own Prometheus metrics.
type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	// counters caches the child counter of each (method, route, status) seen, and observers the
	// histogram of each route: the label hashing and lookup of WithLabelValues is then paid once
	// per label set, not once per request. Both are bounded: routes, methods and statuses are.
	counters  sync.Map // counterKey → prometheus.Counter
	observers sync.Map // route → prometheus.Observer
}

type counterKey struct {
	method, route string
	status        int
}

func newHTTPMetrics(reg prometheus.Registerer) (*httpMetrics, error) {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edgehook_http_requests_total",
			Help: "API requests by method, route and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edgehook_http_request_duration_seconds",
			Help:    "API request latency by route.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}, []string{"route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe counts one request and records its latency.
func (m *httpMetrics) observe(method, route string, status int, elapsed time.Duration) {
	k := counterKey{method, route, status}
	c, ok := m.counters.Load(k)
	if !ok {
		c, _ = m.counters.LoadOrStore(k, m.requests.WithLabelValues(method, route, strconv.Itoa(status)))
	}
	c.(prometheus.Counter).Inc()
	o, ok := m.observers.Load(route)
	if !ok {
		o, _ = m.observers.LoadOrStore(route, m.duration.WithLabelValues(route))
	}
	o.(prometheus.Observer).Observe(elapsed.Seconds())
}

var knownMethods = map[string]bool{http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true}

// accessLog writes one log line per request (never the body or the Authorization header) and
// counts it. It renders errors itself so the status it records is the one sent. The line is built
// from typed attributes, and only when the logger takes Info, so a quiet logger costs nothing.
func (s *Server) accessLog(m *httpMetrics) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			if err := next(c); err != nil {
				c.Error(err)
			}
			route := c.Path() // the route pattern, so ids do not explode the label set
			if route == "" {
				route = "unmatched"
			}
			status, elapsed := c.Response().Status, time.Since(start)
			method := c.Request().Method
			if !knownMethods[method] {
				method = "other" // clients choose methods: keep the label set bounded
			}
			m.observe(method, route, status, elapsed)
			if h, ctx := s.log.Handler(), c.Request().Context(); h.Enabled(ctx, slog.LevelInfo) {
				// A record without a caller: the line's source would always be this function.
				r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
				r.AddAttrs(slog.String("request_id", requestID(c)), slog.String("method", method), slog.String("route", route),
					slog.Int("status", status), slog.Int64("bytes", c.Response().Size),
					slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000))
				_ = h.Handle(ctx, r) // as slog.Logger does, a failed log write is not the request's error
			}
			return nil
		}
	}
}

// unescapeParams percent-decodes the path parameters. echo takes them from the raw path when
// the request escapes a character Go would not ("/v1/subscribers/team%3Ashop", as
// encodeURIComponent writes the id "team:shop"), and leaves them escaped: such a client found
// no subscriber, and its DELETE answered 404.
func unescapeParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().URL.RawPath == "" { // the parameters come from the decoded path
			return next(c)
		}
		values := c.ParamValues()
		for i, v := range values {
			u, err := url.PathUnescape(v)
			if err != nil {
				return errorf(http.StatusBadRequest, CodeBadRequest, c.ParamNames()[i], "%q is not a valid path segment", v)
			}
			values[i] = u
		}
		c.SetParamValues(values...)
		return next(c)
	}
}

// queryParams lists the query parameters each route reads; "pretty" (indented JSON, which echo
// renders) goes with every route.
var queryParams = map[string][]string{
	"/v1/deliveries": {"status", "subscriber", "event", "from", "to", "cursor", "limit"},
}

// checkQuery refuses a query that does not parse, a parameter the route does not read, and one
// given twice, which would otherwise be ignored without a word: GET /v1/subscribers?state=paused
// answered every subscriber, ?limit=1&limit=5000 used the first, and ?subscriber=a%zz (a bad
// escape, which url.Query drops) listed every subscriber's deliveries.
func checkQuery(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if c.Request().URL.RawQuery == "" {
			return next(c)
		}
		params, err := url.ParseQuery(c.Request().URL.RawQuery)
		if err != nil {
			return errorf(http.StatusBadRequest, CodeBadRequest, "", "the query does not parse: %v", err)
		}
		for name, values := range params {
			if name != "pretty" && !slices.Contains(queryParams[c.Path()], name) {
				return errorf(http.StatusBadRequest, CodeBadRequest, name, "unknown query parameter %q", name)
			}
			if len(values) > 1 {
				return errorf(http.StatusBadRequest, CodeBadRequest, name, "query parameter %q is given %d times", name, len(values))
			}
		}
		return next(c)
	}
}

// limitBody refuses a declared oversize body at once and caps the reader for the rest, so a body
// over the limit is a 413 however it is sent. The limit leaves EnvelopeAllowance for the JSON
// around an event's data, whose own size eventInput checks.
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		limit := s.limits.body
		if c.Path() == "/v1/events/batch" {
			limit = s.limits.batch
		}
		limit += EnvelopeAllowance
		r := c.Request()
		if r.ContentLength > limit {
			return tooLarge("", limit)
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
		return next(c)
	}
}

// tokenSet holds SHA-256 digests of the accepted tokens. Comparing digests in constant time hides
// both the tokens' contents and their lengths.
type tokenSet struct{ digests [][sha256.Size]byte }

func newTokenSet(tokens []string) *tokenSet {
	ts := &tokenSet{}
	for _, t := range tokens {
		ts.digests = append(ts.digests, sha256.Sum256([]byte(t)))
	}
	return ts
}

// match compares against every token, without stopping at the first match.
func (ts *tokenSet) match(token string) bool {
	d := sha256.Sum256([]byte(token))
	ok := 0
	for _, want := range ts.digests {
		ok |= subtle.ConstantTimeCompare(d[:], want[:])
	}
	return ok == 1
}

// publicRoutes answer without a token, so a load balancer or systemd can probe them.
var publicRoutes = map[string]bool{"/healthz": true, "/readyz": true}

// authenticate requires "Authorization: Bearer <token>" when tokens are configured, on every
// route but the probes (unknown routes included, so they reveal nothing to strangers). Without
// tokens (a loopback listener, which the command line enforces) it answers only requests whose
// Host names a loopback address: a web page whose name is re-resolved to 127.0.0.1 (DNS
// rebinding) reaches the listener from a browser with its own name as Host, and could otherwise
// add a subscriber that receives every event.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if publicRoutes[c.Path()] {
			return next(c)
		}
		if len(s.auth.digests) == 0 {
			if !loopbackHost(c.Request().Host) {
				return errorf(http.StatusUnauthorized, CodeUnauthorized, "", "without a token the API answers only requests to a loopback host")
			}
			return next(c)
		}
		scheme, token, _ := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
		if !strings.EqualFold(scheme, "Bearer") || !s.auth.match(strings.TrimSpace(token)) {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="edgehook"`)
			return errorf(http.StatusUnauthorized, CodeUnauthorized, "", "a valid bearer token is required")
		}
		return next(c)
	}
}

// loopbackHost reports whether a request's Host (host or host:port) is a loopback host
// (netguard.Loopback). The empty Host names none.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]") // no port: an IPv6 address keeps its brackets
	}
	return netguard.Loopback(host)
}
