//go:build wasip1

// Command wasi is the relay core built as a WASI reactor for the local harness (edge/harness):
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -tags edgehook_hostmac -o build/relay.wasm ./edge/cmd/wasi
//
// The host calls _initialize once per instance, then the exports of package abi for each request.
// KV, the upstream request, the clock and logging are host functions; with the edgehook_hostmac
// tag the hop signature's HMAC-SHA256 is one too (shared/signature), because SHA-256 compiled to
// WASM by Go is two orders of magnitude slower than the host's.
//
// The settings are the Worker's (relay.EnvSecret, ...), read from the WASI environment.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// main is never called in a reactor; the build mode still requires it.
func main() {}

// A garbage collection in Go-compiled WASM is slow, and this module allocates a little on every
// request: twice the default heap growth halves the collections for ~4 MB more memory per
// instance (an A/B in the harness with wazero's termination checks: median per request 175 -> 151
// us and 188 -> 165 us; with the host's fuel instead, medians of 100, 200, 400 and 1000 are
// within noise).
func init() { debug.SetGCPercent(200) }

// rl is the relay, or nil when the settings are wrong (setupErr says why).
var rl, setupErr = setup()

func setup() (*relay.Relay, error) {
	cfg, err := relay.ParseConfig(os.Getenv)
	if err != nil {
		return nil, err
	}
	return relay.New(cfg, relay.Deps{
		Subscribers: &kv{abi.NamespaceSubscribers},
		Dedup:       &kv{abi.NamespaceDedup},
		Upstream:    &upstream{},
		Clock:       &clock{},
		ReadAll:     readAll,
	})
}

// inbox holds the request the host wrote; outbox the encoded response, kept referenced until the
// next call so the host can read it.
var inbox, outbox []byte

// req is the request being handled, reused (its header array too): nothing keeps it past handle.
// scratch is the memory the relay handles it in, reused too: handle encodes the answer before the
// next request, and the host copies what it keeps of the keys, values and upstream request.
var (
	req     relay.Request
	scratch relay.Scratch
)

// buffer returns a buffer of size bytes; the host reuses it for every request that fits.
//
//go:wasmexport edgehook_buffer
func buffer(size uint32) uint32 {
	inbox = make([]byte, max(size, 1)) // never empty: its address must be a real one
	return addr(inbox)
}

//go:wasmexport edgehook_handle
func handle(size uint32) uint64 {
	var resp *relay.Response
	err := abi.DecodeRequest(&req, inbox[:size]) // size <= len(inbox): the host asked for enough
	switch {
	case setupErr != nil:
		resp = misconfigured(setupErr.Error())
	case err != nil:
		resp = misconfigured(err.Error())
	default:
		resp = rl.HandleWith(context.Background(), &req, &scratch)
	}
	outbox = abi.EncodeResponse(outbox[:0], resp)
	return abi.PackPointer(addr(outbox), uint32(len(outbox)))
}

// misconfigured is the answer when the relay cannot run at all: loud, like a rejection.
func misconfigured(detail string) *relay.Response {
	logLine("relay: " + detail)
	outcome := string(wire.Rejected(wire.ReasonMisconfigured))
	return &relay.Response{
		Status: 500,
		Header: relay.Header{{Name: "edgehook-outcome", Value: outcome}, {Name: "content-type", Value: "text/plain; charset=utf-8"}},
		Body:   []byte(outcome + ": " + detail + "\n"),
		Detail: detail,
	}
}

// addr returns the guest address of b's first byte (0 for an empty slice).
func addr(b []byte) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

func addrString(s string) uint32 { return uint32(uintptr(unsafe.Pointer(unsafe.StringData(s)))) }

//go:wasmimport edgehook kv_get_all
func hostKVGetAll(iovPtr, count uint32) uint64

//go:wasmimport edgehook kv_put
func hostKVPut(ns, keyPtr, keyLen, valPtr, valLen uint32, ttlSeconds int64) uint64

//go:wasmimport edgehook upstream
func hostUpstream(reqPtr, reqLen, outPtr, outCap uint32) uint64

//go:wasmimport edgehook take
func hostTake(dst uint32)

//go:wasmimport edgehook now
func hostNow() int64

//go:wasmimport edgehook log
func hostLog(ptr, length uint32)

// take fetches the bytes of the host's last result.
func take(length uint32) []byte {
	b := make([]byte, length)
	if length > 0 {
		hostTake(addr(b))
	}
	return b
}

