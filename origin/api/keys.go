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
	return keyWalker{dec}.value(reflect.TypeOf(v), "")
}

type keyWalker struct{ dec *json.Decoder }

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// value checks the next value of the decoder, which decodes into t, at path.
func (w keyWalker) value(t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
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
