package api

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// EventRequest is one event to emit. Data is kept as the exact bytes received: that is the body
// every subscriber gets, byte for byte.
type EventRequest struct {
	ID          string          `json:"id,omitempty"`
	Type        string          `json:"type"`
	Data        json.RawMessage `json:"data"`
	CoalesceKey string          `json:"coalesce_key,omitempty"`

	checked wire.CheckedJSON // Data as the fast decoder validated it, handed on to the store
	emptyID bool             // "id": "" was sent (markEmptyIDs), which input refuses
}

// BatchRequest is POST /v1/events/batch: up to MaxBatch events, written all or none.
type BatchRequest struct {
	Events []EventRequest `json:"events"`
}

// BatchResult answers a batch, in the order of the request.
type BatchResult struct {
	Results []EmitResult `json:"results"`
}

// input checks what the store cannot see (an id not sent empty, data present) and converts; field
// prefixes the field names for a batch ("events[3].").
func (r *EventRequest) input(field string) (store.EmitInput, error) {
	if r.emptyID {
		return store.EmitInput{}, &wire.FieldError{Field: field + "id", Err: errEmptyID}
	}
	if len(r.Data) == 0 {
		return store.EmitInput{}, &wire.FieldError{Field: field + "data", Err: errRequired}
	}
	id := r.ID
	if id == "" {
		id = NewEventID()
	}
	return store.EmitInput{ID: id, Type: r.Type, Body: r.Data, BodyChecked: r.checked, CoalesceKey: r.CoalesceKey}, nil
}

// NewEventID returns a fresh random event id, "evt_" and 32 hex digits, for events emitted
// without one.
func NewEventID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "evt_" + hex.EncodeToString(b[:])
}

// SubscriberRequest creates a subscriber. Zero fields take the defaults.
type SubscriberRequest struct {
	ID           string             `json:"id,omitempty"`
	URL          string             `json:"url"`
	Events       []string           `json:"events"`
	Profile      store.Profile      `json:"profile,omitempty"`
	LegacyPrefix string             `json:"legacy_prefix,omitempty"`
	Mode         store.Mode         `json:"mode,omitempty"`
	RatePerSec   float64            `json:"rate_per_sec,omitempty"`
	Burst        int                `json:"burst,omitempty"`
	MaxInFlight  int                `json:"max_in_flight,omitempty"`
	TimeoutMS    int64              `json:"timeout_ms,omitempty"`
	Headers      map[string]string  `json:"headers,omitempty"`
	Coalesce     *wire.CoalesceRule `json:"coalesce,omitempty"`

	emptyID bool // "id": "" was sent (markEmptyIDs), which createSubscriber refuses
}

// Input converts the request for the store.
func (r *SubscriberRequest) Input() store.SubscriberInput {
	return store.SubscriberInput{ID: r.ID, URL: r.URL, Events: r.Events, Profile: r.Profile, LegacyPrefix: r.LegacyPrefix,
		Mode: r.Mode, RatePerSec: r.RatePerSec, Burst: r.Burst, MaxInFlight: r.MaxInFlight, TimeoutMS: r.TimeoutMS,
		Headers: r.Headers, Coalesce: r.Coalesce}
}

// SubscriberUpdate changes some settings; absent fields are left alone, and "coalesce": null
// removes coalescing.
type SubscriberUpdate struct {
	URL          *string            `json:"url,omitempty"`
	Events       *[]string          `json:"events,omitempty"`
	Profile      *store.Profile     `json:"profile,omitempty"`
	LegacyPrefix *string            `json:"legacy_prefix,omitempty"`
	Mode         *store.Mode        `json:"mode,omitempty"`
	RatePerSec   *float64           `json:"rate_per_sec,omitempty"`
	Burst        *int               `json:"burst,omitempty"`
	MaxInFlight  *int               `json:"max_in_flight,omitempty"`
	TimeoutMS    *int64             `json:"timeout_ms,omitempty"`
	Headers      *map[string]string `json:"headers,omitempty"`
	Coalesce     json.RawMessage    `json:"coalesce,omitempty"`
}

// UnmarshalJSON decodes strictly, as every request body is, and refuses null for every field
// but coalesce: there null removes coalescing, while elsewhere it would silently keep the
// current value.
func (r *SubscriberUpdate) UnmarshalJSON(b []byte) error {
	type plain SubscriberUpdate
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode((*plain)(r)); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if string(fields[name]) == "null" && !strings.EqualFold(name, "coalesce") {
			return invalid(name, errors.New("must not be null; leave the field out to keep its value"))
		}
	}
	return nil
}

