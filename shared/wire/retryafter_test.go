package wire_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	// Sunday 6 November 1994, 08:49:37 UTC, the RFC 9110 example date.
	now := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	tests := []struct {
		in        string
		want      time.Duration
		wantErr   string // reason in the message; "" means accepted
		nowOffset time.Duration
	}{
		{in: "120", want: 120 * time.Second},
		{in: "0", want: 0},
		{in: " 5 ", want: 5 * time.Second},
		{in: "007", want: 7 * time.Second},
		{in: "604800", want: 7 * 24 * time.Hour},
		{in: "Sun, 06 Nov 1994 08:51:07 GMT", want: 90 * time.Second},             // IMF-fixdate
		{in: "Sunday, 06-Nov-94 08:51:07 GMT", want: 90 * time.Second},            // obsolete RFC 850
		{in: "Sun Nov  6 08:51:07 1994", want: 90 * time.Second},                  // asctime
		{in: "Sun, 06 Nov 1994 08:49:37 GMT", want: 0},                            // now
		{in: "Sun, 06 Nov 1994 08:49:36 GMT", want: 0},                            // a second ago
		{in: "Sun, 06 Nov 1994 08:49:37 GMT", want: 0, nowOffset: 24 * time.Hour}, // a day ago
		{in: "Sun, 06 Nov 1994 08:49:38 GMT", want: time.Second, nowOffset: 400 * time.Millisecond},
		{in: "Sun, 13 Nov 1994 08:49:37 GMT", want: 7 * 24 * time.Hour},
		// Repeated field lines joined into one, as a fetch Headers object (the Worker's) joins
		// them: the first is read, as net/http's Header.Get reads the first line.
		{in: "120, 120", want: 120 * time.Second},
		{in: "120,5", want: 120 * time.Second},
		{in: "Sun, 06 Nov 1994 08:51:07 GMT, Sun, 06 Nov 1994 08:51:07 GMT", want: 90 * time.Second},
		{in: "Sunday, 06-Nov-94 08:51:07 GMT, 5", want: 90 * time.Second},
		{in: "Sun Nov  6 08:51:07 1994, 5", want: 90 * time.Second},

		{in: "", wantErr: "empty"},
		{in: "   ", wantErr: "empty"},
		{in: "soon", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "1.5", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "120s", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "1e3", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "+5", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "-", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "0x10", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "1 2", wantErr: "neither delta-seconds nor an HTTP-date"},
		{in: "-5", wantErr: "is negative"},
		{in: "-0", wantErr: "is negative"},
		{in: "604801", wantErr: "is more than 168h0m0s"},
		{in: "9223372036", wantErr: "is more than"},
		{in: "99999999999999999999", wantErr: "out of range"},
		{in: "-99999999999999999999", wantErr: "out of range"},
		{in: "Sun, 13 Nov 1994 08:49:38 GMT", wantErr: "more than 168h0m0s away"},
		{in: "Fri, 31 Dec 9999 23:59:59 GMT", wantErr: "more than"},
		{in: "Sun, 06 Nov 1994 08:51:07", wantErr: "neither"},
		{in: "06 Nov 1994 08:51:07 GMT", wantErr: "neither"},
		{in: "Sun, 06 Nov 1994 25:51:07 GMT", wantErr: "neither"},
		{in: "2024-11-22T10:00:00Z", wantErr: "neither"},
		// An HTTP-date is GMT, in exactly one of its three forms: time.Parse alone took these.
		{in: "Sunday, 06-Nov-94 08:51:07 EST", wantErr: "neither"},
		{in: "Sunday, 06-Nov-94 08:51:07 XYZ", wantErr: "neither"},
		{in: "Sun, 06 Nov 1994 08:51:07.999 GMT", wantErr: "neither"},
		{in: "sun, 06 nov 1994 08:51:07 GMT", wantErr: "neither"},
		{in: "Sun, 06 Nov 1994 8:51:07 GMT", wantErr: "neither"},
		{in: "Mon, 06 Nov 1994 08:51:07 GMT", wantErr: "neither"}, // 6 Nov 1994 was a Sunday
		{in: "soon, 120", wantErr: "neither"},                     // the first line is garbage
		{in: ", 120", wantErr: "empty"},
		{in: "604801, 120", wantErr: "is more than"},
		{in: "Sun, 120", wantErr: "neither"},
	}
	for _, tc := range tests {
		got, err := wire.ParseRetryAfter(tc.in, now.Add(tc.nowOffset))
		if tc.wantErr == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
			}
			continue
		}
		if !errors.Is(err, wire.ErrRetryAfter) || !strings.Contains(err.Error(), tc.wantErr) || got != 0 {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want 0 and ErrRetryAfter saying %q", tc.in, got, err, tc.wantErr)
		}
	}
}

