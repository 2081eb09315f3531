package harness_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/harness/harnesstest"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// The module is built once per test binary into tmpDir.
var tmpDir, wasmPath, cacheDir string

func TestMain(m *testing.M) {
	var err error
	if tmpDir, err = os.MkdirTemp("", "edgehook-harness-test-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The checkout's build/ (ignored by git), not the user's cache: shared across runs, so only a
	// changed module is compiled again, and pruned as any cache is (harness.CacheTTL).
	if cacheDir, err = filepath.Abs(filepath.Join("..", "..", "build", "wazero-cache")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	wasmPath, err = harnesstest.BuildWASM(tmpDir, harnesstest.HostMACTag)
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = runVerified(m)
	}
	if err := writeBenchReport(os.Getenv("EDGEHOOK_BENCH_OUT"), os.Getenv("EDGEHOOK_BENCH_BASELINE")); err != nil {
		fmt.Fprintln(os.Stderr, "bench report:", err)
		code = 1
	}
	os.RemoveAll(tmpDir)
	os.Exit(code)
}

// runVerified runs the tests, then fails the binary on leaked goroutines.
func runVerified(m *testing.M) int {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// loopback is what the tests' upstreams may reach: their subscribers listen on 127.0.0.1.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

var edgeSecret = mustSecret("whsec_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")

func mustSecret(s string) signature.Secret {
	sec, err := signature.ParseSecret(s)
	if err != nil {
		panic(err)
	}
	return sec
}

func relayConfig() relay.Config {
	return relay.Config{Secrets: []signature.Secret{edgeSecret}, Tolerance: 5 * time.Minute, DedupTTL: time.Hour, MaxBody: 1 << 20}
}

// env is a host over fresh namespaces.
type env struct {
	host               *harness.Host
	subscribers, dedup *memkv.Store
	clock              relay.Clock
}

// newHost starts a host over fresh KV namespaces with the given upstream and pool size.
func newHost(t testing.TB, up relay.Upstream, pool int, callTimeout time.Duration) *env {
	t.Helper()
	return newHostWith(t, up, pool, callTimeout, false)
}

// newHostWith is newHost with the choice of HostConfig.Uninterruptible.
func newHostWith(t testing.TB, up relay.Upstream, pool int, callTimeout time.Duration, uninterruptible bool) *env {
	t.Helper()
	wasm, err := os.ReadFile(wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{clock: relay.SystemClock{}}
	e.subscribers, e.dedup = memkv.New(e.clock), memkv.New(e.clock)
	e.host, err = harness.NewHost(context.Background(), harness.HostConfig{
		WASM: wasm, CacheDir: cacheDir, Pool: pool, CallTimeout: callTimeout, Relay: relayConfig(),
		Deps:   relay.Deps{Subscribers: e.subscribers, Dedup: e.dedup, Upstream: up, Clock: e.clock},
		Logger: quiet, Uninterruptible: uninterruptible,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.host.Close(context.Background()) })
	return e
}

// addSubscriber stores an active record for id pointing at url.
func (e *env) addSubscriber(t testing.TB, id, url string) {
	t.Helper()
	entry, err := wire.SubscriberEntry(id, &wire.SubscriberRecord{URL: url, TimeoutMS: 2000, Active: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.subscribers.Put(context.Background(), entry.Key, entry.Value, 0); err != nil {
		t.Fatal(err)
	}
}

// signedRequest is what the origin sends for one delivery.
func signedRequest(deliveryID, subscriberID string, body []byte, now time.Time) *relay.Request {
	h := relay.Header{{Name: "content-type", Value: "application/json"}, {Name: "webhook-id", Value: "evt_" + deliveryID}}
	hop := &signature.Hop{DeliveryID: deliveryID, SubscriberID: subscriberID, EventType: "video.trending", Attempt: 1, Timestamp: now.Unix()}
	signature.SetHopHeaders(&h, []signature.Secret{edgeSecret}, hop, body)
	return &relay.Request{Method: "POST", Header: h, Body: body}
}
