package wire

import "bytes"

// maxJSONDepth is encoding/json's nesting limit: json.Valid refuses deeper values, so ValidJSON does.
const maxJSONDepth = 10000

// ValidJSON reports what encoding/json's Valid(b) reports, about three times faster on
// string-heavy event data: encoding/json's scanner calls a state function per byte, this reads
// runs of plain string bytes in a tight loop. Like json.Valid it does not check UTF-8. FuzzValidJSON
// pins it to json.Valid.
func ValidJSON(b []byte) bool {
	i, ok := jsonValue(b, SkipJSONSpace(b, 0), 0)
	return ok && SkipJSONSpace(b, i) == len(b)
}

// CheckedJSON is one JSON value that CutJSON validated: a decoder that validates a value on its
// way can hand the proof on, and the receiver (the store, before it accepts an event body) need
// not validate the same bytes again. Only CutJSON and CutNestedJSON make one; the zero CheckedJSON
// proves nothing.
type CheckedJSON struct{ b []byte }

// CutJSON validates the JSON value starting at b[i] (no leading space) as ValidJSON would and
// returns it, copied out of b, with the index after it. ok is false if no valid value starts there.
func CutJSON(b []byte, i int) (v CheckedJSON, end int, ok bool) { return CutNestedJSON(b, i, 0) }

// CutNestedJSON is CutJSON of a value inside depth objects or arrays of a larger document: they
// count toward encoding/json's nesting limit when it decodes that document, so a decoder standing in
// for it must refuse values that are only deep enough with them.
func CutNestedJSON(b []byte, i, depth int) (v CheckedJSON, end int, ok bool) {
	end, ok = jsonValue(b, i, depth)
	if !ok {
		return CheckedJSON{}, 0, false
	}
	return CheckedJSON{bytes.Clone(b[i:end])}, end, true
}

// Bytes returns the value: a copy of the bytes validated, which must not be changed.
func (v CheckedJSON) Bytes() []byte { return v.b }

// Covers reports whether b is exactly the value v validated (the same bytes in memory, not an equal
// copy), so b is valid JSON without another look.
func (v CheckedJSON) Covers(b []byte) bool {
	return len(v.b) > 0 && len(b) == len(v.b) && &b[0] == &v.b[0]
}

// jsonValue validates the value starting at b[i] (no leading space) and returns the index after it.
func jsonValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '"':
		return jsonString(b, i)
	case c == '{' || c == '[':
		return jsonContainer(b, i, depth+1)
	case c == '-' || c >= '0' && c <= '9':
		return jsonNumber(b, i)
	case c == 't':
		return jsonLiteral(b, i, "true")
	case c == 'f':
		return jsonLiteral(b, i, "false")
	case c == 'n':
		return jsonLiteral(b, i, "null")
	}
	return 0, false
}

// jsonContainer validates the object or array opening at b[i].
func jsonContainer(b []byte, i, depth int) (int, bool) {
	if depth > maxJSONDepth {
		return 0, false
	}
	object := b[i] == '{'
	end := byte(']')
	if object {
		end = '}'
	}
	i = SkipJSONSpace(b, i+1)
	if i < len(b) && b[i] == end {
		return i + 1, true
	}
	for {
		var ok bool
		if object {
			if i >= len(b) || b[i] != '"' {
				return 0, false
			}
			if i, ok = jsonString(b, i); !ok {
				return 0, false
			}
			if i = SkipJSONSpace(b, i); i >= len(b) || b[i] != ':' {
				return 0, false
			}
			i = SkipJSONSpace(b, i+1)
		}
		if i, ok = jsonValue(b, i, depth); !ok {
			return 0, false
		}
		if i = SkipJSONSpace(b, i); i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = SkipJSONSpace(b, i+1)
		case end:
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// plainStringByte marks the bytes a JSON string holds as they are: not '"', '\\' or a control byte.
var plainStringByte = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// jsonString validates the string opening at b[i].
func jsonString(b []byte, i int) (int, bool) {
	for i++; ; i++ {
		for i < len(b) && plainStringByte[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) || !isHex(b[i+1]) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) {
					return 0, false
				}
				i += 4
			default:
				return 0, false
			}
		default: // a control byte
			return 0, false
		}
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// jsonNumber validates the number starting at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func jsonNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// digits returns the index after the run of decimal digits at b[i].
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// jsonLiteral validates the literal lit at b[i].
func jsonLiteral(b []byte, i int, lit string) (int, bool) {
	if len(b)-i < len(lit) || string(b[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// SkipJSONSpace returns the index of the first byte at or after i that is not JSON white space.
func SkipJSONSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
