package relay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// Relay handles requests from the origin. It keeps no per-request state, so one Relay serves
// concurrent requests.
type Relay struct {
	cfg     Config
	deps    Deps
	records recordCache
}

// New returns a Relay, or an error naming the first wrong setting or missing dependency.
func New(cfg Config, deps Deps) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	switch {
	case deps.Subscribers == nil:
		return nil, errors.New("relay: Deps.Subscribers is nil")
	case deps.Dedup == nil:
		return nil, errors.New("relay: Deps.Dedup is nil")
	case deps.Upstream == nil:
		return nil, errors.New("relay: Deps.Upstream is nil")
	case deps.Clock == nil:
		return nil, errors.New("relay: Deps.Clock is nil")
	}
	return &Relay{cfg: cfg, deps: deps}, nil
}

// MaxBody returns the configured body limit, for runtimes that read the body (see ReadBody).
func (r *Relay) MaxBody() int64 { return r.cfg.MaxBody }

// Handle answers one request from the origin, in this order: method (405), body size (413), hop
// headers (400), hop signature and timestamp (401), subscriber record (404, or 500 for a record
// that does not decode), dedup (200 duplicate), coalescing (429 coalesced), then the forward to
// the subscriber, whose status, Retry-After and body excerpt are relayed (504 on its timeout, 502
// when it cannot be reached or answers a status outside 200–599). Marks are written only after a
// 2xx.
func (r *Relay) Handle(ctx context.Context, req *Request) *Response {
	return r.HandleWith(ctx, req, new(Scratch))
}

// HandleWith is Handle working in s, which a runtime that handles one request at a time (the WASI
// module) reuses for every request: Handle allocates a Scratch per request, and in the WASM builds
// each allocation costs (BenchmarkGuestCalls). The answer, and the keys, headers and values
// HandleWith passes to the dependencies, live in s until its next use: the caller must be done
// with the answer by then, and the dependencies copy what they keep (see KV).
func (r *Relay) HandleWith(ctx context.Context, req *Request, s *Scratch) *Response {
	s.text = s.buf[:0]
	// In any case, as in the Worker, where the Fetch API has normalized "post" to "POST" already.
	if req.Method != "POST" && !strings.EqualFold(req.Method, "POST") {
		resp := Reject(405, wire.ReasonMethod, "method %s is not allowed; the edge accepts only POST", req.Method)
		resp.Header.Set("Allow", "POST")
		return resp
	}
	if n := int64(len(req.Body)); n > r.cfg.MaxBody {
		return Reject(413, wire.ReasonBodyTooLarge, "body is larger than %s=%d bytes", EnvMaxBody, r.cfg.MaxBody)
	}
	var hop signature.Hop
	text := hopText(req.Header)
	err := text.Parse(&hop)
	if err == nil {
		err = hop.Validate()
	}
	switch {
	case errors.Is(err, signature.ErrMissing):
		return Reject(400, wire.ReasonMissingHeader, "%v", err)
	case err != nil:
		return Reject(400, wire.ReasonMalformedHeader, "%v", err)
	}
	now := r.deps.Clock.Now()
	if err := signature.VerifyValidHop(r.cfg.Secrets, &hop, text.Signature, req.Body, now, r.cfg.Tolerance); err != nil {
		switch {
		case errors.Is(err, signature.ErrTimestamp):
			return Reject(401, wire.ReasonStaleTimestamp, "hop %v", err)
		case errors.Is(err, signature.ErrMalformed): // a negative timestamp, no usable v1 entry
			return Reject(400, wire.ReasonMalformedHeader, "hop %v", err)
		}
		return Reject(401, wire.ReasonBadSignature, "hop signature: %v (is %s the origin's edge secret?)", err, EnvSecret)
	}
	subKey, dedupKey := s.key(subscriberKeyPrefix, hop.SubscriberID), s.key(dedupKeyPrefix, hop.DeliveryID)
	markKey := ""
	reads, n := &s.reads, 2
	reads[0], reads[1] = KVRead{KV: r.deps.Subscribers, Key: subKey}, KVRead{KV: r.deps.Dedup, Key: dedupKey}
	if hop.CoalesceKey != "" { // read now; used only if the record makes this type coalescible
		markKey = wire.CoalesceKey(hop.SubscriberID, hop.CoalesceKey)
		reads[2], n = KVRead{KV: r.deps.Dedup, Key: markKey}, 3
	}
	r.read(s.kvContext(ctx, now), reads[:n])
	rec, resp := r.subscriber(&reads[0])
	if resp != nil {
		return resp
	}
	if d := &reads[1]; d.Err != nil {
		return Reject(503, wire.ReasonKVUnavailable, "read %s: %v", dedupKey, d.Err)
	} else if d.Found {
		return answer(200, wire.OutcomeDuplicate, "delivery %s was already acknowledged by the subscriber", hop.DeliveryID)
	}
	coalesceKey := ""
	if c := rec.Coalesce; c != nil && markKey != "" && c.Applies(hop.EventType) {
		coalesceKey = markKey
		if resp := r.coalesced(&reads[2], c.Window()); resp != nil {
			return resp
		}
	}
	return r.forward(ctx, s, req, &hop, rec, dedupKey, coalesceKey)
}

