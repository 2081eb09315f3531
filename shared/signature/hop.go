package signature

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// Hop is everything the edge acts on, covered by the hop signature together with the body.
type Hop struct {
	DeliveryID   string
	SubscriberID string
	EventType    string
	CoalesceKey  string // empty when the event is not coalescible
	Attempt      int
	Timestamp    int64 // unix seconds
}

// hopVersion starts the canonical string so a future format cannot be confused with this one.
const hopVersion = "edgehook-hop-v1"

// Validate checks every field; the canonical form relies on none containing a newline.
func (h *Hop) Validate() error {
	if err := wire.ValidateID(h.DeliveryID); err != nil {
		return fmt.Errorf("delivery id: %w", err)
	}
	if err := wire.ValidateID(h.SubscriberID); err != nil {
		return fmt.Errorf("subscriber id: %w", err)
	}
	if err := wire.ValidateEventType(h.EventType); err != nil {
		return err
	}
	if err := wire.ValidateCoalesceKey(h.CoalesceKey); err != nil {
		return err
	}
	if h.Attempt < 1 {
		return fmt.Errorf("attempt %d must be at least 1", h.Attempt)
	}
	return nil
}

// canonical appends the signed prefix to b:
//
//	edgehook-hop-v1 \n delivery id \n subscriber id \n event type \n coalesce key \n attempt \n timestamp \n
//
// (no spaces), followed by the raw body. Callers pass a stack buffer (see canonicalBuf): in the
// relay's WASI build every allocation and call costs (edge/harness BenchmarkGuestCalls).
func (h *Hop) canonical(b []byte) []byte {
	for _, s := range [...]string{hopVersion, h.DeliveryID, h.SubscriberID, h.EventType, h.CoalesceKey} {
		b = append(append(b, s...), '\n')
	}
	b = append(strconv.AppendInt(b, int64(h.Attempt), 10), '\n')
	return append(strconv.AppendInt(b, h.Timestamp, 10), '\n')
}

// canonicalBuf is the size of the buffer callers give canonical: room for the longest ids,
// event type and coalesce key of usual traffic; a longer prefix grows onto the heap.
const canonicalBuf = 256

// SignHop returns the Edgehook-Signature value: one "v1,<base64>" per edge secret, space-separated.
func SignHop(secrets []Secret, h *Hop, body []byte) string {
	var buf [canonicalBuf]byte
	prefix := h.canonical(buf[:0])
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		var sum [sha256.Size]byte
		mac(&sum, s.key, prefix, body)
		sigs[i] = versionPrefix + encode(sum[:])
	}
	return strings.Join(sigs, " ")
}

// VerifyHop checks the hop fields, the timestamp against now within tolerance, and that sigHeader
// holds a signature by one of the edge secrets, in constant time.
func VerifyHop(secrets []Secret, h *Hop, sigHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if sigHeader == "" {
		return ErrMissing
	}
	if err := h.Validate(); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return VerifyValidHop(secrets, h, sigHeader, body, now, tolerance)
}

// VerifyValidHop is VerifyHop for a hop whose fields the caller has checked with Validate already,
// as the edge does to answer a malformed hop before a bad signature: it skips Validate.
func VerifyValidHop(secrets []Secret, h *Hop, sigHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if sigHeader == "" {
		return ErrMissing
	}
	if h.Timestamp < 0 {
		return fmt.Errorf("%w: timestamp %q is not unix seconds", ErrMalformed, strconv.FormatInt(h.Timestamp, 10))
	}
	if err := checkUnix(h.Timestamp, "", now, tolerance); err != nil {
		return err
	}
	var buf [canonicalBuf]byte
	prefix := h.canonical(buf[:0])
	return matchAny(sigHeader, secrets, func(key []byte) (sum [sha256.Size]byte) {
		mac(&sum, key, prefix, body)
		return sum
	})
}

// HeaderGetter is satisfied by net/http.Header and by the edge's own header maps.
type HeaderGetter interface{ Get(key string) string }

// HeaderSetter is satisfied by net/http.Header and by the edge's own header maps.
type HeaderSetter interface{ Set(key, value string) }

// SetHopHeaders writes the hop fields and their signature as headers.
func SetHopHeaders(dst HeaderSetter, secrets []Secret, h *Hop, body []byte) {
	dst.Set(wire.HeaderDeliveryID, h.DeliveryID)
	dst.Set(wire.HeaderSubscriberID, h.SubscriberID)
	dst.Set(wire.HeaderEventType, h.EventType)
	if h.CoalesceKey != "" {
		dst.Set(wire.HeaderCoalesceKey, h.CoalesceKey)
	}
	dst.Set(wire.HeaderAttempt, strconv.Itoa(h.Attempt))
	dst.Set(wire.HeaderHopTimestamp, strconv.FormatInt(h.Timestamp, 10))
	dst.Set(wire.HeaderHopSignature, SignHop(secrets, h, body))
}

