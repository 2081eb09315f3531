package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
)

// This file checks what the handlers send against docs/openapi.yaml itself: a small JSON Schema
// validator (the subset the document uses: $ref, allOf, oneOf, type, enum, properties, required,
// additionalProperties, items, format date-time, minimum/maximum) run on real responses.

// docResponse returns the schema of the documented response of method path (the document's
// spelling, "/v1/subscribers/{id}") for status, or nil when the document gives that status no
// JSON body; documented is false when the operation does not list the status.
func docResponse(t *testing.T, doc any, method, path string, status int) (schema any, headers map[any]any, documented bool) {
	t.Helper()
	op, ok := lookupOK(doc, "paths", path, strings.ToLower(method))
	if !ok {
		t.Fatalf("openapi.yaml has no %s %s", method, path)
	}
	resp, ok := lookupOK(op, "responses", strconv.Itoa(status))
	if !ok {
		return nil, nil, false
	}
	resp = resolve(t, doc, resp)
	headers, _ = resp.(map[any]any)["headers"].(map[any]any)
	if s, ok := lookupOK(resp, "content", "application/json", "schema"); ok {
		return s, headers, true
	}
	return nil, headers, true
}

func lookupOK(cur any, keys ...any) (any, bool) {
	for _, k := range keys {
		m, ok := cur.(map[any]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// resolve follows a $ref ("#/components/...").
func resolve(t *testing.T, doc, s any) any {
	t.Helper()
	for {
		m, ok := s.(map[any]any)
		if !ok {
			return s
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return s
		}
		var keys []any
		for _, k := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			keys = append(keys, k)
		}
		s = lookup(t, doc, keys...)
	}
}

var rfc3339UTC = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$`)

// validate appends to errs every way v (decoded with UseNumber) breaks schema s, at path at.
func validate(t *testing.T, doc, s, v any, at string, errs *[]string) {
	t.Helper()
	s = resolve(t, doc, s)
	m, ok := s.(map[any]any)
	if !ok {
		return
	}
	fail := func(format string, args ...any) { *errs = append(*errs, at+": "+fmt.Sprintf(format, args...)) }
	if all, ok := m["allOf"].([]any); ok {
		for _, part := range all {
			validate(t, doc, part, v, at, errs)
		}
	}
	if one, ok := m["oneOf"].([]any); ok {
		n := 0
		for _, part := range one {
			var sub []string
			validate(t, doc, part, v, at, &sub)
			if len(sub) == 0 {
				n++
			}
		}
		if n != 1 {
			fail("matches %d of oneOf", n)
		}
	}
	var types []string
	switch ty := m["type"].(type) {
	case string:
		types = []string{ty}
	case []any:
		for _, x := range ty {
			types = append(types, x.(string))
		}
	}
	if len(types) > 0 {
		okType := false
		for _, ty := range types {
			if jsonTypeIs(v, ty) {
				okType = true
			}
		}
		if !okType {
			fail("%s is not of type %v", short(v), types)
			return
		}
	}
	if enum, ok := m["enum"].([]any); ok {
		found := false
		for _, e := range enum {
			if fmt.Sprint(e) == fmt.Sprint(v) {
				found = true
			}
		}
		if !found {
			fail("%s is not one of the enum %v", short(v), enum)
		}
	}
	if str, ok := v.(string); ok && m["format"] == "date-time" {
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil || !rfc3339UTC.MatchString(str) {
			fail("%q is not an RFC 3339 time in UTC", str)
		}
	}
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		if min, ok := toFloat(m["minimum"]); ok && f < min {
			fail("%s is below the minimum %v", n, min)
		}
		if max, ok := toFloat(m["maximum"]); ok && f > max {
			fail("%s is above the maximum %v", n, max)
		}
	}
	switch val := v.(type) {
	case map[string]any:
		props, _ := m["properties"].(map[any]any)
		for _, r := range asList(m["required"]) {
			if _, ok := val[r.(string)]; !ok {
				fail("lacks the required property %q", r)
			}
		}
		keys := make([]string, 0, len(val))
		for k := range val {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if ps, ok := props[k]; ok {
				validate(t, doc, ps, val[k], at+"."+k, errs)
				continue
			}
			switch ap := m["additionalProperties"].(type) {
			case bool:
				if !ap {
					fail("has the property %q the schema does not list", k)
				}
			case map[any]any:
				validate(t, doc, ap, val[k], at+"."+k, errs)
			}
		}
	case []any:
		if items, ok := m["items"]; ok {
			for i, x := range val {
				validate(t, doc, items, x, fmt.Sprintf("%s[%d]", at, i), errs)
			}
		}
	}
}

func asList(v any) []any { l, _ := v.([]any); return l }

func toFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

func jsonTypeIs(v any, ty string) bool {
	switch ty {
	case "null":
		return v == nil
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "number":
		_, ok := v.(json.Number)
		return ok
	case "integer":
		n, ok := v.(json.Number)
		return ok && !strings.ContainsAny(string(n), ".eE")
	}
	return false
}

func short(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		b = append(b[:77], "..."...)
	}
	return string(b)
}

// checkAgainstDoc checks one response of method path against the document: its status is one
// the operation lists, its JSON body fits the documented schema, the headers the document
// promises are there, and a JSON body is sent as application/json. It returns the violations.
func checkAgainstDoc(t *testing.T, doc any, method, path string, r response) []string {
	t.Helper()
	schema, headers, documented := docResponse(t, doc, method, path, r.status)
	where := fmt.Sprintf("%s %s → %d", method, path, r.status)
	if !documented {
		return []string{fmt.Sprintf("%s: the status is not documented for the operation; body %s", where, bytes.TrimSpace(r.body))}
	}
	var errs []string
	for name, h := range headers {
		got := r.header.Get(name.(string))
		if got == "" {
			errs = append(errs, fmt.Sprintf("%s: the documented header %s is missing", where, name))
			continue
		}
		var sub []string
		validate(t, doc, h.(map[any]any)["schema"], json.Number(got), "header "+name.(string), &sub)
		for _, e := range sub {
			errs = append(errs, where+": "+e)
		}
	}
	if schema == nil || method == "HEAD" {
		return errs
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		errs = append(errs, fmt.Sprintf("%s: Content-Type %q", where, ct))
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return append(errs, fmt.Sprintf("%s: body %q is not JSON: %v", where, r.body, err))
	}
	var sub []string
	validate(t, doc, schema, v, "body", &sub)
	for _, e := range sub {
		errs = append(errs, where+": "+e)
	}
	return errs
}

// reportViolations fails t with each violation.
func reportViolations(t *testing.T, violations []string) {
	t.Helper()
	for _, v := range violations {
		t.Error(v)
	}
}

// TestEveryRouteDocumentsItsUnknownQueryParameter400: every /v1 route refuses a query parameter
// it does not read with a 400 (checkQuery), but eight operations do not list 400.
func TestEveryRouteDocumentsItsUnknownQueryParameter400(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	var violations []string
	for _, c := range []struct{ method, tmpl, path string }{
		{"GET", "/v1/events/{id}", "/v1/events/e1"},
		{"GET", "/v1/stats", "/v1/stats"},
		{"GET", "/v1/subscribers", "/v1/subscribers"},
		{"GET", "/v1/subscribers/{id}", "/v1/subscribers/s"},
		{"DELETE", "/v1/subscribers/{id}", "/v1/subscribers/s"},
		{"POST", "/v1/subscribers/{id}/resume", "/v1/subscribers/s/resume"},
		{"GET", "/v1/deliveries/{id}", "/v1/deliveries/d1"},
		{"POST", "/v1/deliveries/{id}/retry", "/v1/deliveries/d1/retry"},
	} {
		r := e.do(c.method, c.path+"?bogus=1", nil)
		r.wantError(t, http.StatusBadRequest, api.CodeBadRequest, "bogus")
		violations = append(violations, checkAgainstDoc(t, doc, c.method, c.tmpl, r)...)
	}
	reportViolations(t, violations)
}

// TestAPatchWithAMiscasedNullKeyIs400: the document says an unknown field (names are
// case-sensitive) or a key given twice is a 400 naming it; with a null value the PATCH answers
// 422 "must not be null" instead.
func TestAPatchWithAMiscasedNullKeyIs400(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addSubscriber(api.SubscriberRequest{ID: "s", URL: "https://s.example/hook", Events: []string{"*"}})
	for _, c := range []struct{ body, field string }{
		{`{"URL":null}`, "URL"},
		{`{"url":"https://t.example/hook","url":null}`, "url"},
	} {
		r := e.do("PATCH", "/v1/subscribers/s", c.body)
		if r.status != http.StatusBadRequest {
			t.Errorf("PATCH %s → %d %s, want 400 bad_request naming %q", c.body, r.status, bytes.TrimSpace(r.body), c.field)
		}
	}
}

// TestReadyzAnswersOnly200Or503: /readyz documents 200 and 503 (with Retry-After); a Ping
// failure that ToError does not map to 503 passes through as a 500.
func TestReadyzAnswersOnly200Or503(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	e := newEnv(t)
	if err := e.store.Close(); err != nil { // the database can no longer be written
		t.Fatal(err)
	}
	reportViolations(t, append(checkAgainstDoc(t, doc, "GET", "/readyz", e.do("GET", "/readyz", nil)),
		checkAgainstDoc(t, doc, "HEAD", "/readyz", e.do("HEAD", "/readyz", nil))...))
}
