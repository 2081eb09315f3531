package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
)

// checkKeys walks body, a JSON value that decodes into v, and refuses the object keys
// encoding/json takes without a word: a key that matches a field only case-insensitively
// ("Type" for "type") and a key given twice (the decoder keeps the last one), in a struct or a
// map. Errors are 400s naming the key by its path ("coalesce.key", "events[2].id",
// "headers.X-Team"), which also names unknown fields inside nested objects.
func checkKeys(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	// A number out of float64's range is the decoder's error to name, not the walk's.
	dec.UseNumber()
	// v points to where the body decodes.
	return keyWalker{dec}.value(reflect.TypeOf(v).Elem(), "")
}

type keyWalker struct{ dec *json.Decoder }

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// value checks the next value of the decoder, which decodes into t, at path.
func (w keyWalker) value(t reflect.Type, path string) error {
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nullAt(t, path)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	// The decoder names a value of the wrong type without its place in arrays and maps
	// ("events.type"): strictUnmarshal asks the walk, which knows it ("events[2].type").
	if kind := jsonKind(tok); !takes(t, kind) {
		return wrongType(path, t, "JSON "+kind)
	}
	d, ok := tok.(json.Delim)
	switch {
	case !ok: // a scalar
		return nil
	case d == '{' && t != rawMessageType && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map):
		return w.object(t, path)
	case d == '[' && t != rawMessageType && t.Kind() == reflect.Slice:
		for i := 0; w.dec.More(); i++ {
			if err := w.value(t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err := w.dec.Token()
		return err
	}
	return w.skip() // kept as raw bytes, or a shape the decoder has refused already
}

// jsonKind names the kind of JSON value tok (not null) starts, as encoding/json's errors do.
func jsonKind(tok json.Token) string {
	switch tok {
	case json.Delim('{'):
		return "object"
	case json.Delim('['):
		return "array"
	}
	switch tok.(type) {
	case string:
		return "string"
	case bool:
		return "bool"
	}
	return "number"
}

// takes tells whether a value of type t decodes from a JSON value of kind.
func takes(t reflect.Type, kind string) bool {
	switch t.Kind() {
	case reflect.Interface:
		return true
	case reflect.String:
		return kind == "string"
	case reflect.Bool:
		return kind == "bool"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return kind == "number"
	case reflect.Struct, reflect.Map:
		return kind == "object"
	}
	return t == rawMessageType || kind == "array" // a slice
}

// nullAt refuses a JSON null at path, of type t, where encoding/json takes it without a word, as
// a value of a type that cannot be nil: it is left as it was, so {"X-A": null} would be a header
// with an empty value, and a body of null a PATCH of nothing. A null pointer, map or slice
// decodes as nil, which the request types read as absent (or refuse, or take as a removal).
func nullAt(t reflect.Type, path string) error {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		return nil
	}
	return wrongType(path, t, "null")
}

// object checks the members of an object (its '{' read) that decodes into t, a struct or a map.
func (w keyWalker) object(t reflect.Type, path string) error {
	seen := map[string]bool{}
	for w.dec.More() {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // Token returns an object's keys as strings
		field := key
		if path != "" {
			field = path + "." + key
		}
		if seen[key] {
			return errorf(http.StatusBadRequest, CodeBadRequest, field, "%s is given twice", field)
		}
		seen[key] = true
		var elem reflect.Type
		if t.Kind() == reflect.Map {
			elem = t.Elem()
		} else if elem = structFields(t)[key]; elem == nil {
			for name := range structFields(t) {
				if strings.EqualFold(name, key) {
					return errorf(http.StatusBadRequest, CodeBadRequest, field, "unknown field %q (names are case-sensitive: %q)", field, name)
				}
			}
			return errorf(http.StatusBadRequest, CodeBadRequest, field, "unknown field %q", field)
		}
		if err := w.value(elem, field); err != nil {
			return err
		}
	}
	_, err := w.dec.Token()
	return err
}

// skip reads the rest of a value whose opening delimiter was read.
func (w keyWalker) skip() error {
	for depth := 1; depth > 0; {
		tok, err := w.dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}

// fieldCache holds structFields' answer per type.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// structFields maps the JSON names of t's fields, embedded structs' included, to their types.
func structFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case f.Anonymous && name == "":
			for n, ft := range structFields(f.Type) {
				m[n] = ft
			}
		case f.IsExported() && name != "-":
			if name == "" {
				name = f.Name
			}
			m[name] = f.Type
		}
	}
	fieldCache.Store(t, m)
	return m
}
