package wire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxRetryAfter is the largest Retry-After accepted as meaningful; anything longer is treated as
// garbage. Callers apply their own, smaller cap (the origin's default is one hour).
const MaxRetryAfter = 7 * 24 * time.Hour

// ErrRetryAfter is wrapped by every ParseRetryAfter error; the message gives the reason.
var ErrRetryAfter = errors.New("ignored Retry-After")

// ParseRetryAfter parses a Retry-After value in either form of RFC 9110: delta-seconds ("120") or an
// HTTP-date ("Wed, 21 Oct 2015 07:28:00 GMT"). A date in the past yields zero. Empty, malformed,
// negative and absurd (over MaxRetryAfter) values return an error wrapping ErrRetryAfter that says why;
// the caller then falls back to its own backoff. Of several values joined with commas, the first
// is read (firstValue).
func ParseRetryAfter(v string, now time.Time) (time.Duration, error) {
	v = strings.TrimSpace(firstValue(v))
	if v == "" {
		return 0, fmt.Errorf("%w: empty", ErrRetryAfter)
	}
	if c := v[0]; c >= '0' && c <= '9' || c == '-' || c == '+' {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil && errors.Is(err, strconv.ErrRange):
			return 0, fmt.Errorf("%w: %q is out of range", ErrRetryAfter, v)
		case err != nil || c == '+':
			return 0, fmt.Errorf("%w: %q is neither delta-seconds nor an HTTP-date", ErrRetryAfter, v)
		case c == '-': // also "-0": delta-seconds has no sign
			return 0, fmt.Errorf("%w: %q is negative", ErrRetryAfter, v)
		case n > int64(MaxRetryAfter/time.Second):
			return 0, fmt.Errorf("%w: %q seconds is more than %s", ErrRetryAfter, v, MaxRetryAfter)
		}
		return time.Duration(n) * time.Second, nil
	}
	t, err := parseHTTPDate(v, now)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is neither delta-seconds nor an HTTP-date", ErrRetryAfter, v)
	}
	d := t.Sub(now)
	if d < 0 {
		return 0, nil
	}
	if d > MaxRetryAfter {
		return 0, fmt.Errorf("%w: %q is more than %s away", ErrRetryAfter, v, MaxRetryAfter)
	}
	return d.Round(time.Second), nil
}

// firstValue returns the first of repeated Retry-After field lines joined into one value with
// commas, as a fetch Headers object (the Worker's) joins them, and net/http's Header.Get reads
// the first line of a direct answer. A comma after no digit is an HTTP-date's own, after its day
// name.
func firstValue(v string) string {
	i := strings.IndexByte(v, ',')
	if i < 0 {
		return v
	}
	if strings.TrimSpace(v[:i]) != "" && !strings.ContainsAny(v[:i], "0123456789") {
		j := strings.IndexByte(v[i+1:], ',')
		if j < 0 {
			return v
		}
		i += 1 + j
	}
	return v[:i]
}

// httpDateFormats are the three HTTP-date forms of RFC 9110 §5.6.7, written out so this package
// does not pull net/http into the WASM builds. Unlike time.RFC850, the obsolete form's zone is
// the literal GMT: a zone name there was looked up in the machine's own zone ("EST" read 5 h
// late on a machine in New York, an unknown one as GMT).
var httpDateFormats = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	rfc850,
	time.ANSIC,                 // asctime, its day padded with a space ("Nov  6")
	"Mon Jan 02 15:04:05 2006", // or with a zero: date3 = month SP ( 2DIGIT / ( SP DIGIT ) )
}

const rfc850 = "Monday, 02-Jan-06 15:04:05 GMT"

// leapSecond is the time of day of a leap second, which RFC 9110's time-of-day allows and
// time.Parse refuses.
const leapSecond = "23:59:60"

// parseHTTPDate reads v in one of httpDateFormats. time.Parse is looser than the forms (any case,
// a fraction of a second, a one-digit hour, any weekday): the date must also read back as written.
// A leap second is read as the second after 23:59:59.
func parseHTTPDate(v string, now time.Time) (time.Time, error) {
	if before, after, ok := strings.Cut(v, leapSecond); ok {
		t, err := parseHTTPDate(before+"23:59:59"+after, now)
		return t.Add(time.Second), err
	}
	for _, layout := range httpDateFormats {
		t, err := time.Parse(layout, v)
		if err != nil {
			continue
		}
		if layout == rfc850 {
			t = nearestCentury(t, now)
		}
		if t.Format(layout) == v {
			return t, nil
		}
	}
	return time.Time{}, errors.New("not an HTTP-date")
}

// nearestCentury moves a date read from a two-digit year to the century RFC 9110 asks for: the
// one within 50 years of now, a date more than 50 years ahead being in the century before
// (time.Parse puts 69–99 in the 1900s whatever the date is now).
func nearestCentury(t, now time.Time) time.Time {
	t = t.AddDate(now.Year()-now.Year()%100+t.Year()%100-t.Year(), 0, 0)
	switch {
	case t.After(now.AddDate(50, 0, 0)):
		return t.AddDate(-100, 0, 0)
	case !t.After(now.AddDate(-50, 0, 0)):
		return t.AddDate(100, 0, 0)
	}
	return t
}
