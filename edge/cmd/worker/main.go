//go:build js && wasm

// Command worker is the edge relay as a Cloudflare Worker. It is the only package that imports
// syscall/js; the relay itself is edge/relay.
//
// github.com/syumai/workers supplies the runtime glue: the generated assets (wasm_exec.js,
// runtime.mjs), Ready, and the Worker's env (cloudflare.Getenv, GetBinding). The request and
// response conversion and the subscriber fetch are our own (serve.go, fetch.go, loader.mjs): the
// library pumps both bodies through Go pipes and JS streams, one await per chunk, splits every
// header value at ",", leaks a callback per awaited promise, and its fetch ignores deadlines.
// Every relay decision is made in Go (edge/relay); loader.mjs only marshals in bulk.
//
// One Go instance serves every request of an isolate: main sets up the handler, signals Ready
// and blocks forever, and loader.mjs sends every request to that instance. The relay keeps no
// per-request state, and each request's KV and fetch promises are awaited by that request's own
// goroutines, resumed from the JS turn of that request's own promise.
package main

import (
	"fmt"
	"strconv"
	"syscall/js"

	"github.com/syumai/workers"
	"github.com/syumai/workers/cloudflare"

	"github.com/edgehook/edgehook/edge/relay"
)

// maxWorkerBody bounds MAX_BODY_BYTES in the Worker, below relay.MaxMaxBody (the local edge's
// bound): a Worker isolate has 128 MB, and while a request is forwarded it holds its body about
// three times: Go's copy, the loader's copy that fetch sends (Go's memory may be reused or moved
// by a growth before fetch has read it), and, until Go's collector runs, the garbage of an
// earlier request's body in Go's heap, which grows to about twice what is live before it
// collects (and WASM memory never shrinks). 3 × 32 MiB leaves room for the Go instance and the
// JS heap; several such bodies at once in one isolate may still not fit.
const maxWorkerBody = 32 << 20

// Binding names, as in wrangler.toml.
const (
	bindingSubscribers = "SUBSCRIBERS"
	bindingDedup       = "DEDUP"
)

func main() {
	served = newHandler() // requests come in through serveExport
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
	cfg, err := relay.ParseConfig(getenv)
	if err != nil {
		return &handler{err: err}
	}
	if cfg.MaxBody > maxWorkerBody {
		return &handler{err: fmt.Errorf("%s: %d is over the Worker's limit of %d (32 MiB): a larger body does not fit a 128 MB isolate",
			relay.EnvMaxBody, cfg.MaxBody, maxWorkerBody)}
	}
	subs, dedup := cloudflare.GetBinding(bindingSubscribers), cloudflare.GetBinding(bindingDedup)
	for name, b := range map[string]js.Value{bindingSubscribers: subs, bindingDedup: dedup} {
		if b.IsUndefined() {
			return &handler{err: fmt.Errorf("KV binding %s is missing (wrangler.toml kv_namespaces)", name)}
		}
		// Another kind of binding under the name (a var, say) failed every KV call, answered as a
		// KV outage (503 kv_unavailable), which the origin logs as one to wait out.
		if b.Type() != js.TypeObject || b.Get("get").Type() != js.TypeFunction || b.Get("put").Type() != js.TypeFunction {
			return &handler{err: fmt.Errorf("binding %s is a %s, not a KV namespace (wrangler.toml kv_namespaces)", name, b.Type())}
		}
	}
	r, err := relay.New(cfg, relay.Deps{
		Subscribers: kvStore{bindingSubscribers},
		Dedup:       kvStore{bindingDedup},
		Upstream:    fetchUpstream{},
		Clock:       relay.SystemClock{},
		ReadAll:     readAll, // KV calls are promises: a request's reads overlap
	})
	return &handler{relay: r, err: err}
}

// getenv reads a var or secret as text. wrangler.toml may give a var as a number
// (MAX_BODY_BYTES = 1048576, unquoted), which js.Value.String (and so cloudflare.Getenv) renders
// as "<number: 1048576>": a number is written in decimal instead. Any other type keeps String's
// rendering, which ParseConfig refuses, naming the setting.
func getenv(name string) string {
	switch v := cloudflare.GetBinding(name); v.Type() {
	case js.TypeUndefined:
		return ""
	case js.TypeNumber:
		return strconv.FormatFloat(v.Float(), 'f', -1, 64)
	default:
		return v.String()
	}
}
