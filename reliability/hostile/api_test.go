package hostile

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/reliability/internal/rig"
)

// hostileCase is one request the API must refuse.
type hostileCase struct {
	name        string
	method      string
	path        string
	body        string
	contentType string // default application/json
	status      int
	code        string
	field       string // the field the error must name; "-" when the error has none
}

// subscriber builds a subscriber request body with field set to raw JSON.
func subscriber(field, raw string) string {
	url, events := `"http://127.0.0.1:9/hook"`, `["*"]`
	switch field {
	case "url":
		url = raw
	case "events":
		events = raw
	default:
		return fmt.Sprintf(`{"url":%s,"events":%s,%q:%s}`, url, events, field, raw)
	}
	return fmt.Sprintf(`{"url":%s,"events":%s}`, url, events)
}

func hostileCases(subID string) []hostileCase {
	const ev = "/v1/events"
	const subs = "/v1/subscribers"
	patch := "/v1/subscribers/" + subID
	deep := strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
	deepObj := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	big := `{"type":"a.b","data":"` + strings.Repeat("x", 300<<10) + `"}`
	cases := []hostileCase{
		// Malformed, truncated, nested, oversize JSON.
		{name: "malformed", path: ev, body: `{"type": "a.b", "data": {x}}`, status: 400, code: "bad_request", field: "-"},
		{name: "not an object", path: ev, body: `["a.b"]`, status: 400, code: "bad_request", field: "-"},
		{name: "truncated", path: ev, body: `{"type":"a.b","data":{"x":1}`, status: 400, code: "bad_request", field: "-"},
		{name: "truncated in a string", path: ev, body: `{"type":"a.`, status: 400, code: "bad_request", field: "-"},
		{name: "empty body", path: ev, body: ``, status: 400, code: "bad_request", field: "-"},
		{name: "trailing data", path: ev, body: `{"type":"a.b","data":1} {"type":"a.b","data":2}`, status: 400, code: "bad_request", field: "-"},
		{name: "deeply nested data", path: ev, body: `{"type":"a.b","data":` + deep + `}`, status: 400, code: "bad_request", field: "-"},
		{name: "deeply nested objects", path: subs, body: `{"url":"http://127.0.0.1:9/","events":["*"],"coalesce":` + deepObj + `}`, status: 400, code: "bad_request", field: "coalesce.a"},
		{name: "oversize event", path: ev, body: big, status: 413, code: "body_too_large", field: "-"},
		{name: "wrong content type", path: ev, body: `{"type":"a.b","data":1}`, contentType: "text/plain", status: 415, code: "unsupported_media_type", field: "-"},
		{name: "NaN literal", path: subs, body: subscriber("rate_per_sec", "NaN"), status: 400, code: "bad_request", field: "-"},
		{name: "Infinity literal", path: subs, body: subscriber("burst", "Infinity"), status: 400, code: "bad_request", field: "-"},

		// Unknown and mistyped fields.
		{name: "unknown field", path: ev, body: `{"type":"a.b","data":1,"extra":true}`, status: 400, code: "bad_request", field: "extra"},
		{name: "unknown subscriber field", path: subs, body: subscriber("secret", `"whsec_x"`), status: 400, code: "bad_request", field: "secret"},
		{name: "type as number", path: ev, body: `{"type":5,"data":1}`, status: 400, code: "bad_request", field: "type"},
		{name: "data missing", path: ev, body: `{"type":"a.b"}`, status: 422, code: "invalid", field: "data"},

		// Invalid UTF-8 and over-long names.
		{name: "invalid UTF-8 in type", path: ev, body: "{\"type\":\"a\xff.b\",\"data\":1}", status: 422, code: "invalid", field: "type"},
		{name: "invalid UTF-8 in data", path: ev, body: "{\"type\":\"a.b\",\"data\":\"\xff\xfe\"}", status: 422, code: "invalid", field: "data"},
		{name: "over-long type", path: ev, body: `{"type":"` + strings.Repeat("a", 129) + `","data":1}`, status: 422, code: "invalid", field: "type"},
		{name: "over-long segment list", path: ev, body: `{"type":"` + strings.Repeat("a.", 100) + `a","data":1}`, status: 422, code: "invalid", field: "type"},
		{name: "over-long id", path: ev, body: `{"id":"` + strings.Repeat("e", 129) + `","type":"a.b","data":1}`, status: 422, code: "invalid", field: "id"},
		{name: "id with slash", path: ev, body: `{"id":"../../etc","type":"a.b","data":1}`, status: 422, code: "invalid", field: "id"},
		{name: "coalesce key with CRLF", path: ev, body: `{"type":"a.b","data":1,"coalesce_key":"k\r\nX-Evil: 1"}`, status: 422, code: "invalid", field: "coalesce_key"},
		{name: "empty type", path: ev, body: `{"type":"","data":1}`, status: 422, code: "invalid", field: "type"},

		// Batches: all or none.
		{name: "batch with one bad event", path: ev + "/batch", body: `{"events":[{"type":"a.b","data":1},{"type":"bad type","data":1}]}`, status: 422, code: "invalid", field: "events[1].type"},
		{name: "batch too long", path: ev + "/batch", body: `{"events":[` + strings.TrimSuffix(strings.Repeat(`{"type":"a.b","data":1},`, 1001), ",") + `]}`, status: 422, code: "invalid", field: "events"},
		{name: "empty batch", path: ev + "/batch", body: `{"events":[]}`, status: 422, code: "invalid", field: "events"},

		// Rates and bursts: negative, NaN, absurd. (Zero means "the default", on create and update
		// alike: TestZeroRateIsTheDefault.)
		{name: "negative rate", path: subs, body: subscriber("rate_per_sec", "-1"), status: 422, code: "invalid", field: "rate_per_sec"},
		{name: "tiny negative rate", path: subs, body: subscriber("rate_per_sec", "-0.0001"), status: 422, code: "invalid", field: "rate_per_sec"},
		{name: "absurd rate", path: subs, body: subscriber("rate_per_sec", "1e12"), status: 422, code: "invalid", field: "rate_per_sec"},
		{name: "overflowing rate", path: subs, body: subscriber("rate_per_sec", "1e400"), status: 400, code: "bad_request", field: "rate_per_sec"},
		{name: "NaN rate as a string", path: subs, body: subscriber("rate_per_sec", `"NaN"`), status: 400, code: "bad_request", field: "rate_per_sec"},
		{name: "negative burst", path: subs, body: subscriber("burst", "-5"), status: 422, code: "invalid", field: "burst"},
		{name: "absurd burst", path: subs, body: subscriber("burst", "1000000000"), status: 422, code: "invalid", field: "burst"},
		{name: "overflowing burst", path: subs, body: subscriber("burst", "99999999999999999999"), status: 400, code: "bad_request", field: "burst"},
		{name: "fractional burst", path: subs, body: subscriber("burst", "2.5"), status: 400, code: "bad_request", field: "burst"},
		{name: "negative in-flight", path: subs, body: subscriber("max_in_flight", "-1"), status: 422, code: "invalid", field: "max_in_flight"},
		{name: "negative timeout", path: subs, body: subscriber("timeout_ms", "-1"), status: 422, code: "invalid", field: "timeout_ms"},
		{name: "negative rate on update", method: http.MethodPatch, path: patch, body: `{"rate_per_sec":-3}`, status: 422, code: "invalid", field: "rate_per_sec"},
		{name: "absurd burst on update", method: http.MethodPatch, path: patch, body: `{"burst":1000000000}`, status: 422, code: "invalid", field: "burst"},

		// Events patterns.
		{name: "no events", path: subs, body: subscriber("events", `[]`), status: 422, code: "invalid", field: "events"},
		{name: "bad pattern", path: subs, body: subscriber("events", `["a.*.b"]`), status: 422, code: "invalid", field: "events*"},
	}
	// Invalid and non-http URLs.
	for _, u := range []string{"ftp://127.0.0.1/x", "file:///etc/passwd", "javascript:alert(1)", "gopher://127.0.0.1:70/", "http://",
		"//127.0.0.1/x", "/relative", "not a url", "", "http://user:pass@127.0.0.1/", "http://127.0.0.1/#frag", "http://127.0.0.1:99999/",
		"http://[::1/", "http://127.0.0.1/\r\nX-Evil: 1", "http://exa mple.com/"} {
		cases = append(cases, hostileCase{name: "url " + u, path: subs, body: subscriber("url", fmt.Sprintf("%q", u)), status: 422, code: "invalid", field: "url"})
	}
	cases = append(cases, hostileCase{name: "url on update", method: http.MethodPatch, path: patch, body: `{"url":"file:///etc/passwd"}`, status: 422, code: "invalid", field: "url"})
	// CR/LF (and other control bytes) in custom header names and values, and reserved headers.
	for name, hdr := range map[string]string{
		"CRLF in value":        `{"X-A":"v\r\nX-Injected: 1"}`,
		"LF in value":          `{"X-A":"v\nX-Injected: 1"}`,
		"NUL in value":         `{"X-A":"v\u0000"}`,
		"CRLF in name":         `{"X-A\r\nX-Injected":"1"}`,
		"colon in name":        `{"X-A: b":"1"}`,
		"space in name":        `{"X A":"1"}`,
		"empty name":           `{"":"1"}`,
		"host header":          `{"Host":"169.254.169.254"}`,
		"content-length":       `{"Content-Length":"0"}`,
		"signature header":     `{"webhook-signature":"v1,forged"}`,
		"hop header":           `{"Edgehook-Subscriber-Id":"other"}`,
		"transfer-encoding":    `{"Transfer-Encoding":"chunked"}`,
		"UTF-8 in header name": `{"X-Ä":"1"}`,
	} {
		cases = append(cases, hostileCase{name: "headers " + name, path: subs, body: subscriber("headers", hdr), status: 422, code: "invalid", field: "headers*"})
	}
	return cases
}

