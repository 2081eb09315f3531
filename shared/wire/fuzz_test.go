package wire_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// FuzzParseRetryAfter: never panics; a rejection is ErrRetryAfter with zero; an accepted value is
// whole seconds within [0, MaxRetryAfter] and survives re-rendering in both forms.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", " 5 ", "+5", "-5", "-0", "1.5", "604801", "99999999999999999999",
		"Sun, 06 Nov 1994 08:51:07 GMT", "Sunday, 06-Nov-94 08:51:07 GMT", "Sun Nov  6 08:51:07 1994",
		"Fri, 31 Dec 9999 23:59:59 GMT", "soon", ""} {
		f.Add(s, int64(784111777))
	}
	f.Fuzz(func(t *testing.T, v string, nowUnix int64) {
		// Keep the clock within years 1970–2200: the property is about the header, not time.Time limits.
		now := time.Unix(nowUnix%7258118400, 0).UTC()
		if nowUnix < 0 {
			now = time.Unix(-nowUnix%7258118400, 0).UTC()
		}
		d, err := wire.ParseRetryAfter(v, now)
		if err != nil {
			if !errors.Is(err, wire.ErrRetryAfter) || d != 0 {
				t.Fatalf("ParseRetryAfter(%q) = %s, %v; a rejection must be 0 and ErrRetryAfter", v, d, err)
			}
			return
		}
		if d < 0 || d > wire.MaxRetryAfter || d%time.Second != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %s: outside [0, %s] or not whole seconds", v, d, wire.MaxRetryAfter)
		}
		secs := strconv.FormatInt(int64(d/time.Second), 10)
		if d2, err := wire.ParseRetryAfter(secs, now); err != nil || d2 != d {
			t.Fatalf("delta form %q of %q = %s, %v; want %s", secs, v, d2, err, d)
		}
		date := now.Add(d).Format("Mon, 02 Jan 2006 15:04:05 GMT")
		if d2, err := wire.ParseRetryAfter(date, now); err != nil || d2 != d {
			t.Fatalf("date form %q of %q = %s, %v; want %s", date, v, d2, err, d)
		}
		if d2, err := wire.ParseRetryAfter(" \t"+v+" ", now); err != nil || d2 != d {
			t.Fatalf("surrounding white space changed %q: %s, %v", v, d2, err)
		}
	})
}

// FuzzDecodeSubscriberRecord: never panics; an accepted record is valid, within every bound, and
// re-encodes (as a record and inside a bulk file) to the same value.
func FuzzDecodeSubscriberRecord(f *testing.F) {
	for _, s := range []string{fullRecord,
		`{"url":"http://127.0.0.1:8080/hook","timeout_ms":100,"active":false}`,
		`{"url":"http://h/x","timeout_ms":1000,"headers":{},"coalesce":null,"active":true}`,
		`{"URL":"http://h/x","timeout_ms":1000,"active":true}`,
		`{"url":"http://h/x","url":"http://e/","timeout_ms":1000,"active":true}`,
		`{"url":"http://h/x","timeout_ms":288230376151712696,"active":true}`,
		`{"url":"http://h/x","timeout_ms":1000,"headers":{"X-A":"a\nb"},"active":true}`,
		`{"url":"http://h/x","timeout_ms":1000,"coalesce":{"event_types":["a.*"],"key":"k","window_seconds":9223372037},"active":true}`,
		`{"url":"http://u@h/x","timeout_ms":1000,"active":true} {}`,
		`[]`, `null`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := wire.DecodeSubscriberRecord(data)
		if err != nil {
			if r != nil {
				t.Fatalf("a record came back with the error %v", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			var fe *wire.FieldError
			if errors.As(err, &fe) && fe.Field == "record" {
				return // its JSON is longer than the value read ('<' encodes as \u003c): not for export
			}
			t.Fatalf("accepted record %+v does not validate: %v", r, err)
		}
		if r.Timeout() < wire.MinTimeout || r.Timeout() > wire.MaxTimeout {
			t.Fatalf("accepted timeout %s is out of bounds", r.Timeout())
		}
		if c := r.Coalesce; c != nil && (c.Window() < wire.MinCoalesceWindow || c.Window() > wire.MaxCoalesceWindow) {
			t.Fatalf("accepted window %s is out of bounds", c.Window())
		}
		encoded, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		again, err := wire.DecodeSubscriberRecord(encoded)
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("re-decoding %s = %+v, %v; want %+v", encoded, again, err, r)
		}
		entry, err := wire.SubscriberEntry("sub_fuzz", r)
		if err != nil {
			t.Fatalf("SubscriberEntry of an accepted record: %v", err)
		}
		file, err := wire.EncodeBulk([]wire.BulkEntry{entry})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := wire.DecodeBulk(file)
		if err != nil || len(entries) != 1 {
			t.Fatalf("DecodeBulk(EncodeBulk) = %v, %v", entries, err)
		}
		if back, err := wire.DecodeSubscriberRecord([]byte(entries[0].Value)); err != nil || !reflect.DeepEqual(back, r) {
			t.Fatalf("record through the bulk file = %+v, %v; want %+v", back, err, r)
		}
	})
}