// TestRetryAfterTwoDigitYear: an RFC 850 date's two-digit year is the one within 50 years of now
// (RFC 9110 §5.6.7), not time.Parse's fixed 1969–2068: in 2069, "69" is this year.
func TestRetryAfterTwoDigitYear(t *testing.T) {
	t.Parallel()
	const layout = "Monday, 02-Jan-06 15:04:05 GMT"
	for _, now := range []time.Time{
		time.Date(2069, 6, 1, 12, 0, 0, 0, time.UTC),
		time.Date(2099, 12, 31, 23, 0, 0, 0, time.UTC), // "00" is next year
		time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC),
	} {
		v := now.Add(2 * time.Hour).Format(layout)
		if got, err := wire.ParseRetryAfter(v, now); err != nil || got != 2*time.Hour {
			t.Errorf("now %s: ParseRetryAfter(%q) = %s, %v; want 2h", now, v, got, err)
		}
	}
	// 29 February 2000 exists, 29 February 2100 does not: read in 2099, "00" is 2100.
	if _, err := wire.ParseRetryAfter("Tuesday, 29-Feb-00 00:00:00 GMT", time.Date(2099, 12, 31, 0, 0, 0, 0, time.UTC)); !errors.Is(err, wire.ErrRetryAfter) {
		t.Errorf("29-Feb-00 read in 2099: %v, want an error", err)
	}
}

// TestRetryAfterTwoDigitYearMoreThan50YearsAhead: RFC 9110 §5.6.7 reads an rfc850-date "that
// appears to be more than 50 years in the future" in the past century. On 1 June 2026,
// 31-Dec-76 in 2076 is 50.6 years ahead, so it is 31 December 1976 (a Friday): a date in the past,
// retry at once. Comparing years only kept 2076, whose weekday then differs.
func TestRetryAfterTwoDigitYearMoreThan50YearsAhead(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	v := time.Date(1976, 12, 31, 0, 0, 0, 0, time.UTC).Format("Monday, 02-Jan-06 15:04:05 GMT")
	if got, err := wire.ParseRetryAfter(v, now); err != nil || got != 0 {
		t.Fatalf("ParseRetryAfter(%q) on %s = %s, %v; want 0 (a date in 1976), nil", v, now.Format(time.DateOnly), got, err)
	}
}

// TestRetryAfterHTTPDateGrammar: RFC 9110 §5.6.7 says a recipient "MUST accept all three
// HTTP-date formats", whose grammar allows what ParseRetryAfter's read-back check refuses:
//
//	date3       = month SP ( 2DIGIT / ( SP DIGIT ) )   ; asctime: "Nov 06" as well as "Nov  6"
//	time-of-day = hour ":" minute ":" second            ; 00:00:00 - 23:59:60 (leap second)
func TestRetryAfterHTTPDateGrammar(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		now  time.Time
		want time.Duration
	}{
		// asctime with a two-digit day: date3's 2DIGIT branch.
		{in: "Sun Nov 06 08:51:07 1994", now: now, want: 90 * time.Second},
		// A leap second (30 June 2015 23:59:60 UTC was one); read as the instant after :59.
		{in: "Tue, 30 Jun 2015 23:59:60 GMT", now: time.Date(2015, 6, 30, 23, 58, 0, 0, time.UTC), want: 2 * time.Minute},
	} {
		got, err := wire.ParseRetryAfter(tc.in, tc.now)
		if err != nil || got != tc.want {
			t.Errorf("ParseRetryAfter(%q) = %s, %v; want %s (a valid HTTP-date, RFC 9110 §5.6.7)", tc.in, got, err, tc.want)
		}
	}
}
