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

// serveJS is binding.serve(request) → Promise<Response>. The request is handled on its own
// goroutine, which the promise's executor starts inside this request's JS turn.
func (h *handler) serveJS(_ js.Value, args []js.Value) any {
	req := args[0]
	var executor js.Func
	executor = js.FuncOf(func(_ js.Value, p []js.Value) any {
		executor.Release()
		resolve := p[0]
		go func() {
			resolve.Invoke(toJSResponse(h.serve(req)))
		}()
		return nil
	})
	return jsPromise.New(executor)
}

// serve converts the request, runs the relay and never panics: one instance serves every
// request, so a panic must fail this request only.
func (h *handler) serve(jsReq js.Value) (resp *relay.Response) {
	defer func() {
		if p := recover(); p != nil {
			resp = relay.Reject(500, reasonPanic, "edge panic: %v", p)
		}
	}()
	if h.err != nil {
		return relay.Reject(500, wire.ReasonMisconfigured, "the Worker's configuration: %v", h.err)
	}
	req := &relay.Request{Method: jsReq.Get("method").String(), Header: relay.Header{}}
	entries := jsArray.Call("from", jsReq.Get("headers")) // [[name, value], ...], names lower-case
	for i, n := 0, entries.Length(); i < n; i++ {
		e := entries.Index(i)
		req.Header[e.Index(0).String()] = e.Index(1).String()
	}
	if body := jsReq.Get("body"); !body.IsNull() { // null for a bodyless request
		buf, err := await(jsReq.Call("arrayBuffer"))
		if err != nil {
			return relay.Reject(400, wire.ReasonMalformedHeader, "read body: %v", err)
		}
		// Copy at most MaxBody+1 bytes into Go: enough to answer 413.
		n := min(int64(buf.Get("byteLength").Int()), h.relay.MaxBody()+1)
		req.Body = make([]byte, n)
		js.CopyBytesToGo(req.Body, jsUint8Array.New(buf, 0, n))
	}
	resp = h.relay.Handle(context.Background(), req)
	if resp.Detail != "" {
		println("edgehook edge:", resp.Detail) // console.log, for `wrangler tail`
	}
	return resp
}

// toJSResponse builds the Fetch API Response.
func toJSResponse(resp *relay.Response) js.Value {
	headers := jsHeaders.New()
	for k, v := range resp.Header {
		headers.Call("set", k, v)
	}
	init := jsObject.New()
	init.Set("status", resp.Status)
	init.Set("headers", headers)
	body := js.Null()
	if len(resp.Body) > 0 && !nullBodyStatus(resp.Status) {
		body = jsUint8Array.New(len(resp.Body))
		js.CopyBytesToJS(body, resp.Body)
	}
	return jsResponse.New(body, init)
}

// nullBodyStatus reports the statuses whose Response must not have a body.
func nullBodyStatus(status int) bool {
	return status == 101 || status == 204 || status == 205 || status == 304
}
