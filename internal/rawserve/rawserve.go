// Package rawserve serves raw TCP connections on loopback, for tests that write HTTP by hand:
// answers net/http would not send (a head of a million headers, one cut short, a malformed line).
package rawserve

import (
	"net"
	"sync"
	"testing"
)

// Each serves every connection ln accepts with handle, each on its own goroutine, and closes the
// connection when handle returns. When the test ends it closes ln and waits for the handlers.
func Each(t testing.TB, ln net.Listener, handle func(c net.Conn)) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				handle(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
}

// Listen listens on a free port of 127.0.0.1.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
