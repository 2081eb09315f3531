//go:build js && wasm

package main

import (
	"context"
	"syscall/js"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// job is one request from binding.serve.
type job struct {
	method, headers string
	body            js.Value
	bodyLen         int
	done            js.Value
}

// idle hands a request to a server goroutine waiting for one.
var idle = make(chan job)

// serveJS is binding.serve(method, headerText, body, bodyLength, done): it hands the request to a
// server goroutine, which calls done(status, headerText, body). The goroutines outlive their
// requests and serve later ones: a new goroutine would grow its stack again on every request,
// which in WASM is a large share of the request's cost.
func (h *handler) serveJS(_ js.Value, args []js.Value) any {
	j := job{method: args[0].String(), headers: args[1].String(), body: args[2], bodyLen: args[3].Int(), done: args[4]}
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
		j.done.Invoke(resp.Status, headerText(resp.Header), bytesToJS(resp.Body))
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
	// Copy at most MaxBody+1 bytes into Go: enough to answer 413.
	req := &relay.Request{Method: j.method, Header: parseHeaderText(j.headers), Body: bytesFromJS(j.body, int(min(int64(j.bodyLen), h.relay.MaxBody()+1)))}
	resp = h.relay.Handle(context.Background(), req)
	if resp.Detail != "" {
		println("edgehook edge:", resp.Detail) // console.log, for `wrangler tail`
	}
	return resp
}
