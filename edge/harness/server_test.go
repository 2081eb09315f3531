package harness_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/internal/rawserve"
	"github.com/edgehook/edgehook/shared/wire"
)

// A server loads its SUBSCRIBERS namespace from the bulk file and relays over HTTP, to an
// internal address only if AllowNetworks has it: an edge-mode subscriber's URL is chosen by
// whoever holds an API token, and must not reach the local edge's machine or network (the
// origin's direct mode refuses them alike). The refusal reaches the origin as one
// (rejected:blocked_address), not as the subscriber being unreachable, which counts against its
// circuit.
func TestServerServesTheKVFile(t *testing.T) {
	for _, c := range []struct {
		name     string
		allow    []netip.Prefix
		status   int
		outcome  wire.Outcome
		received int64
	}{
		{"loopback allowed", loopback, 200, wire.OutcomeForwarded, 1},
		{"loopback not allowed", nil, 403, wire.Rejected(wire.ReasonBlockedAddress), 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			url, received := subscriber(t, 200)
			entry, err := wire.SubscriberEntry("sub_file", &wire.SubscriberRecord{URL: url, TimeoutMS: 2000, Active: true})
			if err != nil {
				t.Fatal(err)
			}
			data, err := wire.EncodeBulk([]wire.BulkEntry{entry})
			if err != nil {
				t.Fatal(err)
			}
			kvFile := filepath.Join(t.TempDir(), "kv.json")
			if err := os.WriteFile(kvFile, data, 0o644); err != nil {
				t.Fatal(err)
			}
			srv, err := harness.New(context.Background(), harness.Config{KVFile: kvFile, WASMPath: wasmPath, Relay: relayConfig(), Pool: 1,
				CacheDir: cacheDir, AllowNetworks: c.allow}, quiet)
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close(context.Background())
			edge := serve(t, srv.Handler())

			req := signedRequest("del_file", "sub_file", []byte(`{"n":1}`), time.Now())
			hreq, err := http.NewRequest(req.Method, edge, bytes.NewReader(req.Body))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range req.Header {
				hreq.Header.Set(f.Name, f.Value)
			}
			client := &http.Client{Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			resp, err := client.Do(hreq)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status || resp.Header.Get(wire.HeaderOutcome) != string(c.outcome) || received.Load() != c.received {
				t.Fatalf("%d %q, subscriber received %d; want %d %s, %d", resp.StatusCode, resp.Header.Get(wire.HeaderOutcome), received.Load(),
					c.status, c.outcome, c.received)
			}
		})
	}
}

func TestNewServerNamesWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	badKV := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(badKV, []byte(`[{"key":"sub:x","value":"{}","expiration_ttl":5}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		cfg   harness.Config
		wants string
	}{
		{"no module", harness.Config{WASMPath: filepath.Join(dir, "none.wasm"), Relay: relayConfig()}, "make edge-wasm"},
		{"no kv file", harness.Config{WASMPath: wasmPath, KVFile: filepath.Join(dir, "none.json"), Relay: relayConfig()}, "none.json"},
		{"bad kv file", harness.Config{WASMPath: wasmPath, KVFile: badKV, Relay: relayConfig()}, "expiration_ttl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := harness.New(context.Background(), tc.cfg, quiet)
			if err == nil || !strings.Contains(err.Error(), tc.wants) {
				t.Fatalf("err = %v, want one naming %q", err, tc.wants)
			}
		})
	}
}

// A client that sends a head and then stalls in the body is cut off once the read timeout has
// passed: without one, it held its connection, a goroutine and a buffer of its Content-Length for
// as long as it liked.
func TestServerCutsOffAStalledBody(t *testing.T) {
	const readTimeout = 200 * time.Millisecond
	srv, err := harness.New(context.Background(), harness.Config{WASMPath: wasmPath, Relay: relayConfig(), Pool: 1,
		CacheDir: cacheDir, ReadTimeout: readTimeout}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close(context.Background())
	ln := rawserve.Listen(t)
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: edge\r\nContent-Length: 1000\r\n\r\n{\"n\":"); err != nil {
		t.Fatal(err)
	}
	// Whatever the server answers, it must then close: the read ends at EOF, not at this deadline.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if answer, err := io.ReadAll(c); err != nil {
		t.Fatalf("the connection was still open %s after the stalled body, with a read timeout of %s (%v); answered %q",
			time.Since(start).Round(time.Millisecond), readTimeout, err, answer)
	}
}
