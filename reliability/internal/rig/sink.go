package rig

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Sink is a subscriber endpoint on 127.0.0.1. It counts every request per (path, webhook-id) and
// every accepted connection, and answers with Handler (200 when nil).
type Sink struct {
	srv     *httptest.Server
	handler http.HandlerFunc

	conns  atomic.Int64
	mu     sync.Mutex
	seen   map[string]int // path + " " + webhook-id → requests
	total  int
	bodies map[string][]byte // webhook-id → last body
	note   chan struct{}
}

// NewSink starts a sink on a fresh loopback port; h may be nil (always 200). It is closed at the
// end of the test.
func NewSink(t testing.TB, h http.HandlerFunc) *Sink {
	t.Helper()
	return NewSinkOn(t, "127.0.0.1:0", h)
}

// NewSinkOn starts a sink on addr, a loopback address.
func NewSinkOn(t testing.TB, addr string, h http.HandlerFunc) *Sink {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("rig: sink listen %s: %v", addr, err)
	}
	s := &Sink{handler: h, seen: map[string]int{}, bodies: map[string][]byte{}, note: make(chan struct{}, 1)}
	s.srv = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.srv.Start()
	t.Cleanup(func() {
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

func (s *Sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body)) // the handler may read it again
	id := r.Header.Get("webhook-id")
	s.mu.Lock()
	s.seen[r.URL.Path+" "+id]++
	s.total++
	s.bodies[id] = body
	s.mu.Unlock()
	select {
	case s.note <- struct{}{}:
	default:
	}
	if s.handler != nil {
		s.handler(w, r)
	}
}

// URL is the sink's base URL, http://127.0.0.1:<port>.
func (s *Sink) URL() string { return s.srv.URL }

// Addr is the sink's host:port.
func (s *Sink) Addr() string { return s.srv.Listener.Addr().String() }

// Conns is the number of connections accepted so far.
func (s *Sink) Conns() int64 { return s.conns.Load() }

// Total is the number of requests received.
func (s *Sink) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// Counts returns a copy of the requests per (path, webhook-id).
func (s *Sink) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.seen))
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// Seen is how many requests with this path and webhook-id arrived.
func (s *Sink) Seen(path, id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[path+" "+id]
}

// Body is the last body received with this webhook-id.
func (s *Sink) Body(id string) []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bodies[id]
}

// Until waits, woken by each request, until cond holds; it fails the test after timeout.
func (s *Sink) Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-s.note:
		case <-deadline.C:
			t.Fatalf("rig: timed out after %s waiting for %s (sink saw %d requests)", timeout, what, s.Total())
		}
	}
}

// Eventually polls cond every 50 ms until it holds or timeout passes (for state kept by another
// process, which has no signal to wait on); it fails the test on timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("rig: timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
