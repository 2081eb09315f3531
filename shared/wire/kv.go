package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KV key naming. The SUBSCRIBERS namespace holds SubscriberKey records; the DEDUP namespace holds
// DedupKey marks (written only after a 2xx) and CoalesceKey marks.
const (
	subscriberKeyPrefix = "sub:"
	dedupKeyPrefix      = "d:"
	coalesceKeyPrefix   = "c:"
)

// SubscriberKey is the KV key of a subscriber's record.
func SubscriberKey(subscriberID string) string { return subscriberKeyPrefix + subscriberID }

// SubscriberIDFromKey returns the subscriber id of a SubscriberKey, or false.
func SubscriberIDFromKey(key string) (string, bool) {
	return strings.CutPrefix(key, subscriberKeyPrefix)
}

// DedupKey is the KV key marking a delivery as forwarded and acknowledged with a 2xx.
func DedupKey(deliveryID string) string { return dedupKeyPrefix + deliveryID }

// CoalesceKey is the KV key marking that a coalesce key was forwarded to a subscriber; its value is
// the forward time in unix milliseconds. A '/' ends the subscriber id: ids may hold ':' but never
// '/', so two (subscriber, key) pairs can never share a KV key.
func CoalesceKey(subscriberID, coalesceKey string) string {
	return coalesceKeyPrefix + subscriberID + "/" + coalesceKey
}

// Bounds of a SubscriberRecord.
const (
	MinTimeout        = 100 * time.Millisecond
	MaxTimeout        = 60 * time.Second
	DefaultTimeout    = 8 * time.Second
	MinCoalesceWindow = time.Second
	MaxCoalesceWindow = 24 * time.Hour
	MaxRecordBytes    = 64 << 10
)

// SubscriberRecord is the edge's view of a subscriber, stored as JSON under SubscriberKey. The
// destination URL comes only from here: the edge is never an open relay.
type SubscriberRecord struct {
	URL       string            `json:"url"`
	TimeoutMS int64             `json:"timeout_ms"`
	Headers   map[string]string `json:"headers,omitempty"`
	Coalesce  *CoalesceRule     `json:"coalesce,omitempty"`
	Active    bool              `json:"active"`
}

// CoalesceRule makes some event types coalescible: per value of the payload field Key, at most one
// forward per Window; a newer event supersedes an older undelivered one.
type CoalesceRule struct {
	EventTypes    []string `json:"event_types"`
	Key           string   `json:"key"`
	WindowSeconds int64    `json:"window_seconds"`
}

// Timeout returns the record's upstream timeout.
func (r *SubscriberRecord) Timeout() time.Duration {
	return time.Duration(r.TimeoutMS) * time.Millisecond
}

// Window returns the coalescing window.
func (c *CoalesceRule) Window() time.Duration { return time.Duration(c.WindowSeconds) * time.Second }

// Applies reports whether events of type eventType are coalescible under this rule.
func (c *CoalesceRule) Applies(eventType string) bool {
	for _, s := range c.EventTypes {
		if Pattern(s).Match(eventType) {
			return true
		}
	}
	return false
}

// FieldError names the field of a record or request that is wrong.
type FieldError struct {
	Field string
	Err   error
}

// Error returns "<field>: <what is wrong>".
func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate checks every field and returns a *FieldError naming the first that is wrong, then that
// the record's JSON, as SubscriberEntry stores it, is at most MaxRecordBytes: the edge refuses a
// longer KV value, so such a record is refused where it is made (the origin validates with this),
// not at every delivery as rejected:bad_record.
func (r *SubscriberRecord) Validate() error {
	if err := r.validateFields(); err != nil {
		return err
	}
	if r.maxJSONLen() > MaxRecordBytes { // most records are far below: no need to encode them
		if b, err := json.Marshal(r); err == nil && len(b) > MaxRecordBytes {
			return fieldErr("record", "is %d bytes as JSON, the maximum is %d (the headers, URL and coalesce rule are too long)", len(b), MaxRecordBytes)
		}
	}
	return nil
}

