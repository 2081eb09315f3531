package api

import "github.com/edgehook/edgehook/shared/wire"

// decodeEventFast decodes the plain shape of a single event — one object with the keys id, type,
// data and coalesce_key spelled exactly, each at most once, string values without escapes or
// non-ASCII bytes, an id not empty — in one pass over the body, data validated on the way (wire.CutJSON, whose proof spares the store a second look),
// instead of encoding/json's three passes and reflection. It reports false, leaving r alone, for
// anything else, and the caller then decodes with encoding/json: every input it accepts decodes
// there to the same EventRequest, and every error still comes from encoding/json
// (FuzzEventFastPath).
func decodeEventFast(b []byte, r *EventRequest) bool {
	out, i, ok := eventObject(b, wire.SkipJSONSpace(b, 0), 0)
	if !ok || wire.SkipJSONSpace(b, i) != len(b) {
		return false
	}
	*r = out
	return true
}

// decodeBatchFast is decodeEventFast for a batch: {"events":[...]} with that one key, spelled
// exactly, and at least one event, each in the plain shape. Like decodeEventFast it reports false
// for anything else, leaving r alone, and encoding/json decides (FuzzBatchFastPath).
func decodeBatchFast(b []byte, r *BatchRequest) bool {
	i := wire.SkipJSONSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	key, i, ok := plainString(b, wire.SkipJSONSpace(b, i+1))
	if !ok || string(key) != "events" {
		return false
	}
	if i = wire.SkipJSONSpace(b, i); i >= len(b) || b[i] != ':' {
		return false
	}
	if i = wire.SkipJSONSpace(b, i+1); i >= len(b) || b[i] != '[' {
		return false
	}
	var events []EventRequest
	for i = wire.SkipJSONSpace(b, i+1); ; {
		var ev EventRequest
		if ev, i, ok = eventObject(b, i, 2); !ok { // inside the array and the outer object
			return false
		}
		events = append(events, ev)
		if i = wire.SkipJSONSpace(b, i); i >= len(b) {
			return false
		}
		if b[i] == ']' {
			break
		}
		if b[i] != ',' {
			return false
		}
		i = wire.SkipJSONSpace(b, i+1)
	}
	if i = wire.SkipJSONSpace(b, i+1); i >= len(b) || b[i] != '}' || wire.SkipJSONSpace(b, i+1) != len(b) {
		return false
	}
	r.Events = events
	return true
}

// eventObject decodes the plain-shaped event object at b[i], inside depth objects or arrays, and
// returns the index after it. The depth bounds the data's own nesting as encoding/json's limit does.
func eventObject(b []byte, i, depth int) (EventRequest, int, bool) {
	var out EventRequest
	var seen [4]bool
	if i >= len(b) || b[i] != '{' {
		return out, 0, false
	}
	for i = wire.SkipJSONSpace(b, i+1); ; {
		key, j, ok := plainString(b, i)
		if !ok {
			return out, 0, false
		}
		if i = wire.SkipJSONSpace(b, j); i >= len(b) || b[i] != ':' {
			return out, 0, false
		}
		i = wire.SkipJSONSpace(b, i+1)
		var field *string
		var n int
		switch string(key) {
		case "id":
			field, n = &out.ID, 0
		case "type":
			field, n = &out.Type, 1
		case "coalesce_key":
			field, n = &out.CoalesceKey, 2
		case "data":
			n = 3
		default:
			return out, 0, false
		}
		if seen[n] {
			return out, 0, false // encoding/json lets the last one win; leave that to it
		}
		seen[n] = true
		if field != nil {
			v, j, ok := plainString(b, i)
			if !ok || n == 0 && len(v) == 0 { // "id": "" is refused, not generated: the fallback tells it from none
				return out, 0, false
			}
			*field, i = string(v), j
		} else {
			v, j, ok := wire.CutNestedJSON(b, i, depth+1)
			if !ok {
				return out, 0, false
			}
			out.Data, out.checked, i = v.Bytes(), v, j
		}
		if i = wire.SkipJSONSpace(b, i); i >= len(b) {
			return out, 0, false
		}
		switch b[i] {
		case ',':
			i = wire.SkipJSONSpace(b, i+1)
		case '}':
			return out, i + 1, true
		default:
			return out, 0, false
		}
	}
}

// plainString reads the JSON string at b[i] if it holds only printable ASCII without escapes:
// its contents and the index after the closing quote.
func plainString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, 0, false
		}
	}
	return nil, 0, false
}
