package signature_test

import (
	"encoding/base64"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
)

// The Standard Webhooks reference libraries' own known-answer vector (DESIGN.md).
const (
	refSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	refID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	refTimestamp = 1614265330
	refBody      = `{"test": 2432232314}`
	refSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignKnownAnswer(t *testing.T) {
	t.Parallel()
	got := signature.Sign([]signature.Secret{mustSecret(t, refSecret)}, refID, refTimestamp, []byte(refBody))
	if got != refSignature {
		t.Fatalf("Sign = %s, want the reference %s", got, refSignature)
	}
}

func TestSignSeveralSecrets(t *testing.T) {
	t.Parallel()
	secs := []signature.Secret{mustSecret(t, refSecret), mustSecret(t, secretText(32, 7)), mustSecret(t, secretText(64, 9))}
	got := strings.Split(signature.Sign(secs, refID, refTimestamp, []byte(refBody)), " ")
	if len(got) != len(secs) {
		t.Fatalf("Sign with %d secrets gave %d signatures: %q", len(secs), len(got), got)
	}
	for i := range secs {
		if want := signature.Sign(secs[i:i+1], refID, refTimestamp, []byte(refBody)); got[i] != want {
			t.Errorf("signature %d = %s, want %s (the one secret %d alone makes)", i, got[i], want, i)
		}
		if got[i] == got[(i+1)%len(got)] {
			t.Errorf("secrets %d and %d gave the same signature", i, (i+1)%len(got))
		}
	}
	if s := signature.Sign(nil, refID, refTimestamp, []byte(refBody)); s != "" {
		t.Fatalf("Sign with no secret = %q, want empty", s)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	ref, next, other := mustSecret(t, refSecret), mustSecret(t, secretText(32, 7)), mustSecret(t, secretText(32, 8))
	now := time.Unix(refTimestamp, 0)
	ts := strconv.Itoa(refTimestamp)
	body := []byte(refBody)
	sign := func(secs ...signature.Secret) string { return signature.Sign(secs, refID, refTimestamp, body) }
	// A well-formed v1 signature that matches nothing.
	junk := "v1," + base64.StdEncoding.EncodeToString(make([]byte, 32))

	tests := []struct {
		name      string
		secrets   []signature.Secret
		id, ts    string
		sig       string
		body      []byte
		now       time.Time
		tolerance time.Duration
		want      error // nil means verified
	}{
		{name: "reference vector", secrets: []signature.Secret{ref}, sig: refSignature},
		{name: "several signatures, the last matches", secrets: []signature.Secret{ref}, sig: junk + " " + sign(other) + " " + refSignature},
		{name: "rotation: verifier holds old and new, sender signs with new", secrets: []signature.Secret{ref, next}, sig: sign(next)},
		{name: "rotation: sender signs with both, verifier holds new only", secrets: []signature.Secret{next}, sig: sign(ref, next)},
		{name: "unknown versions are ignored", secrets: []signature.Secret{ref}, sig: "v2,abc v1a,xyz " + refSignature + " v0,def"},
		{name: "extra white space between signatures", secrets: []signature.Secret{ref}, sig: "  " + junk + "   " + refSignature + "  "},
		{name: "undecodable v1 next to a good one", secrets: []signature.Secret{ref}, sig: "v1,@@@ " + refSignature},
		{name: "exactly the tolerance in the past", secrets: []signature.Secret{ref}, sig: refSignature, now: now.Add(5 * time.Minute)},
		{name: "exactly the tolerance in the future", secrets: []signature.Secret{ref}, sig: refSignature, now: now.Add(-5 * time.Minute)},
		{name: "custom tolerance", secrets: []signature.Secret{ref}, sig: refSignature, now: now.Add(time.Hour), tolerance: 2 * time.Hour},

		{name: "tampered body", secrets: []signature.Secret{ref}, sig: refSignature, body: []byte(`{"test": 2432232315}`), want: signature.ErrNoMatch},
		{name: "body with a trailing newline", secrets: []signature.Secret{ref}, sig: refSignature, body: []byte(refBody + "\n"), want: signature.ErrNoMatch},
		{name: "wrong secret", secrets: []signature.Secret{other}, sig: refSignature, want: signature.ErrNoMatch},
		{name: "no secret at all", secrets: nil, sig: refSignature, want: signature.ErrNoMatch},
		{name: "an unset secret never matches", secrets: []signature.Secret{{}}, sig: signature.Sign([]signature.Secret{{}}, refID, refTimestamp, body), want: signature.ErrNoMatch},
		{name: "other id", secrets: []signature.Secret{ref}, id: "msg_other", sig: refSignature, want: signature.ErrNoMatch},
		{name: "other timestamp within tolerance", secrets: []signature.Secret{ref}, ts: strconv.Itoa(refTimestamp + 1), sig: refSignature, want: signature.ErrNoMatch},
		{name: "same number, other spelling", secrets: []signature.Secret{ref}, ts: "0" + ts, sig: refSignature, want: signature.ErrNoMatch},
		{name: "signature in another case", secrets: []signature.Secret{ref}, sig: "V1," + strings.TrimPrefix(refSignature, "v1,"), want: signature.ErrMalformed},

		{name: "1 s past the tolerance, past", secrets: []signature.Secret{ref}, sig: refSignature, now: now.Add(5*time.Minute + time.Second), want: signature.ErrTimestamp},
		{name: "1 s past the tolerance, future", secrets: []signature.Secret{ref}, sig: refSignature, now: now.Add(-5*time.Minute - time.Second), want: signature.ErrTimestamp},
		{name: "a day old", secrets: []signature.Secret{ref}, sig: refSignature, now: now.Add(24 * time.Hour), want: signature.ErrTimestamp},
		{name: "stale even with a wrong secret: timestamp first", secrets: []signature.Secret{other}, sig: refSignature, now: now.Add(time.Hour), want: signature.ErrTimestamp},
		{name: "negative tolerance", secrets: []signature.Secret{ref}, sig: refSignature, tolerance: -time.Second, want: signature.ErrTimestamp},
		{name: "clock at the far negative end", secrets: []signature.Secret{ref}, sig: refSignature, now: time.Unix(math.MinInt64+refTimestamp, 0), want: signature.ErrTimestamp},
		{name: "largest timestamp", secrets: []signature.Secret{ref}, ts: strconv.FormatInt(math.MaxInt64, 10), sig: refSignature, want: signature.ErrTimestamp},

		{name: "missing id", secrets: []signature.Secret{ref}, id: "-", sig: refSignature, want: signature.ErrMissing},
		{name: "missing timestamp", secrets: []signature.Secret{ref}, ts: "-", sig: refSignature, want: signature.ErrMissing},
		{name: "missing signature", secrets: []signature.Secret{ref}, sig: "", want: signature.ErrMissing},
		{name: "timestamp not a number", secrets: []signature.Secret{ref}, ts: "yesterday", sig: refSignature, want: signature.ErrMalformed},
		{name: "timestamp in milliseconds is stale", secrets: []signature.Secret{ref}, ts: ts + "000", sig: refSignature, want: signature.ErrTimestamp},
		{name: "negative timestamp", secrets: []signature.Secret{ref}, ts: "-1614265330", sig: refSignature, want: signature.ErrMalformed},
		{name: "timestamp with a plus sign", secrets: []signature.Secret{ref}, ts: "+1614265330", sig: refSignature, want: signature.ErrMalformed},
		{name: "timestamp minus zero", secrets: []signature.Secret{ref}, ts: "-0", sig: refSignature, want: signature.ErrMalformed},
		{name: "timestamp out of int64 range", secrets: []signature.Secret{ref}, ts: "99999999999999999999", sig: refSignature, want: signature.ErrMalformed},
		{name: "only unknown versions", secrets: []signature.Secret{ref}, sig: "v2,abc v1a,xyz", want: signature.ErrMalformed},
		{name: "v1 without comma", secrets: []signature.Secret{ref}, sig: "v1" + strings.TrimPrefix(refSignature, "v1,"), want: signature.ErrMalformed},
		{name: "v1 of the wrong length", secrets: []signature.Secret{ref}, sig: "v1," + base64.StdEncoding.EncodeToString(make([]byte, 16)), want: signature.ErrMalformed},
		{name: "bare base64", secrets: []signature.Secret{ref}, sig: strings.TrimPrefix(refSignature, "v1,"), want: signature.ErrMalformed},
		{name: "white space only", secrets: []signature.Secret{ref}, sig: "   ", want: signature.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, stamp, b, at, tol := refID, ts, body, now, signature.DefaultTolerance
			if tc.id == "-" {
				id = ""
			} else if tc.id != "" {
				id = tc.id
			}
			if tc.ts == "-" {
				stamp = ""
			} else if tc.ts != "" {
				stamp = tc.ts
			}
			if tc.body != nil {
				b = tc.body
			}
			if !tc.now.IsZero() {
				at = tc.now
			}
			if tc.tolerance != 0 {
				tol = tc.tolerance
			}
			err := signature.Verify(tc.secrets, id, stamp, tc.sig, b, at, tol)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			// The four errors are distinct: a caller can tell a stale request from a forged one.
			for _, e := range []error{signature.ErrMissing, signature.ErrTimestamp, signature.ErrMalformed, signature.ErrNoMatch} {
				if e != tc.want && errors.Is(err, e) {
					t.Fatalf("Verify = %v is both %v and %v", err, tc.want, e)
				}
			}
		})
	}
}

// TestDecodeSig: decodeSig accepts exactly the texts base64.StdEncoding decodes to 32 bytes
// without skipping a byte, to the same bytes. Each text is a signature's encoding (of all zeros,
// all ones, and bytes whose last character carries set padding bits) with one byte replaced by
// every possible byte in turn, and a few of other lengths.
func TestDecodeSig(t *testing.T) {
	sums := [][]byte{make([]byte, 32), []byte(strings.Repeat("\xff", 32)), []byte("0123456789abcdef0123456789abcdef")}
	var texts []string
	for _, sum := range sums {
		enc := base64.StdEncoding.EncodeToString(sum)
		texts = append(texts, enc, enc[:43], enc+"=", enc[:42]+"==", strings.TrimRight(enc, "=")+"A")
		for i := range enc {
			for c := range 256 {
				texts = append(texts, enc[:i]+string([]byte{byte(c)})+enc[i+1:])
			}
		}
	}
	texts = append(texts, "", "====", strings.Repeat("A", 43)+"B=")
	for _, s := range texts {
		var got [32]byte
		ok := signature.DecodeSig(&got, s)
		want := make([]byte, 33)
		n, err := base64.StdEncoding.Decode(want, []byte(s))
		wantOK := err == nil && n == 32 && !strings.ContainsAny(s, "\r\n")
		if ok != wantOK || ok && string(got[:]) != string(want[:32]) {
			t.Errorf("decodeSig(%q) = %x, %v; base64 gives %x, %v (err %v)", s, got, ok, want[:n], wantOK, err)
		}
	}
}
