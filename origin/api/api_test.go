package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
)

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("GET", "/healthz", nil).want(t, http.StatusOK)
	e.do("GET", "/readyz", nil).want(t, http.StatusOK)
	// Monitors and load balancers often probe with HEAD: the same status, no body.
	for _, path := range []string{"/healthz", "/readyz"} {
		if r := e.do("HEAD", path, nil).want(t, http.StatusOK); len(r.body) != 0 {
			t.Errorf("HEAD %s answered a body %q", path, r.body)
		}
	}
}

func TestEmitStoresDataByteExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sub := e.addSubscriber(api.SubscriberRequest{URL: "https://example.com/hook", Events: []string{"video.*"}})
	// Odd spacing, key order and escapes must survive: this is the body every subscriber gets.
	data := `{"b": 1,   "a":[1, 2 ], "s":"\u00e9\n"}`
	body := `{"id":"evt_1","type":"video.trending","data":` + data + `}`
	var res api.EmitResult
	e.do("POST", "/v1/events", body).want(t, http.StatusAccepted).decode(t, &res)
	if res.ID != "evt_1" || res.Deliveries != 1 || res.Duplicate {
		t.Fatalf("emit = %+v, want id evt_1 with one delivery", res)
	}
	ev, err := e.store.GetEvent(context.Background(), "evt_1")
	if err != nil {
		t.Fatal(err)
	}
	if string(ev.Body) != data {
		t.Fatalf("stored body %q, want the exact bytes %q", ev.Body, data)
	}

	// The data is the subscribers' body, not the API's: keys repeated or in other cases there are
	// kept as sent, also when an escape in the type takes the request off the fast decoder.
	odd := `{"a":1,"a":2,"A":{"b":[{"c":1,"c":2}]}}`
	e.do("POST", "/v1/events", `{"id":"evt_odd","type":"video.tr\u0065nding","data":`+odd+`}`).want(t, http.StatusAccepted)
	if ev, err := e.store.GetEvent(context.Background(), "evt_odd"); err != nil || string(ev.Body) != odd || ev.Type != "video.trending" {
		t.Fatalf("stored %+v (%v), want the data %q as sent", ev, err, odd)
	}

	// GET /v1/events/{id}: the event, its data as JSON (the JSON encoder compacts it).
	var got api.Event
	e.do("GET", "/v1/events/evt_1", nil).want(t, http.StatusOK).decode(t, &got)
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(data)); err != nil {
		t.Fatal(err)
	}
	if got.ID != "evt_1" || got.Type != "video.trending" || string(got.Data) != compact.String() || got.CreatedAt.IsZero() {
		t.Fatalf("GET /v1/events/evt_1 = %+v, data %s", got, got.Data)
	}
	e.do("GET", "/v1/events/nope", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")

	// Same id, same content: the original answer, nothing new written.
	e.do("POST", "/v1/events", body).want(t, http.StatusAccepted).decode(t, &res)
	if !res.Duplicate || res.Deliveries != 1 {
		t.Fatalf("re-emit = %+v, want a duplicate with the original count", res)
	}
	// Same id, other data: an idempotency conflict.
	e.do("POST", "/v1/events", `{"id":"evt_1","type":"video.trending","data":{"b":2}}`).wantError(t, http.StatusConflict, api.CodeConflict, "id")

	// No matching subscriber: stored, zero deliveries. No id: one is generated.
	e.do("POST", "/v1/events", `{"type":"user.created","data":null}`).want(t, http.StatusAccepted).decode(t, &res)
	if res.ID == "" || res.Deliveries != 0 {
		t.Fatalf("emit without id = %+v", res)
	}
	var page api.DeliveryPage
	e.do("GET", "/v1/deliveries?subscriber="+sub.ID+"&event=evt_1", nil).want(t, http.StatusOK).decode(t, &page)
	if len(page.Deliveries) != 1 || page.Deliveries[0].EventID != "evt_1" || page.Deliveries[0].Status != store.StatusPending {
		t.Fatalf("deliveries = %+v", page.Deliveries)
	}
}

func TestEmitBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{URL: "https://example.com/hook", Events: []string{"*"}})

	events := make([]api.EventRequest, api.MaxBatch)
	for i := range events {
		events[i] = api.EventRequest{ID: fmt.Sprintf("b%d", i), Type: "video.trending", Data: json.RawMessage(`{"i":` + fmt.Sprint(i) + `}`)}
	}
	var res api.BatchResult
	e.do("POST", "/v1/events/batch", api.BatchRequest{Events: events}).want(t, http.StatusAccepted).decode(t, &res)
	if len(res.Results) != api.MaxBatch || res.Results[7].ID != "b7" || res.Results[7].Deliveries != 1 {
		t.Fatalf("batch of %d: %d results, [7] = %+v", api.MaxBatch, len(res.Results), res.Results[7])
	}

	tooMany := append(events, api.EventRequest{ID: "x", Type: "a", Data: json.RawMessage(`1`)})
	e.do("POST", "/v1/events/batch", api.BatchRequest{Events: tooMany}).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events")
	if got := e.do("POST", "/v1/events/batch", `{"events":[]}`).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events"); got.Message != "is empty: send at least one event" {
		t.Errorf(`{"events":[]}: message %q, want one saying the list is empty`, got.Message)
	}
	if got := e.do("POST", "/v1/events/batch", `{}`).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events"); got.Message != "is required" {
		t.Errorf(`{}: message %q, want "is required"`, got.Message)
	}

	// One bad event fails the whole batch, naming it, and writes nothing.
	bad := []api.EventRequest{
		{ID: "ok1", Type: "video.trending", Data: json.RawMessage(`{}`)},
		{ID: "ok2", Type: "video.trending", Data: json.RawMessage(`{}`)},
		{ID: "bad", Type: "video..trending", Data: json.RawMessage(`{}`)},
	}
	e.do("POST", "/v1/events/batch", api.BatchRequest{Events: bad}).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events[2].type")
	e.do("POST", "/v1/events/batch", `{"events":[{"type":"a.b","data":1},{"type":"a.b"}]}`).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events[1].data")
	if _, err := e.store.GetEvent(context.Background(), "ok1"); err == nil {
		t.Fatal("event ok1 of a failed batch was written")
	}
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cases := []struct {
		name, method, path, body string
		hdr                      []string
		status                   int
		code, field              string
	}{
		{"malformed", "POST", "/v1/events", `{"type":`, nil, 400, api.CodeBadRequest, ""},
		{"not json", "POST", "/v1/events", `hello`, nil, 400, api.CodeBadRequest, ""},
		{"empty", "POST", "/v1/events", ``, nil, 400, api.CodeBadRequest, ""},
		{"unknown field", "POST", "/v1/events", `{"type":"a","data":1,"colour":"red"}`, nil, 400, api.CodeBadRequest, "colour"},
		{"trailing data", "POST", "/v1/events", `{"type":"a","data":1} {}`, nil, 400, api.CodeBadRequest, ""},
		{"wrong type", "POST", "/v1/events", `{"type":7,"data":1}`, nil, 400, api.CodeBadRequest, "type"},
		{"nested wrong type", "POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"coalesce":{"event_types":"a","key":"k","window_seconds":1}}`, nil, 400, api.CodeBadRequest, "coalesce.event_types"},
		{"text/plain", "POST", "/v1/events", `{"type":"a","data":1}`, []string{"Content-Type", "text/plain"}, 415, api.CodeUnsupportedMedia, ""},
		{"no content type", "POST", "/v1/events", `{"type":"a","data":1}`, []string{"Content-Type", ""}, 415, api.CodeUnsupportedMedia, ""},
		{"bad type name", "POST", "/v1/events", `{"type":"a b","data":1}`, nil, 422, api.CodeInvalid, "type"},
		{"bad id", "POST", "/v1/events", `{"id":"a/b","type":"a","data":1}`, nil, 422, api.CodeInvalid, "id"},
		{"no data", "POST", "/v1/events", `{"type":"a"}`, nil, 422, api.CodeInvalid, "data"},
		{"bad url", "POST", "/v1/subscribers", `{"url":"ftp://x","events":["*"]}`, nil, 422, api.CodeInvalid, "url"},
		{"bad pattern", "POST", "/v1/subscribers", `{"url":"https://x.example","events":["a..b"]}`, nil, 422, api.CodeInvalid, "events[0]"},
		{"no route", "GET", "/v1/nope", ``, nil, 404, api.CodeNotFound, ""},
		{"wrong method", "PUT", "/v1/events", ``, nil, 405, api.CodeMethodNotAllowed, ""},
		{"no subscriber", "GET", "/v1/subscribers/nobody", ``, nil, 404, api.CodeNotFound, ""},
		{"no delivery", "GET", "/v1/deliveries/dlv_x_1", ``, nil, 404, api.CodeNotFound, ""},
		{"retry no delivery", "POST", "/v1/deliveries/nope/retry", ``, nil, 404, api.CodeNotFound, ""},
		{"pause nobody", "POST", "/v1/subscribers/nobody/pause", ``, nil, 404, api.CodeNotFound, ""},
		{"replay nobody", "POST", "/v1/subscribers/nobody/replay", ``, nil, 404, api.CodeNotFound, ""},
		{"replay bad time", "POST", "/v1/subscribers/nobody/replay", `{"from":"yesterday"}`, nil, 422, api.CodeInvalid, "from"},
		{"rotate bad overlap", "POST", "/v1/subscribers/nobody/rotate-secret", `{"overlap":"forever"}`, nil, 422, api.CodeInvalid, "overlap"},
		{"bad status filter", "GET", "/v1/deliveries?status=lost", ``, nil, 422, api.CodeInvalid, "status"},
		{"bad limit", "GET", "/v1/deliveries?limit=0", ``, nil, 422, api.CodeInvalid, "limit"},
		{"big limit", "GET", "/v1/deliveries?limit=1001", ``, nil, 422, api.CodeInvalid, "limit"},
		{"bad from", "GET", "/v1/deliveries?from=monday", ``, nil, 422, api.CodeInvalid, "from"},
		{"unknown param", "GET", "/v1/deliveries?colour=red", ``, nil, 400, api.CodeBadRequest, "colour"},
		{"key in another case", "POST", "/v1/events", `{"type":"a.b","data":1,"Type":"c.d"}`, nil, 400, api.CodeBadRequest, "Type"},
		{"key twice", "POST", "/v1/events", `{"type":"a.b","data":1,"type":"c.d"}`, nil, 400, api.CodeBadRequest, "type"},
		{"batch key twice", "POST", "/v1/events/batch", `{"events":[{"type":"a","data":1},{"id":"x","type":"a","data":1,"id":"y"}]}`, nil, 400, api.CodeBadRequest, "events[1].id"},
		{"url in capitals", "POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"URL":"https://y.example"}`, nil, 400, api.CodeBadRequest, "URL"},
		{"header twice", "POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"headers":{"X-A":"1","X-A":"2"}}`, nil, 400, api.CodeBadRequest, "headers.X-A"},
		{"nested unknown field", "POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"coalesce":{"event_types":["*"],"key":"k","window_seconds":1,"x":1}}`, nil, 400, api.CodeBadRequest, "coalesce.x"},
		{"patch key twice", "PATCH", "/v1/subscribers/nobody", `{"burst":5,"burst":50}`, nil, 400, api.CodeBadRequest, "burst"},
		{"patch coalesce key twice", "PATCH", "/v1/subscribers/nobody", `{"coalesce":{"event_types":["*"],"key":"k","key":"j","window_seconds":1}}`, nil, 400, api.CodeBadRequest, "coalesce.key"},
		{"replay key twice", "POST", "/v1/subscribers/nobody/replay", `{"from":"2020-01-01T00:00:00Z","from":"2021-01-01T00:00:00Z"}`, nil, 400, api.CodeBadRequest, "from"},
		{"no route, with a query", "GET", "/v1/nope?x=1", ``, nil, 404, api.CodeNotFound, ""},
		{"wrong method, with a query", "PUT", "/v1/deliveries?x=1", ``, nil, 405, api.CodeMethodNotAllowed, ""},
		{"filter the route lacks", "GET", "/v1/subscribers?state=paused", ``, nil, 400, api.CodeBadRequest, "state"},
		{"param on stats", "GET", "/v1/stats?subscriber=x", ``, nil, 400, api.CodeBadRequest, "subscriber"},
		{"param on emit", "POST", "/v1/events?type=a.b", `{"type":"a","data":1}`, nil, 400, api.CodeBadRequest, "type"},
		{"repeated pretty", "GET", "/v1/stats?pretty&pretty", ``, nil, 400, api.CodeBadRequest, "pretty"},
		{"repeated param", "GET", "/v1/deliveries?limit=1&limit=5000", ``, nil, 400, api.CodeBadRequest, "limit"},
		{"empty range", "GET", "/v1/deliveries?from=2030-01-01T00:00:00Z&to=2020-01-01T00:00:00Z", ``, nil, 422, api.CodeInvalid, "from"},
		{"empty range, equal", "GET", "/v1/deliveries?from=2030-01-01T00:00:00Z&to=2030-01-01T00:00:00Z", ``, nil, 422, api.CodeInvalid, "from"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var body any
			if c.body != "" || c.method == "POST" {
				body = c.body
			}
			e := *e
			e.t = t
			e.do(c.method, c.path, body, c.hdr...).wantError(t, c.status, c.code, c.field)
		})
	}
}

// TestPrettyEverywhere: ?pretty, which indents the JSON, goes with every route.
func TestPrettyEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, path := range []string{"/v1/stats?pretty", "/v1/subscribers?pretty", "/v1/deliveries?limit=5&pretty"} {
		if r := e.do("GET", path, nil).want(t, http.StatusOK); !bytes.Contains(r.body, []byte("\n  ")) {
			t.Errorf("GET %s answered %q, not indented", path, r.body)
		}
	}
}

// TestBodyLimit: BodyLimit bounds an event's data, in either route, as `edgehook emit` takes it:
// data of exactly the limit is taken, a byte more refused with a 413 naming the field (the API
// counted the JSON around the data against the limit too). A body is read up to its route's limit
// plus EnvelopeAllowance, and no further, however it is sent.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	const limit, batchLimit = 2048, 4096
	e := newEnv(t, func(s *setup) {
		s.api.BodyLimit = limit
		s.api.BatchBodyLimit = batchLimit
		s.store.MaxBodyBytes = limit
	})
	event := func(n int) string { return `{"type":"a","data":"` + strings.Repeat("x", n-2) + `"}` } // data of n bytes
	e.do("POST", "/v1/events", event(limit)).want(t, http.StatusAccepted)
	e.do("POST", "/v1/events", event(limit+1)).wantError(t, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "data")
	e.do("POST", "/v1/events/batch", `{"events":[`+event(limit)+`]}`).want(t, http.StatusAccepted)
	e.do("POST", "/v1/events/batch", `{"events":[`+event(2)+`,`+event(limit+1)+`]}`).
		wantError(t, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "events[1].data")

	// The read stops at the limit and the allowance, whatever the body holds.
	padded := event(2) + strings.Repeat(" ", limit+api.EnvelopeAllowance)
	e.do("POST", "/v1/events", padded).wantError(t, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "")
	// Without a Content-Length (chunked), the limit still holds while reading.
	req, _ := http.NewRequest("POST", e.url+"/v1/events", struct{ *strings.Reader }{strings.NewReader(padded)})
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || req.ContentLength > 0 {
		t.Fatalf("chunked oversize body: status %d (content length %d), want 413", resp.StatusCode, req.ContentLength)
	}

	// A batch may be bigger than one request, up to its own limit and the allowance.
	batch := `{"events":[` + event(1500) + `,` + event(1500) + `]}`
	e.do("POST", "/v1/events/batch", batch).want(t, http.StatusAccepted)
	padded = `{"events":[` + event(2) + `]}` + strings.Repeat(" ", batchLimit+api.EnvelopeAllowance)
	e.do("POST", "/v1/events/batch", padded).wantError(t, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "")
}

