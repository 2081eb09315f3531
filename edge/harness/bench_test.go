package harness_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/harness/harnesstest"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/wire"
)

// benchBody is the event body of every benchmarked request.
var benchBody = bytes.Repeat([]byte("x"), 1024)

// benchResults holds ns/op of each benchmark's last (largest) run, for writeBenchReport.
var benchResults sync.Map

// stubUpstream answers 200 at once: with it, a benchmark measures the relay alone.
type stubUpstream struct{}

func (stubUpstream) Do(context.Context, *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	return &relay.UpstreamResponse{Status: 200, Header: relay.Header{}, Body: []byte("ok")}, nil
}

var guestMAC struct {
	once sync.Once
	path string
	err  error
}

// guestMACModule builds the module without the host HMAC, to show what it saves.
func guestMACModule(b *testing.B) string {
	guestMAC.once.Do(func() {
		dir := tmpDir + "/guestmac"
		if guestMAC.err = os.MkdirAll(dir, 0o755); guestMAC.err == nil {
			guestMAC.path, guestMAC.err = harnesstest.BuildWASM(dir)
		}
	})
	if guestMAC.err != nil {
		b.Fatal(guestMAC.err)
	}
	return guestMAC.path
}

// BenchmarkRelay1KB relays one delivery with a 1 KB body per iteration, one at a time, through
// the native core and through the WASI module (HMAC in the host, and in the guest for comparison),
// with a stub upstream (the relay's own cost) and with a real subscriber on 127.0.0.1.
func BenchmarkRelay1KB(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, up := range []struct {
		name string
		up   relay.Upstream
	}{{"stub", stubUpstream{}}, {"http", harness.NewUpstream()}} {
		for _, rt := range []string{"native", "wasi", "wasi-guest-hmac"} {
			b.Run(up.name+"/"+rt, func(b *testing.B) {
				clk := relay.SystemClock{}
				subs, dedup := memkv.New(clk), memkv.New(clk)
				entry, err := wire.SubscriberEntry("sub_b", &wire.SubscriberRecord{URL: srv.URL, TimeoutMS: 5000, Active: true})
				if err != nil {
					b.Fatal(err)
				}
				_ = subs.Put(context.Background(), entry.Key, entry.Value, 0)
				deps := relay.Deps{Subscribers: subs, Dedup: dedup, Upstream: up.up, Clock: clk}
				r := benchRelay(b, rt, deps)
				reqs := make([]*relay.Request, b.N)
				now := time.Now()
				for i := range reqs {
					reqs[i] = signedRequest(fmt.Sprintf("del_%s_%d", rt, i), "sub_b", benchBody, now)
				}
				ctx := context.Background()
				b.ResetTimer()
				for _, req := range reqs {
					if resp := r.Handle(ctx, req); resp.Status != 200 {
						b.Fatalf("status %d: %s", resp.Status, resp.Detail)
					}
				}
				b.StopTimer()
				benchResults.Store(up.name+"/"+rt, float64(b.Elapsed().Nanoseconds())/float64(b.N))
			})
		}
	}
}

// benchRelay returns the runtime under test over deps, closed when b ends.
func benchRelay(b *testing.B, rt string, deps relay.Deps) harness.Relay {
	if rt == "native" {
		r, err := relay.New(relayConfig(), deps)
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	path := wasmPath
	if rt == "wasi-guest-hmac" {
		path = guestMACModule(b)
	}
	wasm, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	h, err := harness.NewHost(context.Background(), harness.HostConfig{
		WASM: wasm, CacheDir: cacheDir, Pool: 1, CallTimeout: 10 * time.Second, Relay: relayConfig(), Deps: deps, Logger: quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// writeBenchReport writes the results as JSON to path and prints a table, when benchmarks ran and
// path is set (make bench-harness sets EDGEHOOK_BENCH_OUT).
func writeBenchReport(path string) error {
	results := map[string]float64{}
	benchResults.Range(func(k, v any) bool {
		results[k.(string)] = v.(float64)
		return true
	})
	if path == "" || len(results) == 0 {
		return nil
	}
	overhead := map[string]float64{}
	for _, up := range []string{"stub", "http"} {
		for _, rt := range []string{"wasi", "wasi-guest-hmac"} {
			w, okW := results[up+"/"+rt]
			n, okN := results[up+"/native"]
			if okW && okN {
				overhead[up+"/"+rt] = w - n
			}
		}
	}
	report := struct {
		Benchmark   string             `json:"benchmark"`
		BodyBytes   int                `json:"body_bytes"`
		NsPerReq    map[string]float64 `json:"ns_per_request"`
		OverheadNs  map[string]float64 `json:"overhead_ns_vs_native"`
		TargetNs    float64            `json:"target_overhead_ns"`
		GoVersion   string             `json:"go"`
		CPUs        int                `json:"cpus"`
		GeneratedAt string             `json:"generated_at"`
	}{"BenchmarkRelay1KB (edge/harness)", len(benchBody), results, overhead, 20000, runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339)}
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return err
	}
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("\nrelay, 1 KB body, one request at a time (%s)\n%-26s %12s %16s\n", path, "upstream/runtime", "µs/request", "over native µs")
	for _, k := range keys {
		over := ""
		if o, ok := overhead[k]; ok {
			over = strconv.FormatFloat(o/1e3, 'f', 1, 64)
		}
		fmt.Printf("%-26s %12.1f %16s\n", k, results[k]/1e3, over)
	}
	return nil
}
