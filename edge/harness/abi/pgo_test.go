package abi_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// forgetfulKV never holds anything, so every request is a first delivery.
type forgetfulKV struct{}

func (forgetfulKV) Get(context.Context, string) (string, bool, error)        { return "", false, nil }
func (forgetfulKV) Put(context.Context, string, string, time.Duration) error { return nil }

// stubUpstream answers 200 at once.
type stubUpstream struct{}

func (stubUpstream) Do(context.Context, *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	return &relay.UpstreamResponse{Status: 200, Header: relay.Header{}, Body: []byte("ok")}, nil
}

// BenchmarkGuestPath runs natively what the relay's WASI module (edge/cmd/wasi) does for each
// delivery: decode the request, relay it with the reads batched, encode the answer. `make
// edge-pgo` profiles it into edge/cmd/wasi/default.pgo, which the module's build uses for
// profile-guided optimisation: the inlining of its hot calls saves the most in WASM, where each
// call is costly.
func BenchmarkGuestPath(b *testing.B) {
	secret, err := signature.ParseSecret("whsec_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=")
	if err != nil {
		b.Fatal(err)
	}
	clk := relay.SystemClock{}
	subs := memkv.New(clk)
	entry, err := wire.SubscriberEntry("sub_b", &wire.SubscriberRecord{URL: "http://127.0.0.1:9/", TimeoutMS: 5000, Active: true})
	if err != nil {
		b.Fatal(err)
	}
	_ = subs.Put(context.Background(), entry.Key, entry.Value, 0)
	r, err := relay.New(relay.Config{Secrets: []signature.Secret{secret}, Tolerance: time.Minute, DedupTTL: time.Hour, MaxBody: 1 << 20},
		relay.Deps{Subscribers: subs, Dedup: forgetfulKV{}, Upstream: stubUpstream{}, Clock: clk, ReadAll: func(ctx context.Context, reads []relay.KVRead) {
			for i := range reads {
				reads[i].Value, reads[i].Found, reads[i].Err = reads[i].KV.Get(ctx, reads[i].Key)
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("x", 1024))
	h := relay.Header{{Name: "content-type", Value: "application/json"}, {Name: "webhook-id", Value: "evt_1"}}
	signature.SetHopHeaders(&h, []signature.Secret{secret}, &signature.Hop{
		DeliveryID: "del_1", SubscriberID: "sub_b", EventType: "video.trending", Attempt: 1, Timestamp: time.Now().Unix(),
	}, body)
	in := abi.EncodeRequest(nil, &relay.Request{Method: "POST", Header: h, Body: body})
	var out []byte
	var req relay.Request
	for b.Loop() {
		if err := abi.DecodeRequest(&req, in); err != nil {
			b.Fatal(err)
		}
		resp := r.Handle(context.Background(), &req)
		if resp.Status != 200 {
			b.Fatal(resp.Status, resp.Detail)
		}
		out = abi.EncodeResponse(out[:0], resp)
	}
}