// FuzzDecodeBulk: never panics; an accepted file has non-empty keys and valid TTLs and re-encodes
// to the same entries.
func FuzzDecodeBulk(f *testing.F) {
	for _, s := range []string{`[]`, `null`, `{}`,
		`[{"key":"sub:a","value":"{\"url\":\"http://h/\"}"},{"key":"d:1","value":"1","expiration_ttl":60}]`,
		`[{"key":"a","value":"x","expiration_ttl":59}]`, `[{"key":"","value":"x"}]`,
		`[{"key":"a","value":"x","key":"b"}]`, `[{"KEY":"a","value":"x"}]`, `[{"key":"a","value":"x","metadata":{}}] x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := wire.DecodeBulk(data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "kv bulk file: ") {
				t.Fatalf("error %q does not say it is about the bulk file", err)
			}
			return
		}
		for i, e := range entries {
			if e.Key == "" || e.ExpirationTTL != 0 && e.ExpirationTTL < 60 {
				t.Fatalf("accepted entry %d = %+v", i, e)
			}
		}
		file, err := wire.EncodeBulk(entries)
		if err != nil {
			t.Fatal(err)
		}
		again, err := wire.DecodeBulk(file)
		if err != nil || !reflect.DeepEqual(again, entries) {
			t.Fatalf("DecodeBulk(EncodeBulk(x)) = %+v, %v; want %+v", again, err, entries)
		}
	})
}

// FuzzPattern: never panics; an accepted pattern matches exactly the types its form says, every
// valid event type is also a valid exact pattern matching itself, and a prefix pattern never
// matches the prefix itself.
func FuzzPattern(f *testing.F) {
	for _, p := range [][2]string{{"*", "video.x"}, {"video.*", "video"}, {"video.*", "video.x"}, {"video.*", "videos.x"},
		{"video.trending", "video.trending"}, {".*", ""}, {"*.*", "a.b"}, {"video*", "video"}, {"a..b", "a..b"}, {"a.b.*", "a.b.c.d"}} {
		f.Add(p[0], p[1])
	}
	f.Fuzz(func(t *testing.T, s, ty string) {
		if wire.ValidateEventType(s) == nil {
			if strings.ContainsAny(s, "* :/") || len(s) > wire.MaxEventTypeLen {
				t.Fatalf("ValidateEventType accepted %q", s)
			}
			if p, err := wire.ParsePattern(s); err != nil || !p.Match(s) {
				t.Fatalf("valid type %q is not an exact pattern matching itself: %v", s, err)
			}
		}
		p, err := wire.ParsePattern(s)
		if err != nil {
			if _, err2 := wire.ParsePatterns([]string{"*", s}); err2 == nil {
				t.Fatalf("ParsePatterns accepted %q that ParsePattern refuses", s)
			}
			return
		}
		var want bool
		switch prefix, isPrefix := strings.CutSuffix(s, ".*"); {
		case s == "*":
			want = true
		case isPrefix:
			want = strings.HasPrefix(ty, prefix+".") && len(ty) > len(prefix)+1
			if p.Match(prefix) {
				t.Fatalf("%q matches its own prefix", s)
			}
		default:
			want = ty == s
		}
		if got := p.Match(ty); got != want {
			t.Fatalf("%q.Match(%q) = %v, want %v", s, ty, got, want)
		}
		if ps, err := wire.ParsePatterns([]string{s}); err != nil || ps.Match(ty) != want {
			t.Fatalf("ParsePatterns([%q]).Match(%q) = %v, %v; want %v", s, ty, ps.Match(ty), err, want)
		}
	})
}
