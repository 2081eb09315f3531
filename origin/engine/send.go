package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/edgehook/edgehook/internal/h1"
	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// senders holds the two shared keep-alive transports. Direct mode's dialer refuses internal
// addresses; the edge transport is separate because the edge URL is the operator's own setting
// and may well be local (the wazero harness). Each sends plain-http requests itself on the
// sender's goroutine (h1.Transport) and https ones through net/http's transport.
//
// Requests go to the transports themselves, not through an http.Client: a transport never follows
// redirects (a receiver answers for itself, and following would let a public URL bounce the
// request to an internal one), and the client's redirect bookkeeping (a copy of every request's
// headers) is then work for nothing. Subscriber URLs carry no credentials (wire.ValidateURL), the
// one other thing a client adds.
type senders struct {
	direct, edge *h1.Transport
}

func newSenders(cfg *Config) *senders {
	return &senders{direct: newTransport(netguard.Control(cfg.AllowNetworks), cfg.Workers), edge: newTransport(nil, cfg.Workers)}
}

// newTransport returns a keep-alive transport that keeps at most maxIdle idle connections per
// host and whose dialer runs control (nil: none) on every address it dials.
func newTransport(control func(network, address string, c syscall.RawConn) error, maxIdle int) *h1.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: control}
	return h1.New(&http.Transport{
		Proxy:                  nil, // a proxy would dial for us and bypass the address check
		DialContext:            d.DialContext,
		MaxIdleConnsPerHost:    maxIdle,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ForceAttemptHTTP2:      true,
		MaxResponseHeaderBytes: wire.MaxAnswerHeaderBytes, // as the edge: up to --workers heads in memory at once
	}, d)
}

// edgeHopMargin is how much longer than the subscriber's timeout a request through the edge may
// take: the edge enforces the subscriber's timeout itself, after its KV reads, and its answer
// (forwarded, or upstream_timeout) decides. Cut at the subscriber's timeout, a 200 that came
// within it was recorded as the origin's own timeout whenever the edge's work before the forward
// took longer than the subscriber's slack.
const edgeHopMargin = 10 * time.Second

// Failure classes, the "class" label of the failed counter and the outcome of attempts that got no
// usable answer.
const (
	classHTTP3xx      = "http_3xx"
	classHTTP4xx      = "http_4xx"
	classHTTP5xx      = "http_5xx"
	classThrottled    = "throttled" // 429/503 with a Retry-After
	classGone         = "gone"      // 410
	classTimeout      = "timeout"
	classConnection   = "connection"
	classBlocked      = "blocked_address"
	classEdgeRejected = "edge_rejected"
	classEdgeError    = "edge_error"       // no or unknown outcome header from the edge
	classEdgeDown     = "edge_unreachable" // no connection to the edge
	classConfig       = "misconfigured"    // the request could not be built (no edge URL, no secret)
	classOpenFiles    = "open_files"       // this process could not open a socket: its open-files limit
)

// operatorFault reports whether a failure class is the operator's to fix (the edge, its URL, its
// secret, the host's open-files limit) rather than the subscriber's. Such a failure counts against neither the subscriber's
// circuit nor the delivery's attempts (holdForOperator) and makes a delivery dead only by age: an
// edge that is down for an hour must not dead-letter every delivery it held up.
func operatorFault(class string) bool {
	switch class {
	case classEdgeRejected, classEdgeError, classEdgeDown, classConfig, classOpenFiles:
		return true
	}
	return false
}

// configError marks a request that could not be built: the operator's problem, not the
// subscriber's, so it does not count against the circuit.
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// response is what came back from one send.
type response struct {
	status     int
	retryAfter string
	outcome    string // Edgehook-Outcome, edge mode only
	markFailed string // Edgehook-Mark-Failed, edge mode only
	excerpt    string
	err        error
	latency    time.Duration
	connected  bool // edge mode: a connection to the edge was made (httptrace's GotConn)
}

