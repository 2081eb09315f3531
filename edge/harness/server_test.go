package harness_test

import (
	"bytes"
	"context"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/shared/wire"
)

// A server loads its SUBSCRIBERS namespace from the bulk file and relays over HTTP, to an
// internal address only if AllowNetworks has it: an edge-mode subscriber's URL is chosen by
// whoever holds an API token, and must not reach the local edge's machine or network (the
// origin's direct mode refuses them alike).
func TestServerServesTheKVFile(t *testing.T) {
	for _, c := range []struct {
		name     string
		allow    []netip.Prefix
		status   int
		outcome  wire.Outcome
		received int64
	}{
		{"loopback allowed", loopback, 200, wire.OutcomeForwarded, 1},
		{"loopback not allowed", nil, 502, wire.OutcomeUpstreamUnreachable, 0},
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
