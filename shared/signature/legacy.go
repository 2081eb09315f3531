package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// LegacyHeaders returns the names of the legacy profile's headers for prefix, e.g. "VVV" →
// "X-VVV-Timestamp", "X-VVV-Signature".
func LegacyHeaders(prefix string) (timestampHeader, signatureHeader string) {
	return "X-" + prefix + "-Timestamp", "X-" + prefix + "-Signature"
}

// ValidateLegacyPrefix accepts 1–32 letters, digits and '-', except "Forwarded" and "Forwarded-…"
// in any case: their headers would be X-Forwarded-*, which the edge strips (with the proxies' own
// X-Forwarded-For and the like), so a receiver behind it would never see its signature.
func ValidateLegacyPrefix(prefix string) error {
	if prefix == "" || len(prefix) > 32 {
		return fmt.Errorf("legacy prefix %q must be 1 to 32 characters", prefix)
	}
	for i := 0; i < len(prefix); i++ {
		c := prefix[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("legacy prefix %q may hold only letters, digits and '-'", prefix)
		}
	}
	if lower := strings.ToLower(prefix); lower == "forwarded" || strings.HasPrefix(lower, "forwarded-") {
		return fmt.Errorf("legacy prefix %q would name the headers X-%s-*, and X-Forwarded-* headers are stripped by the edge and by proxies", prefix, prefix)
	}
	return nil
}

// SignLegacy returns the legacy signature value "sha256=<hex HMAC-SHA256(secret text, timestamp + "." + body)>".
// The key is the secret's full text ("whsec_..."), as receivers configured with that string expect.
func SignLegacy(secret Secret, timestamp int64, body []byte) string {
	ts := strconv.FormatInt(timestamp, 10)
	var sum [sha256.Size]byte
	mac(&sum, []byte(secret.text), []byte(ts), dot, body)
	return "sha256=" + hex.EncodeToString(sum[:])
}
