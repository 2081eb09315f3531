package signature_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/signature"
)

// secretText returns the text form of a secret of n bytes of fill.
func secretText(n int, fill byte) string {
	return signature.SecretPrefix + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, n))
}

// mustSecret parses s or fails the test.
func mustSecret(t testing.TB, s string) signature.Secret {
	t.Helper()
	sec, err := signature.ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret(%q): %v", s, err)
	}
	return sec
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		wantErr string // substring of the error; "" means valid
	}{
		{"reference vector secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", ""},
		{"minimum 24 bytes", secretText(24, 1), ""},
		{"default 32 bytes", secretText(32, 2), ""},
		{"maximum 64 bytes", secretText(64, 3), ""},
		{"23 bytes is too short", secretText(23, 1), "decodes to 23 bytes, want 24 to 64"},
		{"65 bytes is too long", secretText(65, 1), "decodes to 65 bytes, want 24 to 64"},
		{"empty", "", `must start with "whsec_"`},
		{"prefix only", "whsec_", "decodes to 0 bytes"},
		{"no prefix", strings.TrimPrefix(secretText(32, 1), "whsec_"), `must start with "whsec_"`},
		{"wrong prefix", "whsek_" + strings.TrimPrefix(secretText(32, 1), "whsec_"), "must start with"},
		{"upper-case prefix", "WHSEC_" + strings.TrimPrefix(secretText(32, 1), "whsec_"), "must start with"},
		{"not base64", "whsec_!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "not canonical standard base64"},
		{"URL-safe alphabet", "whsec_" + base64.URLEncoding.EncodeToString(bytes.Repeat([]byte{0xfb}, 32)), "not canonical standard base64"},
		{"missing padding", "whsec_" + base64.RawStdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 32)), "not canonical standard base64"},
		{"trailing newline", secretText(32, 1) + "\n", "not canonical standard base64"},
		{"embedded CRLF", secretText(24, 1)[:20] + "\r\n" + secretText(24, 1)[20:], "not canonical standard base64"},
		{"leading space", " " + secretText(32, 1), "must start with"},
		// "AB==" and "AC==" decode to the same byte; only the first is canonical.
		{"stray padding bits", secretText(31, 0)[:len(secretText(31, 0))-4] + "AAC=", "not canonical standard base64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sec, err := signature.ParseSecret(tc.in)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseSecret(%q) = %v, want nil", tc.in, err)
				}
				if sec.String() != tc.in || sec.IsZero() {
					t.Fatalf("ParseSecret(%q) = %q (zero %v), want the same text", tc.in, sec.String(), sec.IsZero())
				}
				return
			}
			if !errors.Is(err, signature.ErrSecretFormat) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseSecret(%q) = %v, want ErrSecretFormat containing %q", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := 0; i < 8; i++ {
		sec, err := signature.NewSecret()
		if err != nil {
			t.Fatal(err)
		}
		text := sec.String()
		if seen[text] {
			t.Fatalf("NewSecret returned %q twice", text)
		}
		seen[text] = true
		back := mustSecret(t, text)
		key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(text, signature.SecretPrefix))
		if len(key) != signature.DefaultSecretBytes || bytes.Equal(key, make([]byte, len(key))) {
			t.Fatalf("NewSecret key = %x, want %d random bytes", key, signature.DefaultSecretBytes)
		}
		// The parsed form must sign exactly like the generated one.
		body := []byte("x")
		if a, b := signature.Sign([]signature.Secret{sec}, "id", 1, body), signature.Sign([]signature.Secret{back}, "id", 1, body); a != b {
			t.Fatalf("generated and parsed secret sign differently: %s vs %s", a, b)
		}
	}
	if !(signature.Secret{}).IsZero() {
		t.Fatal("zero Secret is not IsZero")
	}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	a, b := secretText(32, 1), secretText(24, 2)
	for _, in := range []string{a + "," + b, a + " " + b, " " + a + " ,\n\t" + b + ",", a + "\r\n" + b, a + "\v" + b, a + "\f" + b} {
		got, err := signature.ParseSecrets(in)
		if err != nil {
			t.Fatalf("ParseSecrets(%q): %v", in, err)
		}
		if len(got) != 2 || got[0].String() != a || got[1].String() != b {
			t.Fatalf("ParseSecrets(%q) = %v, want [%s %s] in order", in, got, a, b)
		}
	}
	bad := []struct{ in, wantErr string }{
		{"", "no secret given"},
		{" ,, \n", "no secret given"},
		{a + ",whsec_short", "secret 2 of 2"},
		{"nope", "secret 1 of 1"},
	}
	for _, tc := range bad {
		_, err := signature.ParseSecrets(tc.in)
		if !errors.Is(err, signature.ErrSecretFormat) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("ParseSecrets(%q) = %v, want ErrSecretFormat containing %q", tc.in, err, tc.wantErr)
		}
	}
}
