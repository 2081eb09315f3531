//go:build js && wasm

package main

import (
	"context"
	"syscall/js"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// serveJS is binding.serve(method, headerText, body, done): it handles the request on its own
// goroutine, started inside this request's JS turn, and calls done([status, headerText, body]).
func (h *handler) serveJS(_ js.Value, args []js.Value) any {
	method, headers, body, done := args[0].String(), args[1].String(), args[2], args[3]
	go func() {
		resp := h.serve(method, headers, body)
		done.Invoke([]any{resp.Status, headerText(resp.Header), bytesToJS(resp.Body)})
	}()
	return nil
}

// serve runs the relay and never panics: one instance serves every request, so a panic must fail
// this request only.
func (h *handler) serve(method, headers string, body js.Value) (resp *relay.Response) {
	defer func() {
		if p := recover(); p != nil {
			resp = relay.Reject(500, wire.ReasonEdgePanic, "edge panic: %v", p)
		}
	}()
	if h.err != nil {
		return relay.Reject(500, wire.ReasonMisconfigured, "the Worker's configuration: %v", h.err)
	}
	// Copy at most MaxBody+1 bytes into Go: enough to answer 413.
	req := &relay.Request{Method: method, Header: parseHeaderText(headers), Body: bytesFromJS(body, h.relay.MaxBody()+1)}
	resp = h.relay.Handle(context.Background(), req)
	if resp.Detail != "" {
		println("edgehook edge:", resp.Detail) // console.log, for `wrangler tail`
	}
	return resp
}