// deliver sends one claimed delivery and decides its settlement.
func (e *Engine) deliver(ctx context.Context, c store.Claimed) store.Settlement {
	sub := c.Subscriber
	release := store.Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: sub.ID, Result: store.ResultRelease}
	// Before the pacer: a request not made must not take a pacing slot from the sends after it.
	if dead, ok := e.pastMaxAge(c, e.cfg.Now()); ok {
		return dead
	}
	if d := e.pace.reserve(sub, e.cfg.Now()); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return release // stopped before it was sent
		}
	}
	now := e.cfg.Now()
	if dead, ok := e.pastMaxAge(c, now); ok { // the pacer's wait (a second at most) took it there
		return dead
	}
	// A send is cut at 3/4 of its lease as claimed, the pacer's wait included: the last quarter
	// is for its outcome to be written before another claim may take the delivery over. A lease
	// that has no room left is given back unsent.
	budget := e.cfg.LeaseDuration * 3 / 4
	if !c.LeaseExpires.IsZero() {
		budget = c.LeaseExpires.Sub(now) - e.cfg.LeaseDuration/4
	}
	if budget <= 0 {
		return release
	}
	timeout := sub.Timeout()
	if sub.Mode == store.ModeEdge {
		timeout += edgeHopMargin
	}
	sendCtx, cancel := context.WithTimeout(ctx, min(timeout, budget))
	req, err := e.request(sendCtx, c, now)
	var resp response
	if err != nil {
		resp.err = &configError{err}
	} else {
		resp = e.do(req, sub.Mode)
	}
	cancel()
	if ctx.Err() != nil && resp.err != nil {
		return release // cut by a stop: not the subscriber's fault, and not sent as far as we know
	}
	e.m.latency.WithLabelValues(string(sub.Mode)).Observe(resp.latency.Seconds())
	// Retry-After and backoff count from the answer, not from the send: a subscriber that takes
	// 5 s to answer "503, Retry-After: 2" must not be retried at once. The attempt keeps its send
	// time.
	set := e.decide(c, resp, e.cfg.Now())
	if set.Attempt != nil {
		set.Attempt.At = now
	}
	return set
}

// pastMaxAge is c's settlement if it is a retry at or past its max age at now: no attempt after
// the max age, so a failing delivery claimed late (behind a circuit's cool-down, say) dies unsent,
// and counts no attempt. An operator's pause is not late: a resume restarts the age
// (Claimed.AgeFrom). The token its claim took from the subscriber's bucket goes back (Refund).
func (e *Engine) pastMaxAge(c store.Claimed, now time.Time) (store.Settlement, bool) {
	if c.Attempts == 0 || now.Before(e.deadline(c)) {
		return store.Settlement{}, false
	}
	return store.Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID, Refund: true,
		Result: store.ResultDeadUnsent, Reason: store.ReasonMaxAge, Error: "max age reached before the next attempt: not sent"}, true
}

// The subscriber-facing header names in canonical form: set so, they are stored as they are, without
// being canonicalised again on every request.
var (
	headerWebhookID        = http.CanonicalHeaderKey(wire.HeaderWebhookID)
	headerWebhookTimestamp = http.CanonicalHeaderKey(wire.HeaderWebhookTimestamp)
	headerWebhookSignature = http.CanonicalHeaderKey(wire.HeaderWebhookSignature)
)

// contentTypeJSON is every request's Content-Type value (read only).
var contentTypeJSON = []string{"application/json"}