// maxJSONLen bounds the length of json.Marshal(r): a string byte takes at most six bytes (\u00XX),
// and every field, header and pattern at most a few more for quotes, separators and numbers.
func (r *SubscriberRecord) maxJSONLen() int {
	n := len(r.URL)
	for k, v := range r.Headers {
		n += len(k) + len(v)
	}
	items := len(r.Headers)
	if c := r.Coalesce; c != nil {
		n += len(c.Key)
		for _, s := range c.EventTypes {
			n += len(s)
		}
		items += len(c.EventTypes)
	}
	return 6*n + 8*items + 256
}

// validateFields is Validate without the length of the JSON: the edge, which decodes a record,
// checks the length of the value it read instead.
func (r *SubscriberRecord) validateFields() error {
	if err := ValidateURL(r.URL); err != nil {
		return &FieldError{Field: "url", Err: err}
	}
	// Compare in the record's own unit: converting a huge value to a Duration first would overflow
	// and could wrap back into range.
	if r.TimeoutMS < MinTimeout.Milliseconds() || r.TimeoutMS > MaxTimeout.Milliseconds() {
		return fieldErr("timeout_ms", "%d is outside [%d, %d]", r.TimeoutMS, MinTimeout.Milliseconds(), MaxTimeout.Milliseconds())
	}
	// Sorted, so the error names the same header on every run.
	seen := make(map[string]string, len(r.Headers))
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		if err := ValidateHeader(name, r.Headers[name]); err != nil {
			return &FieldError{Field: "headers." + name, Err: err}
		}
		lower := strings.ToLower(name)
		if other, dup := seen[lower]; dup {
			return fieldErr("headers."+name, "same header as %q (names are case-insensitive)", other)
		}
		seen[lower] = name
	}
	if c := r.Coalesce; c != nil {
		if len(c.EventTypes) == 0 {
			return fieldErr("coalesce.event_types", "at least one event type or pattern is required")
		}
		for i, s := range c.EventTypes {
			if _, err := ParsePattern(s); err != nil {
				return &FieldError{Field: fmt.Sprintf("coalesce.event_types[%d]", i), Err: err}
			}
		}
		if c.Key == "" {
			return fieldErr("coalesce.key", "the payload field to coalesce on is required")
		}
		if err := ValidateCoalesceKey(c.Key); err != nil {
			return &FieldError{Field: "coalesce.key", Err: err}
		}
		if c.WindowSeconds < int64(MinCoalesceWindow/time.Second) || c.WindowSeconds > int64(MaxCoalesceWindow/time.Second) {
			return fieldErr("coalesce.window_seconds", "%d is outside [1, %d]", c.WindowSeconds, int64(MaxCoalesceWindow/time.Second))
		}
	}
	return nil
}

// DecodeSubscriberRecord strictly decodes and validates a record: unknown fields, trailing data and
// a missing "url", "timeout_ms" or "active" are errors that name the field.
func DecodeSubscriberRecord(data []byte) (*SubscriberRecord, error) {
	if len(data) > MaxRecordBytes {
		return nil, fmt.Errorf("subscriber record is %d bytes, the maximum is %d", len(data), MaxRecordBytes)
	}
	var raw struct {
		URL       *string           `json:"url"`
		TimeoutMS *int64            `json:"timeout_ms"`
		Headers   map[string]string `json:"headers"`
		Coalesce  *CoalesceRule     `json:"coalesce"`
		Active    *bool             `json:"active"`
	}
	if err := decodeStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("subscriber record: %w", err)
	}
	switch {
	case raw.URL == nil:
		return nil, fieldErr("url", "is required")
	case raw.TimeoutMS == nil:
		return nil, fieldErr("timeout_ms", "is required")
	case raw.Active == nil:
		return nil, fieldErr("active", "is required")
	}
	if len(raw.Headers) == 0 {
		raw.Headers = nil // "headers": {} is the same record as no headers, and re-encodes as such
	}
	r := &SubscriberRecord{URL: *raw.URL, TimeoutMS: *raw.TimeoutMS, Headers: raw.Headers, Coalesce: raw.Coalesce, Active: *raw.Active}
	if err := r.validateFields(); err != nil {
		return nil, err
	}
	return r, nil
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown fields, trailing data,
// duplicate keys and keys that match a field only case-insensitively.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Not dec.More(): it reports nothing after the value when what follows starts with ] or }.
	if SkipJSONSpace(data, int(dec.InputOffset())) != len(data) {
		return errors.New("unexpected data after the JSON value")
	}
	return checkKeys(json.NewDecoder(bytes.NewReader(data)), reflect.TypeOf(v), "")
}

