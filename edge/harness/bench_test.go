package harness_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/harness/harnesstest"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/wire"
)

// benchBody is the event body of every benchmarked request.
var benchBody = bytes.Repeat([]byte("x"), 1024)

// benchResults holds the median ns per request of each upstream/runtime pair in the last (largest)
// run, for writeBenchReport.
var benchResults sync.Map

// guestCounts holds BenchmarkGuestCalls' counts per request, for writeBenchReport.
var guestCounts sync.Map

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

// runtimes are the relays BenchmarkRelay1KB compares.
var runtimes = []string{"native", "wasi", "wasi-uninterruptible", "wasi-guest-hmac"}

// BenchmarkRelay1KB relays deliveries with a 1 KB body, one at a time, through the native core
// and through the WASI module (HMAC in the host; then also uninterruptible, and with the HMAC in the
// guest, for comparison), with a stub upstream (the relay's own cost) and with a real subscriber
// on 127.0.0.1. In "stub" and "http" each request goes to every runtime in turn, so all see the
// same machine load, but each runtime then starts with caches the three others have filled with
// their own code and memory (the WASI modules' compiled code is several MB): a cold-cache figure.
// "stub-warm" runs batches of warmBatch requests on each runtime in turn, as a harness serving a
// stream of deliveries would. The medians of the per-request times are reported (this machine is
// shared and noisy).
func BenchmarkRelay1KB(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	for _, c := range []struct {
		name  string
		up    relay.Upstream
		batch int
	}{{"stub", stubUpstream{}, 1}, {"http", harness.NewUpstream(loopback), 1}, {"stub-warm", stubUpstream{}, warmBatch}} {
		b.Run(c.name, func(b *testing.B) {
			now := time.Now()
			compareRuntimes(b, c.name, srv.URL, c.up, 200, c.batch, func(n int) *relay.Request {
				return signedRequest(fmt.Sprintf("del_%d", n), "sub_b", benchBody, now)
			})
		})
	}
}

// warmBatch is how many requests in a row each runtime gets in the warm-cache figures.
const warmBatch = 100

// BenchmarkHandleFloor is the floor under BenchmarkRelay1KB: requests the relay rejects at once
// (405, wrong method), so the guest does the least it can and the time is the host's round trip:
// "reject-empty" with no headers or body, "reject-1KB" with the headers and body of a delivery,
// which the host encodes and copies in and the guest decodes before it looks at the method. The
// runtimes take turns in batches, with warm caches, as in BenchmarkRelay1KB/stub-warm.
func BenchmarkHandleFloor(b *testing.B) {
	now := time.Now()
	delivery := signedRequest("del_floor", "sub_b", benchBody, now)
	for _, c := range []struct {
		name string
		req  *relay.Request
	}{
		{"reject-empty", &relay.Request{Method: "GET", Header: relay.Header{}}},
		{"reject-1KB", &relay.Request{Method: "GET", Header: delivery.Header, Body: delivery.Body}},
	} {
		b.Run(c.name, func(b *testing.B) {
			compareRuntimes(b, c.name, "http://127.0.0.1:9", stubUpstream{}, 405, warmBatch, func(int) *relay.Request { return c.req })
		})
	}
	// The host alone: a hand-assembled module whose handle export returns a ready 405 at once.
	b.Run("host-roundtrip", func(b *testing.B) {
		resp := abi.EncodeResponse(nil, relay.Reject(405, wire.ReasonMethod, "method GET is not allowed"))
		wasm := wasmModule(returning(resp), resp)
		hosts := map[string]*harness.Host{}
		modes := []string{"wasi", "wasi-uninterruptible"}
		for _, mode := range modes {
			hosts[mode] = hostFor(b, cacheDir, wasm, stubUpstream{}, mode == "wasi-uninterruptible")
		}
		times := map[string][]time.Duration{}
		req := &relay.Request{Method: "GET", Header: delivery.Header, Body: delivery.Body}
		ctx := context.Background()
		b.ResetTimer()
		for range b.N {
			for _, mode := range modes {
				start := time.Now()
				resp := hosts[mode].Handle(ctx, req)
				times[mode] = append(times[mode], time.Since(start))
				if resp.Status != 405 {
					b.Fatalf("%s: status %d, want 405: %s", mode, resp.Status, resp.Detail)
				}
			}
		}
		b.StopTimer()
		for _, mode := range modes {
			m := median(times[mode])
			b.ReportMetric(float64(m.Nanoseconds())/1e3, mode+"-µs/req")
			benchResults.Store("host-roundtrip-1KB/"+mode, float64(m.Nanoseconds()))
		}
	})
}