// TestDefaultBatchLimitTakesTheLargestEvent: a body limit above the default batch limit (dev
// passes no batch limit) still lets an event of the largest data go by batch.
func TestDefaultBatchLimitTakesTheLargestEvent(t *testing.T) {
	t.Parallel()
	const limit = api.DefaultBatchBodyLimit + 1<<20
	e := newEnv(t, func(s *setup) { s.api.BodyLimit = limit; s.store.MaxBodyBytes = limit })
	data := `"` + strings.Repeat("x", limit-2) + `"`
	e.do("POST", "/v1/events/batch", `{"events":[{"type":"a","data":`+data+`}]}`).want(t, http.StatusAccepted)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(s *setup) { s.tokens = []string{"first-token", "second-token"} })
	e.do("GET", "/v1/stats", nil).want(t, http.StatusOK)
	e.do("GET", "/v1/stats", nil, "Authorization", "Bearer second-token").want(t, http.StatusOK)
	e.do("GET", "/metrics", nil).want(t, http.StatusOK)
	for _, auth := range []string{"", "Bearer wrong", "Bearer first-toke", "Basic Zmlyc3QtdG9rZW4=", "first-token", "Bearer "} {
		for _, path := range []string{"/v1/stats", "/metrics", "/v1/subscribers/x", "/v1/nope"} {
			r := e.do("GET", path, nil, "Authorization", auth)
			r.wantError(t, http.StatusUnauthorized, api.CodeUnauthorized, "")
			if r.header.Get("WWW-Authenticate") == "" {
				t.Fatalf("401 without WWW-Authenticate")
			}
		}
	}
	// Probes stay open so a load balancer or systemd can check them.
	e.do("GET", "/healthz", nil, "Authorization", "").want(t, http.StatusOK)
	e.do("GET", "/readyz", nil, "Authorization", "").want(t, http.StatusOK)

	// Without tokens, no header is needed.
	open := newEnv(t)
	open.do("GET", "/v1/stats", nil).want(t, http.StatusOK)
	open.do("GET", "/metrics", nil).want(t, http.StatusOK)
}

func TestSubscriberLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	created := e.addSubscriber(api.SubscriberRequest{ID: "shop", URL: "https://example.com/hook", Events: []string{"order.*"}, RatePerSec: 5})
	if !strings.HasPrefix(created.Secret, "whsec_") || created.ID != "shop" || created.RatePerSec != 5 || created.State != store.StateActive {
		t.Fatalf("created = %+v", created)
	}
	e.do("POST", "/v1/subscribers", api.SubscriberRequest{ID: "shop", URL: "https://example.com/other", Events: []string{"*"}}).
		wantError(t, http.StatusConflict, api.CodeConflict, "")

	// The secret is never shown again.
	for _, path := range []string{"/v1/subscribers/shop", "/v1/subscribers"} {
		r := e.do("GET", path, nil).want(t, http.StatusOK)
		if bytes.Contains(r.body, []byte("whsec_")) || bytes.Contains(r.body, []byte(`"secret"`)) {
			t.Fatalf("GET %s shows a secret: %s", path, r.body)
		}
	}
	var list struct{ Subscribers []api.Subscriber }
	e.do("GET", "/v1/subscribers", nil).want(t, http.StatusOK).decode(t, &list)
	if len(list.Subscribers) != 1 || list.Subscribers[0].ID != "shop" {
		t.Fatalf("list = %+v", list)
	}

	var sub api.Subscriber
	e.do("PATCH", "/v1/subscribers/shop", `{"rate_per_sec":50,"burst":100,"coalesce":{"event_types":["order.*"],"key":"order_id","window_seconds":30}}`).
		want(t, http.StatusOK).decode(t, &sub)
	if sub.RatePerSec != 50 || sub.Burst != 100 || sub.Coalesce == nil || sub.Coalesce.Key != "order_id" || sub.URL != "https://example.com/hook" {
		t.Fatalf("patched = %+v", sub)
	}
	var uncoalesced api.Subscriber
	e.do("PATCH", "/v1/subscribers/shop", `{"coalesce":null}`).want(t, http.StatusOK).decode(t, &uncoalesced)
	if sub = uncoalesced; sub.Coalesce != nil || sub.RatePerSec != 50 {
		t.Fatalf("coalesce not removed: %+v", sub)
	}
	e.do("PATCH", "/v1/subscribers/shop", `{"coalesce":{"key":"k","window_seconds":1,"extra":1}}`).wantError(t, http.StatusBadRequest, api.CodeBadRequest, "coalesce.extra")
	e.do("PATCH", "/v1/subscribers/shop", `{"url":"not a url"}`).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "url")
	e.do("PATCH", "/v1/subscribers/nobody", `{"burst":1}`).wantError(t, http.StatusNotFound, api.CodeNotFound, "")

	e.do("POST", "/v1/subscribers/shop/pause", nil).want(t, http.StatusOK).decode(t, &sub)
	if sub.State != store.StatePaused || sub.StateReason != api.DefaultPauseReason {
		t.Fatalf("paused = %+v", sub)
	}
	e.do("POST", "/v1/subscribers/shop/pause", `{"reason":"receiver migrating, back at 14:00"}`).want(t, http.StatusOK).decode(t, &sub)
	if sub.StateReason != "receiver migrating, back at 14:00" {
		t.Fatalf("paused with a reason = %+v", sub)
	}
	e.do("POST", "/v1/subscribers/shop/pause", `{"reason":"two\nlines"}`).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "reason")
	e.do("POST", "/v1/subscribers/shop/pause", `{"why":"x"}`).wantError(t, http.StatusBadRequest, api.CodeBadRequest, "why")
	e.do("POST", "/v1/subscribers/shop/resume", nil).want(t, http.StatusOK).decode(t, &sub)
	if sub.State != store.StateActive {
		t.Fatalf("resumed = %+v", sub)
	}

	var rotated api.SubscriberWithSecret
	e.do("POST", "/v1/subscribers/shop/rotate-secret", `{"overlap":"1h"}`).want(t, http.StatusOK).decode(t, &rotated)
	if !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == created.Secret || len(rotated.Secrets) != 2 {
		t.Fatalf("rotated = %+v", rotated)
	}
	if exp := rotated.Secrets[1].ExpiresAt; exp.IsZero() || exp.Sub(time.Now()) > time.Hour || !rotated.Secrets[0].ExpiresAt.IsZero() {
		t.Fatalf("after a rotation the old secret expires within the overlap and the new one never: %+v", rotated.Secrets)
	}
	if !rotated.UpdatedAt.After(sub.UpdatedAt) {
		t.Fatalf("a rotation left updated_at at %s (before it: %s)", rotated.UpdatedAt, sub.UpdatedAt)
	}
	e.do("POST", "/v1/subscribers/shop/rotate-secret", nil).want(t, http.StatusOK) // no body: the default overlap

	e.do("DELETE", "/v1/subscribers/shop", nil).want(t, http.StatusNoContent)
	e.do("GET", "/v1/subscribers/shop", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")
	e.do("DELETE", "/v1/subscribers/shop", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")

	// Neither the secrets nor payloads ever reach the log.
	if logs := e.logs.String(); strings.Contains(logs, "whsec_") || strings.Contains(logs, created.Secret[6:]) {
		t.Fatalf("a secret was logged:\n%s", logs)
	}
}

func TestPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.addSubscriber(api.SubscriberRequest{ID: "a", URL: "https://a.example/hook", Events: []string{"*"}})
	e.addSubscriber(api.SubscriberRequest{ID: "b", URL: "https://b.example/hook", Events: []string{"other"}})
	for i := range 25 {
		e.do("POST", "/v1/events", fmt.Sprintf(`{"id":"e%02d","type":"video.trending","data":{}}`, i)).want(t, http.StatusAccepted)
	}
	seen := map[string]bool{}
	var sizes []int
	cursor := ""
	for range 10 {
		var page api.DeliveryPage
		e.do("GET", "/v1/deliveries?limit=10&subscriber=a&cursor="+url.QueryEscape(cursor), nil).want(t, http.StatusOK).decode(t, &page)
		sizes = append(sizes, len(page.Deliveries))
		for _, d := range page.Deliveries {
			if seen[d.ID] || d.SubscriberID != a.ID {
				t.Fatalf("delivery %s seen twice or of another subscriber", d.ID)
			}
			seen[d.ID] = true
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if fmt.Sprint(sizes) != "[10 10 5]" || len(seen) != 25 {
		t.Fatalf("pages %v, %d distinct deliveries; want [10 10 5] and 25", sizes, len(seen))
	}

	count := func(query string) int {
		var page api.DeliveryPage
		e.do("GET", "/v1/deliveries?limit=1000&"+query, nil).want(t, http.StatusOK).decode(t, &page)
		return len(page.Deliveries)
	}
	future := url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	past := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	for query, want := range map[string]int{
		"status=pending": 25, "status=delivered": 0, "subscriber=b": 0, "event=e07": 1,
		"from=" + future: 0, "from=" + past: 25, "to=" + past: 0, "to=" + future: 25,
	} {
		if got := count(query); got != want {
			t.Errorf("?%s: %d deliveries, want %d", query, got, want)
		}
	}
	var newest api.DeliveryPage
	e.do("GET", "/v1/deliveries?limit=1", nil).want(t, http.StatusOK).decode(t, &newest)
	if len(newest.Deliveries) != 1 || newest.Deliveries[0].EventID != "e24" {
		t.Fatalf("newest first: got %+v", newest.Deliveries)
	}
}

// deadDelivery makes a real dead delivery with one logged attempt, through the store's own claim
// and settle (what the engine does after a final failure).
func deadDelivery(t *testing.T, e *env) string {
	t.Helper()
	ctx := context.Background()
	res, err := e.store.Claim(ctx, store.ClaimParams{Now: time.Now(), Limit: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Deliveries) != 1 {
		t.Fatalf("claim: %v, %d deliveries", err, len(res.Deliveries))
	}
	c := res.Deliveries[0]
	_, err = e.store.Settle(ctx, time.Now(), store.CircuitPolicy{Threshold: 5, BaseCooldown: time.Second, MaxCooldown: time.Minute},
		[]store.Settlement{{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID, Result: store.ResultDead,
			Reason: store.ReasonMaxAttempts, Status: 500, Error: "HTTP 500",
			Attempt: &store.Attempt{At: time.Now(), Status: 500, LatencyMS: 12, Outcome: "http_5xx", Error: "HTTP 500", Excerpt: "oops"}}})
	if err != nil {
		t.Fatal(err)
	}
	return c.DeliveryID
}

func TestDeliveryRetryAndReplay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	e.do("POST", "/v1/events", `{"id":"one","type":"a","data":{}}`).want(t, http.StatusAccepted)
	id := deadDelivery(t, e)

	var d api.Delivery
	e.do("GET", "/v1/deliveries/"+id, nil).want(t, http.StatusOK).decode(t, &d)
	if d.Status != store.StatusDead || d.Reason != store.ReasonMaxAttempts || d.LastStatus != 500 || len(d.AttemptLog) != 1 || d.AttemptLog[0].Excerpt != "oops" {
		t.Fatalf("dead delivery = %+v", d)
	}
	var dead api.DeliveryPage
	e.do("GET", "/v1/deliveries?status=dead", nil).want(t, http.StatusOK).decode(t, &dead)
	if len(dead.Deliveries) != 1 || dead.Deliveries[0].AttemptLog != nil {
		t.Fatalf("dead list = %+v (listings carry no attempt log)", dead)
	}

	e.do("POST", "/v1/deliveries/"+id+"/retry", nil).want(t, http.StatusOK).decode(t, &d)
	if d.Status != store.StatusPending || d.Attempts != 0 {
		t.Fatalf("retried = %+v", d)
	}
	e.do("POST", "/v1/deliveries/"+id+"/retry", nil).wantError(t, http.StatusConflict, api.CodeInvalidState, "")

	id = deadDelivery(t, e)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	var rr api.ReplayResult
	e.do("POST", "/v1/subscribers/s/replay", `{"from":"`+future+`"}`).want(t, http.StatusOK).decode(t, &rr)
	if rr.Replayed != 0 {
		t.Fatalf("replay of a range with no deaths replayed %d", rr.Replayed)
	}
	e.do("POST", "/v1/subscribers/s/replay", `{"to":"`+future+`"}`).want(t, http.StatusOK).decode(t, &rr)
	if rr.Replayed != 1 {
		t.Fatalf("replayed %d, want 1", rr.Replayed)
	}
	e.do("GET", "/v1/deliveries/"+id, nil).want(t, http.StatusOK).decode(t, &d)
	if d.Status != store.StatusPending {
		t.Fatalf("after replay: %+v", d)
	}
	e.do("POST", "/v1/subscribers/s/replay", `{"from":"`+future+`","to":"`+future+`"}`).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "from")
}

func TestStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	for i := range 3 {
		e.do("POST", "/v1/events", fmt.Sprintf(`{"type":"a","data":%d}`, i)).want(t, http.StatusAccepted)
	}
	var st api.Stats
	e.do("GET", "/v1/stats", nil).want(t, http.StatusOK).decode(t, &st)
	if st.Depth != 3 || len(st.Subscribers) != 1 || st.Subscribers[0].Counts[store.StatusPending] != 3 {
		t.Fatalf("stats = %+v", st)
	}
}

func TestQueueFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(s *setup) { s.store.GlobalCap = 2 })
	e.addSubscriber(api.SubscriberRequest{URL: "https://s.example/hook", Events: []string{"*"}})
	e.do("POST", "/v1/events", `{"type":"a","data":1}`).want(t, http.StatusAccepted)
	e.do("POST", "/v1/events", `{"type":"a","data":2}`).want(t, http.StatusAccepted)
	r := e.do("POST", "/v1/events", `{"id":"late","type":"a","data":3}`)
	r.wantError(t, http.StatusTooManyRequests, api.CodeQueueFull, "")
	if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
		t.Fatalf("429 with Retry-After %q", ra)
	}
	if _, err := e.store.GetEvent(context.Background(), "late"); err == nil {
		t.Fatal("the refused event was written")
	}
}

// TestRetryAndReplayQueueFull: a retry or a replay that would take the queue past the global cap
// is a 429 queue_full with Retry-After, as an emit is, documented so, and writes nothing: the
// deliveries stay dead.
func TestRetryAndReplayQueueFull(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	e := newEnv(t, func(s *setup) { s.store.GlobalCap = 3 })
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	e.do("POST", "/v1/events/batch", `{"events":[{"type":"a","data":1},{"type":"a","data":2}]}`).want(t, http.StatusAccepted)
	dead := []string{deadDelivery(t, e), deadDelivery(t, e)}
	e.do("POST", "/v1/events/batch", `{"events":[{"type":"a","data":3},{"type":"a","data":4}]}`).want(t, http.StatusAccepted)
	refused := func(method, tmpl, path, says string) {
		t.Helper()
		r := e.do(method, path, nil)
		if msg := r.wantError(t, http.StatusTooManyRequests, api.CodeQueueFull, "").Message; !strings.Contains(msg, says) {
			t.Errorf("%s %s: message %q does not say %q", method, path, msg, says)
		}
		if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Fatalf("%s %s: 429 with Retry-After %q", method, path, ra)
		}
		reportViolations(t, checkAgainstDoc(t, doc, method, tmpl, r))
	}
	stillDead := func(id string) {
		t.Helper()
		var d api.Delivery
		if e.do("GET", "/v1/deliveries/"+id, nil).want(t, http.StatusOK).decode(t, &d); d.Status != store.StatusDead {
			t.Fatalf("refused, yet %s is %s", id, d.Status)
		}
	}

	refused("POST", "/v1/subscribers/{id}/replay", "/v1/subscribers/s/replay", "cannot take 2 more") // at depth 2, cap 3: neither
	stillDead(dead[0])
	stillDead(dead[1])
	e.do("POST", "/v1/deliveries/"+dead[0]+"/retry", nil).want(t, http.StatusOK)
	refused("POST", "/v1/deliveries/{id}/retry", "/v1/deliveries/"+dead[1]+"/retry", "cannot take 1 more")
	stillDead(dead[1])
}