// checkKeys walks one JSON value that already decoded into type t and rejects what encoding/json
// lets through silently: a duplicate key (it keeps the last), a struct key spelled other than its
// json tag (it matches case-insensitively, so "URL" would fill "url") and a null where t cannot be
// nil (it leaves the zero value, so {"X-A": null} would be a header with an empty value). A nil t
// accepts any keys.
func checkKeys(dec *json.Decoder, t reflect.Type, path string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil && t != nil {
		switch t.Kind() {
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
		default:
			return fmt.Errorf("%s: null where a value of type %s is required", path, t.Kind())
		}
	}
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			keyTok, err := dec.Token()
			if err != nil {
				return err
			}
			key := keyTok.(string)
			field := strings.TrimPrefix(path+"."+key, ".")
			if seen[key] {
				return fmt.Errorf("duplicate key %q", field)
			}
			seen[key] = true
			var elem reflect.Type
			if t != nil && t.Kind() == reflect.Map {
				elem = t.Elem()
			} else if t != nil && t.Kind() == reflect.Struct {
				if elem = fieldType(t, key); elem == nil {
					return fmt.Errorf("unknown field %q (field names are case-sensitive)", field)
				}
			}
			if err := checkKeys(dec, elem, field); err != nil {
				return err
			}
		}
		_, err = dec.Token() // '}'
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && t.Kind() == reflect.Slice {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := checkKeys(dec, elem, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		_, err = dec.Token() // ']'
	}
	return err
}

// fieldType returns the type of t's field whose json tag name is exactly key, or nil.
func fieldType(t reflect.Type, key string) reflect.Type {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name == key {
			return f.Type
		}
	}
	return nil
}

// ValidateURL accepts absolute http and https URLs with a host and no user info or fragment. Its
// errors never quote user info: they end up in logs, and a URL refused for carrying credentials
// is exactly one whose password would be shown.
func ValidateURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text quotes the whole URL
		}
		return fmt.Errorf("is not a URL: %w", err)
	}
	shown := *u
	shown.User = nil
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q must be an absolute http or https URL", shown.String())
	case u.Host == "" || u.Hostname() == "":
		return fmt.Errorf("%q has no host", shown.String())
	case u.User != nil:
		return fmt.Errorf("%q must not carry credentials (user info, not shown here); use headers", shown.String())
	case u.Fragment != "":
		return fmt.Errorf("%q must not have a fragment", shown.String())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q has port %s, outside 1–65535", shown.String(), p)
		}
	}
	// Go sends the query as written, and a space there splits the request line (the subscriber's
	// server answers 400), where the Worker's fetch percent-encodes it: refuse it instead. (Control
	// characters url.Parse refuses; other characters go through either way.)
	if strings.Contains(u.RawQuery, " ") {
		return fmt.Errorf("%q has a space in its query: percent-encode it (%%20)", shown.String())
	}
	return nil
}

// RequestQuery returns a URL's raw query as the Worker's fetch writes it into the request line: the
// bytes the Fetch API's URL parser percent-encodes in the query of an http or https URL (the double
// and single quote, '<', '>', controls, space and everything beyond ASCII) become %XX, the rest stay
// as they are. Go's client writes the query as it is, and a request line with raw non-ASCII bytes
// is refused (400) by strict servers such as Node's, which the Worker's forward of the same record
// reached. The decoded query is the same either way.
func RequestQuery(raw string) string {
	n := 0
	for i := 0; i < len(raw); i++ {
		if fetchEscapesInQuery(raw[i]) {
			n++
		}
	}
	if n == 0 {
		return raw
	}
	const hex = "0123456789ABCDEF"
	b := make([]byte, 0, len(raw)+2*n)
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; fetchEscapesInQuery(c) {
			b = append(b, '%', hex[c>>4], hex[c&15])
		} else {
			b = append(b, c)
		}
	}
	return string(b)
}

