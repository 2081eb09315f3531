package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a signed timestamp may be from the verifier's clock, either way.
const DefaultTolerance = 5 * time.Minute

// Verification errors. Callers branch on them with errors.Is.
var (
	ErrMissing   = errors.New("signature headers missing")
	ErrTimestamp = errors.New("timestamp outside the tolerance")
	ErrMalformed = errors.New("malformed signature header")
	ErrNoMatch   = errors.New("no matching signature")
)

const versionPrefix = "v1,"

var dot = []byte{'.'}

func standardMAC(dst *[sha256.Size]byte, key []byte, id, timestamp string, body []byte) {
	mac(dst, key, []byte(id), dot, []byte(timestamp), dot, body)
}

// Sign returns the webhook-signature value for id, the unix timestamp and body: one
// "v1,<base64>" per secret, space-separated, in the order given.
func Sign(secrets []Secret, id string, timestamp int64, body []byte) string {
	ts := strconv.FormatInt(timestamp, 10)
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		var sum [sha256.Size]byte
		standardMAC(&sum, s.key, id, ts, body)
		sigs[i] = versionPrefix + encode(sum[:])
	}
	return strings.Join(sigs, " ")
}

// Verify checks a Standard Webhooks signature: the timestamp must be within tolerance of now (either
// direction) and at least one "v1," signature in sigHeader must match one of the secrets. Signatures
// of other versions are ignored. Comparison is constant-time and runs on the raw body bytes.
func Verify(secrets []Secret, id, timestamp, sigHeader string, body []byte, now time.Time, tolerance time.Duration) error {
	if id == "" || timestamp == "" || sigHeader == "" {
		return ErrMissing
	}
	if err := checkTimestamp(timestamp, now, tolerance); err != nil {
		return err
	}
	return matchAny(sigHeader, secrets, func(key []byte) (sum [sha256.Size]byte) {
		standardMAC(&sum, key, id, timestamp, body)
		return sum
	})
}

// checkTimestamp parses unix seconds and checks |now - ts| <= tolerance.
func checkTimestamp(timestamp string, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || ts < 0 {
		return fmt.Errorf("%w: timestamp %q is not unix seconds", ErrMalformed, timestamp)
	}
	return checkUnix(ts, timestamp, now, tolerance)
}

// checkUnix checks |now - ts| <= tolerance for ts >= 0; text is how ts was written, for the error
// only (the hop passes "", and ts is formatted only when it is out of tolerance).
func checkUnix(ts int64, text string, now time.Time, tolerance time.Duration) error {
	// |now - ts| in uint64, which cannot overflow for any pair of int64 values.
	n, diff, when := now.Unix(), uint64(0), "ahead of"
	if ts > n {
		diff = uint64(ts) - uint64(n)
	} else {
		diff, when = uint64(n)-uint64(ts), "behind"
	}
	if tolerance < 0 || diff > uint64(tolerance/time.Second) {
		if text == "" {
			text = strconv.FormatInt(ts, 10)
		}
		return fmt.Errorf("%w: %s is %ds %s the clock, tolerance %s", ErrTimestamp, text, diff, when, tolerance)
	}
	return nil
}

// matchAny parses a space-separated list of "v1,<base64>" signatures and reports whether any equals
// expected(key) for any secret other than the zero Secret. Unknown versions are skipped; a list with
// no v1 entry is malformed.
func matchAny(sigHeader string, secrets []Secret, expected func(key []byte) [sha256.Size]byte) error {
	// Decoded into arrays with room for a rotation's signatures, on the stack: the edge verifies a
	// hop on every request, and in its WASM builds each allocation costs (BenchmarkGuestCalls).
	candidates := make([][sha256.Size]byte, 0, 4)
	for field := range strings.FieldsSeq(sigHeader) {
		b64, ok := strings.CutPrefix(field, versionPrefix)
		// Padded standard base64 of sha256.Size bytes is exactly sigLen characters (fields hold no
		// CR or LF, which the decoder would skip), so other lengths cannot decode to a signature.
		if !ok || len(b64) != sigLen {
			continue
		}
		var sig [sha256.Size + 1]byte // base64.StdEncoding.DecodedLen(sigLen)
		if n, err := base64.StdEncoding.Decode(sig[:], []byte(b64)); err != nil || n != sha256.Size {
			continue
		}
		candidates = append(candidates, [sha256.Size]byte(sig[:sha256.Size]))
	}
	if len(candidates) == 0 {
		return fmt.Errorf("%w: no v1 signature", ErrMalformed)
	}
	for _, s := range secrets {
		if s.IsZero() {
			continue // an unset Secret{} would be an empty HMAC key that anyone can sign with
		}
		want := expected(s.key) // an array by value: a pointer would escape through the call
		for i := range candidates {
			if hmac.Equal(want[:], candidates[i][:]) {
				return nil
			}
		}
	}
	return ErrNoMatch
}

// sigLen is the length of a signature's base64 text after "v1,": base64.StdEncoding.EncodedLen(sha256.Size).
const sigLen = (sha256.Size + 2) / 3 * 4

func encode(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }
