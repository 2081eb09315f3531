package engine

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/edgehook/edgehook/internal/h1"
	"github.com/edgehook/edgehook/internal/netguard"
)

func TestNewDirectTransportRefusesAZeroPool(t *testing.T) {
	if _, err := NewDirectTransport(nil, 0); err == nil || !strings.Contains(err.Error(), "maxIdlePerHost") {
		t.Fatalf("got %v, want an error naming maxIdlePerHost", err)
	}
}

func TestNewDirectTransportGuardsAddressesLikeTheEngine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	send := func(rt http.RoundTripper) error {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"a":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return nil
	}
	for _, allow := range [][]netip.Prefix{nil, {netip.MustParsePrefix("10.0.0.0/8")}} {
		rt, err := NewDirectTransport(allow, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := send(rt); !errors.Is(err, netguard.ErrBlocked) {
			t.Fatalf("allow %v: got %v, want %v", allow, err, netguard.ErrBlocked)
		}
	}
	rt, err := NewDirectTransport([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.(*h1.Transport).CloseIdleConnections)
	if err := send(rt); err != nil {
		t.Fatal(err)
	}
}

// Concurrent requests each get their own connection, and the pool keeps them all for the next
// round: n senders use n keep-alive connections (the benchmark's ceiling relies on it).
func TestNewDirectTransportKeepsOneConnectionPerConcurrentSender(t *testing.T) {
	const senders, rounds = 3, 4
	var conns atomic.Int64
	// A round's requests are answered once all of them are in, so they are in flight at once.
	var mu sync.Mutex
	var in int
	all := make(chan struct{})
	failed := make(chan struct{}) // closed when the test ends: no handler waits for a lost request
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		wait := all
		if in++; in == senders {
			in = 0
			close(all)
			all = make(chan struct{})
		}
		mu.Unlock()
		select {
		case <-wait:
		case <-failed:
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(failed) }) // before srv.Close, which waits for the handlers
	rt, err := NewDirectTransport([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, senders)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.(*h1.Transport).CloseIdleConnections)
	for round := range rounds {
		errs := make(chan error, senders)
		for range senders {
			go func() {
				req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL, strings.NewReader(`{"a":1}`))
				if err == nil {
					var resp *http.Response
					if resp, err = rt.RoundTrip(req); err == nil {
						resp.Body.Close()
					}
				}
				errs <- err
			}()
		}
		for range senders {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if n := conns.Load(); n != senders {
			t.Fatalf("round %d: %d connections, want %d", round, n, senders)
		}
	}
}
