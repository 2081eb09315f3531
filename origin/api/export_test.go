package api

import "github.com/edgehook/edgehook/origin/store"

// EmitResultJSON exposes emitResultJSON to the external tests.
var EmitResultJSON = emitResultJSON

// DecodeEventFast exposes decodeEventFast to the external tests.
func DecodeEventFast(b []byte) (EventRequest, bool) {
	var r EventRequest
	ok := decodeEventFast(b, &r)
	return r, ok
}

// DecodeBatch decodes a POST /v1/events/batch body as the handler does.
func DecodeBatch(b []byte) (BatchRequest, error) {
	var r BatchRequest
	err := strictUnmarshal(b, &r)
	return r, err
}

// DecodeBatchFast exposes decodeBatchFast to the external tests.
func DecodeBatchFast(b []byte) (BatchRequest, bool) {
	var r BatchRequest
	ok := decodeBatchFast(b, &r)
	return r, ok
}

// Input converts a decoded event for the store as the handlers do.
func (r *EventRequest) Input() (store.EmitInput, error) { return r.input("") }