// TestDatabaseLocked holds the write lock from another connection, as another process would, so
// writes time out: 503 with Retry-After, and /readyz says not ready.
func TestDatabaseLocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(s *setup) { s.store.BusyTimeout = 50 * time.Millisecond })
	unlock := e.lockDatabase()
	r := e.do("POST", "/v1/events", `{"id":"locked","type":"a","data":1}`)
	r.wantError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	e.do("POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"]}`).wantError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "")
	e.do("GET", "/readyz", nil).wantError(t, http.StatusServiceUnavailable, api.CodeUnavailable, "")
	e.do("GET", "/healthz", nil).want(t, http.StatusOK)

	unlock()
	e.do("GET", "/readyz", nil).want(t, http.StatusOK)
	if _, err := e.store.GetEvent(context.Background(), "locked"); err == nil {
		t.Fatal("the event refused with 503 was written")
	}
}

func TestRequestID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("GET", "/healthz", nil)
	if len(r.header.Get("X-Request-Id")) < 16 {
		t.Fatalf("generated request id %q", r.header.Get("X-Request-Id"))
	}
	r = e.do("GET", "/healthz", nil, "X-Request-Id", "client-abc.1")
	if r.header.Get("X-Request-Id") != "client-abc.1" {
		t.Fatalf("a well-formed client id must be kept, got %q", r.header.Get("X-Request-Id"))
	}
	r = e.do("GET", "/v1/nope", nil, "X-Request-Id", "evil\tid")
	if got := r.header.Get("X-Request-Id"); got == "evil\tid" || got == "" {
		t.Fatalf("a malformed client id must be replaced, got %q", got)
	}
	if !strings.Contains(e.logs.String(), `"request_id":"client-abc.1"`) {
		t.Fatalf("the access log lacks the request id:\n%s", e.logs.String())
	}
}

func TestPayloadNeverLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/events", `{"type":"a","data":{"card":"4111-payload-marker"}}`).want(t, http.StatusAccepted)
	e.do("POST", "/v1/events", `{"type":"a b","data":{"card":"4111-payload-marker"}}`).want(t, http.StatusUnprocessableEntity)
	if logs := e.logs.String(); strings.Contains(logs, "payload-marker") || !strings.Contains(logs, `"route":"/v1/events"`) {
		t.Fatalf("logs must have the request but not its payload:\n%s", logs)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("GET", "/healthz", nil).want(t, http.StatusOK)
	e.do("GET", "/v1/subscribers/zz", nil).want(t, http.StatusNotFound)
	body := string(e.do("GET", "/metrics", nil).want(t, http.StatusOK).body)
	for _, want := range []string{
		`edgehook_http_requests_total{code="200",method="GET",route="/healthz"} 1`,
		`edgehook_http_requests_total{code="404",method="GET",route="/v1/subscribers/:id"} 1`,
		"edgehook_http_request_duration_seconds_bucket",
		"go_goroutines",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestEmitResultJSON pins the hand-written answer of a single emit to the bytes encoding/json
// (as c.JSON) would send, and checks it declines ids that encoding/json would escape.
func TestEmitResultJSON(t *testing.T) {
	for _, r := range []api.EmitResult{
		{ID: "evt_0123456789abcdef0123456789abcdef", Deliveries: 12},
		{ID: "a.b:c-d_e", Deliveries: 0, Duplicate: true},
		{ID: "x", Deliveries: 3, Superseded: 2},
		{ID: "y", Deliveries: -1, Duplicate: true, Superseded: 1 << 40},
	} {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(r); err != nil {
			t.Fatal(err)
		}
		got, ok := api.EmitResultJSON(r)
		if !ok || string(got) != want.String() {
			t.Errorf("%+v: got %q, %v; want %q", r, got, ok, want.String())
		}
	}
	for _, id := range []string{`a"b`, `a\b`, "a<b", "a>b", "a&b", "a\nb", "é", "a\x7fb"} {
		if got, ok := api.EmitResultJSON(api.EmitResult{ID: id}); ok {
			t.Errorf("id %q: got %q, want a decline", id, got)
		}
	}
}

