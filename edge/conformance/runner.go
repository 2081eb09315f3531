package conformance

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/andybalholm/brotli"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// Built is a step's request, ready to send.
type Built struct {
	Method string
	Header map[string]string // lower-case names
	Body   []byte            // what is sent (differs from the signed body when tampered)
}

// Build signs a step's request with the hop timestamp relative to now.
func (s *Suite) Build(req *StepRequest, now time.Time) (*Built, error) {
	secrets, err := s.SecretsNamed(req.SignWith)
	if err != nil {
		return nil, err
	}
	body := []byte(req.Body)
	if req.BodyBytes > 0 {
		body = bytes.Repeat([]byte{'x'}, req.BodyBytes)
	}
	hop := &signature.Hop{
		DeliveryID: req.Hop.DeliveryID, SubscriberID: req.Hop.SubscriberID, EventType: req.Hop.EventType,
		CoalesceKey: req.Hop.CoalesceKey, Attempt: req.Hop.Attempt,
		Timestamp: now.Unix() + req.Hop.TimestampOffsetSeconds,
	}
	h := lowerHeader{}
	for k, v := range req.Headers {
		h.Set(k, v)
	}
	signature.SetHopHeaders(h, secrets, hop, body)
	for _, k := range req.OmitHeaders {
		delete(h, strings.ToLower(k))
	}
	for k, v := range req.SetHeaders {
		h.Set(k, v)
	}
	if req.SendBody != nil {
		body = []byte(*req.SendBody)
	}
	method := req.Method
	if method == "" {
		method = http.MethodPost
	}
	return &Built{Method: method, Header: h, Body: body}, nil
}

type lowerHeader map[string]string

func (h lowerHeader) Set(k, v string) { h[strings.ToLower(k)] = v }

// Received is one request the scripted subscriber received.
type Received struct {
	// Path is the request target as received, path and query (the node runner's req.url).
	Path   string
	Header http.Header
	Body   []byte
	// Answer is the body the subscriber answered with, encoded as it was sent.
	Answer []byte
}

// Subscriber is the scripted subscriber: a real HTTP server on 127.0.0.1 that answers as the
// current step's Upstream says and records what it receives.
type Subscriber struct {
	srv      *http.Server
	url      string
	mu       sync.Mutex
	script   Upstream
	received []Received
	stop     chan struct{}
	wg       sync.WaitGroup
}

// StartSubscriber listens on 127.0.0.1 and serves until Close.
func StartSubscriber() (*Subscriber, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Subscriber{url: "http://" + ln.Addr().String(), stop: make(chan struct{})}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// URL is the base URL that replaces PlaceholderSubscriber.
func (s *Subscriber) URL() string { return s.url }

// Script sets the behaviour for the next requests and forgets what was received.
func (s *Subscriber) Script(u Upstream) {
	s.mu.Lock()
	s.script, s.received = u, nil
	s.mu.Unlock()
}

// Received returns what arrived since the last Script.
func (s *Subscriber) Received() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.received)
}

func (s *Subscriber) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	u := s.script
	answer := encodedBody(u)
	s.received = append(s.received, Received{Path: r.RequestURI, Header: r.Header.Clone(), Body: body, Answer: answer})
	s.mu.Unlock()
	if u.Hang {
		// Answer only when the edge gives up (the connection closes) or the subscriber stops.
		select {
		case <-r.Context().Done():
		case <-s.stop:
		}
		return
	}
	for k, v := range u.Headers {
		w.Header().Set(k, v)
	}
	if u.HeaderBytes > 0 {
		w.Header().Set("X-Pad", strings.Repeat("p", u.HeaderBytes))
	}
	if u.ContentEncoding != "" {
		w.Header().Set("Content-Encoding", u.ContentEncoding)
	}
	if u.CutBody || u.StallBody {
		w.Header().Set("Content-Length", strconv.Itoa(len(answer)+100))
	}
	w.WriteHeader(u.Status)
	_, _ = w.Write(answer)
	if u.CutBody || u.StallBody {
		_ = http.NewResponseController(w).Flush()
		if u.StallBody {
			select {
			case <-r.Context().Done():
			case <-s.stop:
			}
		}
		panic(http.ErrAbortHandler) // closes the connection, 100 bytes short
	}
}

// Close releases hanging requests and stops the server.
func (s *Subscriber) Close() {
	close(s.stop)
	_ = s.srv.Close()
	s.wg.Wait()
}

// UpstreamBody is the body a scripted subscriber answers with.
func UpstreamBody(u Upstream) []byte {
	if u.BodyBytes > 0 {
		return bytes.Repeat([]byte{'y'}, u.BodyBytes)
	}
	return []byte(u.Body)
}

// encoders compress a scripted answer for each content_encoding.
var encoders = map[string]func(io.Writer) io.WriteCloser{
	"gzip":    func(w io.Writer) io.WriteCloser { return gzip.NewWriter(w) },
	"br":      func(w io.Writer) io.WriteCloser { return brotli.NewWriter(w) },
	"deflate": func(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) },
}

// encodedBody is the body a scripted subscriber answers with, compressed as u says.
func encodedBody(u Upstream) []byte {
	enc, ok := encoders[u.ContentEncoding]
	if !ok {
		return UpstreamBody(u)
	}
	var b bytes.Buffer
	w := enc(&b)
	_, _ = w.Write(UpstreamBody(u))
	_ = w.Close()
	return b.Bytes()
}

// UnreachableURL returns a base URL on 127.0.0.1 where nothing listens (a port just released).
func UnreachableURL() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	url := "http://" + ln.Addr().String()
	return url, ln.Close()
}

