package api

// EmitResultJSON exposes emitResultJSON to the external tests.
var EmitResultJSON = emitResultJSON

// DecodeEventFast exposes decodeEventFast to the external tests.
func DecodeEventFast(b []byte) (EventRequest, bool) {
	var r EventRequest
	ok := decodeEventFast(b, &r)
	return r, ok
}

// ValidJSON exposes validJSON to the external tests.
var ValidJSON = validJSON