// request builds the signed request for a delivery, sent under ctx.
func (e *Engine) request(ctx context.Context, c store.Claimed, now time.Time) (*http.Request, error) {
	sub := c.Subscriber
	target := sub.URL
	if sub.Mode == store.ModeEdge {
		if e.cfg.EdgeURL == "" {
			return nil, errors.New("subscriber uses edge mode but the engine has no edge URL")
		}
		target = e.cfg.EdgeURL
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(c.Event.Body))
	if err != nil {
		return nil, err
	}
	if sub.Mode != store.ModeEdge {
		// The query as the Worker's fetch writes it for the same URL in edge mode.
		req.URL.RawQuery = wire.RequestQuery(req.URL.RawQuery)
	}
	// The constant values are shared by every request and the others share one array: Set would
	// allocate a slice per value. Nothing writes to a request's header values once it is built.
	h := req.Header
	for k, v := range sub.Headers {
		h.Set(k, v)
	}
	h["Content-Type"], h["User-Agent"] = contentTypeJSON, e.userAgent
	ts := now.Unix()
	vals := make([]string, 0, 3)
	add := func(key, v string) {
		vals = append(vals, v)
		h[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	}
	// The subscriber-facing headers are made here in both modes: the edge forwards them untouched
	// and never holds subscriber secrets.
	add(headerWebhookID, c.Event.ID)
	add(headerWebhookTimestamp, strconv.FormatInt(ts, 10))
	switch sub.Profile {
	case store.ProfileLegacy:
		sec, ok := sub.LegacySecret(now)
		if !ok {
			return nil, errors.New("subscriber has no valid secret")
		}
		tsHeader, sigHeader := signature.LegacyHeaders(sub.LegacyPrefix)
		h.Set(tsHeader, strconv.FormatInt(ts, 10))
		h.Set(sigHeader, signature.SignLegacy(sec, ts, c.Event.Body))
	default:
		secrets := sub.ActiveSecrets(now)
		if len(secrets) == 0 {
			return nil, errors.New("subscriber has no valid secret")
		}
		add(headerWebhookSignature, signature.Sign(secrets, c.Event.ID, ts, c.Event.Body))
	}
	if sub.Mode == store.ModeEdge {
		signature.SetHopHeaders(h, e.cfg.EdgeSecrets, &signature.Hop{
			DeliveryID: c.DeliveryID, SubscriberID: sub.ID, EventType: c.Event.Type, CoalesceKey: c.CoalesceKey,
			Attempt: c.Attempts + 1, Timestamp: ts,
		}, c.Event.Body)
	}
	return req, nil
}

// do sends req and reads at most ExcerptBytes of the answer.
func (e *Engine) do(req *http.Request, mode store.Mode) response {
	t := e.http.direct
	var connected *atomic.Bool // edge mode only: nothing to allocate for a direct send
	if mode == store.ModeEdge {
		t, connected = e.http.edge, new(atomic.Bool)
		// Whether the request reached the edge at all: a failure before it did (DNS, refused, a
		// dial or TLS handshake that timed out) is the edge's, whatever error the transport gives.
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(httptrace.GotConnInfo) { connected.Store(true) }}))
	}
	start := time.Now()
	resp, err := t.RoundTrip(req)
	if err != nil {
		// Worded as http.Client words it: `Post "<url>": <cause>`.
		return response{err: &url.Error{Op: "Post", URL: req.URL.String(), Err: err}, latency: time.Since(start),
			connected: connected != nil && connected.Load()}
	}
	defer resp.Body.Close()
	var excerpt []byte
	if resp.ContentLength != 0 { // most acknowledgements have no body: no buffer for one
		excerpt, err = io.ReadAll(io.LimitReader(resp.Body, int64(e.cfg.ExcerptBytes)))
		// Drain a little more so the connection can be reused; a huge body just closes it.
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	}
	r := response{status: resp.StatusCode, retryAfter: resp.Header.Get(wire.HeaderRetryAfter),
		outcome: resp.Header.Get(wire.HeaderOutcome), excerpt: string(excerpt), latency: time.Since(start)}
	if mode == store.ModeEdge {
		r.markFailed = resp.Header.Get(wire.HeaderMarkFailed)
	}
	if err != nil && r.status/100 != 2 {
		r.excerpt += " [body read error: " + err.Error() + "]"
	}
	return r
}

