package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// arrival is one request the sink received.
type arrival struct {
	sub string // the last path segment: /s/<subscriber id>
	id  string // the webhook-id header: the event id
	at  time.Time
}

// sink is the subscribers' endpoint: it answers 204 at once and records every arrival. Every
// subscriber's URL is http://<addr>/s/<id>.
type sink struct {
	srv *http.Server
	ln  net.Listener

	mu       sync.Mutex
	arrivals []arrival
	notify   chan struct{} // signalled (coalesced) on every arrival
	conns    atomic.Int64  // connections accepted since the last reset
}

// newSink starts a sink on a free loopback port.
func newSink() (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{ln: ln, notify: make(chan struct{}, 1)}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, state http.ConnState) {
			if state == http.StateNew {
				s.conns.Add(1)
			}
		}}
	go s.srv.Serve(ln)
	return s, nil
}

// serve reads the body, records the arrival and answers 204.
func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	_, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a := arrival{sub: r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:], id: r.Header.Get(wire.HeaderWebhookID), at: time.Now()}
	s.mu.Lock()
	s.arrivals = append(s.arrivals, a)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	w.WriteHeader(http.StatusNoContent)
}

// url is the endpoint of a subscriber.
func (s *sink) url(sub string) string { return "http://" + s.ln.Addr().String() + "/s/" + sub }

// reset forgets the arrivals and connections so far.
func (s *sink) reset() {
	s.mu.Lock()
	s.arrivals = nil
	s.mu.Unlock()
	s.conns.Store(0)
}

// connections returns how many connections it accepted since the last reset.
func (s *sink) connections() int { return int(s.conns.Load()) }

// count returns how many requests arrived since the last reset.
func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.arrivals)
}

// first returns the time of the first arrival since the last reset; zero if none.
func (s *sink) first() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.arrivals) == 0 {
		return time.Time{}
	}
	return s.arrivals[0].at
}

// take returns the arrivals since the last reset, in arrival order, and resets.
func (s *sink) take() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.arrivals
	s.arrivals = nil
	return a
}

// waitFor waits until n requests have arrived, or nothing has arrived for quiet (the sender is
// done or stuck), or limit has passed, or ctx ends. It returns the count.
func (s *sink) waitFor(ctx context.Context, n int, quiet, limit time.Duration) int {
	idle := time.NewTimer(quiet)
	defer idle.Stop()
	end := time.NewTimer(limit)
	defer end.Stop()
	for {
		if c := s.count(); c >= n {
			return c
		}
		select {
		case <-s.notify:
			idle.Reset(quiet)
		case <-idle.C:
			return s.count()
		case <-end.C:
			return s.count()
		case <-ctx.Done():
			return s.count()
		}
	}
}

// close stops the sink.
func (s *sink) close() error { return s.srv.Close() }

// hangingServer accepts connections and never answers: a subscriber that is up but stuck.
type hangingServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
	done  chan struct{}
}

// newHangingServer starts one on a free loopback port.
func newHangingServer() (*hangingServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &hangingServer{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
		}
	}()
	return h, nil
}

// url is the endpoint of a subscriber on it.
func (h *hangingServer) url(sub string) string { return "http://" + h.ln.Addr().String() + "/s/" + sub }

// accepted returns how many connections it took.
func (h *hangingServer) accepted() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// close stops accepting and closes every connection taken.
func (h *hangingServer) close() error {
	err := h.ln.Close()
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		err = errors.Join(err, c.Close())
	}
	return err
}
