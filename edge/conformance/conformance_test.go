package conformance_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/edgehook/edgehook/edge/conformance"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/httpupstream"
	"github.com/edgehook/edgehook/edge/relay/memkv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNative runs every scenario against the relay core compiled natively, with in-memory KV, a
// fixed clock and a real subscriber on 127.0.0.1.
func TestNative(t *testing.T) {
	suite, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := suite.RelayConfig()
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
	upstream := httpupstream.New(nil)
	// A scenario passes natively only when it passes with KV reads one after another and with
	// them batched through Deps.ReadAll, as the Worker and the WASI module read.
	results := map[string]string{}
	for _, sc := range suite.Scenarios {
		results[sc.Name] = conformance.ResultPass
	}
	for _, batched := range []bool{false, true} {
		for _, sc := range suite.Scenarios {
			if !t.Run(fmt.Sprintf("%s/batchedKV=%v", sc.Name, batched), func(t *testing.T) {
				runNative(t, suite, &sc, cfg, batched, sub, down, upstream)
			}) {
				results[sc.Name] = conformance.ResultFail
			}
		}
	}
	if err := conformance.WriteReport("native", results); err != nil {
		t.Error(err)
	}
}

// readConcurrently is a Deps.ReadAll that performs the reads at once, each on its own goroutine,
// as promises overlap in the Worker.
func readConcurrently(ctx context.Context, reads []relay.KVRead) {
	var wg sync.WaitGroup
	for i := range reads {
		wg.Go(func() { reads[i].Value, reads[i].Found, reads[i].Err = reads[i].KV.Get(ctx, reads[i].Key) })
	}
	wg.Wait()
}

// runNative runs one scenario on a fresh relay and fresh KV.
func runNative(t *testing.T, suite *conformance.Suite, sc *conformance.Scenario, cfg relay.Config, batchedKV bool,
	sub *conformance.Subscriber, down string, upstream relay.Upstream) {
	clk := conformance.StillClock{At: conformance.RunnerEpoch}
	subs, dedup := memkv.New(clk), memkv.New(clk)
	ctx := context.Background()
	if err := sc.Seed(ctx, subs, dedup, sub.URL(), down, clk.Now()); err != nil {
		t.Fatal(err)
	}
	deps := relay.Deps{Subscribers: subs, Dedup: dedup, Upstream: upstream, Clock: clk}
	if batchedKV {
		deps.ReadAll = readConcurrently
	}
	r, err := relay.New(cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range sc.Steps {
		b, err := suite.Build(&st.Request, clk.Now())
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		sub.Script(st.Upstream)
		var h relay.Header
		for k, v := range b.Header {
			h.Set(k, v)
		}
		resp := r.Handle(ctx, &relay.Request{Method: b.Method, Header: h, Body: b.Body})
		obs := &conformance.Observed{
			Status: resp.Status, Header: resp.Header.Map(), Body: resp.Body, Received: sub.Received(),
			SentBody: b.Body, WrittenAt: clk.Now(), Dedup: dedup,
		}
		if errs := conformance.Check(&st.Expect, obs); len(errs) > 0 {
			t.Errorf("step %d (%s):\n  %s", i+1, resp.Detail, strings.Join(errs, "\n  "))
		}
	}
}