// kv is one host KV namespace. kv, upstream and clock implement the relay's dependencies with
// pointer receivers: an interface holding a value calls its method through a generated pointer
// wrapper, one more call per use in the WASM build.
type kv struct{ ns uint32 }

// iov is reused for every readAll: the host reads it before it returns. kvResults is the host's
// last answer, which it may send again as abi.CodeSame.
var (
	iov       []uint32
	kvResults string
)

// readAll is relay.Deps.ReadAll: one host call for all of a request's reads, one copy of the
// results, whose values are substrings of that copy; no copy when they are the last ones again.
func readAll(_ context.Context, reads []relay.KVRead) {
	iov = iov[:0]
	for _, r := range reads {
		iov = append(iov, r.KV.(*kv).ns, addrString(r.Key), uint32(len(r.Key)))
	}
	code, n := abi.SplitResult(hostKVGetAll(uint32(uintptr(unsafe.Pointer(unsafe.SliceData(iov)))), uint32(len(reads))))
	switch {
	case code == abi.CodeSame && n == uint32(len(kvResults)):
		// The same string, at the same address, as last time: the relay's record cache finds it
		// equal to the last record without comparing the bytes.
	case code == abi.CodeOK:
		b := take(n) // fresh and never reused: the strings may share it
		kvResults = unsafe.String(unsafe.SliceData(b), len(b))
	default:
		panic(fmt.Sprintf("abi: %s answered code %d with %d bytes", abi.KVGetAllFunc, code, n)) // the host broke the ABI: trap
	}
	if err := abi.DecodeKVResults(kvResults, reads); err != nil {
		panic(err) // the host broke the ABI: trap, and the host replaces this instance
	}
}

func (ns *kv) Get(ctx context.Context, key string) (string, bool, error) {
	r := []relay.KVRead{{KV: ns, Key: key}}
	readAll(ctx, r)
	return r[0].Value, r[0].Found, r[0].Err
}

func (ns *kv) Put(_ context.Context, key, value string, ttl time.Duration) error {
	code, n := abi.SplitResult(hostKVPut(ns.ns, addrString(key), uint32(len(key)), addrString(value), uint32(len(value)), int64(ttl/time.Second)))
	if code != abi.CodeOK {
		return abi.HostError(take(n))
	}
	return nil
}

// upstream sends the request through the host, which enforces the timeout.
type upstream struct{}

// upstreamBuf is reused for every upstream request: the host copies the bytes before it returns.
// upstreamIn and upstreamResp, the answer, are reused too: the relay is done with an answer (it
// copies what it keeps into its response, which handle encodes) before the next request.
var (
	upstreamBuf, upstreamIn []byte
	upstreamResp            relay.UpstreamResponse
)

// upstreamInSize is upstreamIn's first size, which the host writes answers into at once: room for
// the longest excerpt of a subscriber's body and a few headers.
const upstreamInSize = wire.MaxExcerptBytes + 1024

func (*upstream) Do(_ context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	upstreamBuf = abi.EncodeUpstreamRequest(upstreamBuf[:0], req)
	if upstreamIn == nil {
		upstreamIn = make([]byte, upstreamInSize)
	}
	upstreamIn = upstreamIn[:cap(upstreamIn)]
	code, n := abi.SplitResult(hostUpstream(addr(upstreamBuf), uint32(len(upstreamBuf)), addr(upstreamIn), uint32(len(upstreamIn))))
	if code == abi.CodeOK {
		if n > uint32(len(upstreamIn)) { // the host kept it: take it into a larger buffer
			upstreamIn = make([]byte, n)
			hostTake(addr(upstreamIn))
		}
		upstreamIn = upstreamIn[:n]
		if err := abi.DecodeUpstreamResponse(&upstreamResp, upstreamIn); err != nil {
			return nil, err
		}
		return &upstreamResp, nil
	}
	b := take(n)
	switch code {
	case abi.CodeTimeout:
		return nil, upstreamError{string(b), relay.ErrUpstreamTimeout}
	case abi.CodeBlocked:
		return nil, upstreamError{string(b), relay.ErrUpstreamBlocked}
	}
	return nil, abi.HostError(b)
}

// upstreamError is the host's message, wrapping the relay error its result code stands for.
type upstreamError struct {
	msg  string
	kind error
}

func (e upstreamError) Error() string { return e.msg }
func (e upstreamError) Unwrap() error { return e.kind }

type clock struct{}

func (*clock) Now() time.Time { return time.Unix(0, hostNow()) }

func logLine(s string) { hostLog(addrString(s), uint32(len(s))) }