// TestHostileAPI sends each hostile request to a real `edgehook serve` and checks the status, the
// JSON error naming the field, and that the database did not change.
func TestHostileAPI(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgehook.db")
	o := rig.Serve(t, db)
	sub := o.AddSubscriber(t, map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"*"}})
	// Paused: an input wrongly accepted queues a delivery but the engine does not work on it, so
	// the table counts move only when a request writes.
	o.JSON(t, http.MethodPost, "/v1/subscribers/"+sub.ID+"/pause", map[string]any{}, nil)
	inspect := rig.OpenDB(t, db)

	cases := hostileCases(sub.ID)
	refused := 0
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := inspect.TableCounts(t)
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			h := http.Header{}
			if tc.contentType != "" {
				h.Set("Content-Type", tc.contentType)
			}
			r := o.Do(t, method, tc.path, []byte(tc.body), h)
			checkRefusal(t, r, tc.status, tc.code, tc.field)
			if after := inspect.TableCounts(t); !reflect.DeepEqual(before, after) {
				t.Errorf("the database changed:\nbefore %v\nafter  %v", before, after)
			}
			if !t.Failed() {
				refused++
			}
		})
	}
	// The same server still works: the refusals were refusals, not a broken API.
	ok := o.Do(t, http.MethodPost, "/v1/events", []byte(`{"type":"a.b","data":{"ok":true}}`), nil)
	if ok.Status != http.StatusAccepted {
		t.Fatalf("a valid emit after the hostile ones: %d %s", ok.Status, ok.Body)
	}
	exits := 0
	select {
	case <-o.Done():
		exits = 1
	default:
	}
	rig.Record(t, "hostile-api", map[string]any{"inputs": len(cases), "refused_correctly": refused, "server_exits": exits})
}