// ParseHopHeaders reads the hop fields and the signature. A missing required header is ErrMissing
// naming it; a number not in the canonical decimal form SetHopHeaders writes ("+1", "01") is
// ErrMalformed naming it, so the signed text and the header text are always the same.
func ParseHopHeaders(src HeaderGetter) (h *Hop, sigHeader string, err error) {
	t := HopText{
		DeliveryID:   src.Get(wire.HeaderDeliveryID),
		SubscriberID: src.Get(wire.HeaderSubscriberID),
		EventType:    src.Get(wire.HeaderEventType),
		CoalesceKey:  src.Get(wire.HeaderCoalesceKey),
		Attempt:      src.Get(wire.HeaderAttempt),
		Timestamp:    src.Get(wire.HeaderHopTimestamp),
		Signature:    src.Get(wire.HeaderHopSignature),
	}
	h = new(Hop)
	if err := t.Parse(h); err != nil {
		return nil, "", err
	}
	return h, t.Signature, nil
}

// HopText holds the hop headers' values as received ("" for an absent header). The edge fills it
// in one pass over its request's headers rather than looking each one up (ParseHopHeaders).
type HopText struct {
	DeliveryID, SubscriberID, EventType, CoalesceKey, Attempt, Timestamp, Signature string
}

// Parse sets h's fields from t, with ParseHopHeaders' checks and errors; the signature is
// t.Signature. It does not Validate the fields.
func (t *HopText) Parse(h *Hop) error {
	if t.DeliveryID == "" || t.SubscriberID == "" || t.EventType == "" || t.Attempt == "" || t.Timestamp == "" || t.Signature == "" {
		return t.missing()
	}
	n, ok := parseCanonicalInt(t.Attempt, 0)
	if !ok {
		return fmt.Errorf("%w: %s %q is not a plain decimal integer", ErrMalformed, wire.HeaderAttempt, t.Attempt)
	}
	ts, ok := parseCanonicalInt(t.Timestamp, 64)
	if !ok {
		return fmt.Errorf("%w: %s %q is not plain decimal unix seconds", ErrMalformed, wire.HeaderHopTimestamp, t.Timestamp)
	}
	*h = Hop{DeliveryID: t.DeliveryID, SubscriberID: t.SubscriberID, EventType: t.EventType, CoalesceKey: t.CoalesceKey, Attempt: int(n), Timestamp: ts}
	return nil
}

// missing names the first required header t lacks, for Parse.
func (t *HopText) missing() error {
	for _, f := range [...][2]string{
		{wire.HeaderDeliveryID, t.DeliveryID}, {wire.HeaderSubscriberID, t.SubscriberID},
		{wire.HeaderEventType, t.EventType}, {wire.HeaderAttempt, t.Attempt},
		{wire.HeaderHopTimestamp, t.Timestamp}, {wire.HeaderHopSignature, t.Signature},
	} {
		if f[1] == "" {
			return fmt.Errorf("%w: %s", ErrMissing, f[0])
		}
	}
	return nil
}

// parseCanonicalInt parses s as strconv.ParseInt(s, 10, bitSize) does and reports whether s is
// exactly how strconv.FormatInt writes the result: no '+', no leading zero, no "-0". It checks the
// text as it parses, without strconv's calls: the edge parses two numbers per request, and in its
// WASM builds each call costs.
func parseCanonicalInt(s string, bitSize int) (int64, bool) {
	if bitSize == 0 {
		bitSize = strconv.IntSize
	}
	digits, neg := s, false
	if s != "" && s[0] == '-' {
		digits, neg = s[1:], true
	}
	// 19 digits always fit in a uint64; more overflow an int64.
	if digits == "" || len(digits) > 19 || digits[0] == '0' && (len(digits) > 1 || neg) {
		return 0, false
	}
	var u uint64
	for i := 0; i < len(digits); i++ {
		d := digits[i] - '0'
		if d > 9 {
			return 0, false
		}
		u = u*10 + uint64(d)
	}
	limit := uint64(1) << (bitSize - 1) // the magnitude of the smallest value; the largest is one less
	if neg {
		if u > limit {
			return 0, false
		}
		return -int64(u), true // for u == 1<<63 both int64(u) and its negation are math.MinInt64
	}
	if u >= limit {
		return 0, false
	}
	return int64(u), true
}