// decide turns a response into a settlement: the outcome policy of the engine.
func (e *Engine) decide(c store.Claimed, r response, now time.Time) store.Settlement {
	sub := c.Subscriber
	set := store.Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: sub.ID, Status: r.status, Sent: sub}
	attempt := &store.Attempt{At: now, Status: r.status, LatencyMS: r.latency.Milliseconds(), Excerpt: r.excerpt}
	set.Attempt = attempt
	fail := func(class, msg string, circuit bool) store.Settlement {
		attempt.Outcome, attempt.Error = class, msg
		set.Error = msg
		if circuit {
			set.Circuit = store.CircuitFailure
		}
		e.m.failed.WithLabelValues(sub.ID, class).Inc()
		if operatorFault(class) {
			return e.holdForOperator(c, set, now)
		}
		return e.retry(c, set, now.Add(e.backoff(c.Attempts)), now)
	}
	if r.err != nil {
		class := classConnection
		var ne net.Error
		switch {
		case errors.As(r.err, new(*configError)):
			class = classConfig
		case errors.Is(r.err, netguard.ErrBlocked):
			class = classBlocked
		case errors.Is(r.err, context.DeadlineExceeded), errors.As(r.err, &ne) && ne.Timeout():
			class = classTimeout
		case errors.Is(r.err, syscall.EMFILE), errors.Is(r.err, syscall.ENFILE), lookupOutOfFiles(r.err):
			// Shared hosts cap open files low: the socket was never made, whatever the subscriber.
			e.log.Error("OUT OF FILE DESCRIPTORS: raise the open-files limit (ulimit -n) or lower --workers",
				"subscriber", sub.ID, "delivery", c.DeliveryID, "error", r.err)
			return fail(classOpenFiles, r.err.Error(), false)
		}
		// Through the edge, a connection to it that was never made, or that failed, is the edge's:
		// it answers upstream_unreachable for the subscriber's. A timeout once connected is not:
		// the subscriber may be the slow one.
		if sub.Mode == store.ModeEdge && class != classConfig && (!r.connected || class == classConnection) {
			class = classEdgeDown
			e.log.Error("EDGE UNREACHABLE: check --edge-url and the edge", "subscriber", sub.ID, "delivery", c.DeliveryID, "error", r.err)
		}
		return fail(class, r.err.Error(), class != classBlocked && !operatorFault(class))
	}
	if sub.Mode == store.ModeEdge {
		o, err := wire.ParseOutcome(r.outcome)
		if err != nil {
			return fail(classEdgeError, fmt.Sprintf("edge answered %d without a valid %s (%q)", r.status, wire.HeaderOutcome, r.outcome), false)
		}
		attempt.Outcome = string(o)
		if reason, ok := o.IsRejected(); ok {
			if reason == wire.ReasonBlockedAddress {
				// The local edge refused the subscriber's address as a direct send would have:
				// the same failure, which does not count against the subscriber's circuit.
				return fail(classBlocked, "edge: "+netguard.ErrBlocked.Error(), false)
			}
			e.log.Error("EDGE REJECTED A DELIVERY: "+rejectionHint(reason),
				"reason", reason, "subscriber", sub.ID, "delivery", c.DeliveryID, "status", r.status)
			e.m.edgeRejections.WithLabelValues(reasonLabel(reason)).Inc()
			return fail(classEdgeRejected, "edge rejected: "+reason, false)
		}
		if r.markFailed != "" {
			e.log.Warn("the edge could not write its marks (KV writes failing, e.g. the daily quota): a retry of this delivery is forwarded again, its key is not coalesced",
				"marks", r.markFailed, "subscriber", sub.ID, "delivery", c.DeliveryID)
			for m := range strings.SplitSeq(r.markFailed, ",") {
				e.m.markFailures.WithLabelValues(markLabel(strings.TrimSpace(m))).Inc()
			}
		}
		switch o {
		case wire.OutcomeDuplicate:
			set.Result = store.ResultDelivered
			return set
		case wire.OutcomeCoalesced:
			e.m.coalesced.WithLabelValues(sub.ID).Inc()
			return e.coalesced(c, set, r.retryAfter, now)
		case wire.OutcomeUpstreamTimeout:
			return fail(classTimeout, "edge: subscriber timed out", true)
		case wire.OutcomeUpstreamUnreachable:
			return fail(classConnection, "edge: subscriber unreachable", true)
		}
	}
	switch s := r.status; {
	case s/100 == 2:
		if attempt.Outcome == "" {
			attempt.Outcome = "delivered"
		}
		set.Circuit = store.CircuitSuccess
		set.Result = store.ResultDelivered
		return set
	case s == http.StatusGone:
		msg := "subscriber answered 410 Gone"
		attempt.Outcome, attempt.Error, set.Error = classGone, msg, msg
		set.Disable = msg
		e.m.failed.WithLabelValues(sub.ID, classGone).Inc()
		// A failure as any other, and final at the last attempt (or the max age) whether the
		// settle disables the subscriber or finds it changed since this send (Settlement.Sent).
		// Otherwise held with its subscriber once disabled, or due after the backoff.
		return e.retry(c, set, now.Add(e.backoff(c.Attempts)), now)
	case s == http.StatusTooManyRequests || s == http.StatusServiceUnavailable:
		// A wait of 0 (a date already past by this clock, or "0") is no wait: taken as one, every
		// attempt was spent at once on a subscriber that asked to be left alone. It backs off as
		// for any failure.
		if d, err := wire.ParseRetryAfter(r.retryAfter, now); err == nil && d > 0 {
			d = min(d, e.cfg.RetryAfterCap)
			msg := fmt.Sprintf("%d with Retry-After %q", s, r.retryAfter)
			attempt.Outcome, attempt.Error, set.Error = classThrottled, msg, msg
			set.PauseUntil = now.Add(d)
			e.m.failed.WithLabelValues(sub.ID, classThrottled).Inc()
			// The subscriber is paused for its Retry-After; the delivery waits for the backoff
			// this attempt earns, as any failure's, too: retried at each "Retry-After: 1", it
			// spent every attempt in seconds on a subscriber that only asked it to slow down.
			return e.retry(c, set, now.Add(max(d, e.backoff(c.Attempts))), now)
		}
	}
	class := classHTTP5xx
	switch {
	case r.status/100 == 3:
		class = classHTTP3xx
	case r.status/100 == 4:
		class = classHTTP4xx
	}
	return fail(class, fmt.Sprintf("subscriber answered %d", r.status), true)
}

