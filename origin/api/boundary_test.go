package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/origin/api"
)

// TestAQueryThatDoesNotParseIsRefused: a query pair that does not parse (a bad escape, or a ';'
// separator) must be refused like an unknown one, not dropped: dropping ?subscriber= turns a
// filtered listing into a listing of every subscriber's deliveries, and a dropped ?limit= is
// silently the default.
func TestAQueryThatDoesNotParseIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "a", URL: "https://a.example/hook", Events: []string{"*"}})
	e.addSubscriber(api.SubscriberRequest{ID: "b", URL: "https://b.example/hook", Events: []string{"*"}})
	e.do("POST", "/v1/events", `{"id":"e1","type":"a.b","data":{}}`).want(t, http.StatusAccepted)
	for _, q := range []string{"subscriber=a%zz", "subscriber=a;x", "limit=1;limit=5000", "status=dead&x=%zz"} {
		r := e.do("GET", "/v1/deliveries?"+q, nil)
		if r.status != http.StatusBadRequest {
			t.Errorf("GET /v1/deliveries?%s: status %d, want 400; body %s", q, r.status, r.body)
		}
	}
}

// TestANullHeaderValueIsRefused: a header value must be a string; null is a wrong type (400
// naming it), not an empty header value stored and sent on every delivery.
func TestANullHeaderValueIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "a", URL: "https://a.example/hook", Events: []string{"*"}, Headers: map[string]string{"X-Keep": "1"}})
	e.do("POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"headers":{"X-A":null}}`).
		wantError(t, http.StatusBadRequest, api.CodeBadRequest, "headers.X-A")
	e.do("PATCH", "/v1/subscribers/a", `{"headers":{"X-B":null}}`).
		wantError(t, http.StatusBadRequest, api.CodeBadRequest, "headers.X-B")
}

// TestATypeErrorNamesTheElement: a wrong type inside an array or a map names the element, as
// the document promises ("Field errors name the event, e.g. events[3].type"; "headers.X-Team").
func TestATypeErrorNamesTheElement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/events/batch", `{"events":[{"type":"a","data":1},{"type":"a","data":1},{"type":5,"data":1}]}`).
		wantError(t, http.StatusBadRequest, api.CodeBadRequest, "events[2].type")
	e.do("POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"headers":{"X-Team":5}}`).
		wantError(t, http.StatusBadRequest, api.CodeBadRequest, "headers.X-Team")
}

// TestTheLegacySignatureHeadersAreReserved: an extra header with the name of the legacy
// profile's own signature header must be refused like webhook-* is: at the edge the record's
// extra headers are Set after the forwarded ones and replace the origin's signature.
func TestTheLegacySignatureHeadersAreReserved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/subscribers", `{"url":"https://x.example","events":["*"],"profile":"legacy","legacy_prefix":"VVV","mode":"edge","headers":{"X-VVV-Signature":"sha256=forged"}}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "headers.X-VVV-Signature")
}

// TestANullBodyIsRefused: a body of JSON null is not an object: a 400 like [] or "x", not a PATCH
// that answers 200 (and bumps updated_at) or an emit error about "data".
func TestANullBodyIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "a", URL: "https://a.example/hook", Events: []string{"*"}})
	for _, c := range []struct{ method, path string }{{"PATCH", "/v1/subscribers/a"}, {"POST", "/v1/events"}} {
		r := e.do(c.method, c.path, `null`)
		if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "the request body") {
			t.Errorf("%s %s null: %d %s; want 400 naming the request body", c.method, c.path, r.status, r.body)
		}
	}
}

// TestATimeBoundBeforeTheEpochIsRefused: the zero time (year 1) is how the store reads "no bound",
// so {"to":"0001-01-01T00:00:00Z"} replayed every dead delivery; nothing is stored before 1970, and
// such a bound is a 422 naming it, in a replay and in a listing.
func TestATimeBoundBeforeTheEpochIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	e.do("POST", "/v1/subscribers/s/replay", `{"to":"0001-01-01T00:00:00Z"}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "to")
	e.do("POST", "/v1/subscribers/s/replay", `{"from":"1969-12-31T23:59:59Z"}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "from")
	e.do("GET", "/v1/deliveries?to=0001-01-01T00:00:00Z", nil).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "to")
}

// TestAnEmptyTimeRangeNamesBothBounds: from not before to is a 422 on from whose message names
// both bounds with their values, in a replay (which said only "must be before to") as in a
// listing.
func TestAnEmptyTimeRangeNamesBothBounds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	const from, to = "2030-01-01T00:00:00Z", "2030-01-01T00:00:00Z"
	want := "from (" + from + ") must be before to (" + to + ")"
	for _, r := range []response{
		e.do("POST", "/v1/subscribers/s/replay", `{"from":"`+from+`","to":"`+to+`"}`),
		e.do("GET", "/v1/deliveries?from="+from+"&to="+to, nil),
	} {
		if got := r.wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "from"); got.Message != want {
			t.Errorf("message %q, want %q", got.Message, want)
		}
	}
}