// TestDecodedDataReachesTheStoreProven: data the fast decoders validated reaches the store with
// the proof (wire.CheckedJSON), so the store does not validate it again; data encoding/json
// decoded (here: an escaped key takes the slow path) arrives without one, and the store checks it.
func TestDecodedDataReachesTheStoreProven(t *testing.T) {
	t.Parallel()
	proven := func(r api.EventRequest) bool {
		in, err := r.Input()
		if err != nil {
			t.Fatal(err)
		}
		return in.BodyChecked.Covers(in.Body)
	}
	single, ok := api.DecodeEventFast([]byte(`{"type":"a","data":{"k":[1,"v"]}}`))
	if !ok || !proven(single) {
		t.Errorf("fast single event: decoded %v, proven %v; want both", ok, ok && proven(single))
	}
	batch, ok := api.DecodeBatchFast([]byte(`{"events":[{"type":"a","data":1},{"type":"b","data":"x"}]}`))
	if !ok || !proven(batch.Events[0]) || !proven(batch.Events[1]) {
		t.Errorf("fast batch: decoded %v; want every event proven", ok)
	}
	slow, err := api.DecodeBatch([]byte(`{"events":[{"typ\u0065":"a","data":{"k":1}}]}`))
	if err != nil || proven(slow.Events[0]) {
		t.Errorf("slow path: %v; want decoded and not proven", err)
	}
}