// hostFor returns a host of one instance running wasm over empty namespaces, its compilation
// cache in dir, closed when tb ends.
func hostFor(tb testing.TB, dir string, wasm []byte, up relay.Upstream, uninterruptible bool) *harness.Host {
	clk := relay.SystemClock{}
	h, err := harness.NewHost(context.Background(), harness.HostConfig{
		WASM: wasm, CacheDir: dir, Pool: 1, CallTimeout: 10 * time.Second, Relay: relayConfig(),
		Deps:   relay.Deps{Subscribers: memkv.New(clk), Dedup: memkv.New(clk), Upstream: up, Clock: clk},
		Logger: quiet, Uninterruptible: uninterruptible,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// compareRuntimes runs request(n) for n < b.N on every runtime, batch requests at a time on each
// in turn, over its own KV namespaces holding one subscriber (sub_b, at url), and records the
// median time per request of each under group in benchResults.
func compareRuntimes(b *testing.B, group, url string, up relay.Upstream, status, batch int, request func(n int) *relay.Request) {
	clk := relay.SystemClock{}
	relays := make([]harness.Relay, len(runtimes))
	reqs := make([][]*relay.Request, len(runtimes))
	for i, rt := range runtimes {
		subs, dedup := memkv.New(clk), memkv.New(clk)
		entry, err := wire.SubscriberEntry("sub_b", &wire.SubscriberRecord{URL: url, TimeoutMS: 5000, Active: true})
		if err != nil {
			b.Fatal(err)
		}
		_ = subs.Put(context.Background(), entry.Key, entry.Value, 0)
		relays[i] = benchRelay(b, rt, relay.Deps{Subscribers: subs, Dedup: dedup, Upstream: up, Clock: clk})
		reqs[i] = make([]*relay.Request, b.N)
		for n := range reqs[i] {
			reqs[i][n] = request(n)
		}
	}
	times := make([][]time.Duration, len(runtimes))
	for i := range times {
		times[i] = make([]time.Duration, b.N)
	}
	ctx := context.Background()
	b.ResetTimer()
	for first := 0; first < b.N; first += batch {
		for i, r := range relays {
			for n := first; n < min(first+batch, b.N); n++ {
				start := time.Now()
				resp := r.Handle(ctx, reqs[i][n])
				times[i][n] = time.Since(start)
				if resp.Status != status {
					b.Fatalf("%s: status %d, want %d: %s", runtimes[i], resp.Status, status, resp.Detail)
				}
			}
		}
	}
	b.StopTimer()
	for i, rt := range runtimes {
		m := median(times[i])
		b.ReportMetric(float64(m.Nanoseconds())/1e3, rt+"-µs/req")
		benchResults.Store(group+"/"+rt, float64(m.Nanoseconds()))
	}
}

// BenchmarkPool relays 1 KB deliveries (stub upstream) one at a time through a host of one
// instance and one of harness.DefaultPool, in turn in warm batches as in stub-warm: with requests
// one at a time, the pooled host should cost no more than the single instance (it reuses the
// instance that served the last request).
func BenchmarkPool(b *testing.B) {
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		b.Fatal(err)
	}
	clk := relay.SystemClock{}
	pools := []int{1, harness.DefaultPool}
	hosts := make([]*harness.Host, len(pools))
	for i, pool := range pools {
		subs := memkv.New(clk)
		entry, err := wire.SubscriberEntry("sub_b", &wire.SubscriberRecord{URL: "http://127.0.0.1:9", TimeoutMS: 5000, Active: true})
		if err != nil {
			b.Fatal(err)
		}
		_ = subs.Put(context.Background(), entry.Key, entry.Value, 0)
		if hosts[i], err = harness.NewHost(context.Background(), harness.HostConfig{
			WASM: wasm, CacheDir: cacheDir, Pool: pool, CallTimeout: 10 * time.Second, Relay: relayConfig(),
			Deps:   relay.Deps{Subscribers: subs, Dedup: memkv.New(clk), Upstream: stubUpstream{}, Clock: clk},
			Logger: quiet,
		}); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = hosts[i].Close(context.Background()) })
	}
	now := time.Now()
	reqs := make([]*relay.Request, b.N)
	for n := range reqs {
		reqs[n] = signedRequest(fmt.Sprintf("del_%d", n), "sub_b", benchBody, now)
	}
	times := make([][]time.Duration, len(hosts))
	b.ResetTimer()
	for first := 0; first < b.N; first += warmBatch {
		for i, h := range hosts {
			for n := first; n < min(first+warmBatch, b.N); n++ {
				start := time.Now()
				resp := h.Handle(context.Background(), reqs[n])
				times[i] = append(times[i], time.Since(start))
				if resp.Status != 200 {
					b.Fatalf("pool of %d: status %d: %s", pools[i], resp.Status, resp.Detail)
				}
			}
		}
	}
	b.StopTimer()
	for i, pool := range pools {
		m := median(times[i])
		b.ReportMetric(float64(m.Nanoseconds())/1e3, fmt.Sprintf("pool%d-µs/req", pool))
		benchResults.Store(fmt.Sprintf("stub-warm-pool-%d/wasi", pool), float64(m.Nanoseconds()))
	}
}