// KVView reads the DEDUP namespace after a step: the value and expiration of a live key.
type KVView interface {
	Lookup(key string) (value string, expires time.Time, found bool)
}

// Observed is what a runner saw in one step.
type Observed struct {
	Status   int
	Header   map[string]string // lower-case names
	Body     []byte
	Received []Received
	SentBody []byte
	// WrittenAt is when the step ran, for TTL and value checks.
	WrittenAt time.Time
	Dedup     KVView
}

// Check compares a step's observation with its expectation and returns every mismatch.
func Check(e *Expect, o *Observed) []string {
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if o.Status != e.Status {
		fail("status %d, want %d", o.Status, e.Status)
	}
	if got := o.Header[strings.ToLower(wire.HeaderOutcome)]; got != e.Outcome {
		fail("outcome %q, want %q", got, e.Outcome)
	}
	for k, v := range e.Headers {
		if got, ok := o.Header[strings.ToLower(k)]; !ok || got != v {
			fail("header %s = %q (present %v), want %q", k, got, ok, v)
		}
	}
	for _, k := range e.HeadersAbsent {
		if got, ok := o.Header[strings.ToLower(k)]; ok {
			fail("header %s = %q, want absent", k, got)
		}
	}
	if e.Body != nil && string(o.Body) != *e.Body {
		fail("body %q, want %q", o.Body, *e.Body)
	}
	if e.BodyLength != nil && len(o.Body) != *e.BodyLength {
		fail("body length %d, want %d", len(o.Body), *e.BodyLength)
	}
	if e.BodyAsAnswered && (len(o.Received) != 1 || !bytes.Equal(o.Body, o.Received[0].Answer)) {
		fail("body %q, want the subscriber's answer as sent", o.Body)
	}
	if e.UpstreamLatency {
		v := o.Header[strings.ToLower(wire.HeaderUpstreamLatency)]
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 0 {
			fail("%s = %q, want a non-negative integer", wire.HeaderUpstreamLatency, v)
		}
	}
	switch n := len(o.Received); {
	case e.Forwarded && n != 1:
		fail("subscriber received %d requests, want 1", n)
	case !e.Forwarded && n != 0:
		fail("subscriber received %d requests, want none", n)
	case e.Forwarded && e.ForwardedRequest != nil:
		errs = append(errs, checkForwarded(e.ForwardedRequest, &o.Received[0], o.SentBody)...)
	}
	if e.KV != nil {
		errs = append(errs, checkKV(e.KV, o)...)
	}
	return errs
}

func checkForwarded(e *ForwardedRequest, r *Received, sent []byte) []string {
	var errs []string
	if e.Path != "" && r.Path != e.Path {
		errs = append(errs, fmt.Sprintf("forwarded path %q, want %q", r.Path, e.Path))
	}
	for k, v := range e.Headers {
		if got := r.Header.Values(k); len(got) != 1 || got[0] != v {
			errs = append(errs, fmt.Sprintf("forwarded header %s = %q, want %q", k, got, v))
		}
	}
	for _, k := range e.HeadersAbsent {
		if got := r.Header.Values(k); len(got) > 0 {
			errs = append(errs, fmt.Sprintf("forwarded header %s = %q, want absent", k, got))
		}
	}
	if e.BodyIdentical && !bytes.Equal(r.Body, sent) {
		errs = append(errs, fmt.Sprintf("forwarded body %q differs from the body sent %q", r.Body, sent))
	}
	return errs
}

func checkKV(e *KVExpect, o *Observed) []string {
	var errs []string
	for _, k := range e.Present {
		if _, _, ok := o.Dedup.Lookup(k); !ok {
			errs = append(errs, fmt.Sprintf("DEDUP %s missing", k))
		}
	}
	for _, k := range e.Absent {
		if v, _, ok := o.Dedup.Lookup(k); ok {
			errs = append(errs, fmt.Sprintf("DEDUP %s = %q, want absent", k, v))
		}
	}
	for k, ttl := range e.TTLSeconds {
		_, exp, ok := o.Dedup.Lookup(k)
		want := o.WrittenAt.Add(time.Duration(ttl) * time.Second)
		if d := exp.Sub(want); !ok || d < -2*time.Second || d > 2*time.Second {
			errs = append(errs, fmt.Sprintf("DEDUP %s expires %v (present %v), want %v ± 2s", k, exp, ok, want))
		}
	}
	for _, k := range e.NowMS {
		v, _, _ := o.Dedup.Lookup(k)
		ms, err := strconv.ParseInt(v, 10, 64)
		if d := time.UnixMilli(ms).Sub(o.WrittenAt); err != nil || d < -5*time.Second || d > 5*time.Second {
			errs = append(errs, fmt.Sprintf("DEDUP %s = %q, want unix ms within 5s of %d", k, v, o.WrittenAt.UnixMilli()))
		}
	}
	return errs
}

// Seed writes a scenario's starting KV: its subscriber records, with the URL placeholders replaced,
// and its dedup and coalescing marks as of now. Both Go runners start every scenario with it.
func (sc *Scenario) Seed(ctx context.Context, subs, dedup relay.KV, subscriberURL, unreachableURL string, now time.Time) error {
	for id, seed := range sc.Subscribers {
		if err := subs.Put(ctx, wire.SubscriberKey(id), SubscriberValue(seed, subscriberURL, unreachableURL), 0); err != nil {
			return fmt.Errorf("seed subscriber %s: %w", id, err)
		}
	}
	for _, kv := range sc.Dedup {
		if err := dedup.Put(ctx, kv.Key, kv.ValueAt(now), 0); err != nil {
			return fmt.Errorf("seed %s: %w", kv.Key, err)
		}
	}
	return nil
}
