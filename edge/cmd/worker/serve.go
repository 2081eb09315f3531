//go:build js && wasm

package main

import (
	"context"
	"syscall/js"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// reasonPanic is the rejection reason of a request whose handling panicked.
const reasonPanic = "edge_panic"

var jsPromise = js.Global().Get("Promise")

// serveJS is binding.serve(method, headerText, body) → Promise<[status, headerText, body]>. The
// request runs on its own goroutine, which the promise's executor starts inside this request's JS
// turn.
func (h *handler) serveJS(_ js.Value, args []js.Value) any {
	method, headers, body := args[0].String(), args[1].String(), args[2]
	var executor js.Func
	executor = js.FuncOf(func(_ js.Value, p []js.Value) any {
		executor.Release()
		resolve := p[0]
		go func() {
			resp := h.serve(method, headers, body)
			resolve.Invoke([]any{resp.Status, headerText(resp.Header), bytesToJS(resp.Body)})
		}()
		return nil
	})
	return jsPromise.New(executor)
}

// serve runs the relay and never panics: one instance serves every request, so a panic must fail
// this request only.
func (h *handler) serve(method, headers string, body js.Value) (resp *relay.Response) {
	defer func() {
		if p := recover(); p != nil {
			resp = relay.Reject(500, reasonPanic, "edge panic: %v", p)
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