// fetchEscapesInQuery reports whether the WHATWG URL parser percent-encodes byte c in the query of
// a special-scheme URL (the special-query percent-encode set; '#' never reaches a query).
func fetchEscapesInQuery(c byte) bool {
	return c <= ' ' || c >= 0x7f || c == '"' || c == '\'' || c == '<' || c == '>'
}

// reservedHeaders are set by the HTTP layer itself (framing, connection management); a subscriber's
// extra headers may not override them. Lower case.
var reservedHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"keep-alive": true, "proxy-connection": true, "upgrade": true, "te": true, "trailer": true,
}

// ValidateHeader checks a custom header: a token name (RFC 9110) that is neither a hop or signature
// header (Edgehook-*, webhook-*) nor one the HTTP layer owns (Host, Content-Length, ...), and a
// value without control characters other than horizontal tab (so no CR, LF or NUL).
func ValidateHeader(name, value string) error {
	if name == "" {
		return errors.New("header name is empty")
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return fmt.Errorf("header name %q contains byte 0x%02x", name, name[i])
		}
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(lower, "edgehook-") || strings.HasPrefix(lower, "webhook-") || reservedHeaders[lower] {
		return fmt.Errorf("header name %q is reserved", name)
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("header %q value contains control byte 0x%02x (CR, LF, NUL and the like are not allowed)", name, c)
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	return isNameChar(c) || strings.IndexByte("!#$%&'*+.^`|~", c) >= 0
}

// BulkEntry is one element of the JSON array that `wrangler kv bulk put` reads.
type BulkEntry struct {
	Key           string `json:"key"`
	Value         string `json:"value"`
	ExpirationTTL int64  `json:"expiration_ttl,omitempty"`
}

// EncodeBulk renders entries as the file `wrangler kv bulk put` reads.
func EncodeBulk(entries []BulkEntry) ([]byte, error) {
	if entries == nil {
		entries = []BulkEntry{}
	}
	return json.MarshalIndent(entries, "", "  ")
}

// DecodeBulk reads a `wrangler kv bulk put` file strictly.
func DecodeBulk(data []byte) ([]BulkEntry, error) {
	// Value is a pointer so that a missing or null "value", which wrangler refuses, is told apart
	// from an empty string.
	var raw []struct {
		Key           string  `json:"key"`
		Value         *string `json:"value"`
		ExpirationTTL int64   `json:"expiration_ttl"`
	}
	if err := decodeStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("kv bulk file: %w", err)
	}
	if raw == nil {
		return nil, errors.New("kv bulk file: must be a JSON array")
	}
	entries := make([]BulkEntry, len(raw))
	for i, e := range raw {
		if e.Key == "" {
			return nil, fmt.Errorf("kv bulk file: [%d].key is empty", i)
		}
		if e.Value == nil {
			return nil, fmt.Errorf("kv bulk file: [%d].value is required (a string)", i)
		}
		if e.ExpirationTTL != 0 && e.ExpirationTTL < 60 {
			return nil, fmt.Errorf("kv bulk file: [%d].expiration_ttl %d is below KV's minimum of 60", i, e.ExpirationTTL)
		}
		entries[i] = BulkEntry{Key: e.Key, Value: *e.Value, ExpirationTTL: e.ExpirationTTL}
	}
	return entries, nil
}

// SubscriberEntry renders a record as a bulk entry under its SubscriberKey.
func SubscriberEntry(subscriberID string, r *SubscriberRecord) (BulkEntry, error) {
	if err := ValidateID(subscriberID); err != nil {
		return BulkEntry{}, err
	}
	if err := r.Validate(); err != nil {
		return BulkEntry{}, err
	}
	v, err := json.Marshal(r)
	if err != nil {
		return BulkEntry{}, err
	}
	return BulkEntry{Key: SubscriberKey(subscriberID), Value: string(v)}, nil
}
