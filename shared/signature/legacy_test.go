package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/signature"
)

func TestLegacyHeaders(t *testing.T) {
	t.Parallel()
	for prefix, want := range map[string][2]string{
		"VVV":      {"X-VVV-Timestamp", "X-VVV-Signature"},
		"Acme-Hub": {"X-Acme-Hub-Timestamp", "X-Acme-Hub-Signature"},
	} {
		ts, sig := signature.LegacyHeaders(prefix)
		if ts != want[0] || sig != want[1] {
			t.Errorf("LegacyHeaders(%q) = %q, %q, want %q, %q", prefix, ts, sig, want[0], want[1])
		}
	}
}

func TestValidateLegacyPrefix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		wantErr string
	}{
		{"VVV", ""},
		{"a", ""},
		{"Acme-2", ""},
		{strings.Repeat("A", 32), ""},
		{"", "must be 1 to 32 characters"},
		{strings.Repeat("A", 33), "must be 1 to 32 characters"},
		{"V V", "only letters, digits and '-'"},
		{"V_V", "only letters, digits and '-'"},
		{"V:V", "only letters, digits and '-'"},
		{"VV\r\nX", "only letters, digits and '-'"},
		{"Vé", "only letters, digits and '-'"},
		{"Forwarded", "X-Forwarded-"},
		{"forwarded-sig", "X-Forwarded-"},
		{"Forwardedx", ""},
		{"My-Forwarded", ""},
	}
	for _, tc := range tests {
		err := signature.ValidateLegacyPrefix(tc.in)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("ValidateLegacyPrefix(%q) = %v, want error containing %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestSignLegacy(t *testing.T) {
	t.Parallel()
	sec := mustSecret(t, refSecret)
	body := []byte(refBody)
	got := signature.SignLegacy(sec, refTimestamp, body)
	if !regexp.MustCompile(`^sha256=[0-9a-f]{64}$`).MatchString(got) {
		t.Fatalf("SignLegacy = %q, want sha256=<64 lower-case hex>", got)
	}
	// Independently: HMAC-SHA256 keyed with the secret's full text over "timestamp.body".
	m := hmac.New(sha256.New, []byte(refSecret))
	m.Write([]byte("1614265330." + refBody))
	if want := "sha256=" + hex.EncodeToString(m.Sum(nil)); got != want {
		t.Fatalf("SignLegacy = %s, want %s", got, want)
	}
	for name, other := range map[string]string{
		"timestamp": signature.SignLegacy(sec, refTimestamp+1, body),
		"body":      signature.SignLegacy(sec, refTimestamp, append(body, ' ')),
		"secret":    signature.SignLegacy(mustSecret(t, secretText(32, 1)), refTimestamp, body),
	} {
		if other == got {
			t.Errorf("changing the %s did not change the legacy signature", name)
		}
	}
}
