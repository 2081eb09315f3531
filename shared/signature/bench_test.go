package signature_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
)

// body1KB is a 1 KB JSON-ish event body.
var body1KB = append([]byte(`{"data":"`), append(bytes.Repeat([]byte("x"), 1024-11), '"', '}')...)

// BenchmarkStandardSignVerify1KB signs a 1 KB body with one secret and verifies it, as the origin
// and a subscriber do once per delivery.
func BenchmarkStandardSignVerify1KB(b *testing.B) {
	secs := []signature.Secret{mustSecret(b, refSecret)}
	now := time.Unix(refTimestamp, 0)
	b.SetBytes(int64(len(body1KB)))
	for b.Loop() {
		sig := signature.Sign(secs, refID, refTimestamp, body1KB)
		if err := signature.Verify(secs, refID, "1614265330", sig, body1KB, now, signature.DefaultTolerance); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHopSignVerify1KB signs a 1 KB body's hop and verifies it, as the origin and the edge do
// once per attempt.
func BenchmarkHopSignVerify1KB(b *testing.B) {
	secs := []signature.Secret{mustSecret(b, refSecret)}
	h := baseHop()
	now := time.Unix(h.Timestamp, 0)
	b.SetBytes(int64(len(body1KB)))
	for b.Loop() {
		sig := signature.SignHop(secs, h, body1KB)
		if err := signature.VerifyHop(secs, h, sig, body1KB, now, signature.DefaultTolerance); err != nil {
			b.Fatal(err)
		}
	}
}
