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

func standardMAC(key []byte, id, timestamp string, body []byte) []byte {
	return mac(key, []byte(id), dot, []byte(timestamp), dot, body)
}

// Sign returns the webhook-signature value for id, the unix timestamp and body: one
// "v1,<base64>" per secret, space-separated, in the order given.
func Sign(secrets []Secret, id string, timestamp int64, body []byte) string {
	ts := strconv.FormatInt(timestamp, 10)
	sigs := make([]string, len(secrets))
	for i, s := range secrets {
		sigs[i] = versionPrefix + encode(standardMAC(s.key, id, ts, body))
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
	return matchAny(sigHeader, secrets, func(key []byte) []byte { return standardMAC(key, id, timestamp, body) })
}

// checkTimestamp parses unix seconds and checks |now - ts| <= tolerance.
func checkTimestamp(timestamp string, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || ts < 0 {
		return fmt.Errorf("%w: timestamp %q is not unix seconds", ErrMalformed, timestamp)
	}
	// |now - ts| in uint64, which cannot overflow for any pair of int64 values.
	n, diff, when := now.Unix(), uint64(0), "ahead of"
	if ts > n {
		diff = uint64(ts) - uint64(n)
	} else {
		diff, when = uint64(n)-uint64(ts), "behind"
	}
	if tolerance < 0 || diff > uint64(tolerance/time.Second) {
		return fmt.Errorf("%w: %s is %ds %s the clock, tolerance %s", ErrTimestamp, timestamp, diff, when, tolerance)
	}
	return nil
}

// matchAny parses a space-separated list of "v1,<base64>" signatures and reports whether any equals
// expected(key) for any secret other than the zero Secret. Unknown versions are skipped; a list with
// no v1 entry is malformed.
func matchAny(sigHeader string, secrets []Secret, expected func(key []byte) []byte) error {
	var candidates [][]byte
	for _, field := range strings.Fields(sigHeader) {
		b64, ok := strings.CutPrefix(field, versionPrefix)
		if !ok {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) != sha256.Size {
			continue
		}
		candidates = append(candidates, sig)
	}
	if len(candidates) == 0 {
		return fmt.Errorf("%w: no v1 signature", ErrMalformed)
	}
	for _, s := range secrets {
		if s.IsZero() {
			continue // an unset Secret{} would be an empty HMAC key that anyone can sign with
		}
		want := expected(s.key)
		for _, c := range candidates {
			if hmac.Equal(want, c) {
				return nil
			}
		}
	}
	return ErrNoMatch
}

func encode(sum []byte) string { return base64.StdEncoding.EncodeToString(sum) }