// retry schedules another attempt at `at`, unless the delivery has used its attempts or its age
// (beforeMaxAge: a Retry-After, which pauses the subscriber, is a wait it asked for).
func (e *Engine) retry(c store.Claimed, set store.Settlement, at, now time.Time) store.Settlement {
	next, ok := e.beforeMaxAge(c, at, now, set.PauseUntil)
	switch {
	case !ok:
		set.Result, set.Reason = store.ResultDead, store.ReasonMaxAge
	case c.Attempts+1 >= e.cfg.MaxAttempts:
		set.Result, set.Reason = store.ResultDead, store.ReasonMaxAttempts
	default:
		set.Result, set.NextAttemptAt = store.ResultRetry, next
	}
	return set
}

// coalesced reschedules a delivery the edge held back, its coalesce key forwarded less than the
// record's window ago, without counting an attempt: at the edge's Retry-After (the rest of the
// window, capped), else after a first backoff, and by the max age (beforeMaxAge). A delivery the
// edge holds past its max age dies unsent now: sent at the max age, it would be held again.
func (e *Engine) coalesced(c store.Claimed, set store.Settlement, retryAfter string, now time.Time) store.Settlement {
	at, asked := now.Add(e.backoff(0)), time.Time{}
	if d, err := wire.ParseRetryAfter(retryAfter, now); err == nil {
		at = now.Add(min(d, e.cfg.RetryAfterCap))
		asked = at
	}
	return e.reschedule(c, set, at, now, asked, "the edge coalesced it until past its max age: not sent")
}

// reschedule puts c back without counting an attempt, its subscriber not tried, due at `at` by
// the max age (beforeMaxAge). Past that it is dead unsent, with why as its last error.
func (e *Engine) reschedule(c store.Claimed, set store.Settlement, at, now, asked time.Time, why string) store.Settlement {
	next, ok := e.beforeMaxAge(c, at, now, asked)
	if !ok {
		set.Result, set.Reason, set.Error = store.ResultDeadUnsent, store.ReasonMaxAge, why
		return set
	}
	set.Result, set.NextAttemptAt = store.ResultReschedule, next
	return set
}

