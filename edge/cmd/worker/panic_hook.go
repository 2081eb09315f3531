//go:build js && wasm && edgehook_panic

package main

import "github.com/edgehook/edgehook/edge/relay"

// panicHeader makes a request of this test build panic in the Go instance, as a bug would.
const panicHeader = "edgehook-test-panic"

func init() {
	panicHook = func(r *relay.Request) {
		if v := r.Header.Get(panicHeader); v != "" {
			panic("asked by " + panicHeader + ": " + v)
		}
	}
}
