package harness_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/conformance"
	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
)

// TestConformanceWASI runs every scenario against the WASI module in the harness: real HTTP from
// the test to the harness's handler on 127.0.0.1, the module in wazero, real HTTP to the scripted
// subscriber. The clock is fixed while a scenario runs, as in the native runner.
func TestConformanceWASI(t *testing.T) {
	suite, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := suite.RelayConfig()
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := conformance.StartSubscriber()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	down, err := conformance.UnreachableURL()
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	upstream := harness.NewUpstream(loopback)
	results := map[string]string{}
	defer func() {
		if err := conformance.WriteReport("wasi", results); err != nil {
			t.Error(err)
		}
	}()
	for _, sc := range suite.Scenarios {
		results[sc.Name] = conformance.ResultFail
		passed := t.Run(sc.Name, func(t *testing.T) {
			ctx := context.Background()
			clk := conformance.StillClock{At: conformance.RunnerEpoch}
			subs, dedup := memkv.New(clk), memkv.New(clk)
			if err := sc.Seed(ctx, subs, dedup, sub.URL(), down, clk.Now()); err != nil {
				t.Fatal(err)
			}
			host, err := harness.NewHost(ctx, harness.HostConfig{
				WASM: wasm, CacheDir: cacheDir, Pool: 1, CallTimeout: 30 * time.Second, Relay: cfg,
				Deps:   relay.Deps{Subscribers: subs, Dedup: dedup, Upstream: upstream, Clock: clk},
				Logger: quiet,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer host.Close(ctx)
			url := serve(t, harness.NewHandler(host, cfg.MaxBody, quiet))
			for i, st := range sc.Steps {
				b, err := suite.Build(&st.Request, clk.Now())
				if err != nil {
					t.Fatalf("step %d: %v", i+1, err)
				}
				sub.Script(st.Upstream)
				obs := send(t, client, url, b)
				obs.Received, obs.SentBody, obs.WrittenAt, obs.Dedup = sub.Received(), b.Body, clk.Now(), dedup
				if errs := conformance.Check(&st.Expect, obs); len(errs) > 0 {
					t.Errorf("step %d:\n  %s", i+1, strings.Join(errs, "\n  "))
				}
			}
		})
		if passed {
			results[sc.Name] = conformance.ResultPass
		}
	}
}

// serve runs h on 127.0.0.1 until the test ends and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return "http://" + ln.Addr().String() + "/"
}

// send makes one step's request over HTTP and returns what came back.
func send(t *testing.T, client *http.Client, url string, b *conformance.Built) *conformance.Observed {
	t.Helper()
	req, err := http.NewRequest(b.Method, url, bytes.NewReader(b.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range b.Header {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]string{}
	for k, vs := range resp.Header {
		h[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	return &conformance.Observed{Status: resp.StatusCode, Header: h, Body: body}
}