// beforeMaxAge is when c's next attempt, wanted at `at`, comes: no attempt comes after the max
// age, so a later one is brought forward to the last call, the delivery's last. There is none
// (false: the delivery is dead) once the last call has come, or if a wait the other side asked
// for (asked, the end of its Retry-After; zero: none) ends past it.
func (e *Engine) beforeMaxAge(c store.Claimed, at, now, asked time.Time) (time.Time, bool) {
	last := e.deadline(c).Add(-e.lastCallLead())
	if !now.Before(last) || asked.After(last) {
		return time.Time{}, false
	}
	return minTime(at, last), true
}

// deadline is when c reaches --max-age: no attempt comes after it.
func (e *Engine) deadline(c store.Claimed) time.Time { return c.AgeFrom.Add(e.cfg.MaxAge) }

// lastCallLead is how long before the max age a delivery's last attempt is due: a claim comes at
// or after the due time (the poll, a busy engine, the gap between cron drains), and one at the
// max age itself would find the delivery too old to send. A minute, or a sixtieth of a shorter
// max age.
func (e *Engine) lastCallLead() time.Duration { return min(time.Minute, e.cfg.MaxAge/60) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// operatorHoldCap bounds the wait of a delivery held up by the operator's fault (holdForOperator)
// below the backoff cap of subscriber failures (hours): once the edge is fixed, what it held up
// flows again within this, as nothing else brings it forward.
const operatorHoldCap = time.Hour

// holdForOperator reschedules a delivery that failed for the operator's reason (operatorFault)
// without counting the attempt: its subscriber was not tried, and must still have all its attempts
// once the edge is fixed. Without a count to back off by, the wait is full jitter over as long as
// the delivery has waited so far (at least the backoff base, at most operatorHoldCap and the
// backoff cap), so a long outage is tried ever more rarely. It is dead only by age, and then too
// without an attempt counted.
func (e *Engine) holdForOperator(c store.Claimed, set store.Settlement, now time.Time) store.Settlement {
	at := now.Add(rand.N(min(e.cfg.BackoffCap, operatorHoldCap, max(e.cfg.BackoffBase, now.Sub(c.AgeFrom))) + 1))
	return e.reschedule(c, set, at, now, time.Time{}, set.Error)
}

// backoff is full jitter: random(0, BackoffCeiling(attempts)).
func (e *Engine) backoff(attempts int) time.Duration {
	return rand.N(e.cfg.BackoffCeiling(attempts) + 1)
}

// lookupOutOfFiles tells whether err is a DNS lookup that could not open its socket: Go's resolver
// keeps only the text of that error, not its errno.
func lookupOutOfFiles(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && (strings.Contains(de.Err, syscall.EMFILE.Error()) || strings.Contains(de.Err, syscall.ENFILE.Error()))
}

// rejectionHint says what to check after the edge refused a hop for reason (PROTOCOL.md §5).
func rejectionHint(reason string) string {
	switch reason {
	case wire.ReasonStaleTimestamp:
		return "check the clocks of the origin and the edge (NTP): the hop's timestamp is outside the edge's tolerance"
	case wire.ReasonBadSignature, wire.ReasonMissingHeader, wire.ReasonMalformedHeader:
		return "check that --edge-secret matches the edge's EDGE_SECRET, and that nothing between them rewrites the request"
	case wire.ReasonUnknownSubscriber, wire.ReasonBadRecord:
		return "check the subscriber's KV record (edgehook edge export-kv, then wrangler kv bulk put)"
	case wire.ReasonBodyTooLarge:
		return "the body is over the edge's MAX_BODY_BYTES: raise it, or lower --body-limit"
	case wire.ReasonKVUnavailable:
		return "the edge could not read KV; it is retried"
	}
	return "check the edge's configuration and logs"
}

// markLabel bounds the mark label to the marks the protocol names: the edge's answer is not
// trusted to keep the label set small.
func markLabel(m string) string {
	if m == wire.MarkDedup || m == wire.MarkCoalesce {
		return m
	}
	return "other"
}

// reasonLabel bounds the reason label to the reasons the protocol names, as markLabel the marks;
// the log line of the rejection keeps the reason as the edge sent it.
func reasonLabel(reason string) string {
	if wire.KnownReason(reason) {
		return reason
	}
	return "other"
}