// Scratch is the memory Relay.HandleWith works in for one request. Its zero value is ready to use.
type Scratch struct {
	reads  [3]KVRead
	up     UpstreamRequest
	resp   Response
	fields [4]Field // the answer's headers
	// header holds the headers forwarded to the subscriber, and text the KV keys and the marks'
	// value, when they fit (they do for usual requests).
	header [16]Field
	text   []byte
	buf    [320]byte
	kv     kvDeadline // the KV calls' context (kvContext)
}

// kvContext returns ctx for KV calls made from now on: with a deadline KVTimeout after now (or
// ctx's, if sooner), and no timer. The KV that can stall, the Worker's, reads the deadline and
// keeps the time itself (its loader fails a call still pending then); the harness's KV is in
// memory. context.WithTimeout's timer cost the relay's WASI build about 25 µs a request (guest
// calls 95 → 386, allocations 0 → 8 in make bench-harness), more than the harness's whole budget.
// The context lives in sc, so it costs no allocation either; Done and Err stay ctx's.
func (sc *Scratch) kvContext(ctx context.Context, now time.Time) context.Context {
	sc.kv = kvDeadline{Context: ctx, at: now.Add(KVTimeout)}
	return &sc.kv
}

// kvDeadline is a context whose deadline is at, or its parent's if sooner (Scratch.kvContext).
type kvDeadline struct {
	context.Context
	at time.Time
}

func (c *kvDeadline) Deadline() (time.Time, bool) {
	if d, ok := c.Context.Deadline(); ok && d.Before(c.at) {
		return d, true
	}
	return c.at, true
}

// key appends prefix and id to sc.text and returns them as one string over that memory.
func (sc *Scratch) key(prefix, id string) string {
	start := len(sc.text)
	sc.text = append(append(sc.text, prefix...), id...)
	return sc.since(start)
}

// decimal appends n in decimal to sc.text and returns it as a string over that memory.
func (sc *Scratch) decimal(n int64) string {
	start := len(sc.text)
	sc.text = strconv.AppendInt(sc.text, n, 10)
	return sc.since(start)
}

