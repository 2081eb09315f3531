package abi

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
)

func TestRoundTrips(t *testing.T) {
	h := relay.Header{{Name: "content-type", Value: "application/json"}, {Name: "webhook-id", Value: "evt_1"}, {Name: "empty"}}
	req := &relay.Request{Method: "POST", Header: h, Body: []byte(`{"a":1}`)}
	resp := &relay.Response{Status: 429, Header: h, Body: []byte("slow down"), Detail: "coalesced"}
	up := &relay.UpstreamRequest{URL: "http://127.0.0.1:9/x", Header: h, Body: []byte("b"), Timeout: 1500 * time.Millisecond}
	upResp := &relay.UpstreamResponse{Status: 204, Header: relay.Header{}, Body: []byte{}}
	for _, tc := range []struct {
		name   string
		in     any
		enc    []byte
		decode func([]byte) (any, error)
	}{
		{"request", req, EncodeRequest(nil, req), func(b []byte) (any, error) {
			var r relay.Request
			err := DecodeRequest(&r, b)
			return &r, err
		}},
		{"response", resp, EncodeResponse(nil, resp), func(b []byte) (any, error) { return DecodeResponse(b) }},
		{"upstream request", up, EncodeUpstreamRequest(nil, up), func(b []byte) (any, error) { return DecodeUpstreamRequest(b) }},
		{"upstream response", upResp, EncodeUpstreamResponse(nil, upResp), func(b []byte) (any, error) {
			var r relay.UpstreamResponse
			err := DecodeUpstreamResponse(&r, b)
			return &r, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.decode(tc.enc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.in) {
				t.Fatalf("round trip: got %+v, want %+v", got, tc.in)
			}
			// Every truncation and a trailing byte are errors, never a partial message.
			for n := range len(tc.enc) {
				if _, err := tc.decode(tc.enc[:n]); !errors.Is(err, ErrShort) {
					t.Fatalf("truncated to %d of %d bytes: err = %v, want ErrShort", n, len(tc.enc), err)
				}
			}
			if _, err := tc.decode(append(tc.enc, 0)); !errors.Is(err, ErrShort) {
				t.Fatalf("trailing byte: err = %v, want ErrShort", err)
			}
		})
	}
}

// Decoding into a message decoded before reuses its header array and leaves nothing of it behind.
func TestDecodeReusesHeaders(t *testing.T) {
	long := relay.Header{{Name: "a", Value: "1"}, {Name: "b", Value: "2"}, {Name: "c", Value: "3"}}
	short := relay.Header{{Name: "retry-after", Value: "5"}}
	var req relay.Request
	var up relay.UpstreamResponse
	var arrays []*relay.Field // the first field of each decode's header array
	for _, h := range []relay.Header{long, short} {
		if err := DecodeRequest(&req, EncodeRequest(nil, &relay.Request{Method: "POST", Header: h})); err != nil {
			t.Fatal(err)
		}
		if err := DecodeUpstreamResponse(&up, EncodeUpstreamResponse(nil, &relay.UpstreamResponse{Status: 503, Header: h})); err != nil {
			t.Fatal(err)
		}
		arrays = append(arrays, &req.Header[0], &up.Header[0])
	}
	if !reflect.DeepEqual(req.Header, short) || !reflect.DeepEqual(up.Header, short) || up.Status != 503 {
		t.Fatalf("second decode: request headers %+v, upstream %d %+v; want %+v", req.Header, up.Status, up.Header, short)
	}
	if arrays[0] != arrays[2] || arrays[1] != arrays[3] {
		t.Fatal("the second decode allocated new header arrays")
	}
}

func TestResultPacking(t *testing.T) {
	code, n := SplitResult(Result(CodeTimeout, 70000))
	ptr, length := SplitPointer(PackPointer(0xdeadbeef, 12))
	if code != CodeTimeout || n != 70000 || ptr != 0xdeadbeef || length != 12 {
		t.Fatalf("got %d %d %#x %d", code, n, ptr, length)
	}
}

func TestKVResults(t *testing.T) {
	var enc []byte
	enc = AppendKVResult(enc, `{"url":"x"}`, true, nil)
	enc = AppendKVResult(enc, "", false, nil)
	enc = AppendKVResult(enc, "", false, errors.New("kv down"))
	enc = AppendKVResult(enc, "", true, nil) // an empty value is still found
	reads := make([]relay.KVRead, 4)
	if err := DecodeKVResults(string(enc), reads); err != nil {
		t.Fatal(err)
	}
	want := []relay.KVRead{{Value: `{"url":"x"}`, Found: true}, {}, {Err: HostError("kv down")}, {Found: true}}
	if !reflect.DeepEqual(reads, want) {
		t.Fatalf("got %+v, want %+v", reads, want)
	}
	for n := range len(enc) {
		if err := DecodeKVResults(string(enc[:n]), reads); !errors.Is(err, ErrShort) {
			t.Fatalf("truncated to %d of %d bytes: err = %v, want ErrShort", n, len(enc), err)
		}
	}
	if err := DecodeKVResults(string(enc), reads[:3]); !errors.Is(err, ErrShort) {
		t.Fatalf("more results than reads: err = %v, want ErrShort", err)
	}
	bad := append([]byte{9, 0, 0, 0}, enc[4:]...)
	if err := DecodeKVResults(string(bad), reads); err == nil || errors.Is(err, ErrShort) {
		t.Fatalf("unknown result code: err = %v", err)
	}
}
