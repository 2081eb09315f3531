//go:build js && wasm

// Command worker is the edge relay as a Cloudflare Worker (github.com/syumai/workers). It is the
// only package that imports syscall/js; the relay itself is edge/relay.
//
// One Go instance serves every request of an isolate: main registers the handler, signals Ready
// and blocks forever, and loader.mjs keeps the first instance's handleRequest. The relay keeps no
// per-request state, and each request's KV and fetch calls are awaited by that request's own
// goroutine, so concurrent requests do not share anything but the configuration.
package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall/js"

	"github.com/syumai/workers"
	"github.com/syumai/workers/cloudflare"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// Binding names, as in wrangler.toml.
const (
	bindingSubscribers = "SUBSCRIBERS"
	bindingDedup       = "DEDUP"
)

// reasonPanic is the rejection reason of a request whose handling panicked.
const reasonPanic = "edge_panic"

func main() {
	workers.ServeNonBlock(newHandler())
	workers.Ready()
	select {} // keep this instance alive for the next requests
}

// handler serves every request with one Relay, or explains why it could not be built.
type handler struct {
	relay *relay.Relay
	err   error // configuration error, answered as 500 rejected:misconfigured
}

// newHandler reads the configuration from the environment of the first request; bindings and vars
// are the same for every request of an isolate.
func newHandler() *handler {
	cfg, err := relay.ParseConfig(cloudflare.Getenv)
	if err != nil {
		return &handler{err: err}
	}
	subs, dedup := cloudflare.GetBinding(bindingSubscribers), cloudflare.GetBinding(bindingDedup)
	for name, b := range map[string]js.Value{bindingSubscribers: subs, bindingDedup: dedup} {
		if b.IsUndefined() {
			return &handler{err: fmt.Errorf("KV binding %s is missing (wrangler.toml kv_namespaces)", name)}
		}
	}
	r, err := relay.New(cfg, relay.Deps{
		Subscribers: kvStore{subs},
		Dedup:       kvStore{dedup},
		Upstream:    fetchUpstream{},
		Clock:       relay.SystemClock{},
	})
	return &handler{relay: r, err: err}
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// One instance serves every request: a panic must fail this request, not all of them.
	defer func() {
		if p := recover(); p != nil {
			writeResponse(w, relay.Reject(500, reasonPanic, "edge panic: %v", p))
		}
	}()
	if h.err != nil {
		writeResponse(w, relay.Reject(500, wire.ReasonMisconfigured, "the Worker's configuration: %v", h.err))
		return
	}
	req := &relay.Request{Method: r.Method, Header: make(relay.Header, len(r.Header))}
	for k, vs := range r.Header {
		// The library splits every header value at "," (a signature "v1,<base64>" included);
		// joining with "," restores the value exactly as the Fetch API gave it.
		req.Header.Set(k, strings.Join(vs, ","))
	}
	if r.Body != nil { // nil for a bodyless request
		body, err := relay.ReadBody(r.Body, h.relay.MaxBody())
		if err != nil {
			writeResponse(w, relay.Reject(400, wire.ReasonMalformedHeader, "read body: %v", err))
			return
		}
		req.Body = body
	}
	resp := h.relay.Handle(context.Background(), req)
	if resp.Detail != "" {
		println("edgehook edge:", resp.Detail) // console.log, for `wrangler tail`
	}
	writeResponse(w, resp)
}

func writeResponse(w http.ResponseWriter, resp *relay.Response) {
	for k, v := range resp.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}
