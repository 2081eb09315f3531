// Package relay is the edge's relay core: it verifies the origin's hop signature, looks the
// subscriber up in KV, deduplicates, coalesces and forwards the delivery, and answers the origin
// with the subscriber's status and an outcome header.
//
// It is pure Go on the standard library and shared/ only (no net/http, no syscall/js), so the same
// core runs natively in tests, as the GOOS=wasip1 module of the local harness and inside the
// Cloudflare Worker (GOOS=js). Each runtime supplies the three dependencies — the two KV
// namespaces, the upstream and the clock — and converts its own request type into a Request.
package relay

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"slices"
	"strings"
	"time"
)

// Header holds a request's or a response's headers: lower-case names, each once, in the order
// they were set. Get, Set and Del take names in any case. A header that appears several times is
// carried as one value joined with ", ", as the Fetch API does. *Header satisfies
// signature.HeaderGetter and signature.HeaderSetter.
//
// A slice rather than a map: a request has a dozen headers, and in the WASM builds building,
// searching and ranging over a map of that size costs several times the rest of the relay
// (edge/harness BenchmarkGuestCalls); a scan of a dozen names compares little more than lengths.
type Header []Field

// Field is one header.
type Field struct {
	Name  string // lower-case
	Value string
}

// Get returns the value of name, or "".
func (h Header) Get(name string) string {
	v, _ := h.Lookup(name)
	return v
}

// Lookup returns the value of name and whether it is present.
func (h Header) Lookup(name string) (string, bool) {
	// Callers mostly pass capitalised names (wire.Header*), which strings.ToLower copies into a new
	// string on every call; in the WASM builds that allocation, and a branch per byte, are a large
	// share of a request. An ASCII name is lower-cased eight bytes at a time into a stack buffer
	// instead.
	var buf [64]byte
	if len(name) > len(buf) {
		return h.lookupLower(strings.ToLower(name))
	}
	n := copy(buf[:], name)
	for i := 0; i < n; i += 8 {
		w := binary.LittleEndian.Uint64(buf[i:])
		if w&0x8080808080808080 != 0 { // not ASCII
			return h.lookupLower(strings.ToLower(name))
		}
		binary.LittleEndian.PutUint64(buf[i:], lowerASCII(w))
	}
	return h.lookupLower(string(buf[:n]))
}

// lookupLower is Lookup of a lower-case name.
func (h Header) lookupLower(name string) (string, bool) {
	for i := range h {
		if h[i].Name == name {
			return h[i].Value, true
		}
	}
	return "", false
}

// lowerASCII lower-cases the eight ASCII bytes of w: a byte gets 0x20 added when adding 0x3f sets
// its high bit (it is at least 'A') and adding 0x25 does not (it is at most 'Z').
func lowerASCII(w uint64) uint64 {
	const ones = 0x0101010101010101
	upper := (w + 0x3f*ones) &^ (w + 0x25*ones) & (0x80 * ones)
	return w | upper>>2
}

// Set replaces the value of name, or adds name at the end.
func (h *Header) Set(name, value string) { h.setLower(strings.ToLower(name), value) }

// setLower is Set of a lower-case name.
func (h *Header) setLower(name, value string) {
	for i := range *h {
		if (*h)[i].Name == name {
			(*h)[i].Value = value
			return
		}
	}
	*h = append(*h, Field{name, value})
}

// Del removes name.
func (h *Header) Del(name string) {
	name = strings.ToLower(name)
	*h = slices.DeleteFunc(*h, func(f Field) bool { return f.Name == name })
}

// Map returns the headers as a map, lower-case name to value.
func (h Header) Map() map[string]string {
	m := make(map[string]string, len(h))
	for _, f := range h {
		m[f.Name] = f.Value
	}
	return m
}

// Request is one request from the origin to the edge.
type Request struct {
	Method string
	Header Header
	// Body is the request body as read by the runtime. Runtimes read at most Config.MaxBody+1 bytes
	// (ReadBody does), so an oversize body is seen as one and answered with 413.
	Body []byte
}

// Response is the edge's answer to the origin.
type Response struct {
	Status int
	// Header holds wire.HeaderOutcome always, wire.HeaderUpstreamLatency when the subscriber was
	// called, Retry-After when there is one, and Content-Type when Body is non-empty.
	Header Header
	// Body is at most wire.MaxExcerptBytes: the subscriber's body, or the edge's explanation of its
	// own answer.
	Body []byte
	// Detail is a line for the operator's log: why a request was rejected, or a problem that did not
	// change the answer (a failed KV write after a 2xx). It is never sent.
	Detail string
}

