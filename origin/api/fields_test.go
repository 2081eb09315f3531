package api_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/origin/api"
)

// TestPatternErrorNamesTheElement: a bad pattern in "events" is a 422 whose field is the
// element's path ("events[1]"), as a wrong type there already is, and as coalesce.event_types[0]
// is (openapi.yaml: "field names the offending field", e.g. "events[3].type").
func TestPatternErrorNamesTheElement(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The same element with a wrong type: named by its index.
	e.do("POST", "/v1/subscribers", `{"url":"https://x.example/h","events":["*",5]}`).
		wantError(t, http.StatusBadRequest, api.CodeBadRequest, "events[1]")
	// With a value that is not allowed: the field must be the element too.
	e.do("POST", "/v1/subscribers", `{"url":"https://x.example/h","events":["*","a b"]}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events[1]")
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	e.do("PATCH", "/v1/subscribers/s", `{"events":["a.*","bad pattern"]}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events[1]")
}

// TestInvalidCharacterIsQuoted: an id or type with a character outside the allowed set is
// a 422 whose message quotes that character, not the first byte of its UTF-8 read as Latin-1
// ("évt" answered "contains 'Ã'").
func TestInvalidCharacterIsQuoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct{ body, field string }{
		{`{"id":"évt","type":"a","data":1}`, "id"},
		{`{"type":"vidéo.trending","data":1}`, "type"},
	} {
		msg := e.do("POST", "/v1/events", c.body).wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, c.field).Message
		if !strings.Contains(msg, "'é'") || strings.Contains(msg, "Ã") {
			t.Errorf("%s: message %q does not name the character 'é'", c.body, msg)
		}
	}
	msg := e.do("POST", "/v1/subscribers", `{"id":"tëam","url":"https://x.example/h","events":["*"]}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "id").Message
	if !strings.Contains(msg, "'ë'") {
		t.Errorf("subscriber id: message %q does not name the character 'ë'", msg)
	}
}

// TestIntegerTypeMessage: a fraction or exponent where an integer is expected is a 400 whose
// message says an integer is wanted. It answered "burst must be a number, not JSON number 1.5",
// which tells the client nothing (it sent a number).
func TestIntegerTypeMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	for _, c := range []struct{ method, path, body, field string }{
		{"PATCH", "/v1/subscribers/s", `{"burst":1.5}`, "burst"},
		{"PATCH", "/v1/subscribers/s", `{"timeout_ms":1e3}`, "timeout_ms"},
		{"POST", "/v1/subscribers", `{"url":"https://x.example/h","events":["*"],"max_in_flight":2.5}`, "max_in_flight"},
	} {
		msg := e.do(c.method, c.path, c.body).wantError(t, http.StatusBadRequest, api.CodeBadRequest, c.field).Message
		if strings.Contains(msg, "must be a number, not JSON number") || !strings.Contains(msg, "integer") {
			t.Errorf("%s %s: message %q does not say an integer is expected", c.method, c.body, msg)
		}
	}
}

// TestEventIDWithADotIsRefused: an event id is its deliveries' Standard Webhooks webhook-id, and
// the signed content is "{id}.{timestamp}.{body}": with a dot in the id, the signature of event
// "evt.1732270000" verifies event "evt" with the timestamp 1732270000 and a body starting with
// the real timestamp. The specification forbids the dot; an emit with one is refused naming id,
// and nothing is stored.
func TestEventIDWithADotIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	msg := e.do("POST", "/v1/events", `{"id":"evt.1732270000","type":"a","data":1}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "id").Message
	if !strings.Contains(msg, "Standard Webhooks") {
		t.Errorf("message %q does not say why a dot is refused", msg)
	}
	e.do("POST", "/v1/events/batch", `{"events":[{"id":"ok-1","type":"a","data":1},{"id":"a.b","type":"a","data":1}]}`).
		wantError(t, http.StatusUnprocessableEntity, api.CodeInvalid, "events[1].id")
	e.do("GET", "/v1/events/ok-1", nil).want(t, http.StatusNotFound)
}

// rawRequest sends one HTTP/1.1 request as written (the Go client never sends an empty chunked
// body: it probes the body and drops it) and reads the answer.
func (e *env) rawRequest(req string) response {
	e.t.Helper()
	u, err := url.Parse(e.url)
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, req); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

// TestOptionalBodyEmptyChunked: pause, rotate-secret and replay take an optional body
// (openapi.yaml: requestBody required: false). A request whose body is empty but sent chunked
// (Transfer-Encoding: chunked and a zero-length last chunk, as proxies and streaming clients send
// it) has no body, so it must be answered as one without a body: it was a 415, or a 400 "request
// body is empty" with Content-Type: application/json.
func TestOptionalBodyEmptyChunked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	for _, path := range []string{"/v1/subscribers/s/pause", "/v1/subscribers/s/rotate-secret", "/v1/subscribers/s/replay"} {
		for _, ct := range []string{"", "Content-Type: application/json\r\n"} {
			r := e.rawRequest("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + ct +
				"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")
			if r.status != http.StatusOK {
				t.Errorf("POST %s, empty chunked body, %q: status %d %s, want 200", path, strings.TrimSpace(ct), r.status, r.body)
			}
		}
	}
}

// TestConflictNamesTheEvent: a batch refused with 409 names the event at fault in
// field ("events[1].id"), as every other batch error names its event (openapi.yaml, batch: "Field
// errors name the event, e.g. events[3].type"; Error.field: "The offending field").
func TestConflictNamesTheEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/v1/events", `{"id":"k1","type":"a","data":1}`).want(t, http.StatusAccepted)
	// An id stored with other data.
	e.do("POST", "/v1/events/batch", `{"events":[{"id":"k6","type":"a","data":1},{"id":"k1","type":"a","data":2}]}`).
		wantError(t, http.StatusConflict, api.CodeConflict, "events[1].id")
	// An id twice in the batch with different data: the second one is at fault.
	e.do("POST", "/v1/events/batch", `{"events":[{"id":"k3","type":"a","data":1},{"id":"x","type":"a","data":1},{"id":"k3","type":"a","data":2}]}`).
		wantError(t, http.StatusConflict, api.CodeConflict, "events[2].id")
	// A single emit names its id.
	e.do("POST", "/v1/events", `{"id":"k1","type":"a","data":3}`).wantError(t, http.StatusConflict, api.CodeConflict, "id")

	// The coalesce key is content too: the same id and data with another key, or with a key where
	// there was none, is a conflict, not a duplicate.
	e.do("POST", "/v1/events", `{"id":"k1","type":"a","data":1,"coalesce_key":"c"}`).wantError(t, http.StatusConflict, api.CodeConflict, "id")
	e.do("POST", "/v1/events", `{"id":"k7","type":"a","data":1,"coalesce_key":"c"}`).want(t, http.StatusAccepted)
	e.do("POST", "/v1/events", `{"id":"k7","type":"a","data":1}`).wantError(t, http.StatusConflict, api.CodeConflict, "id")
	e.do("POST", "/v1/events/batch", `{"events":[{"id":"k8","type":"a","data":1},{"id":"k7","type":"a","data":1,"coalesce_key":"d"}]}`).
		wantError(t, http.StatusConflict, api.CodeConflict, "events[1].id")
	e.do("POST", "/v1/events/batch", `{"events":[{"id":"k9","type":"a","data":1,"coalesce_key":"c"},{"id":"k9","type":"a","data":1}]}`).
		wantError(t, http.StatusConflict, api.CodeConflict, "events[1].id")
}
