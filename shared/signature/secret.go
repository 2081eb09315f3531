// Package signature implements the three HMAC-SHA256 signatures of edgehook: Standard Webhooks
// (subscriber-facing), the legacy X-<Prefix>-Signature profile, and the origin → edge hop signature.
// docs/PROTOCOL.md is the specification, with worked examples that the tests check.
package signature

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// SecretPrefix starts every secret's text form.
const SecretPrefix = "whsec_"

// Secret key sizes in bytes.
const (
	MinSecretBytes     = 24
	MaxSecretBytes     = 64
	DefaultSecretBytes = 32
)

// ErrSecretFormat is wrapped by every ParseSecret error.
var ErrSecretFormat = errors.New("invalid secret")

// Secret is a parsed "whsec_<base64>" secret. Standard Webhooks and the hop signature key the HMAC
// with the decoded bytes; the legacy profile keys it with the full text, as such receivers expect.
type Secret struct {
	text string
	key  []byte
}

// NewSecret returns a fresh secret of DefaultSecretBytes random bytes from crypto/rand.
func NewSecret() (Secret, error) {
	key := make([]byte, DefaultSecretBytes)
	if _, err := rand.Read(key); err != nil {
		return Secret{}, fmt.Errorf("generate secret: %w", err)
	}
	return Secret{text: SecretPrefix + base64.StdEncoding.EncodeToString(key), key: key}, nil
}

// ParseSecret parses "whsec_<base64>" with 24–64 decoded bytes.
func ParseSecret(s string) (Secret, error) {
	b64, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: must start with %q", ErrSecretFormat, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	// The decoder skips CR/LF and tolerates stray padding bits; requiring the canonical encoding keeps
	// one text per key, which matters because the legacy profile keys its HMAC with the text.
	if err != nil || base64.StdEncoding.EncodeToString(key) != b64 {
		return Secret{}, fmt.Errorf("%w: the part after %q is not canonical standard base64", ErrSecretFormat, SecretPrefix)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("%w: decodes to %d bytes, want %d to %d", ErrSecretFormat, len(key), MinSecretBytes, MaxSecretBytes)
	}
	return Secret{text: s, key: key}, nil
}

// ParseSecrets parses a list separated by commas and/or white space (as in the EDGE_SECRET
// variable during a rotation). At least one secret is required.
func ParseSecrets(s string) ([]Secret, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
	if len(fields) == 0 {
		return nil, fmt.Errorf("%w: no secret given", ErrSecretFormat)
	}
	secrets := make([]Secret, 0, len(fields))
	for i, f := range fields {
		sec, err := ParseSecret(f)
		if err != nil {
			return nil, fmt.Errorf("secret %d of %d: %w", i+1, len(fields), err)
		}
		secrets = append(secrets, sec)
	}
	return secrets, nil
}

// String returns the text form. Callers must never log it.
func (s Secret) String() string { return s.text }

// IsZero reports whether s is the zero Secret.
func (s Secret) IsZero() bool { return len(s.key) == 0 }
