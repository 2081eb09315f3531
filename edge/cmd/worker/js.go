//go:build js && wasm

package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall/js"
	"unsafe"

	"github.com/edgehook/edgehook/edge/relay"
)

// io is loader.mjs's I/O object (binding.io), and its functions. Each call across the JS/Go
// boundary costs, and a js.Value that refers to a JS string or object costs more: Go registers a
// finalizer for each (runtime.SetFinalizer, then a call back into JS to release it after a GC)
// and JS a map entry. So only numbers cross: Go passes the address and length of its own memory,
// where the loader reads what Go sends and writes what Go asks for, and Go makes one call per
// operation, however many promises it involves.
var (
	io       = js.Global().Get("context").Get("binding").Get("io")
	ioResult = io.Get("result")
	ioTake   = io.Get("take")
	ioDone   = io.Get("done")
	ioGetAll = io.Get("getAll")
	ioPut    = io.Get("put")
	ioPost   = io.Get("post")
)

// Operations in flight, by id: settle (called from JS) hands each its outcome.
var (
	pendingMu sync.Mutex
	pending   = map[int32]chan settled{}
	nextID    int32
)

// settled is an operation's outcome: whether it succeeded, and the length of its packed result.
type settled struct {
	ok  bool
	len int
}

// settle is called by the loader when operation id has settled (ok is 1 or 0, n the length of its
// packed result); the loader then resumes the Go scheduler (Go's _resume), which runs the
// goroutine waiting in call. It is a WASM export rather than a js.FuncOf: syscall/js delivers a
// FuncOf call as an event object whose fields it reads by name and whose arguments it wraps in
// finalized values, which cost more than the rest of the wake-up in workerd. It must not block:
// the channel has room for the one outcome of its operation.
//
//go:wasmexport edgehookSettle
func settle(id, ok, n int32) {
	pendingMu.Lock()
	ch := pending[id]
	delete(pending, id)
	pendingMu.Unlock()
	if ch != nil { // the loader settles each id once
		ch <- settled{ok: ok != 0, len: int(n)}
	}
}

// call starts fn(id, args...), an operation that calls settle(id, ok, resultLength) when it is
// done, blocks the calling goroutine until then, and returns the operation's packed result: its
// items (see nextItem), or its failure's message as the error. The goroutine resumes inside the JS
// turn that settled it, which belongs to the request that started the operation. The args are
// numbers; memory they point into must be heap memory (see addr), which the caller keeps alive
// (runtime.KeepAlive) until call returns: JS reads it during fn.Invoke.
func call(fn js.Value, args ...any) ([]byte, error) {
	ch := make(chan settled, 1)
	pendingMu.Lock()
	nextID++
	for pending[nextID] != nil { // after int32 wraps, an id may still be in use
		nextID++
	}
	id := nextID
	pending[id] = ch
	pendingMu.Unlock()
	fn.Invoke(append([]any{id}, args...)...) // never throws: the loader turns a throw into a failure
	s := <-ch
	res := make([]byte, s.len)
	if s.len > 0 {
		ioResult.Invoke(id, addr(res))
		runtime.KeepAlive(res)
	}
	if !s.ok {
		msg, _ := nextItem(&res)
		return nil, errors.New(msg)
	}
	return res, nil
}

// addr is the address of b's memory in the WASM linear memory, where the loader reads or writes
// it. b must be heap memory, and addr makes sure it is: an address is a plain number to escape
// analysis, so a buffer whose only use is addr(b) may stay on the goroutine's stack, which Go
// moves when it grows or shrinks it (in any function prologue, or during a GC), and JS would then
// read or write freed memory. The heap (like static data) does not move. The caller keeps b alive
// (runtime.KeepAlive) until the JS call that uses it has returned.
func addr(b []byte) int { return heapAddr(unsafe.Pointer(unsafe.SliceData(b))) }

// strAddr is addr of a string's bytes.
func strAddr(s string) int { return heapAddr(unsafe.Pointer(unsafe.StringData(s))) }

// heapAddr returns p as a number, after making the memory p points to escape to the heap: the
// store escape analysis cannot rule out is never made (alwaysFalse is never set), so it costs a
// load and a branch. The same device as the runtime's internal/abi.Escape.
func heapAddr(p unsafe.Pointer) int {
	if alwaysFalse {
		escapeSink = p
	}
	return int(uintptr(p))
}

var (
	alwaysFalse bool           // never set; see heapAddr
	escapeSink  unsafe.Pointer // never written; see heapAddr
)

// nullItem is the length of a null item in a packed list.
const nullItem = 0xffffffff

// pack appends items to b as a packed list, the loader's unpack format: each item's length as a
// little-endian uint32, then its bytes.
func pack(b []byte, items ...string) []byte {
	for _, s := range items {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	return b
}

// nextItem takes the first item off a packed list from the loader (pack in loader.mjs) and
// returns it as a string over the list's memory, which is never written again; null gives "" and
// false.
func nextItem(b *[]byte) (string, bool) {
	if len(*b) < 4 {
		panic(fmt.Sprintf("loader result: %d bytes left, want an item's length", len(*b)))
	}
	n := binary.LittleEndian.Uint32(*b)
	*b = (*b)[4:]
	if n == nullItem {
		return "", false
	}
	s := unsafe.String(unsafe.SliceData(*b), int(n))
	*b = (*b)[n:]
	return s, true
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
