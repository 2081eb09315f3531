package wire_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

const fullRecord = `{
  "url": "https://hooks.example.com/in?team=7",
  "timeout_ms": 5000,
  "headers": {"Authorization": "Bearer abc", "X-Team": "7\tseven"},
  "coalesce": {"event_types": ["video.rank_updated", "stats.*"], "key": "video_id", "window_seconds": 30},
  "active": true
}`

func TestDecodeSubscriberRecordValid(t *testing.T) {
	t.Parallel()
	r, err := wire.DecodeSubscriberRecord([]byte(fullRecord))
	if err != nil {
		t.Fatal(err)
	}
	want := &wire.SubscriberRecord{
		URL: "https://hooks.example.com/in?team=7", TimeoutMS: 5000,
		Headers:  map[string]string{"Authorization": "Bearer abc", "X-Team": "7\tseven"},
		Coalesce: &wire.CoalesceRule{EventTypes: []string{"video.rank_updated", "stats.*"}, Key: "video_id", WindowSeconds: 30},
		Active:   true,
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("decoded %+v, want %+v", r, want)
	}
	if r.Timeout() != 5*time.Second || r.Coalesce.Window() != 30*time.Second {
		t.Fatalf("Timeout %s, Window %s", r.Timeout(), r.Coalesce.Window())
	}
	for ty, want := range map[string]bool{"video.rank_updated": true, "stats.daily": true, "stats": false, "video.trending": false} {
		if got := r.Coalesce.Applies(ty); got != want {
			t.Errorf("Applies(%q) = %v, want %v", ty, got, want)
		}
	}
	// What the origin writes (json.Marshal) decodes to the same record.
	again, err := wire.DecodeSubscriberRecord(mustMarshal(t, r))
	if err != nil || !reflect.DeepEqual(again, r) {
		t.Fatalf("re-decoded %+v, %v; want %+v", again, err, r)
	}
	minimal, err := wire.DecodeSubscriberRecord([]byte(`{"url":"http://127.0.0.1:8080/hook","timeout_ms":100,"headers":{},"coalesce":null,"active":false}`))
	if err != nil || minimal.Headers != nil || minimal.Coalesce != nil || minimal.Active {
		t.Fatalf("minimal record = %+v, %v", minimal, err)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeSubscriberRecordErrors checks that each bad record is refused with the offending field
// named: as a *FieldError when the JSON is well-formed, in the message otherwise.
func TestDecodeSubscriberRecordErrors(t *testing.T) {
	t.Parallel()
	// rec builds a record from a valid one with one top-level field replaced (or removed, for "").
	rec := func(field, value string) string {
		fields := map[string]string{"url": `"https://h.example/x"`, "timeout_ms": `1000`, "active": `true`}
		if value == "" {
			delete(fields, field)
		} else {
			fields[field] = value
		}
		parts := []string{}
		for _, k := range []string{"url", "timeout_ms", "headers", "coalesce", "active"} {
			if v, ok := fields[k]; ok {
				parts = append(parts, `"`+k+`":`+v)
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	coalesce := func(inner string) string { return rec("coalesce", "{"+inner+"}") }
	tests := []struct {
		name, in  string
		field     string // FieldError.Field; "" when the error is not a FieldError
		wantInErr string
	}{
		{"not JSON", `url=x`, "", "subscriber record"},
		{"empty", ``, "", "subscriber record"},
		{"array", `[]`, "", "subscriber record"},
		{"unknown field", strings.TrimSuffix(rec("url", `"https://h.example/x"`), "}") + `,"retries":3}`, "", `unknown field "retries"`},
		{"unknown field in coalesce", coalesce(`"event_types":["a"],"key":"k","window_seconds":1,"max":2`), "", `unknown field "max"`},
		{"field in the wrong case", `{"URL":"https://h.example/x","timeout_ms":1000,"active":true}`, "", `unknown field "URL"`},
		{"field in the wrong case in coalesce", coalesce(`"event_types":["a"],"Key":"k","window_seconds":1`), "", `unknown field "coalesce.Key"`},
		{"duplicate key", `{"url":"https://h.example/x","url":"https://evil.example/","timeout_ms":1000,"active":true}`, "", `duplicate key "url"`},
		{"duplicate header", rec("headers", `{"X-A":"1","X-A":"2"}`), "", `duplicate key "headers.X-A"`},
		{"trailing data", rec("url", `"https://h.example/x"`) + `{}`, "", "after the JSON value"},
		{"trailing garbage", rec("url", `"https://h.example/x"`) + ` x`, "", "subscriber record"},
		{"trailing brace", rec("url", `"https://h.example/x"`) + `}`, "", "after the JSON value"},
		{"trailing bracket and a record", rec("url", `"https://h.example/x"`) + ` ] {"url":"https://evil.example/"}`, "", "after the JSON value"},
		{"wrong type", rec("timeout_ms", `"1000"`), "", "timeout_ms"},
		{"null header value", rec("headers", `{"X-A":null}`), "", "headers.X-A: null where a value of type string is required"},
		{"null coalesce key", coalesce(`"event_types":["a"],"key":null,"window_seconds":1`), "", "coalesce.key: null"},
		{"too large", `{"url":"` + strings.Repeat("a", wire.MaxRecordBytes) + `"}`, "", "the maximum is 65536"},

		{"missing url", rec("url", ""), "url", "is required"},
		{"null url", rec("url", "null"), "url", "is required"},
		{"missing timeout_ms", rec("timeout_ms", ""), "timeout_ms", "is required"},
		{"missing active", rec("active", ""), "active", "is required"},

		{"relative URL", rec("url", `"/hook"`), "url", "absolute http or https"},
		{"no scheme", rec("url", `"h.example/hook"`), "url", "absolute http or https"},
		{"ftp URL", rec("url", `"ftp://h.example/x"`), "url", "absolute http or https"},
		{"mailto", rec("url", `"mailto:a@h.example"`), "url", "absolute http or https"},
		{"javascript", rec("url", `"javascript:alert(1)"`), "url", "absolute http or https"},
		{"no host", rec("url", `"https:///x"`), "url", "no host"},
		{"port only", rec("url", `"http://:8080/x"`), "url", "no host"},
		{"credentials", rec("url", `"https://user:pw@h.example/x"`), "url", "must not carry credentials"},
		{"user only", rec("url", `"https://user@h.example/x"`), "url", "must not carry credentials"},
		{"fragment", rec("url", `"https://h.example/x#frag"`), "url", "fragment"},
		{"port 0", rec("url", `"http://h.example:0/x"`), "url", "outside 1–65535"},
		{"port 65536", rec("url", `"http://h.example:65536/x"`), "url", "outside 1–65535"},
		{"unparsable", rec("url", `"http://h.example/%zz"`), "url", "is not a URL"},
		{"empty url", rec("url", `""`), "url", "absolute http or https"},
		{"space in the query", rec("url", `"https://h.example/x?team=a b"`), "url", `has a space in its query: percent-encode it (%20)`},

		{"timeout below 100 ms", rec("timeout_ms", "99"), "timeout_ms", "99 is outside [100, 60000]"},
		{"timeout above 60 s", rec("timeout_ms", "60001"), "timeout_ms", "outside [100, 60000]"},
		{"timeout zero", rec("timeout_ms", "0"), "timeout_ms", "outside"},
		{"timeout negative", rec("timeout_ms", "-1000"), "timeout_ms", "outside"},
		// 2^58 + 1000 ms wraps to exactly 1 s if converted to a Duration before the check.
		{"timeout overflowing a Duration", rec("timeout_ms", "288230376151712696"), "timeout_ms", "outside"},

		{"header value with LF", rec("headers", `{"X-A":"a\nInjected: 1"}`), "headers.X-A", "control byte 0x0a"},
		{"header value with CR", rec("headers", `{"X-A":"a\r"}`), "headers.X-A", "control byte 0x0d"},
		{"header value with NUL", rec("headers", `{"X-A":"a\u0000"}`), "headers.X-A", "control byte 0x00"},
		{"header value with DEL", rec("headers", `{"X-A":"a\u007f"}`), "headers.X-A", "control byte 0x7f"},
		{"header name with a space", rec("headers", `{"X A":"1"}`), "headers.X A", "contains byte 0x20"},
		{"header name with a colon", rec("headers", `{"X-A:":"1"}`), "headers.X-A:", "contains byte 0x3a"},
		{"header name with LF", rec("headers", `{"X-A\n":"1"}`), "headers.X-A\n", "contains byte 0x0a"},
		{"empty header name", rec("headers", `{"":"1"}`), "headers.", "header name is empty"},
		{"hop header", rec("headers", `{"Edgehook-Attempt":"1"}`), "headers.Edgehook-Attempt", "reserved"},
		{"signature header", rec("headers", `{"webhook-signature":"v1,x"}`), "headers.webhook-signature", "reserved"},
		{"signature header, other case", rec("headers", `{"Webhook-Id":"x"}`), "headers.Webhook-Id", "reserved"},
		{"Host", rec("headers", `{"host":"evil.example"}`), "headers.host", "reserved"},
		{"Content-Length", rec("headers", `{"Content-Length":"0"}`), "headers.Content-Length", "reserved"},
		{"Transfer-Encoding", rec("headers", `{"Transfer-Encoding":"chunked"}`), "headers.Transfer-Encoding", "reserved"},
		{"same header in two cases", rec("headers", `{"X-Token":"1","x-token":"2"}`), "headers.x-token", `same header as "X-Token"`},
		{"first bad header in sorted order", rec("headers", `{"Z-B":"\n","A-B":"\n"}`), "headers.A-B", "control byte"},

		{"empty event_types", coalesce(`"event_types":[],"key":"k","window_seconds":1`), "coalesce.event_types", "at least one"},
		{"missing event_types", coalesce(`"key":"k","window_seconds":1`), "coalesce.event_types", "at least one"},
		{"bad pattern", coalesce(`"event_types":["a.*","video*"],"key":"k","window_seconds":1`), "coalesce.event_types[1]", `pattern "video*"`},
		{"missing key", coalesce(`"event_types":["a"],"window_seconds":1`), "coalesce.key", "is required"},
		{"key with a space", coalesce(`"event_types":["a"],"key":"a b","window_seconds":1`), "coalesce.key", "byte 0x20"},
		{"window zero", coalesce(`"event_types":["a"],"key":"k","window_seconds":0`), "coalesce.window_seconds", "0 is outside [1, 86400]"},
		{"window missing", coalesce(`"event_types":["a"],"key":"k"`), "coalesce.window_seconds", "outside"},
		{"window above a day", coalesce(`"event_types":["a"],"key":"k","window_seconds":86401`), "coalesce.window_seconds", "outside"},
		{"window overflowing a Duration", coalesce(`"event_types":["a"],"key":"k","window_seconds":9223372037`), "coalesce.window_seconds", "outside"},
		{"window as a float", coalesce(`"event_types":["a"],"key":"k","window_seconds":0.5`), "", "window_seconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, err := wire.DecodeSubscriberRecord([]byte(tc.in))
			if err == nil {
				t.Fatalf("DecodeSubscriberRecord(%s) = %+v, want an error", tc.in, r)
			}
			if r != nil {
				t.Fatalf("DecodeSubscriberRecord returned a record with the error %v", err)
			}
			if !strings.Contains(err.Error(), tc.wantInErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantInErr)
			}
			var fe *wire.FieldError
			if tc.field == "" {
				if errors.As(err, &fe) {
					t.Fatalf("error %q is a FieldError for %q, want a decoding error", err, fe.Field)
				}
				return
			}
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Fatalf("error %q: want a FieldError for %q", err, tc.field)
			}
			if !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Fatalf("error %q does not start with the field name", err)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	if got := wire.SubscriberKey("sub_acme"); got != "sub:sub_acme" {
		t.Errorf("SubscriberKey = %q", got)
	}
	if id, ok := wire.SubscriberIDFromKey(wire.SubscriberKey("a:b")); !ok || id != "a:b" {
		t.Errorf("SubscriberIDFromKey round trip = %q, %v", id, ok)
	}
	for _, k := range []string{"d:x", "sub", "Sub:x", ""} {
		if id, ok := wire.SubscriberIDFromKey(k); ok {
			t.Errorf("SubscriberIDFromKey(%q) = %q, true", k, id)
		}
	}
	if got := wire.DedupKey("dlv_1"); got != "d:dlv_1" {
		t.Errorf("DedupKey = %q", got)
	}
	if got := wire.CoalesceKey("sub_acme", "video:42"); got != "c:sub_acme/video:42" {
		t.Errorf("CoalesceKey = %q", got)
	}
	// Subscriber ids may hold ':' (never '/') and keys anything printable: no two pairs may collide.
	pairs := [][2]string{{"a:b", "c"}, {"a", "b:c"}, {"a", "b/c"}, {"a:b:c", ""}, {"a", ":b:c"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		k := wire.CoalesceKey(p[0], p[1])
		if prev, dup := seen[k]; dup {
			t.Errorf("CoalesceKey%v and CoalesceKey%v are both %q", prev, p, k)
		}
		seen[k] = p
	}
	// The three namespaces' prefixes never overlap.
	if wire.SubscriberKey("x") == wire.DedupKey("x") || wire.DedupKey("x") == wire.CoalesceKey("x", "") {
		t.Error("key prefixes overlap")
	}
}

// TestRecordJSONLength: a record whose JSON would be longer than the edge accepts is refused by
// Validate and so by SubscriberEntry, naming the record; one of exactly MaxRecordBytes goes
// through the bulk file and decodes.
func TestRecordJSONLength(t *testing.T) {
	t.Parallel()
	withHeader := func(n int) *wire.SubscriberRecord {
		return &wire.SubscriberRecord{URL: "https://h.example/x", TimeoutMS: 1000, Active: true, Headers: map[string]string{"X-Big": strings.Repeat("<", n)}}
	}
	short, err := json.Marshal(withHeader(0))
	if err != nil {
		t.Fatal(err)
	}
	fits := (wire.MaxRecordBytes - len(short)) / 6 // each '<' is \u003c in the JSON
	pad := wire.MaxRecordBytes - len(short) - 6*fits
	r := withHeader(fits)
	r.URL += strings.Repeat("y", pad)
	entry, err := wire.SubscriberEntry("sub_a", r)
	if err != nil || len(entry.Value) != wire.MaxRecordBytes {
		t.Fatalf("SubscriberEntry(a record of exactly %d bytes) = %d bytes, %v", wire.MaxRecordBytes, len(entry.Value), err)
	}
	if _, err := wire.DecodeSubscriberRecord([]byte(entry.Value)); err != nil {
		t.Fatalf("the entry's value does not decode: %v", err)
	}
	r.URL += "y"
	var fe *wire.FieldError
	if err := r.Validate(); !errors.As(err, &fe) || fe.Field != "record" || !strings.Contains(err.Error(), "65537 bytes as JSON") {
		t.Errorf("Validate(a record of %d bytes) = %v, want a record FieldError", wire.MaxRecordBytes+1, err)
	}
	if _, err := wire.SubscriberEntry("sub_a", r); err == nil {
		t.Error("SubscriberEntry accepted a record the edge would refuse")
	}
}

func TestBulk(t *testing.T) {
	t.Parallel()
	r, err := wire.DecodeSubscriberRecord([]byte(fullRecord))
	if err != nil {
		t.Fatal(err)
	}
	entry, err := wire.SubscriberEntry("sub_acme", r)
	if err != nil {
		t.Fatal(err)
	}
	if entry.Key != "sub:sub_acme" || entry.ExpirationTTL != 0 {
		t.Fatalf("SubscriberEntry = %+v", entry)
	}
	if back, err := wire.DecodeSubscriberRecord([]byte(entry.Value)); err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("entry value decodes to %+v, %v; want %+v", back, err, r)
	}
	entries := []wire.BulkEntry{entry, {Key: "d:dlv_1", Value: "1", ExpirationTTL: 86400}}
	file, err := wire.EncodeBulk(entries)
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.DecodeBulk(file)
	if err != nil || !reflect.DeepEqual(got, entries) {
		t.Fatalf("DecodeBulk(EncodeBulk) = %+v, %v; want %+v", got, err, entries)
	}
	// The exact layout wrangler reads: an array of {key, value[, expiration_ttl]}.
	var generic []map[string]any
	if err := json.Unmarshal(file, &generic); err != nil || len(generic) != 2 || generic[0]["key"] != "sub:sub_acme" ||
		generic[1]["expiration_ttl"] != float64(86400) || len(generic[0]) != 2 {
		t.Fatalf("bulk file %s does not have the wrangler layout", file)
	}
	if empty, err := wire.EncodeBulk(nil); err != nil || string(empty) != "[]" {
		t.Fatalf("EncodeBulk(nil) = %s, %v; want []", empty, err)
	}
	if got, err := wire.DecodeBulk([]byte("[]")); err != nil || len(got) != 0 {
		t.Fatalf("DecodeBulk([]) = %v, %v", got, err)
	}

	bad := []struct{ in, wantErr string }{
		{``, "kv bulk file"},
		{`null`, "must be a JSON array"},
		{`{}`, "kv bulk file"},
		{`[{"key":"","value":"x"}]`, "[0].key is empty"},
		{`[{"key":"a","value":"x"},{"value":"x"}]`, "[1].key is empty"},
		{`[{"key":"a","value":"x","expiration_ttl":59}]`, "[0].expiration_ttl 59 is below KV's minimum of 60"},
		{`[{"key":"a","value":"x","expiration_ttl":-1}]`, "expiration_ttl -1"},
		{`[{"key":"a","value":"x","metadata":{}}]`, `unknown field "metadata"`},
		{`[{"key":"a","value":"x","key":"b"}]`, `duplicate key "[0].key"`},
		{`[{"key":"a","value":"x"},{"KEY":"a","value":"x"}]`, `unknown field "[1].KEY"`},
		{`[{"key":"a","value":1}]`, "value"},
		{`[{"key":"sub:a"}]`, "[0].value is required"},
		{`[{"key":"a","value":"x"},{"key":"b","value":null}]`, "[1].value is required"},
		{`[{"key":"a","value":"x","expiration_ttl":null}]`, "[0].expiration_ttl: null where a value of type int64 is required"},
		{`[] []`, "after the JSON value"},
		{`[{"key":"a","value":"x"}]]`, "after the JSON value"},
		{`[] }`, "after the JSON value"},
	}
	for _, tc := range bad {
		_, err := wire.DecodeBulk([]byte(tc.in))
		checkErr(t, "DecodeBulk("+tc.in+")", err, tc.wantErr)
	}

	if _, err := wire.SubscriberEntry("bad id", r); err == nil || !strings.Contains(err.Error(), "contains ' '") {
		t.Errorf("SubscriberEntry(bad id) = %v", err)
	}
	broken := *r
	broken.TimeoutMS = 1
	var fe *wire.FieldError
	if _, err := wire.SubscriberEntry("sub_acme", &broken); !errors.As(err, &fe) || fe.Field != "timeout_ms" {
		t.Errorf("SubscriberEntry(invalid record) = %v, want a timeout_ms FieldError", err)
	}
}

// TestValidateURLNeverShowsCredentials: a URL refused for carrying credentials is the one whose
// password the error would show, and these errors end up in logs (--edge-url, a subscriber's url).
func TestValidateURLNeverShowsCredentials(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"https://admin:hunter2pw@edge.example.com/",
		"https://hunter2pw@edge.example.com/",
		"ftp://admin:hunter2pw@edge.example.com/",
		"https://admin:hunter2pw@edge.example.com:99999/",
		"https://admin:hunter2pw@edge.example.com:x/",
		"https://admin:hunter2pw@/",
		"https://admin:hunter2pw@edge.example.com/#frag",
	} {
		err := wire.ValidateURL(u)
		if err == nil || strings.Contains(err.Error(), "hunter2pw") {
			t.Errorf("ValidateURL(%q) = %v, want an error without the credentials", u, err)
		}
	}
}

// TestValidateURLAcceptsQueriesThatWereDelivered: of a query's characters only a space breaks Go's
// request line (url.Parse refuses controls). Non-ASCII, '"', '<' and '>' are delivered by both
// runtimes (percent-encoded, by the Worker's fetch and by wire.RequestQuery in Go's senders), and
// refusing them would make existing subscribers' KV records bad_record at the edge.
func TestValidateURLAcceptsQueriesThatWereDelivered(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"https://h.example/x?city=Zürich",
		`https://h.example/x?q="a"`,
		"https://h.example/x?expr=a<b",
	} {
		if err := wire.ValidateURL(u); err != nil {
			t.Errorf("ValidateURL(%q) = %v; it was accepted and delivered before", u, err)
		}
	}
}

// TestRequestQueryAsFetch: the query percent-encoded as the WHATWG URL parser encodes it for an
// http(s) URL (JS: new URL(u).search), existing escapes and other bytes kept.
func TestRequestQueryAsFetch(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"":                     "",
		"a=1&b=x~y!*()":        "a=1&b=x~y!*()",
		"city=Zürich":          "city=Z%C3%BCrich",
		`q="a"&s='b'&e=a<b>c`:  "q=%22a%22&s=%27b%27&e=a%3Cb%3Ec",
		"k=%41%zz&p=`{|}^\\[]": "k=%41%zz&p=`{|}^\\[]",
		"d=\x7f":               "d=%7F",
	} {
		if got := wire.RequestQuery(raw); got != want {
			t.Errorf("RequestQuery(%q) = %q, want %q", raw, got, want)
		}
	}
}
