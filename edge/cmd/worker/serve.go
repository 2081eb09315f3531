//go:build js && wasm

package main

import (
	"context"
	"runtime"
	"unsafe"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// job is one request from the loader: its id for it and the lengths of its encoded method, header
// text and body, which io.take copies into Go's memory.
type job struct{ id, methodLen, headersLen, bodyLen int }

// idle hands a request to a server goroutine waiting for one.
var idle = make(chan job)

// served is the handler of every request (main sets it before signalling Ready).
var served *handler

// serveExport hands the loader's request id to a server goroutine, which answers it with io.done;
// the loader then resumes the Go scheduler (Go's _resume), which runs that goroutine. Like
// settle, it is a WASM export, not a js.FuncOf, and it never blocks. The goroutines outlive their
// requests and serve later ones: a new goroutine would grow its stack again on every request,
// which in WASM is a large share of the request's cost.
//
//go:wasmexport edgehookServe
func serveExport(id, methodLen, headersLen, bodyLen int32) {
	j := job{id: int(id), methodLen: int(methodLen), headersLen: int(headersLen), bodyLen: int(bodyLen)}
	select {
	case idle <- j:
	default: // every server is busy: one more, which stays for later requests
		go served.server(j)
	}
}

// bodyCapExport returns how many body bytes the loader reads and hands to take (bodyCap), so that
// an oversize body is neither read whole nor held whole in the isolate's memory.
//
//go:wasmexport edgehookBodyCap
func bodyCapExport() int32 { return int32(served.bodyCap()) }

// bodyCap is the most body bytes a request needs: MaxBody+1, enough for the relay to answer 413
// (MaxMaxBody keeps it within int32), or none when misconfigured, which serve answers without a
// body.
func (h *handler) bodyCap() int {
	if h.err != nil {
		return 0
	}
	return int(h.relay.MaxBody() + 1)
}

// server runs j, then every request handed to it.
func (h *handler) server(j job) {
	for {
		resp := h.serve(j)
		headers := headerText(resp.Header)
		ioDone.Invoke(j.id, resp.Status, strAddr(headers), len(headers), addr(resp.Body), len(resp.Body))
		runtime.KeepAlive(headers)
		runtime.KeepAlive(resp)
		j = <-idle
	}
}

// panicHook, when set, runs on each request before the relay. Only a build with the
// edgehook_panic tag sets it (panic_hook.go): the workerd tests load that bundle to see a panic
// answered and the instance serve on. The bundle make worker builds leaves it nil.
var panicHook func(*relay.Request)

// serve runs the relay and never panics: one instance serves every request, so a panic must fail
// this request only.
func (h *handler) serve(j job) (resp *relay.Response) {
	defer func() {
		if p := recover(); p != nil {
			resp = relay.Reject(500, wire.ReasonEdgePanic, "edge panic: %v", p)
		}
	}()
	if h.err != nil {
		return relay.Reject(500, wire.ReasonMisconfigured, "the Worker's configuration: %v", h.err)
	}
	req := h.take(j)
	if panicHook != nil {
		panicHook(req)
	}
	resp = h.relay.Handle(context.Background(), req)
	if resp.Detail != "" {
		println("edgehook edge:", resp.Detail) // console.log, for `wrangler tail`
	}
	return resp
}

// take copies j's method, headers and at most bodyCap body bytes into one new buffer, which the
// Request's strings and body share: nothing writes it again.
func (h *handler) take(j job) *relay.Request {
	bodyLen := min(j.bodyLen, h.bodyCap())
	b := make([]byte, j.methodLen+j.headersLen+bodyLen)
	ioTake.Invoke(j.id, addr(b), bodyLen)
	runtime.KeepAlive(b)
	method, headers, body := b[:j.methodLen], b[j.methodLen:j.methodLen+j.headersLen], b[j.methodLen+j.headersLen:]
	return &relay.Request{Method: str(method), Header: parseHeaderText(str(headers)), Body: body}
}

// str returns b as a string over the same memory; the caller never writes b again.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
