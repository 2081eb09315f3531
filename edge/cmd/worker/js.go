//go:build js && wasm

package main

import (
	"errors"
	"strings"
	"sync"
	"syscall/js"

	"github.com/edgehook/edgehook/edge/relay"
)

// io is loader.mjs's I/O object (binding.io). Each call across the JS/Go boundary costs (a
// js.Value that refers to a JS string or object carries a finalizer), so the loader does the
// marshalling in bulk and Go makes one call per operation, however many promises it involves.
var io = js.Global().Get("context").Get("binding").Get("io")

// Operations in flight, by id: settle (called from JS) hands each its outcome.
var (
	pendingMu sync.Mutex
	pending   = map[int]chan settled{}
	nextID    int
)

type settled struct {
	ok bool
	v  js.Value
}

func init() {
	io.Set("settle", js.FuncOf(func(_ js.Value, args []js.Value) any {
		id := args[0].Int()
		pendingMu.Lock()
		ch := pending[id]
		delete(pending, id)
		pendingMu.Unlock()
		ch <- settled{ok: args[1].Bool(), v: args[2]}
		return nil
	}))
}

// call starts io[method](id, args...), an operation that calls io.settle(id, ok, value) when it
// is done, and blocks the calling goroutine until then. The goroutine resumes inside the JS turn
// that settled it, which belongs to the request that started the operation.
func call(method string, args ...any) (js.Value, error) {
	ch := make(chan settled, 1)
	pendingMu.Lock()
	nextID++
	id := nextID
	pending[id] = ch
	pendingMu.Unlock()
	io.Call(method, append([]any{id}, args...)...)
	s := <-ch
	if !s.ok {
		return js.Value{}, errors.New(s.v.String())
	}
	return s.v, nil
}

// headerText renders headers as the loader's "name\nvalue\n…" form.
func headerText(h relay.Header) string {
	var b strings.Builder
	for _, f := range h {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(f.Name)
		b.WriteByte('\n')
		b.WriteString(f.Value)
	}
	return b.String()
}

// parseHeaderText reads the loader's "name\nvalue\n…" form (names lower-case, as Fetch gives).
func parseHeaderText(s string) relay.Header {
	h := make(relay.Header, 0, strings.Count(s, "\n")/2+1)
	for s != "" {
		name, rest, _ := strings.Cut(s, "\n")
		value, rest2, _ := strings.Cut(rest, "\n")
		h.Set(name, value)
		s = rest2
	}
	return h
}

// bytesFromJS copies the first n bytes of a Uint8Array (null gives nil); the caller knows its
// length, which saves asking JS for it.
func bytesFromJS(v js.Value, n int) []byte {
	if v.IsNull() || v.IsUndefined() {
		return nil
	}
	b := make([]byte, n)
	js.CopyBytesToGo(b, v)
	return b
}

// bytesToJS returns a Uint8Array holding b.
func bytesToJS(b []byte) js.Value {
	v := jsUint8Array.New(len(b))
	js.CopyBytesToJS(v, b)
	return v
}

var jsUint8Array = js.Global().Get("Uint8Array")
