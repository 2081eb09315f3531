//go:build js && wasm

package main

import (
	"context"
	"runtime"
	"syscall/js"
	"unsafe"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// job is one request from binding.serve: the loader's id for it and the lengths of its encoded
// method, header text and body, which io.take copies into Go's memory.
type job struct{ id, methodLen, headersLen, bodyLen int }

// idle hands a request to a server goroutine waiting for one.
var idle = make(chan job)

// serveJS is binding.serve(id, methodLength, headersLength, bodyLength): it hands the request to
// a server goroutine, which answers it with io.done. The goroutines outlive their requests and
// serve later ones: a new goroutine would grow its stack again on every request, which in WASM is
// a large share of the request's cost.
func (h *handler) serveJS(_ js.Value, args []js.Value) any {
	j := job{id: args[0].Int(), methodLen: args[1].Int(), headersLen: args[2].Int(), bodyLen: args[3].Int()}
	select {
	case idle <- j:
	default: // every server is busy: one more, which stays for later requests
		go h.server(j)
	}
	return nil
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
	resp = h.relay.Handle(context.Background(), h.take(j))
	if resp.Detail != "" {
		println("edgehook edge:", resp.Detail) // console.log, for `wrangler tail`
	}
	return resp
}

// take copies j's method, headers and at most MaxBody+1 body bytes (enough to answer 413) into
// one new buffer, which the Request's strings and body share: nothing writes it again.
func (h *handler) take(j job) *relay.Request {
	bodyLen := int(min(int64(j.bodyLen), h.relay.MaxBody()+1))
	b := make([]byte, j.methodLen+j.headersLen+bodyLen)
	ioTake.Invoke(j.id, addr(b), bodyLen)
	runtime.KeepAlive(b)
	method, headers, body := b[:j.methodLen], b[j.methodLen:j.methodLen+j.headersLen], b[j.methodLen+j.headersLen:]
	return &relay.Request{Method: str(method), Header: parseHeaderText(str(headers)), Body: body}
}

// str returns b as a string over the same memory; the caller never writes b again.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
