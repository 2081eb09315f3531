package wire_test

import (
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/wire"
)

// checkErr fails unless err is nil when wantErr is "" and otherwise contains wantErr.
func checkErr(t *testing.T, what string, err error, wantErr string) {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Errorf("%s = %v, want nil", what, err)
	case wantErr != "" && err == nil:
		t.Errorf("%s = nil, want an error containing %q", what, wantErr)
	case wantErr != "" && !strings.Contains(err.Error(), wantErr):
		t.Errorf("%s = %v, want an error containing %q", what, err, wantErr)
	}
}

func TestValidateEventType(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, wantErr string }{
		{"video.trending", ""},
		{"video.rank_updated", ""},
		{"a", ""},
		{"A-b_C.9.x-y", ""},
		{strings.Repeat("a", wire.MaxEventTypeLen), ""},
		{"", "empty"},
		{strings.Repeat("a", wire.MaxEventTypeLen+1), "129 bytes long, the maximum is 128"},
		{".video", "empty segment"},
		{"video.", "empty segment"},
		{"video..trending", "empty segment"},
		{".", "empty segment"},
		{"a$..b", `contains '$'`}, // the first bad segment decides, whatever is wrong with it
		{"a..b$", "empty segment"},
		{"video trending", `contains ' '`},
		{"video/trending", `contains '/'`},
		{"video:trending", `contains ':'`},
		{"video.*", `contains '*'`},
		{"*", `contains '*'`},
		{"vidéo", `contains 'é'`},
		{"video\n", "contains"},
	}
	for _, tc := range tests {
		checkErr(t, "ValidateEventType("+tc.in+")", wire.ValidateEventType(tc.in), tc.wantErr)
	}
}

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, wantErr string }{
		{"msg_p5jXN8AQM9LWM0D4loKWxJek", ""},
		{"evt:2024-11-22.001", ""},
		{"a", ""},
		{strings.Repeat("i", wire.MaxIDLen), ""},
		{"", "id is empty"},
		{strings.Repeat("i", wire.MaxIDLen+1), "the maximum is 128"},
		{"a/b", `contains '/'`},
		{"a b", `contains ' '`},
		{"a\nb", `contains '\n'`},
		{"a\x00", "contains"},
		{"ü", `contains 'ü'`},
		{"a\xff", `contains '�'`},
		{"a*", `contains '*'`},
	}
	for _, tc := range tests {
		checkErr(t, "ValidateID("+tc.in+")", wire.ValidateID(tc.in), tc.wantErr)
	}
}

// TestValidateEventID: an event id is an id without '.', the separator of the Standard Webhooks
// signed content "{id}.{timestamp}.{body}".
func TestValidateEventID(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, wantErr string }{
		{"evt_01JD6Q3ZP0M8", ""},
		{"order:42-created", ""},
		{"evt.1732270000", `contains '.', which a Standard Webhooks message id must not`},
		{"", "id is empty"},
		{"a b", `contains ' '`},
	}
	for _, tc := range tests {
		checkErr(t, "ValidateEventID("+tc.in+")", wire.ValidateEventID(tc.in), tc.wantErr)
	}
}

func TestValidateCoalesceKey(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, wantErr string }{
		{"", ""},
		{"video:42", ""},
		{"!\"#$%&'()*+,-./~", ""},
		{strings.Repeat("k", wire.MaxCoalesceKeyLen), ""},
		{strings.Repeat("k", wire.MaxCoalesceKeyLen+1), "the maximum is 200"},
		{"a b", "byte 0x20"},
		{"a\tb", "byte 0x09"},
		{"a\nb", "byte 0x0a"},
		{"a\x7f", "byte 0x7f"},
		{"é", "byte 0xc3"},
	}
	for _, tc := range tests {
		checkErr(t, "ValidateCoalesceKey("+tc.in+")", wire.ValidateCoalesceKey(tc.in), tc.wantErr)
	}
}

func TestParsePattern(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, wantErr string }{
		{"*", ""},
		{"video.trending", ""},
		{"video.*", ""},
		{"a.b.*", ""},
		{"", "event type is empty"},
		{".*", "prefix: event type is empty"},
		{"*.*", "prefix"},
		{"video*", `contains '*'`},
		{"video.*.x", `contains '*'`},
		{"video.**", `contains '*'`},
		{"video.", "empty segment"},
		{"video..*", "prefix"},
		{"**", `contains '*'`},
		{" *", `contains ' '`},
	}
	for _, tc := range tests {
		p, err := wire.ParsePattern(tc.in)
		checkErr(t, "ParsePattern("+tc.in+")", err, tc.wantErr)
		if err == nil && string(p) != tc.in {
			t.Errorf("ParsePattern(%q) = %q", tc.in, p)
		}
		if err != nil && !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParsePattern(%q) error %q does not quote the pattern", tc.in, err)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern string
		matches []string
		misses  []string
	}{
		{"*", []string{"a", "video.trending", "x.y.z"}, nil},
		{"video.trending", []string{"video.trending"}, []string{"video", "video.trending.x", "video.trendin", "Video.trending"}},
		{"video.*", []string{"video.trending", "video.rank_updated", "video.a.b"}, []string{"video", "video.", "videos.trending", "vide.x", "audio.video.x", "Video.x"}},
		{"a.b.*", []string{"a.b.c", "a.b.c.d"}, []string{"a.b", "a.bc", "a.c.d"}},
	}
	for _, tc := range tests {
		p, err := wire.ParsePattern(tc.pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, ty := range tc.matches {
			if !p.Match(ty) {
				t.Errorf("%q does not match %q", tc.pattern, ty)
			}
		}
		for _, ty := range tc.misses {
			if p.Match(ty) {
				t.Errorf("%q matches %q", tc.pattern, ty)
			}
		}
	}
	// An unparsed value with a bare '*' suffix is not a prefix pattern.
	if wire.Pattern("vid*").Match("video") {
		t.Error(`Pattern("vid*") matches "video"`)
	}
}

func TestPatterns(t *testing.T) {
	t.Parallel()
	ps, err := wire.ParsePatterns([]string{"video.*", "user.created"})
	if err != nil {
		t.Fatal(err)
	}
	for ty, want := range map[string]bool{"video.x": true, "user.created": true, "user.deleted": false, "video": false} {
		if got := ps.Match(ty); got != want {
			t.Errorf("Patterns.Match(%q) = %v, want %v", ty, got, want)
		}
	}
	if (wire.Patterns{}).Match("a") {
		t.Error("empty Patterns matches")
	}
	_, err = wire.ParsePatterns(nil)
	checkErr(t, "ParsePatterns(nil)", err, "at least one event pattern is required")
	_, err = wire.ParsePatterns([]string{"*", "ok.x", "bad..x"})
	checkErr(t, "ParsePatterns(bad third)", err, `[2]: pattern "bad..x"`)
}
