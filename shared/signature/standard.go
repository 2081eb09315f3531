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

// checkTimestamp parses unix seconds in plain decimal (digits only: ParseInt also takes a sign)
// and checks |now - ts| <= tolerance.
func checkTimestamp(timestamp string, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || ts < 0 || timestamp[0] < '0' || timestamp[0] > '9' {
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
	var sig [sha256.Size]byte
	if len(sigHeader) == len(versionPrefix)+sigLen && sigHeader[:len(versionPrefix)] == versionPrefix && decodeSig(&sig, sigHeader[len(versionPrefix):]) {
		// The usual header, one signature: it holds no white space (decodeSig took every byte), so
		// it is its own only field. Splitting it costs more than the rest in the WASM builds.
		candidates = append(candidates, sig)
	} else {
		for field := range strings.FieldsSeq(sigHeader) {
			if b64, ok := strings.CutPrefix(field, versionPrefix); ok && decodeSig(&sig, b64) {
				candidates = append(candidates, sig)
			}
		}
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

// decodeSig decodes s into dst when s is what base64.StdEncoding decodes to sha256.Size bytes
// without skipping anything: sigLen characters of the standard alphabet, the last one '=' (the
// unused low bits of the one before may be set, as the non-strict decoder allows). It is
// base64.StdEncoding.Decode for the one length a signature has, a loop without calls: in the WASM
// builds the decoder's calls cost more than the decoding.
func decodeSig(dst *[sha256.Size]byte, s string) bool {
	if len(s) != sigLen || s[sigLen-1] != '=' {
		return false
	}
	var bad byte // any character outside the alphabet sets the high bit
	for i := 0; i < sigLen/4-1; i++ {
		a, b, c, d := b64Value[s[4*i]], b64Value[s[4*i+1]], b64Value[s[4*i+2]], b64Value[s[4*i+3]]
		bad |= a | b | c | d
		v := uint32(a)<<18 | uint32(b)<<12 | uint32(c)<<6 | uint32(d)
		dst[3*i], dst[3*i+1], dst[3*i+2] = byte(v>>16), byte(v>>8), byte(v)
	}
	a, b, c := b64Value[s[sigLen-4]], b64Value[s[sigLen-3]], b64Value[s[sigLen-2]]
	bad |= a | b | c
	v := uint32(a)<<18 | uint32(b)<<12 | uint32(c)<<6
	dst[sha256.Size-2], dst[sha256.Size-1] = byte(v>>16), byte(v>>8)
	return bad&0x80 == 0
}

// b64Value maps each character of the standard base64 alphabet to its value and every other byte
// to 0xff.
var b64Value = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		t[c] = byte(i)
	}
	return t
}()

// sigLen is the length of a signature's base64 text after "v1,": base64.StdEncoding.EncodedLen(sha256.Size).
const sigLen = (sha256.Size + 2) / 3 * 4

func encode(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }
