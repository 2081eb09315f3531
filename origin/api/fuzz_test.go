package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"github.com/prometheus/client_golang/prometheus"
)

// fuzzRoutes are the routes whose request decoding FuzzAPIRequest exercises.
var fuzzRoutes = []struct{ method, path string }{
	{http.MethodPost, "/v1/events"},
	{http.MethodPost, "/v1/events/batch"},
	{http.MethodPost, "/v1/subscribers"},
	{http.MethodPatch, "/v1/subscribers/fz"},
	{http.MethodPost, "/v1/subscribers/fz/rotate-secret"},
	{http.MethodPost, "/v1/subscribers/fz/replay"},
	{http.MethodGet, "/v1/deliveries"},
}

// FuzzAPIRequest sends arbitrary bodies and query strings to the API's decoding routes over a real
// SQLite store. Whatever arrives: no panic, no 500, every error is the JSON {code, message} body,
// and whatever the API accepts is stored valid — event data is JSON in UTF-8, subscribers have an
// http(s) URL and headers that cannot split a request.
func FuzzAPIRequest(f *testing.F) {
	st, err := store.Open(context.Background(), store.Options{Path: filepath.Join(f.TempDir(), "fuzz.db")})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	if _, err := st.CreateSubscriber(context.Background(), store.SubscriberInput{ID: "fz", URL: "http://127.0.0.1:9/", Events: []string{"*"}}); err != nil {
		f.Fatal(err)
	}
	srv, err := api.New(api.Options{Store: st, Registry: prometheus.NewRegistry(), BodyLimit: 64 << 10})
	if err != nil {
		f.Fatal(err)
	}
	seeds := []string{
		`{"type":"video.trending","data":{"video_id":"v1"}}`,
		`{"id":"evt_1","type":"a.b","data":[1,2],"coalesce_key":"k"}`,
		`{"events":[{"type":"a.b","data":1},{"type":"c","data":"x"}]}`,
		`{"url":"http://127.0.0.1:9/h","events":["video.*"],"rate_per_sec":5,"burst":3,"headers":{"X-A":"b"}}`,
		`{"rate_per_sec":1e3,"coalesce":{"event_types":["a.*"],"key":"id","window_seconds":30}}`,
		`{"coalesce":null,"mode":"edge"}`,
		`{"overlap":"1h"}`,
		`{"from":"2026-01-01T00:00:00Z"}`,
		`{"type":"a.b","data":"\u00e9"}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), "", []byte(s))
	}
	f.Add(uint8(6), "status=dead&limit=5&cursor=abc", []byte(nil))
	f.Add(uint8(6), "from=2026-01-01T00:00:00Z&to=x&limit=-1", []byte(nil))

	f.Fuzz(func(t *testing.T, route uint8, query string, body []byte) {
		r := fuzzRoutes[int(route)%len(fuzzRoutes)]
		req := httptest.NewRequest(r.method, r.path, bytes.NewReader(body))
		req.URL.RawQuery = query
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)

		status := rec.Code
		if status == http.StatusInternalServerError || status < 200 || status > 599 {
			t.Fatalf("%s %s?%s %q: status %d %s", r.method, r.path, query, body, status, rec.Body)
		}
		if status >= 400 {
			var e api.Error
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			if err := dec.Decode(&e); err != nil || e.Code == "" || e.Message == "" {
				t.Fatalf("status %d without the JSON error body: %q (%v)", status, rec.Body, err)
			}
			return
		}
		switch r.path {
		case "/v1/events":
			var res api.EmitResult
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			ev, err := st.GetEvent(context.Background(), res.ID)
			if err != nil {
				t.Fatalf("accepted event %s is not stored: %v", res.ID, err)
			}
			if !json.Valid(ev.Body) || !utf8.Valid(ev.Body) {
				t.Fatalf("accepted event data %q is not JSON in UTF-8", ev.Body)
			}
		case "/v1/subscribers", "/v1/subscribers/fz":
			var v api.Subscriber
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				t.Fatal(err)
			}
			sub, err := st.GetSubscriber(context.Background(), v.ID)
			if err != nil {
				t.Fatal(err)
			}
			if err := wire.ValidateURL(sub.URL); err != nil {
				t.Fatalf("stored URL: %v", err)
			}
			for name, value := range sub.Headers {
				if err := wire.ValidateHeader(name, value); err != nil || strings.ContainsAny(name+value, "\r\n") {
					t.Fatalf("stored header %q: %q: %v", name, value, err)
				}
			}
			if sub.RatePerSec <= 0 || sub.RatePerSec > store.MaxRatePerSec || sub.Burst < 1 || sub.Burst > store.MaxBurst {
				t.Fatalf("stored rate %v burst %d", sub.RatePerSec, sub.Burst)
			}
		}
	})
}

// FuzzEventFastPath checks the single-event fast decoder against encoding/json (strict, as the API
// decodes): whatever the fast path accepts, encoding/json accepts too and decodes to the same
// request, data byte for byte.
func FuzzEventFastPath(f *testing.F) {
	for _, s := range []string{
		`{"id":"evt-1","type":"video.trending","data":{"video_id":"v1","n":[1,2.5e3,true,null,"x\"}"]}}`,
		` { "type" : "a.b" , "data" : 1 , "coalesce_key" : "k" } `, `{"type":"a","data":null}`, `{"type":"a","data":"s"}`,
		`{"type":"a","data":1}}`, `{"type":"a","data":1} {}`, `{"type":"a","data":[}`, `{"type":"a","data":}`,
		`{"type":"a","data":1,"colour":"red"}`, `{"TYPE":"a","data":1}`, `{"type":"a","type":"b","data":1}`,
		`{"type":"a\u0062","data":1}`, `{"type":"é","data":1}`, `{"type":7,"data":1}`, `{"type":null,"data":1}`,
		`{"type":"a","data":tru}`, `{"type":"a","data":"\xff"}`, `{"type":"a","data":{"a":1}`, `{}`, ``, `[]`,
		`{"type":"a","data":01}`, `{"type":"a","data":-}`, `{"type":"a","data":"a\\"}`, `{"type":"a",}`,
		`{"id":"","type":"a","data":1}`,
	} {
		f.Add([]byte(s))
	}
	// The usual shapes must take the fast path, or this test compares nothing.
	for _, s := range []string{`{"id":"evt-1","type":"a.b","data":{"k":[1,"}"]}}`, ` { "type" : "a" , "data" : 1 } `} {
		if _, ok := api.DecodeEventFast([]byte(s)); !ok {
			f.Fatalf("the fast path declined %q", s)
		}
	}
	// An empty id must not: encoding/json's path tells it from an absent one, and refuses it.
	if _, ok := api.DecodeEventFast([]byte(`{"id":"","type":"a","data":1}`)); ok {
		f.Fatal(`the fast path took "id": ""`)
	}
	fuzzAgainstJSON(f, api.DecodeEventFast, sameEvent)
}

// fuzzAgainstJSON fuzzes a fast decoder: whatever it accepts, encoding/json (strict, as the API's
// fallback decodes) must accept too and decode to the same value.
func fuzzAgainstJSON[T any](f *testing.F, fast func([]byte) (T, bool), same func(a, b T) bool) {
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := fast(b)
		if !ok {
			return
		}
		var want T
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json refuses it: %v", b, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			t.Fatalf("fast path accepted %q, which has data after the value", b)
		}
		if !same(got, want) {
			t.Fatalf("%q: fast path decoded %+v, encoding/json %+v", b, got, want)
		}
	})
}

func sameEvent(a, b api.EventRequest) bool {
	return a.ID == b.ID && a.Type == b.Type && a.CoalesceKey == b.CoalesceKey && bytes.Equal(a.Data, b.Data)
}

// FuzzBatchFastPath checks the batch fast decoder against encoding/json as FuzzEventFastPath does
// the single event's.
func FuzzBatchFastPath(f *testing.F) {
	for _, s := range []string{
		`{"events":[{"id":"e1","type":"a.b","data":{"k":[1,"}"]}},{"type":"c","data":null,"coalesce_key":"k"}]}`,
		` { "events" : [ { "type" : "a" , "data" : 1 } ] } `, `{"events":[]}`, `{"events":null}`, `{"events":[{}]}`,
		`{"events":[{"type":"a","data":1}],"events":[]}`, `{"Events":[{"type":"a","data":1}]}`, `{"events":[{"type":"a","data":1},]}`,
		`{"events":[{"type":"a","data":1}]} x`, `{"events":[{"type":"a","data":1}}`, `{"events":[1]}`, `{}`, `[]`, ``,
		`{"events":[{"type":"a","data":1},{"id":"","type":"a","data":1}]}`,
	} {
		f.Add([]byte(s))
	}
	// The usual shape must take the fast path, or this test compares nothing.
	if _, ok := api.DecodeBatchFast([]byte(`{"events":[{"id":"e1","type":"a","data":{}},{"type":"b","data":[1]}]}`)); !ok {
		f.Fatal("the fast path declined a plain batch")
	}
	fuzzAgainstJSON(f, api.DecodeBatchFast, func(a, b api.BatchRequest) bool {
		return slices.EqualFunc(a.Events, b.Events, sameEvent)
	})
}

// TestFastPathNestingLimit: encoding/json's nesting limit counts the containers around an event's
// data (the event object; in a batch also the array and the outer object), so the fast decoders
// decline data at the limit on its own, which encoding/json refuses, and take the deepest it accepts.
// The fuzzers cannot reach inputs this large.
func TestFastPathNestingLimit(t *testing.T) {
	t.Parallel()
	nested := func(depth int) string { return strings.Repeat("[", depth) + strings.Repeat("]", depth) }
	for _, tc := range []struct {
		name   string
		around int // containers around the data
		body   func(data string) []byte
		fast   func([]byte) bool
		json   func([]byte) error
	}{
		{"event", 1, func(d string) []byte { return []byte(`{"type":"a","data":` + d + `}`) },
			func(b []byte) bool { _, ok := api.DecodeEventFast(b); return ok },
			func(b []byte) error { var r api.EventRequest; return json.Unmarshal(b, &r) }},
		{"batch", 3, func(d string) []byte { return []byte(`{"events":[{"type":"a","data":` + d + `}]}`) },
			func(b []byte) bool { _, ok := api.DecodeBatchFast(b); return ok },
			func(b []byte) error { var r api.BatchRequest; return json.Unmarshal(b, &r) }},
	} {
		deepest := 10000 - tc.around // encoding/json's limit is 10000 levels
		for depth, accepted := range map[int]bool{deepest: true, deepest + 1: false} {
			b := tc.body(nested(depth))
			if err := tc.json(b); (err == nil) != accepted {
				t.Fatalf("%s with data %d deep: encoding/json says %v, want accepted=%v", tc.name, depth, err, accepted)
			}
			if got := tc.fast(b); got != accepted {
				t.Errorf("%s with data %d deep: the fast path took it=%v, encoding/json accepted=%v", tc.name, depth, got, accepted)
			}
		}
	}
}
