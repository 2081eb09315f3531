package relay_test

import (
	"context"
	"testing"
	"time"
)

// forgetfulKV never holds anything, so every request is a first delivery.
type forgetfulKV struct{}

func (forgetfulKV) Get(context.Context, string) (string, bool, error)        { return "", false, nil }
func (forgetfulKV) Put(context.Context, string, string, time.Duration) error { return nil }

// BenchmarkHandleForward is the relay's own cost for one forwarded 1 KB delivery without I/O
// (memory KV, a canned upstream answer). Run it for GOOS=js too, to see the WASM cost.
func BenchmarkHandleForward(b *testing.B) {
	f := newFixture(&testing.T{}, plainRecord)
	req := f.request("", map[string]string{"Webhook-Id": "evt_1", "Content-Type": "application/json"})
	r := f.relay(&testing.T{}, f.subs, forgetfulKV{}, upstreamFunc(ok200))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if resp := r.Handle(ctx, req); resp.Status != 200 {
			b.Fatal(resp.Detail)
		}
	}
}