// checkRefusal checks the status, the JSON error's code and the field it names ("-": none; a
// trailing "*": any field with that prefix).
func checkRefusal(t *testing.T, r rig.Response, status int, code, field string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("status %d, want %d; body %.300s", r.Status, status, r.Body)
	}
	e, ok := r.Error()
	if !ok {
		t.Fatalf("the answer is not a JSON error: %q %.300s", r.Header.Get("Content-Type"), r.Body)
	}
	if e.Code != code {
		t.Errorf("code %q, want %q (%s)", e.Code, code, e.Message)
	}
	switch {
	case field == "-":
		if e.Field != "" {
			t.Errorf("field %q, want none", e.Field)
		}
	case strings.HasSuffix(field, "*"):
		if !strings.HasPrefix(e.Field, strings.TrimSuffix(field, "*")) {
			t.Errorf("field %q, want %s", e.Field, field)
		}
	case e.Field != field:
		t.Errorf("field %q, want %q (%s)", e.Field, field, e.Message)
	}
}

// TestHostileChunkedOversize sends an oversize body without a Content-Length (chunked), so the
// limit must hold while reading, not only on the declared length.
func TestHostileChunkedOversize(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgehook.db")
	o := rig.Serve(t, db)
	inspect := rig.OpenDB(t, db)
	before := inspect.TableCounts(t)
	pr, pw := net.Pipe()
	defer pr.Close()
	go func() {
		defer pw.Close()
		w := bufio.NewWriter(pw)
		fmt.Fprintf(w, `{"type":"a.b","data":"`)
		for range 300 {
			w.WriteString(strings.Repeat("y", 1024))
		}
		w.WriteString(`"}`)
		w.Flush()
	}()
	req, err := http.NewRequest(http.MethodPost, o.URL+"/v1/events", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := make([]byte, 4096)
	n, _ := resp.Body.Read(body)
	r := rig.Response{Status: resp.StatusCode, Header: resp.Header, Body: body[:n]}
	checkRefusal(t, r, http.StatusRequestEntityTooLarge, "body_too_large", "-")
	if after := inspect.TableCounts(t); !reflect.DeepEqual(before, after) {
		t.Errorf("the database changed:\nbefore %v\nafter  %v", before, after)
	}
}

// TestHostileHeaders sends huge and numerous request headers: the server refuses them with 431
// (net/http's own plain-text answer, before any handler runs), writes nothing and keeps serving.
func TestHostileHeaders(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "edgehook.db")
	o := rig.Serve(t, db)
	inspect := rig.OpenDB(t, db)
	before := inspect.TableCounts(t)
	many := http.Header{}
	for i := range 20000 {
		many.Set(fmt.Sprintf("X-H-%d", i), strings.Repeat("v", 64))
	}
	headerCases := map[string]http.Header{
		"one 2 MB header":  {"X-Big": {strings.Repeat("a", 2<<20)}},
		"20000 headers":    many,
		"huge bearer":      {"Authorization": {"Bearer " + strings.Repeat("t", 2<<20)}},
		"huge request id":  {"X-Request-Id": {strings.Repeat("r", 2<<20)}},
		"huge cookie list": {"Cookie": {strings.Repeat("c=1; ", 300000)}},
	}
	refused := 0
	for name, h := range headerCases {
		r, err := o.Try(http.MethodPost, "/v1/events", []byte(`{"type":"a.b","data":1}`), h)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if r.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%s: status %d, want 431", name, r.Status)
			continue
		}
		refused++
	}
	// A long but legal request id is replaced, never echoed or logged as sent.
	r := o.Do(t, http.MethodGet, "/healthz", nil, http.Header{"X-Request-Id": {strings.Repeat("r", 300) + "/"}})
	if got := r.Header.Get("X-Request-Id"); strings.Contains(got, "rrrr") {
		t.Errorf("a malformed X-Request-Id was echoed: %.50q", got)
	}
	if after := inspect.TableCounts(t); !reflect.DeepEqual(before, after) {
		t.Errorf("the database changed:\nbefore %v\nafter  %v", before, after)
	}
	if ok := o.Do(t, http.MethodPost, "/v1/events", []byte(`{"type":"a.b","data":1}`), nil); ok.Status != http.StatusAccepted {
		t.Fatalf("a valid emit after the huge headers: %d %s", ok.Status, ok.Body)
	}
	rig.Record(t, "hostile-headers", map[string]any{"inputs": len(headerCases), "refused_431": refused})
}

