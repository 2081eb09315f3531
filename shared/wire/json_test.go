package wire_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/wire"
)

// FuzzValidJSON pins ValidJSON to json.Valid, and CutJSON to ValidJSON: a whole input is valid
// exactly when CutJSON takes a value from its first non-space byte and only space follows.
func FuzzValidJSON(f *testing.F) {
	for _, s := range []string{
		`{"a":[1,-0.5e+3,2E-2,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"]}`, ` [ ] `, `{}`, `""`, `0`, `-`, `01`, `1.`, `1e`,
		`.5`, `+1`, `"\x"`, `"\u00g0"`, "\"\x01\"", `"\xff"`, `[1,]`, `{"a"}`, `{"a":1,}`, `{1:2}`, `tru`, `truex`, `nul`,
		`[1 2]`, `{"a":1 "b":2}`, `1 `, ` `, ``,
	} {
		f.Add([]byte(s))
	}
	// encoding/json's nesting limit, checked here: inputs this large would slow the fuzzer down.
	for _, depth := range []int{10000, 10001} {
		b := []byte(strings.Repeat("[", depth) + strings.Repeat("]", depth))
		if got, want := wire.ValidJSON(b), json.Valid(b); got != want {
			f.Fatalf("ValidJSON at depth %d = %v, json.Valid says %v", depth, got, want)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		want := json.Valid(b)
		if got := wire.ValidJSON(b); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid says %v", b, got, want)
		}
		start := wire.SkipJSONSpace(b, 0)
		v, end, ok := wire.CutJSON(b, start)
		if whole := ok && wire.SkipJSONSpace(b, end) == len(b); whole != want {
			t.Fatalf("CutJSON(%q) = %q, %d, %v; json.Valid says %v", b, v.Bytes(), end, ok, want)
		}
		if ok && (!bytes.Equal(v.Bytes(), b[start:end]) || !json.Valid(v.Bytes())) {
			t.Fatalf("CutJSON(%q) = %q, which is not the valid value b[%d:%d]", b, v.Bytes(), start, end)
		}
	})
}

// TestCutJSON: the value is cut from its start to its end and copied out of the input, and the
// proof covers exactly that copy, not the input nor an equal slice nor a part of it.
func TestCutJSON(t *testing.T) {
	in := []byte(`{"data": {"a":"b"} ,"x":1}`)
	v, end, ok := wire.CutJSON(in, 9)
	if !ok || string(v.Bytes()) != `{"a":"b"}` || end != 18 {
		t.Fatalf(`CutJSON = %q, %d, %v; want {"a":"b"}, 18, true`, v.Bytes(), end, ok)
	}
	in[10] = 'X' // the input is the caller's buffer, reused once decoded
	if string(v.Bytes()) != `{"a":"b"}` {
		t.Fatalf("the value changed with the input: %q", v.Bytes())
	}
	if !v.Covers(v.Bytes()) {
		t.Error("the proof does not cover its own value")
	}
	for name, b := range map[string][]byte{
		"the input": in[9:18], "an equal copy": bytes.Clone(v.Bytes()), "a prefix": v.Bytes()[:3], "nothing": nil,
	} {
		if v.Covers(b) {
			t.Errorf("the proof covers %s (%q)", name, b)
		}
	}
	var zero wire.CheckedJSON
	if zero.Covers(nil) || zero.Covers([]byte{}) {
		t.Error("the zero proof covers an empty body")
	}
	for _, bad := range []string{`{"a":}`, `[1,`, ``, ` 1`} {
		if v, _, ok := wire.CutJSON([]byte(bad), 0); ok || v.Bytes() != nil {
			t.Errorf("CutJSON(%q) = %q, %v; want a refusal", bad, v.Bytes(), ok)
		}
	}
}

// TestCutNestedJSON: a value inside depth containers is refused exactly when json.Valid refuses it
// wrapped in that many arrays (encoding/json's nesting limit counts them), and CutJSON is depth 0.
func TestCutNestedJSON(t *testing.T) {
	t.Parallel()
	nested := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	for _, depth := range []int{0, 1, 3} {
		for _, n := range []int{9999 - depth, 10000 - depth, 10001 - depth} {
			v := []byte(nested(n))
			want := json.Valid([]byte(nested(depth + n)))
			if _, end, ok := wire.CutNestedJSON(v, 0, depth); ok != want || ok && end != len(v) {
				t.Errorf("CutNestedJSON of arrays %d deep inside %d = %d, %v; json.Valid of the whole says %v", n, depth, end, ok, want)
			}
			if _, _, ok := wire.CutJSON(v, 0); depth == 0 && ok != want {
				t.Errorf("CutJSON of arrays %d deep = %v; json.Valid says %v", n, ok, want)
			}
		}
	}
}