// TestPatchRefusesSilentResets: a zero rate, burst, in-flight cap or timeout, an empty mode or
// profile, and a null for any field but coalesce, are refused naming the field, and leave the subscriber as it was. (Zero was
// taken as "the default" and null as "absent": an operator throttling with rate 0 got 10/s.)
func TestPatchRefusesSilentResets(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.addSubscriber(api.SubscriberRequest{ID: "shop", URL: "https://example.com/hook", Events: []string{"*"},
		RatePerSec: 3, Burst: 4, MaxInFlight: 2, TimeoutMS: 2000, Headers: map[string]string{"X-Team": "a"}})
	for _, c := range []struct{ body, field string }{
		{`{"rate_per_sec":0}`, "rate_per_sec"},
		{`{"burst":0}`, "burst"},
		{`{"max_in_flight":0}`, "max_in_flight"},
		{`{"timeout_ms":0}`, "timeout_ms"},
		{`{"rate_per_sec":5,"timeout_ms":0}`, "timeout_ms"},
		{`{"url":null}`, "url"},
		{`{"events":null}`, "events"},
		{`{"headers":null}`, "headers"},
		{`{"burst":7,"mode":null}`, "mode"},
		{`{"mode":""}`, "mode"},
		{`{"profile":""}`, "profile"},
	} {
		e.do("PATCH", "/v1/subscribers/shop", c.body).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, c.field)
	}
	var after api.Subscriber
	e.do("GET", "/v1/subscribers/shop", nil).want(t, http.StatusOK).decode(t, &after)
	if after.RatePerSec != 3 || after.Burst != 4 || after.MaxInFlight != 2 || after.TimeoutMS != 2000 ||
		after.Headers["X-Team"] != "a" || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Fatalf("a refused patch changed the subscriber: %+v", after)
	}
	e.do("PATCH", "/v1/subscribers/shop", `{"bogus":null}`).wantError(t, http.StatusBadRequest, api.CodeBadRequest, "bogus")
	var cleared api.Subscriber
	e.do("PATCH", "/v1/subscribers/shop", `{"coalesce":null,"headers":{}}`).want(t, http.StatusOK).decode(t, &cleared)
	if len(cleared.Headers) != 0 || cleared.RatePerSec != 3 {
		t.Fatalf(`{"headers":{}} must remove the headers and keep the rest: %+v`, cleared)
	}
}

// TestTypeErrorMessages: a wrong type where no field is at fault names the body, or the field
// the value stands for, instead of starting with a blank.
func TestTypeErrorMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "shop", URL: "https://example.com/hook", Events: []string{"*"}})
	for _, c := range []struct{ method, path, body, field, message string }{
		{"POST", "/v1/subscribers", `[]`, "", "the request body must be an object, not JSON array"},
		{"POST", "/v1/events", `"x"`, "", "the request body must be an object, not JSON string"},
		{"PATCH", "/v1/subscribers/shop", `{"coalesce":5}`, "coalesce", "coalesce must be an object, not JSON number"},
		{"PATCH", "/v1/subscribers/shop", `{"coalesce":{"key":5}}`, "coalesce.key", "key must be a string, not JSON number"},
	} {
		if got := e.do(c.method, c.path, c.body).wantError(t, http.StatusBadRequest, api.CodeBadRequest, c.field); got.Message != c.message {
			t.Errorf("%s %s %s: message %q, want %q", c.method, c.path, c.body, got.Message, c.message)
		}
	}
}

// TestEscapedPathIDs: an id with a character a client escapes in a path segment (":" is
// "%3A" from encodeURIComponent) names the same object as the id written plain.
func TestEscapedPathIDs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "team:shop", URL: "https://example.com/hook", Events: []string{"*"}})
	e.do("POST", "/v1/events", `{"id":"order:1","type":"a.b","data":1}`).want(t, http.StatusAccepted)
	var sub api.Subscriber
	if e.do("GET", "/v1/subscribers/team%3Ashop", nil).want(t, http.StatusOK).decode(t, &sub); sub.ID != "team:shop" {
		t.Fatalf("GET team%%3Ashop = %+v", sub)
	}
	var ev api.Event
	if e.do("GET", "/v1/events/order%3a1", nil).want(t, http.StatusOK).decode(t, &ev); ev.ID != "order:1" {
		t.Fatalf("GET order%%3a1 = %+v", ev)
	}
	e.do("POST", "/v1/subscribers/team%3Ashop/pause", nil).want(t, http.StatusOK)
	e.do("DELETE", "/v1/subscribers/team%3Ashop", nil).want(t, http.StatusNoContent)
	e.do("GET", "/v1/subscribers/team:shop", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")
	// Decoded once only: %2541 is "%41", not "A".
	e.addSubscriber(api.SubscriberRequest{ID: "A", URL: "https://example.com/hook", Events: []string{"*"}})
	e.do("GET", "/v1/subscribers/%2541", nil).wantError(t, http.StatusNotFound, api.CodeNotFound, "")
}
