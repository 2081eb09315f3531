package relay

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

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
// when it cannot be reached). Marks are written only after a 2xx.
func (r *Relay) Handle(ctx context.Context, req *Request) *Response {
	if req.Method != "POST" {
		resp := Reject(405, wire.ReasonMethod, "method %s is not allowed; the edge accepts only POST", req.Method)
		resp.Header.Set("Allow", "POST")
		return resp
	}
	if n := int64(len(req.Body)); n > r.cfg.MaxBody {
		return Reject(413, wire.ReasonBodyTooLarge, "body is larger than %s=%d bytes", EnvMaxBody, r.cfg.MaxBody)
	}
	hop, sig, err := signature.ParseHopHeaders(req.Header)
	if err == nil {
		err = hop.Validate()
	}
	switch {
	case errors.Is(err, signature.ErrMissing):
		return Reject(400, wire.ReasonMissingHeader, "%v", err)
	case err != nil:
		return Reject(400, wire.ReasonMalformedHeader, "%v", err)
	}
	if err := signature.VerifyHop(r.cfg.Secrets, hop, sig, req.Body, r.deps.Clock.Now(), r.cfg.Tolerance); err != nil {
		if errors.Is(err, signature.ErrTimestamp) {
			return Reject(401, wire.ReasonStaleTimestamp, "hop %v", err)
		}
		return Reject(401, wire.ReasonBadSignature, "hop signature: %v (is %s the origin's edge secret?)", err, EnvSecret)
	}
	subKey, dedupKey, markKey := wire.SubscriberKey(hop.SubscriberID), wire.DedupKey(hop.DeliveryID), ""
	reads := []kvRead{{kv: r.deps.Subscribers, key: subKey}, {kv: r.deps.Dedup, key: dedupKey}}
	if hop.CoalesceKey != "" { // read now; used only if the record makes this type coalescible
		markKey = wire.CoalesceKey(hop.SubscriberID, hop.CoalesceKey)
		reads = append(reads, kvRead{kv: r.deps.Dedup, key: markKey})
	}
	r.read(ctx, reads)
	rec, resp := r.subscriber(&reads[0])
	if resp != nil {
		return resp
	}
	if d := &reads[1]; d.err != nil {
		return Reject(503, wire.ReasonKVUnavailable, "read %s: %v", dedupKey, d.err)
	} else if d.found {
		return answer(200, wire.OutcomeDuplicate, "delivery %s was already acknowledged by the subscriber", hop.DeliveryID)
	}
	coalesceKey := ""
	if c := rec.Coalesce; c != nil && markKey != "" && c.Applies(hop.EventType) {
		coalesceKey = markKey
		if resp := r.coalesced(&reads[2], c.Window()); resp != nil {
			return resp
		}
	}
	return r.forward(ctx, req, hop, rec, dedupKey, coalesceKey)
}

// kvRead is one KV read of a request and its result.
type kvRead struct {
	kv    KV
	key   string
	value string
	found bool
	err   error
}

// read performs the reads, all at once when the runtime's KV calls can overlap (Deps.ConcurrentKV),
// and returns when every one has finished, so none outlives the request.
func (r *Relay) read(ctx context.Context, reads []kvRead) {
	if !r.deps.ConcurrentKV {
		for i := range reads {
			reads[i].value, reads[i].found, reads[i].err = reads[i].kv.Get(ctx, reads[i].key)
		}
		return
	}
	var wg sync.WaitGroup
	for i := range reads {
		wg.Go(func() { reads[i].value, reads[i].found, reads[i].err = reads[i].kv.Get(ctx, reads[i].key) })
	}
	wg.Wait()
}

// subscriber decodes the subscriber's record, or returns the rejection.
func (r *Relay) subscriber(read *kvRead) (*wire.SubscriberRecord, *Response) {
	if read.err != nil {
		return nil, Reject(503, wire.ReasonKVUnavailable, "read %s: %v", read.key, read.err)
	}
	if !read.found {
		return nil, Reject(404, wire.ReasonUnknownSubscriber, "no KV record %s", read.key)
	}
	rec, err := r.records.decode(read.value)
	if err != nil {
		// An operator error: the record was written by hand or by another version.
		return nil, Reject(500, wire.ReasonBadRecord, "KV record %s does not decode: %v", read.key, err)
	}
	if !rec.Active {
		return nil, Reject(404, wire.ReasonUnknownSubscriber, "KV record %s is inactive", read.key)
	}
	return rec, nil
}

