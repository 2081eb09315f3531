package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"
)

// decodeJSON reads the request body strictly into v: the content type must be JSON (415), the body
// within the limit (413), and the JSON one value of the expected shape with no unknown fields and
// nothing after it (400, naming the field when the decoder knows it).
func decodeJSON(c echo.Context, v any) error {
	r := c.Request()
	ct := r.Header.Get(echo.HeaderContentType)
	if ct != echo.MIMEApplicationJSON { // the usual header needs no parsing
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationJSON {
			return errorf(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "", "Content-Type must be application/json, not %q", ct)
		}
	}
	buf := bodyBuffers.Get().(*bytes.Buffer)
	defer putBodyBuffer(buf)
	if r.ContentLength > 0 { // within the limit: limitBody refused more
		buf.Grow(int(r.ContentLength) + bytes.MinRead) // ReadFrom then reads it all without growing
	}
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return ToError(err) // *http.MaxBytesError → 413
	}
	return strictUnmarshal(buf.Bytes(), v)
}

// bodyBuffers recycles request body buffers: decoding copies out everything it keeps (strings,
// json.RawMessage), so a body's bytes are garbage once decoded.
var bodyBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody bounds the buffers kept, so one large batch does not pin its memory.
const maxPooledBody = 64 << 10

func putBodyBuffer(b *bytes.Buffer) {
	if b.Cap() > maxPooledBody {
		return
	}
	b.Reset()
	bodyBuffers.Put(b)
}

// decodeOptionalJSON is decodeJSON for routes whose body may be left out (Content-Length 0, or a
// chunked body that ends at once, as proxies and streaming clients send none): then v keeps its
// zero value.
func decodeOptionalJSON(c echo.Context, v any) error {
	r := c.Request()
	if r.ContentLength == 0 {
		return nil
	}
	if r.ContentLength < 0 {
		var first [1]byte
		n, err := io.ReadFull(r.Body, first[:])
		if n == 0 {
			if err == io.EOF {
				return nil
			}
			return ToError(err)
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(first[:]), r.Body), r.Body}
	}
	return decodeJSON(c, v)
}

// strictUnmarshal decodes exactly one JSON value, rejecting unknown fields and trailing data.
func strictUnmarshal(body []byte, v any) error {
	switch r := v.(type) {
	case *EventRequest:
		if decodeEventFast(body, r) {
			return nil
		}
	case *BatchRequest:
		if decodeBatchFast(body, r) {
			return nil
		}
	}
	// The key walk first: it names a problem by its path (events[2].type, where the decoder
	// says events.type), and refuses what the decoder takes without a word, or would judge
	// first in a type's own UnmarshalJSON ({"URL": null} is a misspelt key, not a null url).
	// What it cannot read (malformed JSON) is the decoder's to name.
	var named *Error
	if err := checkKeys(body, v); errors.As(err, &named) {
		return named
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return errorf(http.StatusBadRequest, CodeBadRequest, "", "unexpected data after the JSON value")
	}
	return markEmptyIDs(body, v)
}

// bodySubject names the whole decoded value in an error, where no field is at fault.
const bodySubject = "the request body"

// wrongType is the 400 for a value at path that type t cannot take: got names what it was ("JSON
// string", "null").
func wrongType(path string, t reflect.Type, got string) *Error {
	return errorf(http.StatusBadRequest, CodeBadRequest, path, "%s must be %s, not %s", subjectOf(path), describeType(t), got)
}

// subjectOf names the value at path (a field's path, "" for the whole body) in an error.
func subjectOf(path string) string {
	if path == "" {
		return bodySubject
	}
	return path
}

// jsonError turns a decoding error into a 400 that names the field where possible.
func jsonError(err error) *Error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var e *Error // from a type's own UnmarshalJSON
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &syn):
		return errorf(http.StatusBadRequest, CodeBadRequest, "", "malformed JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		return wrongType(typ.Field, typ.Type, "JSON "+typ.Value)
	case errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, CodeBadRequest, "", "request body is empty")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errorf(http.StatusBadRequest, CodeBadRequest, "", "request body ends in the middle of a JSON value")
	}
	if field, ok := unknownField(err); ok {
		return errorf(http.StatusBadRequest, CodeBadRequest, field, "unknown field %q", field)
	}
	return errorf(http.StatusBadRequest, CodeBadRequest, "", "invalid JSON: %v", err)
}

// unknownField reads the field name of a DisallowUnknownFields error, which encoding/json
// reports only as text: `json: unknown field "name"`.
func unknownField(err error) (string, bool) {
	name, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	return strings.Trim(name, `"`), ok
}

func describeType(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer" // "a number, not JSON number 1.5" would say nothing
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return describeType(t.Elem())
	}
	return "an object"
}
