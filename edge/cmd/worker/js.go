//go:build js && wasm

package main

import (
	"errors"
	"sync"
	"syscall/js"
	"time"
)

// JS globals, looked up once. js.Global() is wasm_exec's proxy of globalThis, and workerd refuses
// calls whose `this` is that proxy, so functions are called with Invoke.
var (
	global         = js.Global()
	jsArray        = global.Get("Array")
	jsObject       = global.Get("Object")
	jsPromise      = global.Get("Promise")
	jsResponse     = global.Get("Response")
	jsHeaders      = global.Get("Headers")
	jsUint8Array   = global.Get("Uint8Array")
	jsAbort        = global.Get("AbortController")
	jsFetch        = global.Get("fetch")
	jsSetTimeout   = global.Get("setTimeout")
	jsClearTimeout = global.Get("clearTimeout")
)

// await blocks the calling goroutine until p settles. Both callbacks are released whichever runs
// (the library's helper leaks one per call, which a long-lived instance cannot afford). The
// goroutine resumes inside the JS turn that settled p, that is, in the request's own context.
func await(p js.Value) (js.Value, error) {
	type result struct {
		v   js.Value
		err error
	}
	ch := make(chan result, 1)
	then := js.FuncOf(func(_ js.Value, args []js.Value) any {
		ch <- result{v: args[0]}
		return nil
	})
	catch := js.FuncOf(func(_ js.Value, args []js.Value) any {
		ch <- result{err: jsError(args[0])}
		return nil
	})
	p.Call("then", then, catch)
	r := <-ch
	then.Release()
	catch.Release()
	return r.v, r.err
}

// jsError turns a rejection reason into an error.
func jsError(v js.Value) error {
	if v.Type() == js.TypeObject {
		if msg := v.Get("message"); msg.Type() == js.TypeString {
			return errors.New(v.Get("name").String() + ": " + msg.String())
		}
	}
	return errors.New(v.Call("toString").String())
}

// afterFunc calls f after d with a JS timer. Unlike a Go timer, whose single JS timeout may have
// been scheduled during another request (and die with it), this one belongs to the request that
// calls afterFunc. stop cancels it.
func afterFunc(d time.Duration, f func()) (stop func()) {
	var (
		cb   js.Func
		once sync.Once
	)
	release := func() { once.Do(cb.Release) }
	cb = js.FuncOf(func(js.Value, []js.Value) any {
		release()
		f()
		return nil
	})
	id := jsSetTimeout.Invoke(cb, d.Milliseconds())
	return func() {
		jsClearTimeout.Invoke(id)
		release()
	}
}