// TestHostileTokens runs the server with a token and checks that every request without the right
// one is a 401 JSON error that writes nothing, on every route but the probes.
func TestHostileTokens(t *testing.T) {
	t.Parallel()
	const token = "tok_reliability_9f8e7d6c5b4a"
	db := filepath.Join(t.TempDir(), "edgehook.db")
	o := rig.Serve(t, db, "--token", token)
	inspect := rig.OpenDB(t, db)
	emit := []byte(`{"type":"a.b","data":1}`)
	cases := map[string]string{
		"missing":         "",
		"wrong":           "Bearer tok_reliability_000000000000",
		"prefix of it":    "Bearer " + token[:len(token)-1],
		"longer":          "Bearer " + token + "x",
		"basic scheme":    "Basic " + token,
		"no scheme":       token,
		"empty bearer":    "Bearer ",
		"two tokens":      "Bearer " + token + " " + token,
		"case of token":   "Bearer " + strings.ToUpper(token),
		"NUL after token": "Bearer " + token + "\x00",
	}
	before := inspect.TableCounts(t)
	tried, refused := 0, 0
	for name, auth := range cases {
		for _, route := range []struct{ method, path string }{{"POST", "/v1/events"}, {"GET", "/v1/subscribers"}, {"GET", "/metrics"}, {"GET", "/v1/nope"}} {
			h := http.Header{}
			if auth != "" {
				h.Set("Authorization", auth)
			}
			var body []byte
			if route.method == "POST" {
				body = emit
			}
			r, err := o.Try(route.method, route.path, body, h)
			if err != nil {
				// net/http refuses a NUL in a header value on the client side: nothing was sent.
				if strings.Contains(auth, "\x00") {
					continue
				}
				t.Fatalf("%s %s %s: %v", name, route.method, route.path, err)
			}
			tried++
			if r.Status != http.StatusUnauthorized {
				t.Errorf("%s: %s %s: status %d, want 401", name, route.method, route.path, r.Status)
				continue
			}
			if e, ok := r.Error(); !ok || e.Code != "unauthorized" {
				t.Errorf("%s: %s %s: not the unauthorized JSON error: %s", name, route.method, route.path, r.Body)
				continue
			}
			refused++
		}
	}
	if after := inspect.TableCounts(t); !reflect.DeepEqual(before, after) {
		t.Errorf("the database changed:\nbefore %v\nafter  %v", before, after)
	}
	o.Token = token
	if r := o.Do(t, http.MethodPost, "/v1/events", emit, nil); r.Status != http.StatusAccepted {
		t.Fatalf("the right token: %d %s", r.Status, r.Body)
	}
	if r := o.Do(t, http.MethodGet, "/healthz", nil, http.Header{"Authorization": {"Bearer wrong"}}); r.Status != http.StatusOK {
		t.Fatalf("/healthz is public: %d", r.Status)
	}
	rig.Record(t, "hostile-tokens", map[string]any{"requests": tried, "refused_401": refused})
}