// Patch converts the request for the store. A zero rate, burst, in-flight cap or timeout, and an
// empty profile or mode, are errors: at creation they mean the default, but here they would
// silently reset the setting (an edge subscriber would go direct).
func (r *SubscriberUpdate) Patch() (store.SubscriberPatch, error) {
	p := store.SubscriberPatch{URL: r.URL, Events: r.Events, Profile: r.Profile, LegacyPrefix: r.LegacyPrefix, Mode: r.Mode,
		RatePerSec: r.RatePerSec, Burst: r.Burst, MaxInFlight: r.MaxInFlight, TimeoutMS: r.TimeoutMS, Headers: r.Headers}
	for _, f := range []struct {
		name, zero string
		isZero     bool
	}{{"rate_per_sec", "0", r.RatePerSec != nil && *r.RatePerSec == 0}, {"burst", "0", r.Burst != nil && *r.Burst == 0},
		{"max_in_flight", "0", r.MaxInFlight != nil && *r.MaxInFlight == 0}, {"timeout_ms", "0", r.TimeoutMS != nil && *r.TimeoutMS == 0},
		{"profile", "empty", r.Profile != nil && *r.Profile == ""}, {"mode", "empty", r.Mode != nil && *r.Mode == ""}} {
		if f.isZero {
			return p, invalid(f.name, fmt.Errorf("must not be %s; leave the field out to keep its value", f.zero))
		}
	}
	if r.Coalesce != nil {
		var rule *wire.CoalesceRule
		if err := strictUnmarshal(r.Coalesce, &rule); err != nil {
			e := ToError(err)
			if e.Field == "" {
				e.Message = strings.Replace(e.Message, bodySubject, "coalesce", 1)
			}
			e.Field = "coalesce" + prefixed(e.Field)
			return p, e
		}
		p.Coalesce = &rule
	}
	return p, nil
}

func prefixed(field string) string {
	if field == "" {
		return ""
	}
	return "." + field
}

// PauseRequest is the optional body of pause.
type PauseRequest struct {
	// Reason is shown as the subscriber's state_reason; empty: DefaultPauseReason.
	Reason string `json:"reason,omitempty"`
}

// DefaultPauseReason is the state_reason of a subscriber paused without a reason.
const DefaultPauseReason = "paused by an operator"

// MaxPauseReason bounds a pause reason, in bytes.
const MaxPauseReason = 200

// PauseReason checks an operator's pause reason: printable UTF-8 text of at most MaxPauseReason
// bytes; empty gives DefaultPauseReason.
func PauseReason(s string) (string, error) {
	switch {
	case s == "":
		return DefaultPauseReason, nil
	case len(s) > MaxPauseReason:
		return "", fmt.Errorf("is %d bytes long, the maximum is %d", len(s), MaxPauseReason)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl):
		return "", errors.New("must be printable UTF-8 text")
	}
	return s, nil
}

// RotateRequest is the optional body of rotate-secret.
type RotateRequest struct {
	// Overlap is how long the old secret stays valid, as a Go duration ("24h"); empty: the
	// server's default.
	Overlap string `json:"overlap,omitempty"`
}

// ReplayRequest selects the dead deliveries of a subscriber to queue again: those that died in
// [from, to). Both are RFC 3339 times; empty means unbounded.
type ReplayRequest struct {
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// ReplayResult tells what a replay did with the dead deliveries it took: queued again and due
// now, queued but held with their disabled subscriber, or superseded by a newer event with their
// coalesce key (not queued).
type ReplayResult struct {
	Replayed   int64 `json:"replayed"`
	Held       int64 `json:"held"`
	Superseded int64 `json:"superseded"`
}

// NewReplayResult is the answer for the store's r.
func NewReplayResult(r store.Replayed) ReplayResult {
	return ReplayResult{Replayed: r.Pending, Held: r.Held, Superseded: r.Superseded}
}

// givenID reads whether an event's id was sent, which EventRequest's string cannot tell: "id": ""
// decodes as no id does.
type givenID struct {
	ID *string `json:"id"`
}

// markEmptyIDs flags the events or the subscriber of v, decoded from body by encoding/json, that
// were sent with "id": "". Only a request with one without an id is read again: the fast decoders
// decline an empty id, so this is off the usual path.
func markEmptyIDs(body []byte, v any) (err error) {
	switch r := v.(type) {
	case *SubscriberRequest:
		r.emptyID, err = sentEmpty(body, r.ID)
	case *EventRequest:
		r.emptyID, err = sentEmpty(body, r.ID)
	case *BatchRequest:
		if slices.ContainsFunc(r.Events, func(e EventRequest) bool { return e.ID == "" }) {
			var g struct {
				Events []givenID `json:"events"`
			}
			if err := json.Unmarshal(body, &g); err != nil {
				return jsonError(err)
			}
			for i := range g.Events {
				r.Events[i].emptyID = g.Events[i].ID != nil && *g.Events[i].ID == ""
			}
		}
	}
	return err
}

// sentEmpty tells whether the object in body, decoded with id, was sent with "id": "".
func sentEmpty(body []byte, id string) (bool, error) {
	if id != "" {
		return false, nil
	}
	var g givenID
	if err := json.Unmarshal(body, &g); err != nil {
		return false, jsonError(err)
	}
	return g.ID != nil, nil
}

var errRequired = errors.New("is required")

// errEmptyID refuses an id sent empty ({"id":"$ID"} with ID unset): generating one instead would
// store the event, or create the subscriber, again at every retry.
var errEmptyID = errors.New("must not be empty; leave the field out to have one generated")
