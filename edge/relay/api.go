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
	"strings"
	"time"
)

// Header is a header map with lower-case keys; Get, Set and Del take names in any case. A header
// that appears several times is carried as one value joined with ", ", as the Fetch API does.
// It satisfies signature.HeaderGetter and signature.HeaderSetter.
type Header map[string]string

// Get returns the value of name, or "".
func (h Header) Get(name string) string {
	// Callers mostly pass capitalised names (wire.Header*), which strings.ToLower copies into a new
	// string on every call; in the WASM builds that allocation, and a branch per byte, are a large
	// share of a request (edge/harness BenchmarkGuestCalls). An ASCII name is lower-cased eight
	// bytes at a time into a stack buffer instead: the compiler does not allocate for the
	// h[string(buf)] index.
	var buf [64]byte
	if len(name) > len(buf) {
		return h[strings.ToLower(name)]
	}
	n := copy(buf[:], name)
	for i := 0; i < n; i += 8 {
		w := binary.LittleEndian.Uint64(buf[i:])
		if w&0x8080808080808080 != 0 { // not ASCII
			return h[strings.ToLower(name)]
		}
		binary.LittleEndian.PutUint64(buf[i:], lowerASCII(w))
	}
	return h[string(buf[:n])]
}

// lowerASCII lower-cases the eight ASCII bytes of w: a byte gets 0x20 added when adding 0x3f sets
// its high bit (it is at least 'A') and adding 0x25 does not (it is at most 'Z').
func lowerASCII(w uint64) uint64 {
	const ones = 0x0101010101010101
	upper := (w + 0x3f*ones) &^ (w + 0x25*ones) & (0x80 * ones)
	return w | upper>>2
}

// Set replaces the value of name.
func (h Header) Set(name, value string) { h[strings.ToLower(name)] = value }

// Del removes name.
func (h Header) Del(name string) { delete(h, strings.ToLower(name)) }

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
// the tests' fakes implement it.
type KV interface {
	// Get returns the value stored under key; found is false for a missing or expired key.
	Get(ctx context.Context, key string) (value string, found bool, err error)
	// Put stores value under key for ttl. Callers never pass a ttl below MinKVTTL, which Cloudflare
	// KV refuses.
	Put(ctx context.Context, key, value string, ttl time.Duration) error
}

// MinKVTTL is the shortest expiration Cloudflare KV accepts.
const MinKVTTL = 60 * time.Second

// UpstreamRequest is the one POST the edge makes to a subscriber.
type UpstreamRequest struct {
	URL    string
	Header Header
	Body   []byte
	// Timeout is the subscriber's timeout from its KV record. The Upstream must give up after it
	// and return an error wrapping ErrUpstreamTimeout.
	Timeout time.Duration
}

// UpstreamResponse is the subscriber's answer.
type UpstreamResponse struct {
	Status int
	Header Header
	// Body holds at most the first wire.MaxExcerptBytes bytes of the subscriber's body; an
	// Upstream need not read more (the relay truncates anything longer).
	Body []byte
}

// Upstream sends one request to a subscriber, enforcing req.Timeout.
type Upstream interface {
	// Do returns the subscriber's response, or an error wrapping ErrUpstreamTimeout when the
	// timeout (or ctx) expired first; any other error means the subscriber could not be reached.
	Do(ctx context.Context, req *UpstreamRequest) (*UpstreamResponse, error)
}

// ErrUpstreamTimeout is wrapped by Upstream errors for a subscriber that did not answer in time.
var ErrUpstreamTimeout = errors.New("subscriber did not answer within its timeout")

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