// TestZeroRateIsTheDefaultOrRefused pins the documented meaning of zero: on create, a zero rate
// or burst takes the default (10/s, 20); on update, where leaving a field out keeps its value, a
// zero is refused (422 naming the field) and changes nothing. Never a rate of zero that would
// stall the subscriber for ever.
func TestZeroRateIsTheDefaultOrRefused(t *testing.T) {
	t.Parallel()
	o := rig.Serve(t, filepath.Join(t.TempDir(), "edgehook.db"))
	type limits struct {
		Rate  float64 `json:"rate_per_sec"`
		Burst int     `json:"burst"`
	}
	var created, got limits
	o.JSON(t, http.MethodPost, "/v1/subscribers", map[string]any{"id": "z", "url": "http://127.0.0.1:9/", "events": []string{"*"},
		"rate_per_sec": 0, "burst": 0}, &created)
	if created.Rate != 10 || created.Burst != 20 {
		t.Errorf("zero rate and burst on create gave %v/s burst %d, want the defaults 10/s and 20", created.Rate, created.Burst)
	}
	o.JSON(t, http.MethodPatch, "/v1/subscribers/z", map[string]any{"rate_per_sec": 3, "burst": 4}, nil)
	for _, field := range []string{"rate_per_sec", "burst"} {
		body, _ := json.Marshal(map[string]any{field: 0})
		r := o.Do(t, http.MethodPatch, "/v1/subscribers/z", body, nil)
		if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), `"field":"`+field+`"`) {
			t.Errorf("PATCH %s 0: %d %s, want 422 naming the field", field, r.Status, r.Body)
		}
	}
	o.JSON(t, http.MethodGet, "/v1/subscribers/z", nil, &got)
	if got.Rate != 3 || got.Burst != 4 {
		t.Errorf("after the refused updates %v/s burst %d, want 3/s and 4 kept", got.Rate, got.Burst)
	}
}