// coalesced answers 429 coalesced when the mark says the key was forwarded less than window ago.
func (r *Relay) coalesced(mark *kvRead, window time.Duration) *Response {
	if mark.err != nil {
		return Reject(503, wire.ReasonKVUnavailable, "read %s: %v", mark.key, mark.err)
	}
	if !mark.found {
		return nil
	}
	ms, err := strconv.ParseInt(mark.value, 10, 64)
	if err != nil {
		return nil // a mark this relay did not write: forward rather than hold the key back forever
	}
	left := time.UnixMilli(ms).Add(window).Sub(r.deps.Clock.Now())
	if left <= 0 {
		return nil
	}
	secs := int64((left + time.Second - 1) / time.Second)
	resp := answer(429, wire.OutcomeCoalesced, "%s was forwarded less than %s ago; retry in %ds", mark.key, window, secs)
	resp.Header.Set(wire.HeaderRetryAfter, strconv.FormatInt(secs, 10))
	return resp
}

// forward sends the delivery to the subscriber and relays its answer.
func (r *Relay) forward(ctx context.Context, req *Request, hop *signature.Hop, rec *wire.SubscriberRecord, dedupKey, coalesceKey string) *Response {
	start := r.deps.Clock.Now()
	up, err := r.deps.Upstream.Do(ctx, &UpstreamRequest{
		URL:     rec.URL,
		Header:  forwardHeader(req.Header, rec.Headers),
		Body:    req.Body,
		Timeout: rec.Timeout(),
	})
	latency := strconv.FormatInt(r.deps.Clock.Now().Sub(start).Milliseconds(), 10)
	if err != nil {
		var resp *Response
		if errors.Is(err, ErrUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded) {
			resp = answer(504, wire.OutcomeUpstreamTimeout, "subscriber %s did not answer within %s", hop.SubscriberID, rec.Timeout())
		} else {
			resp = answer(502, wire.OutcomeUpstreamUnreachable, "subscriber %s unreachable: %v", hop.SubscriberID, err)
		}
		resp.Header.Set(wire.HeaderUpstreamLatency, latency)
		return resp
	}
	resp := &Response{Status: up.Status, Header: Header{}, Body: excerpt(up.Body)}
	resp.Header.Set(wire.HeaderOutcome, string(wire.OutcomeForwarded))
	resp.Header.Set(wire.HeaderUpstreamLatency, latency)
	if ra := up.Header.Get(wire.HeaderRetryAfter); ra != "" {
		resp.Header.Set(wire.HeaderRetryAfter, ra)
	}
	if ct := up.Header.Get("Content-Type"); ct != "" && len(resp.Body) > 0 {
		resp.Header.Set("Content-Type", ct)
	}
	if up.Status < 200 || up.Status > 299 {
		return resp
	}
	// Acknowledged: remember it. A failed write does not change the answer (the subscriber has
	// the delivery); at worst a retry delivers it again, which receivers dedupe by webhook-id.
	forwarded := strconv.FormatInt(start.UnixMilli(), 10)
	var failed []string
	if err := r.deps.Dedup.Put(ctx, dedupKey, forwarded, r.cfg.DedupTTL); err != nil {
		failed = append(failed, fmt.Sprintf("write %s: %v", dedupKey, err))
	}
	if coalesceKey != "" {
		if err := r.deps.Dedup.Put(ctx, coalesceKey, forwarded, max(MinKVTTL, rec.Coalesce.Window())); err != nil {
			failed = append(failed, fmt.Sprintf("write %s: %v", coalesceKey, err))
		}
	}
	resp.Detail = strings.Join(failed, "; ")
	return resp
}

// strippedHeaders are never forwarded: transport headers the runtime sets itself, and headers
// the platform adds about the origin's connection.
var strippedHeaders = map[string]bool{
	"host": true, "content-length": true, "connection": true, "keep-alive": true,
	"proxy-connection": true, "proxy-authorization": true, "te": true, "trailer": true,
	"transfer-encoding": true, "upgrade": true, "x-real-ip": true,
}

// forwardHeader returns the headers sent to the subscriber: the origin's, minus hop headers
// (every "edgehook-" header), transport and platform headers, plus the record's extra headers.
func forwardHeader(in Header, extra map[string]string) Header {
	out := make(Header, len(in)+len(extra))
	for k, v := range in {
		if strippedHeaders[k] || strings.HasPrefix(k, "edgehook-") || strings.HasPrefix(k, "cf-") || strings.HasPrefix(k, "x-forwarded-") {
			continue
		}
		out[k] = v
	}
	for k, v := range extra {
		out.Set(k, v)
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
		Header: Header{strings.ToLower(wire.HeaderOutcome): string(outcome), "content-type": "text/plain; charset=utf-8"},
		Body:   excerpt([]byte(detail + "\n")),
		Detail: detail,
	}
}

// Reject builds an edge-side rejection (outcome rejected:<reason>) whose body and Detail explain
// it; runtimes use it for failures outside Handle, such as a configuration error.
func Reject(status int, reason, format string, args ...any) *Response {
	return answer(status, wire.Rejected(reason), format, args...)
}
