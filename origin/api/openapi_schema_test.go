package api_test

import (
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
	"go.yaml.in/yaml/v2"
)

// TestOpenAPISchemasMatchTypes fails when a schema of docs/openapi.yaml and the Go type the API
// reads or writes for it differ in their fields, so a renamed, added or removed field cannot
// leave the document behind.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	schema := func(name string, more ...any) []any {
		return append([]any{"components", "schemas", name}, more...)
	}
	body := func(path, method string, more ...any) []any {
		return append([]any{"paths", path, method}, more...)
	}
	jsonBody := []any{"content", "application/json", "schema"}
	request := append([]any{"requestBody"}, jsonBody...)
	cases := []struct {
		keys []any // from the document's root
		v    any
	}{
		{schema("Error"), api.Error{}},
		{schema("EventRequest"), api.EventRequest{}},
		{schema("EmitResult"), api.EmitResult{}},
		{schema("Event"), api.Event{}},
		{schema("CoalesceRule"), wire.CoalesceRule{}},
		{schema("SubscriberRequest"), api.SubscriberRequest{}},
		{schema("SubscriberUpdate"), api.SubscriberUpdate{}},
		{schema("Subscriber"), api.Subscriber{}},
		{schema("Subscriber", "properties", "secrets", "items"), api.SecretInfo{}},
		{schema("Delivery"), api.Delivery{}},
		{schema("Delivery", "properties", "attempt_log", "items"), api.Attempt{}},
		{schema("Stats"), api.Stats{}},
		{schema("Stats", "properties", "subscribers", "items"), api.SubscriberStats{}},
		{body("/v1/events/batch", "post", request...), api.BatchRequest{}},
		{body("/v1/events/batch", "post", append([]any{"responses", "202"}, jsonBody...)...), api.BatchResult{}},
		{body("/v1/subscribers/{id}/pause", "post", request...), api.PauseRequest{}},
		{body("/v1/subscribers/{id}/rotate-secret", "post", request...), api.RotateRequest{}},
		{body("/v1/subscribers/{id}/replay", "post", request...), api.ReplayRequest{}},
		{body("/v1/subscribers/{id}/replay", "post", append([]any{"responses", "200"}, jsonBody...)...), api.ReplayResult{}},
		{body("/v1/deliveries", "get", append([]any{"responses", "200"}, jsonBody...)...), api.DeliveryPage{}},
		{body("/v1/subscribers", "get", append([]any{"responses", "200"}, jsonBody...)...), api.SubscriberList{}},
	}
	for _, c := range cases {
		documented := properties(t, lookup(t, doc, c.keys...))
		served := jsonFields(reflect.TypeOf(c.v))
		if strings.Join(documented, " ") != strings.Join(served, " ") {
			t.Errorf("openapi.yaml %v documents %v; %T has %v", c.keys, documented, c.v, served)
		}
	}
	// SubscriberWithSecret is Subscriber and the secret.
	var merged []string
	for _, part := range lookup(t, doc, schema("SubscriberWithSecret", "allOf")...).([]any) {
		if ref, ok := part.(map[any]any)["$ref"].(string); ok {
			part = lookup(t, doc, schema(strings.TrimPrefix(ref, "#/components/schemas/"))...)
		}
		merged = append(merged, properties(t, part)...)
	}
	sort.Strings(merged)
	if want := jsonFields(reflect.TypeOf(api.SubscriberWithSecret{})); strings.Join(merged, " ") != strings.Join(want, " ") {
		t.Errorf("openapi.yaml SubscriberWithSecret documents %v; the type has %v", merged, want)
	}
}

// TestOpenAPIEnumsMatchConstants fails when an enum of docs/openapi.yaml and the values the code
// has differ.
func TestOpenAPIEnumsMatchConstants(t *testing.T) {
	t.Parallel()
	doc := openAPIDoc(t)
	schemas := []any{"components", "schemas"}
	cases := []struct {
		keys   []any
		values []string
	}{
		{[]any{"DeliveryStatus", "enum"}, []string{string(store.StatusPending), string(store.StatusLeased), string(store.StatusDelivered),
			string(store.StatusDead), string(store.StatusSuperseded), string(store.StatusHeld)}},
		{[]any{"Subscriber", "properties", "state", "enum"}, []string{string(store.StateActive), string(store.StatePaused), string(store.StateDisabled)}},
		{[]any{"SubscriberRequest", "properties", "profile", "enum"}, []string{string(store.ProfileStandard), string(store.ProfileLegacy)}},
		{[]any{"SubscriberRequest", "properties", "mode", "enum"}, []string{string(store.ModeDirect), string(store.ModeEdge)}},
		{[]any{"Error", "properties", "code", "enum"}, []string{api.CodeBadRequest, api.CodeUnauthorized, api.CodeNotFound,
			api.CodeMethodNotAllowed, api.CodeConflict, api.CodeInvalidState, api.CodeTooLarge, api.CodeUnsupportedMedia,
			api.CodeInvalid, api.CodeQueueFull, api.CodeUnavailable, api.CodeInternal}},
	}
	for _, c := range cases {
		var documented []string
		for _, v := range lookup(t, doc, append(schemas, c.keys...)...).([]any) {
			documented = append(documented, v.(string))
		}
		sort.Strings(documented)
		sort.Strings(c.values)
		if strings.Join(documented, " ") != strings.Join(c.values, " ") {
			t.Errorf("openapi.yaml %v is %v; the code has %v", c.keys, documented, c.values)
		}
	}
}

// openAPIDoc parses docs/openapi.yaml.
func openAPIDoc(t *testing.T) any {
	t.Helper()
	data, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// lookup follows keys from the root of the parsed document.
func lookup(t *testing.T, doc any, keys ...any) any {
	t.Helper()
	cur := doc
	for i, k := range keys {
		m, ok := cur.(map[any]any)
		if !ok {
			t.Fatalf("openapi.yaml %v: not an object at %v", keys, keys[:i])
		}
		if cur, ok = m[k]; !ok {
			t.Fatalf("openapi.yaml %v: no %v", keys, keys[:i+1])
		}
	}
	return cur
}

// properties returns the sorted property names of an object schema.
func properties(t *testing.T, schema any) []string {
	t.Helper()
	m, ok := schema.(map[any]any)
	if !ok {
		t.Fatalf("openapi.yaml: %v is not a schema", schema)
	}
	props, ok := m["properties"].(map[any]any)
	if !ok {
		t.Fatalf("openapi.yaml: schema %v has no properties", schema)
	}
	var names []string
	for k := range props {
		names = append(names, k.(string))
	}
	sort.Strings(names)
	return names
}

// jsonFields returns the sorted JSON names of the fields encoding/json reads and writes for t,
// embedded structs' included.
func jsonFields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			names = append(names, jsonFields(f.Type)...)
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