// callCounter counts entries into one function and, when by is set, credits each to the nearest
// function of this project's code on the stack (a call of the Go runtime or standard library is
// made on its behalf). The benchmark calls the guest from one goroutine.
type callCounter struct {
	n  *int
	by map[string]int
}

func (c callCounter) Before(_ context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, si experimental.StackIterator) {
	*c.n++
	if c.by == nil {
		return
	}
	for si.Next() {
		// Guest names are "." + the Go symbol, with "/" and "." of the import path as "_".
		if name := si.Function().Definition().DebugName(); strings.HasPrefix(name, ".main.") || strings.Contains(name, "edgehook_edgehook") {
			c.by[name]++
			return
		}
	}
}
func (callCounter) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}
func (callCounter) Abort(context.Context, api.Module, api.FunctionDefinition, error)    {}

// topCallers is how many of the guest's functions the report lists by calls made on their behalf.
const topCallers = 12

// BenchmarkGuestCalls counts, per 1 KB request with the stub upstream (and per request rejected at
// once, for the floor), the guest's function calls, its allocations (calls of runtime.mallocgc)
// and its calls of host functions (the host's refuel among them, about one every four requests). Unlike
// times these counts do not depend on the machine's load. The guest's garbage collections are averaged in, so the
// figures are comparable at the same -benchtime (make bench-harness: 5000). The listener slows the
// calls; its times mean nothing.
func BenchmarkGuestCalls(b *testing.B) {
	var guest, host, mallocs int
	by := map[string]int{}
	factory := experimental.FunctionListenerFactoryFunc(func(def api.FunctionDefinition) experimental.FunctionListener {
		switch {
		case def.GoFunction() != nil:
			return callCounter{n: &host}
		case def.Name() == "runtime.mallocgc":
			return callCounter{&mallocs, by} // guest too: counted again below
		}
		return callCounter{&guest, by}
	})
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		b.Fatal(err)
	}
	clk := relay.SystemClock{}
	subs, dedup := memkv.New(clk), memkv.New(clk)
	entry, err := wire.SubscriberEntry("sub_b", &wire.SubscriberRecord{URL: "http://127.0.0.1:9", TimeoutMS: 5000, Active: true})
	if err != nil {
		b.Fatal(err)
	}
	_ = subs.Put(context.Background(), entry.Key, entry.Value, 0)
	// wazero keys its cache on the listeners too, so this compilation is cached beside the bench's.
	ctx := experimental.WithFunctionListenerFactory(context.Background(), factory)
	h, err := harness.NewHost(ctx, harness.HostConfig{
		WASM: wasm, CacheDir: cacheDir, Pool: 1, CallTimeout: 10 * time.Second, Relay: relayConfig(),
		Deps: relay.Deps{Subscribers: subs, Dedup: dedup, Upstream: stubUpstream{}, Clock: clk}, Logger: quiet,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close(context.Background())
	now := time.Now()
	for _, c := range []struct {
		name, prefix string // prefix goes before each count's key in the report
		req          func(id string) *relay.Request
		status       int
	}{
		{"delivery", "", func(id string) *relay.Request { return signedRequest(id, "sub_b", benchBody, now) }, 200},
		{"reject-empty", "reject-empty: ", func(string) *relay.Request { return &relay.Request{Method: "GET", Header: relay.Header{}} }, 405},
	} {
		b.Run(c.name, func(b *testing.B) {
			run := func(prefix string, n int) {
				for i := range n {
					if resp := h.Handle(context.Background(), c.req(fmt.Sprintf("%s_%s_%d", c.name, prefix, i))); resp.Status != c.status {
						b.Fatalf("status %d, want %d: %s", resp.Status, c.status, resp.Detail)
					}
				}
			}
			run("warm", 10) // the first requests fill the relay's caches
			guest, host, mallocs = 0, 0, 0
			clear(by)
			b.ResetTimer()
			run("del", b.N)
			b.StopTimer()
			counts := map[string]float64{
				"guest_calls": float64(guest+mallocs) / float64(b.N),
				"allocations": float64(mallocs) / float64(b.N),
				"host_calls":  float64(host) / float64(b.N),
			}
			for k, v := range counts {
				b.ReportMetric(v, k+"/req")
				guestCounts.Store(c.prefix+k, v)
			}
			callers := make([]string, 0, len(by))
			for name := range by {
				callers = append(callers, name)
			}
			slices.SortFunc(callers, func(x, y string) int { return by[y] - by[x] })
			for _, name := range callers[:min(topCallers, len(callers))] {
				short := strings.TrimPrefix(strings.TrimPrefix(name, "."), "github.com_edgehook_edgehook_")
				guestCounts.Store(c.prefix+"calls by "+short, float64(by[name])/float64(b.N))
			}
		})
	}
}

// median is the middle value of d (the upper of the middle two for an even count).
func median[T cmp.Ordered](d []T) T {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
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
		Uninterruptible: rt == "wasi-uninterruptible",
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

// benchReport is the JSON of make bench-harness (read by bench/edge.go).
type benchReport struct {
	Benchmark   string             `json:"benchmark"`
	BodyBytes   int                `json:"body_bytes"`
	Runs        int                `json:"runs"` // processes whose medians the times are the median of
	NsPerReq    map[string]float64 `json:"median_ns_per_request"`
	OverheadNs  map[string]float64 `json:"overhead_ns_vs_native"`
	TargetNs    float64            `json:"target_overhead_ns"`
	Guest       map[string]float64 `json:"guest_per_request,omitempty"`
	Stages      map[string]float64 `json:"stage_median_ns,omitempty"`
	GoVersion   string             `json:"go"`
	CPUs        int                `json:"cpus"`
	GeneratedAt string             `json:"generated_at"`
}

// writeBenchReport writes the results as JSON to path and prints a table, when benchmarks ran and
// path is set (make bench-harness sets EDGEHOOK_BENCH_OUT). With baseline, an earlier report, the
// table shows its figures beside the new ones.
func writeBenchReport(path, baseline string) error {
	results, guest, stages := collect(&benchResults), collect(&guestCounts), collect(&stageResults)
	if path == "" || len(results)+len(guest)+len(stages) == 0 {
		return nil
	}
	runs, err := mergeEarlierRuns(results, stages, os.Getenv("EDGEHOOK_BENCH_RUNS"))
	if err != nil {
		return err
	}
	var before benchReport
	if baseline != "" {
		data, err := os.ReadFile(baseline)
		if err != nil {
			return fmt.Errorf("EDGEHOOK_BENCH_BASELINE: %w", err)
		}
		if err := json.Unmarshal(data, &before); err != nil {
			return fmt.Errorf("EDGEHOOK_BENCH_BASELINE %s: %w", baseline, err)
		}
	}
	overhead := map[string]float64{}
	for _, up := range []string{"stub", "http", "stub-warm", "reject-empty", "reject-1KB"} {
		for _, rt := range runtimes[1:] {
			w, okW := results[up+"/"+rt]
			n, okN := results[up+"/native"]
			if okW && okN {
				overhead[up+"/"+rt] = w - n
			}
		}
	}
	report := benchReport{"BenchmarkRelay1KB (edge/harness)", len(benchBody), runs, results, overhead, 20000, guest, stages,
		runtime.Version(), runtime.NumCPU(), time.Now().UTC().Format(time.RFC3339)}
	data, err := json.MarshalIndent(report, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("\nrelay, 1 KB body, one request at a time, median (%s)\n", path)
	printTable("upstream/runtime", "µs/request", results, before.NsPerReq, 1e3)
	printTable("harness cost over native", "µs/request", overhead, before.OverheadNs, 1e3)
	printTable("guest, per request", "count", guest, before.Guest, 1)
	printTable("1 KB delivery, stage /runtime", "µs", stages, before.Stages, 1e3)
	return nil
}

// mergeEarlierRuns replaces each time in results and stages by its median over this process and
// the earlier runs' reports named in files (space-separated; make bench-harness passes them) and
// returns the number of runs. This machine runs a whole process fast or slow (the WASI relay at
// about 15 or about 24 µs, the native core at 2.8 or 3.4), so one process's medians can land on
// either side of a target; the median of three does not hang on one draw.
func mergeEarlierRuns(results, stages map[string]float64, files string) (int, error) {
	runs := 1
	seen := map[string][]float64{}
	for _, f := range strings.Fields(files) {
		data, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("EDGEHOOK_BENCH_RUNS: %w", err)
		}
		var earlier benchReport
		if err := json.Unmarshal(data, &earlier); err != nil {
			return 0, fmt.Errorf("EDGEHOOK_BENCH_RUNS %s: %w", f, err)
		}
		for k, v := range earlier.NsPerReq {
			seen["r "+k] = append(seen["r "+k], v)
		}
		for k, v := range earlier.Stages {
			seen["s "+k] = append(seen["s "+k], v)
		}
		runs++
	}
	for prefix, m := range map[string]map[string]float64{"r ": results, "s ": stages} {
		for k, v := range m {
			if earlier := seen[prefix+k]; len(earlier) > 0 {
				m[k] = median(append(earlier, v))
			}
		}
	}
	return runs, nil
}

// collect copies a map of float64s.
func collect(m *sync.Map) map[string]float64 {
	out := map[string]float64{}
	m.Range(func(k, v any) bool {
		out[k.(string)] = v.(float64)
		return true
	})
	return out
}

// printTable prints the rows of now sorted by key, each divided by unit, with the baseline's figure
// and the change when there is one.
func printTable(title, what string, now, before map[string]float64, unit float64) {
	if len(now) == 0 {
		return
	}
	fmt.Printf("%-50s %12s %12s %8s\n", title, what, "before", "change")
	keys := make([]string, 0, len(now))
	for k := range now {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		was, change := "", ""
		if b, ok := before[k]; ok && b != 0 {
			was = strconv.FormatFloat(b/unit, 'f', 1, 64)
			change = strconv.FormatFloat((now[k]-b)/b*100, 'f', 0, 64) + "%"
		}
		fmt.Printf("%-50s %12.1f %12s %8s\n", k, now[k]/unit, was, change)
	}
}
