package wire

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Limits on names that travel in headers, KV keys and URLs.
const (
	MaxEventTypeLen   = 128
	MaxIDLen          = 128
	MaxCoalesceKeyLen = 200
)

// ValidateEventType checks an event type name: 1–128 characters of [A-Za-z0-9_-] in non-empty
// segments separated by single dots, e.g. "video.rank_updated".
func ValidateEventType(t string) error {
	if t == "" {
		return fmt.Errorf("event type is empty")
	}
	if len(t) > MaxEventTypeLen {
		return fmt.Errorf("event type is %d bytes long, the maximum is %d", len(t), MaxEventTypeLen)
	}
	// One pass without strings.Split (no allocation: the edge validates every request's type). A
	// segment is checked for emptiness when its dot (or the end) is reached, after its characters,
	// so errors come in the same order as segment by segment.
	start := 0
	for i := 0; i <= len(t); i++ {
		if i == len(t) || t[i] == '.' {
			if i == start {
				return fmt.Errorf("event type %q has an empty segment (leading, trailing or doubled dot)", t)
			}
			start = i + 1
		} else if c := t[i]; !isNameChar(c) {
			return fmt.Errorf("event type %q contains %q; allowed are letters, digits, '_', '-' and '.'", t, charAt(t, i))
		}
	}
	return nil
}

// ValidateID checks an identifier (event, delivery or subscriber id): 1–128 characters of
// [A-Za-z0-9_.:-]. Ids appear in headers, KV keys and URLs, so nothing else is allowed.
func ValidateID(id string) error {
	if id == "" {
		return fmt.Errorf("id is empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("id is %d bytes long, the maximum is %d", len(id), MaxIDLen)
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !isNameChar(c) && c != '.' && c != ':' {
			return fmt.Errorf("id %q contains %q; allowed are letters, digits, '_', '-', '.' and ':'", id, charAt(id, i))
		}
	}
	return nil
}

// ValidateEventID checks an event id, which is its deliveries' Standard Webhooks webhook-id: an id
// (ValidateID) without '.'. The signed content is "{id}.{timestamp}.{body}", so a dot in the id
// would let the signature of one message verify another (id "evt", the timestamp taken from the
// id, the body starting with the real timestamp); the specification forbids it.
func ValidateEventID(id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	if strings.IndexByte(id, '.') >= 0 {
		return fmt.Errorf("id %q contains '.', which a Standard Webhooks message id must not (its signature would be ambiguous); allowed are letters, digits, '_', '-' and ':'", id)
	}
	return nil
}

// charAt is the character at byte i of s, for an error to quote: the byte itself would show the
// first byte of a multi-byte character as a Latin-1 one ('é' as 'Ã').
func charAt(s string, i int) rune {
	r, _ := utf8.DecodeRuneInString(s[i:])
	return r
}

// ValidateCoalesceKey checks a coalesce key value: printable ASCII without spaces, at most 200 bytes.
// The empty key means "no coalescing" and is valid.
func ValidateCoalesceKey(k string) error {
	if len(k) > MaxCoalesceKeyLen {
		return fmt.Errorf("coalesce key is %d bytes long, the maximum is %d", len(k), MaxCoalesceKeyLen)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("coalesce key %q contains byte 0x%02x; only printable ASCII without spaces is allowed", k, c)
		}
	}
	return nil
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// Pattern selects event types: "*" matches every type, "video.*" every type below "video"
// (not "video" itself), anything else exactly one type.
type Pattern string

// ParsePattern validates one pattern.
func ParsePattern(s string) (Pattern, error) {
	if s == "*" {
		return Pattern(s), nil
	}
	if prefix, ok := strings.CutSuffix(s, ".*"); ok {
		if err := ValidateEventType(prefix); err != nil {
			return "", fmt.Errorf("pattern %q: prefix: %w", s, err)
		}
		return Pattern(s), nil
	}
	if err := ValidateEventType(s); err != nil {
		return "", fmt.Errorf("pattern %q: %w (patterns are \"*\", an exact type or \"prefix.*\")", s, err)
	}
	return Pattern(s), nil
}

// Match reports whether the event type t is selected by p.
func (p Pattern) Match(t string) bool {
	if p == "*" {
		return true
	}
	if strings.HasSuffix(string(p), ".*") {
		rest, ok := strings.CutPrefix(t, string(p[:len(p)-1])) // "video.*" → "video."
		return ok && rest != ""
	}
	return string(p) == t
}

// Patterns is a list of patterns; it matches a type when any of its patterns does.
type Patterns []Pattern

// ParsePatterns validates a non-empty list of patterns. A bad one is a *FieldError naming its
// index ("[1]").
func ParsePatterns(list []string) (Patterns, error) {
	if len(list) == 0 {
		return nil, fmt.Errorf("at least one event pattern is required")
	}
	ps := make(Patterns, 0, len(list))
	for i, s := range list {
		p, err := ParsePattern(s)
		if err != nil {
			return nil, &FieldError{Field: fmt.Sprintf("[%d]", i), Err: err}
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// Match reports whether any pattern in ps matches the event type t.
func (ps Patterns) Match(t string) bool {
	for _, p := range ps {
		if p.Match(t) {
			return true
		}
	}
	return false
}