// since returns sc.text from start on as a string over the same memory. Nothing writes there
// again before the Scratch's next use (an append past the array's end copies).
func (sc *Scratch) since(start int) string {
	b := sc.text[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// The prefixes of wire's KV keys: the key of an empty id is its prefix.
var (
	subscriberKeyPrefix = wire.SubscriberKey("")
	dedupKeyPrefix      = wire.DedupKey("")
)

// hopText collects the hop headers in one pass over the request's: looking each up would scan the
// headers seven times (~40 calls per request in the WASM builds, BenchmarkGuestCalls). For each
// header it dispatches on the name's length and compares the name in 8-byte words, which compile
// to one load and one comparison each for GOARCH=wasm (see load64), whereas comparing strings is a
// call of memequal and of its byte loop there. TestHopFieldNames pins the names to wire's.
func hopText(h Header) (t signature.HopText) {
	for i := range h {
		k := h[i].Name
		if !isHopName(k) {
			continue
		}
		var f *string
		var name string
		switch len(k) {
		case len(wire.HeaderAttempt):
			f, name = &t.Attempt, hopAttempt
		case len(wire.HeaderHopTimestamp): // and wire.HeaderHopSignature
			f, name = &t.Timestamp, hopTimestamp
			if k[len(hopPrefix)] == hopSignature[len(hopPrefix)] {
				f, name = &t.Signature, hopSignature
			}
		case len(wire.HeaderEventType):
			f, name = &t.EventType, hopEventType
		case len(wire.HeaderDeliveryID):
			f, name = &t.DeliveryID, hopDeliveryID
		case len(wire.HeaderCoalesceKey):
			f, name = &t.CoalesceKey, hopCoalesceKey
		case len(wire.HeaderSubscriberID):
			f, name = &t.SubscriberID, hopSubscriberID
		default:
			continue
		}
		// isHopName compared the first eight bytes; every name is 16 to 24 bytes long, so two
		// words, overlapping for the shorter ones, cover the rest.
		if load64(k[8:]) == load64(name[8:]) && load64(k[len(k)-8:]) == load64(name[len(name)-8:]) {
			*f = h[i].Value
		}
	}
	return t
}

// The hop headers' names, lower-case.
var (
	hopAttempt      = strings.ToLower(wire.HeaderAttempt)
	hopTimestamp    = strings.ToLower(wire.HeaderHopTimestamp)
	hopSignature    = strings.ToLower(wire.HeaderHopSignature)
	hopEventType    = strings.ToLower(wire.HeaderEventType)
	hopDeliveryID   = strings.ToLower(wire.HeaderDeliveryID)
	hopCoalesceKey  = strings.ToLower(wire.HeaderCoalesceKey)
	hopSubscriberID = strings.ToLower(wire.HeaderSubscriberID)
)

// read performs the reads through Deps.ReadAll, or one after another.
func (r *Relay) read(ctx context.Context, reads []KVRead) {
	if r.deps.ReadAll != nil {
		r.deps.ReadAll(ctx, reads)
		return
	}
	for i := range reads {
		reads[i].Value, reads[i].Found, reads[i].Err = reads[i].KV.Get(ctx, reads[i].Key)
	}
}

// subscriber decodes the subscriber's record, or returns the rejection.
func (r *Relay) subscriber(read *KVRead) (*wire.SubscriberRecord, *Response) {
	if read.Err != nil {
		return nil, Reject(503, wire.ReasonKVUnavailable, "read %s: %v", read.Key, read.Err)
	}
	if !read.Found {
		return nil, Reject(404, wire.ReasonUnknownSubscriber, "no KV record %s", read.Key)
	}
	rec, err := r.records.decode(read.Value)
	if err != nil {
		// An operator error: the record was written by hand or by another version.
		return nil, Reject(500, wire.ReasonBadRecord, "KV record %s does not decode: %v", read.Key, err)
	}
	if !rec.Active {
		return nil, Reject(404, wire.ReasonUnknownSubscriber, "KV record %s is inactive", read.Key)
	}
	return rec, nil
}

// coalesced answers 429 coalesced when the mark says the key was forwarded less than window ago.
func (r *Relay) coalesced(mark *KVRead, window time.Duration) *Response {
	if mark.Err != nil {
		return Reject(503, wire.ReasonKVUnavailable, "read %s: %v", mark.Key, mark.Err)
	}
	if !mark.Found {
		return nil
	}
	ms, err := strconv.ParseInt(mark.Value, 10, 64)
	if err != nil {
		return nil // a mark this relay did not write: forward rather than hold the key back forever
	}
	// At most a window: a mark dated ahead of this clock (another's, or written by hand) must not
	// hold the key back, and the origin's delivery with it, for longer.
	left := min(time.UnixMilli(ms).Add(window).Sub(r.deps.Clock.Now()), window)
	if left <= 0 {
		return nil
	}
	secs := int64((left + time.Second - 1) / time.Second)
	resp := answer(429, wire.OutcomeCoalesced, "%s was forwarded less than %s ago; retry in %ds", mark.Key, window, secs)
	resp.Header = append(resp.Header, Field{keyRetryAfter, strconv.FormatInt(secs, 10)})
	return resp
}

// forward sends the delivery to the subscriber and relays its answer.
func (r *Relay) forward(ctx context.Context, a *Scratch, req *Request, hop *signature.Hop, rec *wire.SubscriberRecord, dedupKey, coalesceKey string) *Response {
	start := r.deps.Clock.Now()
	a.up = UpstreamRequest{URL: rec.URL, Header: forwardHeader(a.header[:0], req.Header, rec.Headers), Body: req.Body, Timeout: rec.Timeout()}
	up, err := r.deps.Upstream.Do(ctx, &a.up)
	end := r.deps.Clock.Now()
	latency := strconv.FormatInt(end.Sub(start).Milliseconds(), 10)
	if err == nil && (up.Status < 200 || up.Status > 599) {
		// Not a final HTTP status the edge can answer with: the Worker's Response refuses one
		// outside 200–599 (it would throw, and the origin get no outcome at all).
		err = fmt.Errorf("it answered status %d, outside 200–599", up.Status)
	}
	if err != nil {
		var resp *Response
		switch {
		case errors.Is(err, ErrUpstreamBlocked):
			// Refused before any connection: the subscriber was not called, so no latency. Its URL or
			// the edge's allow-list is the operator's to fix, not a subscriber failure.
			return Reject(403, wire.ReasonBlockedAddress, "subscriber %s: %v", hop.SubscriberID, err)
		case errors.Is(err, ErrUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded):
			resp = answer(504, wire.OutcomeUpstreamTimeout, "subscriber %s did not answer within %s", hop.SubscriberID, rec.Timeout())
		default:
			resp = answer(502, wire.OutcomeUpstreamUnreachable, "subscriber %s unreachable: %v", hop.SubscriberID, err)
		}
		resp.Header = append(resp.Header, Field{keyUpstreamLatency, latency})
		return resp
	}
	resp := &a.resp
	*resp = Response{
		Status: up.Status,
		Header: append(a.fields[:0], Field{keyOutcome, string(wire.OutcomeForwarded)}, Field{keyUpstreamLatency, latency}),
		Body:   excerpt(up.Body),
	}
	if ra, _ := up.Header.lookupLower(keyRetryAfter); ra != "" && len(ra) <= maxRelayedValue {
		resp.Header = append(resp.Header, Field{keyRetryAfter, ra})
	}
	if ct, _ := up.Header.lookupLower(keyContentType); ct != "" && len(ct) <= maxRelayedValue && len(resp.Body) > 0 {
		resp.Header = append(resp.Header, Field{keyContentType, ct})
	}
	if up.Status < 200 || up.Status > 299 {
		return resp
	}
	// Acknowledged: remember it. A failed write does not change the answer (the subscriber has
	// the delivery); at worst a retry delivers it again, which receivers dedupe by webhook-id.
	// The origin is told (HeaderMarkFailed), or dedup and coalescing would stop unseen once the
	// KV's daily writes are spent.
	// The writes share one KVTimeout: one that stalls fails like one that errs, rather than hold
	// the subscriber's answer until the origin gives up on it (see KVTimeout).
	forwarded := a.decimal(start.UnixMilli())
	var failed, marks []string
	ctx = a.kvContext(ctx, end)
	if err := r.deps.Dedup.Put(ctx, dedupKey, forwarded, r.dedupTTL(hop)); err != nil {
		failed, marks = append(failed, fmt.Sprintf("write %s: %v", dedupKey, err)), append(marks, wire.MarkDedup)
	}
	if coalesceKey != "" {
		if err := r.deps.Dedup.Put(ctx, coalesceKey, forwarded, max(MinKVTTL, rec.Coalesce.Window())); err != nil {
			failed, marks = append(failed, fmt.Sprintf("write %s: %v", coalesceKey, err)), append(marks, wire.MarkCoalesce)
		}
	}
	if len(failed) > 0 {
		resp.Detail = strings.Join(failed, "; ")
		resp.Header = append(resp.Header, Field{keyMarkFailed, strings.Join(marks, ", ")})
	}
	return resp
}

// maxRelayedValue bounds the subscriber's Retry-After and Content-Type the edge relays; no valid
// Retry-After (at most 33 bytes) or usual media type comes near. Relaying any length, a subscriber
// whose head just fits wire.MaxAnswerHeaderBytes made an edge answer the origin cannot read, taken
// for an edge fault: an attempt not counted, and the operator blamed for the subscriber's answer.
const maxRelayedValue = 256

// dedupTTL is how long the mark of an acknowledged hop lives: DedupTTL, or longer for a hop from
// an origin whose clock is ahead. A hop is accepted while its timestamp is within Tolerance of the
// clock either way (whole seconds, signature.VerifyValidHop), so one stamped ahead of the clock stays
// acceptable up to Tolerance past its stamp; a replay after its mark expired would be forwarded
// again.
func (r *Relay) dedupTTL(hop *signature.Hop) time.Duration {
	accepted := hop.Timestamp + int64(r.cfg.Tolerance/time.Second) + 1 - r.deps.Clock.Now().Unix() // seconds still acceptable
	return max(r.cfg.DedupTTL, time.Duration(accepted)*time.Second)
}

// Header keys (lower-case) of the edge's answer, written directly into a Header: Set would
// lower-case the capitalised wire names again on every request.
var (
	keyOutcome         = strings.ToLower(wire.HeaderOutcome)
	keyUpstreamLatency = strings.ToLower(wire.HeaderUpstreamLatency)
	keyRetryAfter      = strings.ToLower(wire.HeaderRetryAfter)
	keyMarkFailed      = strings.ToLower(wire.HeaderMarkFailed)
)

// hopPrefix starts the name of every hop header.
const hopPrefix = "edgehook-"

// isHopName reports whether a lower-case header name starts with hopPrefix. Asked for every header
// of a request (hopText, stripped), it compares a word and a byte: for GOARCH=wasm comparing a
// nine-byte string is a call of memequal (~20 calls per request, BenchmarkGuestCalls).
func isHopName(k string) bool {
	return len(k) >= len(hopPrefix) && k[8] == '-' && load64(k) == hopWord
}

// hopWord is hopPrefix's first eight bytes as load64 reads them: a variable, so that isHopName is
// small enough to inline.
var hopWord = load64(hopPrefix)

const keyContentType = "content-type"

// stripped reports whether a header (lower-case name) is never forwarded: hop headers (every
// "edgehook-" header), transport headers the runtime sets itself (Accept-Encoding too), and
// headers the platform or a proxy adds about the origin's connection (its address:
// CF-Connecting-IP, True-Client-IP, X-Forwarded-For, X-Real-IP, Forwarded; Cloudflare's
// CDN-Loop), which a subscriber has no business seeing. It is asked for every header of every request, so it switches on the first
// byte before comparing anything: in the WASM builds a map lookup or a string comparison costs
// several calls (BenchmarkGuestCalls).
func stripped(k string) bool {
	if k == "" {
		return false
	}
	switch k[0] {
	case 'e':
		return isHopName(k) // most of a request's headers
	case 'a':
		// The origin's connection's: the origin cannot decode an excerpt relayed without its
		// Content-Encoding, so each runtime asks for the encodings its client decodes itself.
		return k == "accept-encoding"
	case 'c':
		return strings.HasPrefix(k, "cf-") || k == "content-length" || k == "connection" || k == "cdn-loop"
	case 'x':
		return strings.HasPrefix(k, "x-forwarded-") || k == "x-real-ip"
	case 'h':
		return k == "host"
	case 'k':
		return k == "keep-alive"
	case 'p':
		return k == "proxy-connection" || k == "proxy-authorization"
	case 't':
		return k == "te" || k == "trailer" || k == "transfer-encoding" || k == "true-client-ip"
	case 'f':
		return k == "forwarded"
	case 'u':
		return k == "upgrade"
	}
	return false
}

// forwardHeader appends to out the headers sent to the subscriber: the origin's, minus the
// stripped ones and those its Connection header names (options of the origin's connection, RFC
// 9110 §7.6.1), plus the record's extra headers.
func forwardHeader(out, in Header, extra map[string]string) Header {
	var options []string // mostly none: the origin sends no Connection header
	for _, f := range in {
		if f.Name == "connection" {
			for o := range strings.SplitSeq(f.Value, ",") {
				options = append(options, strings.ToLower(strings.TrimSpace(o)))
			}
		}
	}
	for _, f := range in {
		if !stripped(f.Name) && (options == nil || !slices.Contains(options, f.Name)) {
			out = append(out, f)
		}
	}
	if len(extra) > 0 { // ranging over even a nil map is a call in the WASM builds
		for k, v := range extra {
			out.Set(k, v)
		}
	}
	return out
}

func excerpt(b []byte) []byte {
	if len(b) > wire.MaxExcerptBytes {
		return b[:wire.MaxExcerptBytes]
	}
	return b
}

// answer builds an edge-made response whose body and Detail explain it.
func answer(status int, outcome wire.Outcome, format string, args ...any) *Response {
	detail := string(outcome) + ": " + fmt.Sprintf(format, args...)
	return &Response{
		Status: status,
		// Room for the one or two headers callers add.
		Header: append(make(Header, 0, 4), Field{keyOutcome, string(outcome)}, Field{keyContentType, "text/plain; charset=utf-8"}),
		Body:   excerpt([]byte(detail + "\n")),
		Detail: detail,
	}
}

// Reject builds an edge-side rejection (outcome rejected:<reason>) whose body and Detail explain
// it; runtimes use it for failures outside Handle, such as a configuration error.
func Reject(status int, reason, format string, args ...any) *Response {
	return answer(status, wire.Rejected(reason), format, args...)
}
