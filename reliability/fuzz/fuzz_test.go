// Package fuzz holds native Go fuzz targets for the parsers that have none in their own package:
// the relay core's request handling, the harness's host ABI codec, the origin's config file and
// byte sizes, and the edge outcome header. (shared/ fuzzes its own parsers; origin/api fuzzes its
// request decoding in origin/api/fuzz_test.go.)
package fuzz

import (
	"bytes"
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness/abi"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/origin/config"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// fixedClock is the fuzz targets' clock: the hop timestamps of the seeds are near it.
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

// recordingUpstream answers 200 and remembers what the relay forwarded.
type recordingUpstream struct {
	mu   sync.Mutex
	reqs []*relay.UpstreamRequest
}

func (u *recordingUpstream) Do(_ context.Context, r *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs = append(u.reqs, r)
	return &relay.UpstreamResponse{Status: 204, Header: relay.Header{}}, nil
}

var (
	fuzzNow    = time.Unix(1_800_000_000, 0)
	fuzzSecret = mustSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	subURL     = "http://127.0.0.1:9/subscriber"
)

func mustSecret(s string) signature.Secret {
	sec, err := signature.ParseSecret(s)
	if err != nil {
		panic(err)
	}
	return sec
}

// encodeHeaders flattens headers as "name: value" lines, the fuzzer's view of a header map.
func encodeHeaders(h http.Header) string {
	var b strings.Builder
	for name, vs := range h {
		b.WriteString(name + ": " + strings.Join(vs, ", ") + "\n")
	}
	return b.String()
}

// FuzzRelayHandle feeds arbitrary headers, bodies and methods to the relay core with a real
// in-memory KV. Whatever arrives, the relay must not panic, must answer with a valid outcome and
// a bounded body, and may call the subscriber only for a hop that verifies with the edge secret —
// and then only at the URL of the subscriber's KV record, without any hop header.
func FuzzRelayHandle(f *testing.F) {
	body := []byte(`{"video_id":"v1"}`)
	for _, hop := range []signature.Hop{
		{DeliveryID: "dlv_1", SubscriberID: "sub_a", EventType: "video.trending", Attempt: 1, Timestamp: fuzzNow.Unix()},
		{DeliveryID: "dlv_2", SubscriberID: "sub_a", EventType: "video.rank", CoalesceKey: "v1", Attempt: 3, Timestamp: fuzzNow.Unix() - 100},
		{DeliveryID: "dlv_3", SubscriberID: "sub_missing", EventType: "x", Attempt: 1, Timestamp: fuzzNow.Unix()},
	} {
		h := http.Header{}
		signature.SetHopHeaders(h, []signature.Secret{fuzzSecret}, &hop, body)
		h.Set("webhook-id", "evt_1")
		f.Add("POST", encodeHeaders(h), body)
	}
	f.Add("GET", "Edgehook-Signature: v1,AAAA\n", []byte{})
	f.Add("POST", "Edgehook-Timestamp: 99999999999999999999\n", []byte("{"))

	f.Fuzz(func(t *testing.T, method, headers string, body []byte) {
		subs := memkv.New(fixedClock{fuzzNow})
		rec := &wire.SubscriberRecord{URL: subURL, TimeoutMS: 1000, Active: true,
			Coalesce: &wire.CoalesceRule{EventTypes: []string{"video.*"}, Key: "video_id", WindowSeconds: 30}}
		entry, err := wire.SubscriberEntry("sub_a", rec)
		if err != nil {
			t.Fatal(err)
		}
		subs.LoadBulk([]wire.BulkEntry{entry})
		up := &recordingUpstream{}
		r, err := relay.New(relay.Config{Secrets: []signature.Secret{fuzzSecret}, Tolerance: 5 * time.Minute,
			DedupTTL: time.Hour, MaxBody: 4096}, relay.Deps{Subscribers: subs, Dedup: memkv.New(fixedClock{fuzzNow}), Upstream: up, Clock: fixedClock{fuzzNow}})
		if err != nil {
			t.Fatal(err)
		}
		h := relay.Header{}
		for _, line := range strings.Split(headers, "\n") {
			if name, value, ok := strings.Cut(line, ":"); ok {
				h.Set(strings.TrimSpace(name), strings.TrimSpace(value))
			}
		}
		resp := r.Handle(context.Background(), &relay.Request{Method: method, Header: h, Body: body})
		if resp == nil {
			t.Fatal("nil response")
		}
		if _, err := wire.ParseOutcome(resp.Header.Get(wire.HeaderOutcome)); err != nil {
			t.Fatalf("outcome header %q: %v", resp.Header.Get(wire.HeaderOutcome), err)
		}
		if len(resp.Body) > wire.MaxExcerptBytes {
			t.Fatalf("answer body of %d bytes", len(resp.Body))
		}
		if len(up.reqs) == 0 {
			return
		}
		// Something was forwarded: it must have been a verified hop, to the record's URL.
		hop, sig, err := signature.ParseHopHeaders(h)
		if err != nil {
			t.Fatalf("forwarded a request whose hop headers do not parse: %v", err)
		}
		if err := signature.VerifyHop([]signature.Secret{fuzzSecret}, hop, sig, body, fuzzNow, 5*time.Minute); err != nil {
			t.Fatalf("forwarded a hop that does not verify: %v", err)
		}
		for _, fwd := range up.reqs {
			if fwd.URL != subURL || hop.SubscriberID != "sub_a" {
				t.Fatalf("forwarded to %q for subscriber %q", fwd.URL, hop.SubscriberID)
			}
			for _, name := range wire.HopHeaders {
				if fwd.Header.Get(name) != "" {
					t.Fatalf("forwarded hop header %s", name)
				}
			}
			if !bytes.Equal(fwd.Body, body) {
				t.Fatal("forwarded a different body")
			}
		}
	})
}

// FuzzABIDecode decodes arbitrary bytes as each message of the harness's host ABI. The decoders
// must not panic, and whatever decodes must re-encode to a message that decodes to the same value.
func FuzzABIDecode(f *testing.F) {
	f.Add(abi.EncodeRequest(nil, &relay.Request{Method: "POST", Header: relay.Header{{Name: "a", Value: "b"}}, Body: []byte("x")}))
	f.Add(abi.EncodeResponse(nil, &relay.Response{Status: 200, Header: relay.Header{{Name: "edgehook-outcome", Value: "forwarded"}}, Body: []byte("ok")}))
	f.Add(abi.EncodeUpstreamRequest(nil, &relay.UpstreamRequest{URL: subURL, Header: relay.Header{}, Body: []byte("{}"), Timeout: time.Second}))
	f.Add(abi.EncodeUpstreamResponse(nil, &relay.UpstreamResponse{Status: 503, Header: relay.Header{{Name: "retry-after", Value: "1"}}}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r, again relay.Request
		if err := abi.DecodeRequest(&r, b); err == nil {
			err := abi.DecodeRequest(&again, abi.EncodeRequest(nil, &r))
			roundTrip(t, &r, &again, err)
		}
		if r, err := abi.DecodeResponse(b); err == nil {
			again, err := abi.DecodeResponse(abi.EncodeResponse(nil, r))
			roundTrip(t, r, again, err)
		}
		if r, err := abi.DecodeUpstreamRequest(b); err == nil {
			again, err := abi.DecodeUpstreamRequest(abi.EncodeUpstreamRequest(nil, r))
			roundTrip(t, r, again, err)
		}
		var u, uAgain relay.UpstreamResponse
		if err := abi.DecodeUpstreamResponse(&u, b); err == nil {
			err := abi.DecodeUpstreamResponse(&uAgain, abi.EncodeUpstreamResponse(nil, &u))
			roundTrip(t, &u, &uAgain, err)
		}
	})
}

func roundTrip[T any](t *testing.T, first T, again T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("re-encoded %+v does not decode: %v", first, err)
	}
	if !reflect.DeepEqual(normalize(first), normalize(again)) {
		t.Fatalf("round trip changed the value:\n%+v\n%+v", first, again)
	}
}