// KV is one key-value namespace. The Worker's KV namespaces, the harness's in-memory store and
// the tests' fakes implement it. The keys and values the relay passes may be memory it reuses for
// its next request (Relay.HandleWith): an implementation copies what it keeps past a call.
//
// The relay calls Get, Put and Deps.ReadAll with a context whose deadline is at most KVTimeout
// away, by the relay's Clock. The context is not cancelled at that deadline (a timer per request
// was too dear in WASM): an implementation that can stall (a remote store) reads Deadline and
// gives up by then with an error, which the relay treats as any failure of the call.
type KV interface {
	// Get returns the value stored under key; found is false for a missing or expired key.
	Get(ctx context.Context, key string) (value string, found bool, err error)
	// Put stores value under key for ttl. Callers never pass a ttl below MinKVTTL, which Cloudflare
	// KV refuses.
	Put(ctx context.Context, key, value string, ttl time.Duration) error
}

// KVTimeout bounds a request's KV reads (together) and its mark writes after a 2xx (together). A
// read that does not answer in time is a failed read (503 rejected:kv_unavailable, which the
// origin waits out as the edge's fault), a write a failed write (wire.HeaderMarkFailed).
// Unbounded, a stalled KV held the request until the origin's own timeout for the send, which
// the origin counts as the subscriber's timeout, against its circuit, though it was never called.
// The origin waits for the edge up to the subscriber's timeout_ms plus 10 s (at most 67.5 s, three
// quarters of the default lease, for a timeout_ms of 60 s): the reads' 2 s before the forward
// and the writes' 2 s after it leave the rest of that margin for the transfer of the request and
// the answer.
const KVTimeout = 2 * time.Second

// MinKVTTL is the shortest expiration Cloudflare KV accepts.
const MinKVTTL = 60 * time.Second

// UpstreamRequest is the one POST the edge makes to a subscriber.
type UpstreamRequest struct {
	URL    string
	Header Header
	Body   []byte
	// Timeout is the subscriber's timeout from its KV record. The Upstream must give up after it:
	// with an error wrapping ErrUpstreamTimeout when the answer's status has not arrived, else with
	// the body read so far.
	Timeout time.Duration
}

// UpstreamResponse is the subscriber's answer.
type UpstreamResponse struct {
	Status int
	Header Header
	// Body holds at most the first wire.MaxExcerptBytes bytes of the subscriber's body, fewer when
	// it broke off or stalled past the timeout; an Upstream need not read more (the relay
	// truncates anything longer).
	Body []byte
}

// Upstream sends one request to a subscriber, enforcing req.Timeout. Like KV, it copies what it
// keeps of req past Do.
type Upstream interface {
	// Do returns the subscriber's response, or an error wrapping ErrUpstreamTimeout when the
	// timeout (or ctx) expired before its status arrived, or ErrUpstreamBlocked when the runtime
	// refused the subscriber's address; any other error means the subscriber could not be reached.
	Do(ctx context.Context, req *UpstreamRequest) (*UpstreamResponse, error)
}

// ErrUpstreamTimeout is wrapped by Upstream errors for a subscriber that did not answer in time.
var ErrUpstreamTimeout = errors.New("subscriber did not answer within its timeout")

// ErrUpstreamBlocked is wrapped by Upstream errors for a subscriber whose address the runtime
// refuses to connect to: an internal one the local edge is not allowed (netguard). The Worker
// never reports it.
var ErrUpstreamBlocked = errors.New("address refused")

// Clock tells the time. Hop timestamps, dedup and coalescing marks and the upstream latency use it.
type Clock interface{ Now() time.Time }

// SystemClock is the real clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Deps are what a runtime supplies to the core.
type Deps struct {
	// Subscribers is the SUBSCRIBERS namespace: wire.SubscriberKey → wire.SubscriberRecord JSON.
	// The relay only reads it.
	Subscribers KV
	// Dedup is the DEDUP namespace: wire.DedupKey and wire.CoalesceKey marks.
	Dedup    KV
	Upstream Upstream
	Clock    Clock
	// ReadAll, when set, performs a request's KV reads (two or three, on either namespace) together
	// and fills in each one's result: the Worker issues them as one promise, the WASI module as one
	// host call, so a request crosses into the runtime once for all of them. Nil reads them one
	// after another through KV.Get.
	ReadAll func(ctx context.Context, reads []KVRead)
}

// KVRead is one KV read of a request: KV and Key say what to read; Value, Found and Err are the
// result, as KV.Get returns them.
type KVRead struct {
	KV    KV
	Key   string
	Value string
	Found bool
	Err   error
}

// ReadBody reads at most max+1 bytes of r, enough for Handle to tell an oversize body.
func ReadBody(r io.Reader, max int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r, max+1))
}