// normalize treats nil and empty byte slices and header maps alike (the codec does not keep the
// difference, and nothing depends on it).
func normalize(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return v
	}
	cp := reflect.New(rv.Elem().Type())
	cp.Elem().Set(rv.Elem())
	for i := 0; i < cp.Elem().NumField(); i++ {
		fv := cp.Elem().Field(i)
		if (fv.Kind() == reflect.Slice || fv.Kind() == reflect.Map) && fv.Len() == 0 && fv.CanSet() {
			fv.Set(reflect.Zero(fv.Type()))
		}
	}
	return cp.Interface()
}

// FuzzConfigFile parses arbitrary config files. ParseFile must not panic; it accepts only known
// keys, and a value it returns must be free of control characters a flag could not hold.
func FuzzConfigFile(f *testing.F) {
	known := map[string]bool{"db": true, "body_limit": true, "token": true, "workers": true, "allow_network": true}
	f.Add([]byte(`{"db":"x.db","body_limit":"1MiB","workers":8,"token":["a","b"]}`))
	f.Add([]byte(`{"allow_network":["127.0.0.0/8"],"db":null}`))
	f.Add([]byte(`{"db":"a"} {}`))
	f.Add([]byte(`{"unknown":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := config.ParseFile(data, func(k string) bool { return known[k] })
		if err != nil {
			if strings.Contains(err.Error(), "\x00") {
				t.Fatalf("error message carries a NUL: %q", err)
			}
			return
		}
		for k := range file {
			if !known[k] {
				t.Fatalf("unknown key %q accepted", k)
			}
		}
	})
}

// FuzzByteSize parses arbitrary sizes: no panic, never negative, and what String renders parses
// back to the same size.
func FuzzByteSize(f *testing.F) {
	for _, s := range []string{"262144", "256KiB", "256KB", "4MiB", "4MB", "1GiB", "-1", "1e3", "9223372036854775807", "99999999999GiB", " 1 KiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b config.ByteSize
		if err := b.Set(s); err != nil {
			return
		}
		if b < 0 {
			t.Fatalf("%q parsed to a negative size %d", s, b)
		}
		var again config.ByteSize
		if err := again.Set(b.String()); err != nil || again != b {
			t.Fatalf("%q → %d → %q → %d, %v", s, b, b.String(), again, err)
		}
	})
}

// FuzzParseOutcome parses arbitrary Edgehook-Outcome values: an accepted value is one of the
// known outcomes or a rejection with a token reason, and it is returned unchanged.
func FuzzParseOutcome(f *testing.F) {
	for _, s := range []string{"forwarded", "duplicate", "coalesced", "rejected:bad_signature", "rejected:", "rejected:A", "upstream_timeout", " forwarded"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		o, err := wire.ParseOutcome(s)
		if err != nil {
			return
		}
		if string(o) != s {
			t.Fatalf("%q parsed as %q", s, o)
		}
		if reason, ok := o.IsRejected(); ok {
			if reason == "" || strings.ContainsAny(reason, " \r\n:") {
				t.Fatalf("rejection reason %q accepted", reason)
			}
			return
		}
		switch o {
		case wire.OutcomeForwarded, wire.OutcomeDuplicate, wire.OutcomeCoalesced, wire.OutcomeUpstreamTimeout, wire.OutcomeUpstreamUnreachable:
		default:
			t.Fatalf("unknown outcome %q accepted", s)
		}
	})
}
