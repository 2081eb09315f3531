package signature_test

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// isSentinel reports whether err is one of the four verification errors.
func isSentinel(err error) bool {
	for _, e := range []error{signature.ErrMissing, signature.ErrTimestamp, signature.ErrMalformed, signature.ErrNoMatch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// fuzzSecrets are the verifier's secrets: an old and a new one, as during a rotation.
func fuzzSecrets(t testing.TB) []signature.Secret {
	return []signature.Secret{mustSecret(t, refSecret), mustSecret(t, secretText(32, 0x5a))}
}

// FuzzVerify: Verify never panics on any header and fails only with a sentinel; a header it accepts
// carries the exact signature; what Sign produces always verifies, also among garbage, with either
// secret; and changing the body breaks it.
func FuzzVerify(f *testing.F) {
	f.Add(refID, int64(refTimestamp), []byte(refBody), refSignature)
	f.Add(refID, int64(refTimestamp), []byte(refBody), "v2,abc v1,@@@ "+refSignature)
	f.Add("", int64(0), []byte{}, "")
	f.Add("msg_1", int64(-5), []byte("x"), "v1,")
	f.Add("msg_1", int64(1<<62), []byte("x"), "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
	f.Add("m", int64(1), []byte("\x00\xff"), " \t v1,AAAA v1a,")
	f.Add("m", int64(1614265330), []byte("x"), "+1614265330")
	f.Fuzz(func(t *testing.T, id string, ts int64, body []byte, header string) {
		secs := fuzzSecrets(t)
		now := time.Unix(ts, 0)
		// The header doubles as a webhook-timestamp value: anything there is malformed or checked.
		if err := signature.Verify(secs, id, header, header, body, now, signature.DefaultTolerance); err != nil && !isSentinel(err) {
			t.Fatalf("Verify(timestamp %q) = %v: not a sentinel error", header, err)
		}
		stamp := strconv.FormatInt(ts, 10)
		err := signature.Verify(secs, id, stamp, header, body, now, signature.DefaultTolerance)
		if err != nil && !isSentinel(err) {
			t.Fatalf("Verify(%q) = %v: not a sentinel error", header, err)
		}
		if id == "" || ts < 0 {
			if err == nil {
				t.Fatalf("Verify accepted id %q, timestamp %d", id, ts)
			}
			return
		}
		if err == nil {
			found := false
			for _, s := range strings.Fields(signature.Sign(secs, id, ts, body)) {
				want, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "v1,"))
				for _, field := range strings.Fields(header) {
					got, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(field, "v1,"))
					found = found || strings.HasPrefix(field, "v1,") && string(got) == string(want)
				}
			}
			if !found {
				t.Fatalf("Verify accepted %q, which holds no signature of ours", header)
			}
		}
		for i := range secs {
			sig := signature.Sign(secs[i:i+1], id, ts, body)
			if err := signature.Verify(secs, id, stamp, header+" "+sig, body, now, signature.DefaultTolerance); err != nil {
				t.Fatalf("Sign's own signature %q after %q does not verify: %v", sig, header, err)
			}
			tampered := append(append([]byte(nil), body...), '!')
			if err := signature.Verify(secs, id, stamp, sig, tampered, now, signature.DefaultTolerance); !errors.Is(err, signature.ErrNoMatch) {
				t.Fatalf("tampered body: Verify = %v, want ErrNoMatch", err)
			}
		}
	})
}

// FuzzParseSecrets: never panics; an accepted secret is its own canonical text, 24–64 bytes.
func FuzzParseSecrets(f *testing.F) {
	for _, s := range []string{refSecret, secretText(24, 1), secretText(65, 1), refSecret + "\n", "whsec_", "",
		refSecret + "," + secretText(64, 2), "whsec_AAAA\r\nAAAA", secretText(31, 0)[:40] + "AAC="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		secs, err := signature.ParseSecrets(s)
		if err != nil {
			if !errors.Is(err, signature.ErrSecretFormat) {
				t.Fatalf("ParseSecrets(%q) = %v, not ErrSecretFormat", s, err)
			}
			return
		}
		for _, sec := range secs {
			text := sec.String()
			key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(text, signature.SecretPrefix))
			if err != nil || !strings.HasPrefix(text, signature.SecretPrefix) || len(key) < signature.MinSecretBytes ||
				len(key) > signature.MaxSecretBytes || signature.SecretPrefix+base64.StdEncoding.EncodeToString(key) != text {
				t.Fatalf("accepted secret %q is not canonical whsec_ text of 24–64 bytes", text)
			}
			if !strings.Contains(s, text) {
				t.Fatalf("accepted secret %q is not part of the input %q", text, s)
			}
		}
	})
}

// FuzzHop: ParseHopHeaders and VerifyHop never panic and fail only with sentinels; a valid parsed
// hop round-trips through SetHopHeaders to identical headers and verifies with either secret, and
// changing any field or the body after signing breaks it.
func FuzzHop(f *testing.F) {
	f.Add("dlv_1", "sub_acme", "video.rank_updated", "video:42", "3", "1732270000", "v1,AAAA", []byte(`{"a":1}`))
	f.Add("dlv_1", "sub_acme", "video.x", "", "1", "0", "", []byte{})
	f.Add("a\nb", "", "video..x", "a b", "+1", "01", "v1,@", []byte("x"))
	f.Add("d", "s", "e", "k", "99999999999999999999", "-1", "v1,"+base64.StdEncoding.EncodeToString(make([]byte, 32)), []byte("x"))
	f.Fuzz(func(t *testing.T, delivery, subscriber, eventType, coalesce, attempt, ts, sig string, body []byte) {
		secs := fuzzSecrets(t)
		in := exactHeaders{}
		for name, v := range map[string]string{wire.HeaderDeliveryID: delivery, wire.HeaderSubscriberID: subscriber,
			wire.HeaderEventType: eventType, wire.HeaderCoalesceKey: coalesce, wire.HeaderAttempt: attempt,
			wire.HeaderHopTimestamp: ts, wire.HeaderHopSignature: sig} {
			if v != "" {
				in[name] = v
			}
		}
		h, gotSig, err := signature.ParseHopHeaders(in)
		if err != nil {
			if !errors.Is(err, signature.ErrMissing) && !errors.Is(err, signature.ErrMalformed) {
				t.Fatalf("ParseHopHeaders = %v: not ErrMissing or ErrMalformed", err)
			}
			return
		}
		// Numbers are accepted only in the form SetHopHeaders writes.
		if strconv.Itoa(h.Attempt) != attempt || strconv.FormatInt(h.Timestamp, 10) != ts || gotSig != sig {
			t.Fatalf("ParseHopHeaders(%v) = %+v, %q: fields differ from the header text", in, h, gotSig)
		}
		now := time.Unix(h.Timestamp, 0)
		err = signature.VerifyHop(secs, h, gotSig, body, now, signature.DefaultTolerance)
		if err != nil && !isSentinel(err) {
			t.Fatalf("VerifyHop = %v: not a sentinel error", err)
		}
		if h.Validate() != nil || h.Timestamp < 0 {
			if !errors.Is(err, signature.ErrMalformed) {
				t.Fatalf("VerifyHop of invalid hop %+v = %v, want ErrMalformed", h, err)
			}
			return
		}
		out := exactHeaders{}
		signature.SetHopHeaders(out, secs, h, body)
		out[wire.HeaderHopSignature] = sig // so the headers compare equal to the input
		if len(out) != len(in) {
			t.Fatalf("SetHopHeaders wrote %v, parsed from %v", out, in)
		}
		for k, v := range in {
			if out[k] != v {
				t.Fatalf("header %s: SetHopHeaders wrote %q, parsed from %q", k, out[k], v)
			}
		}
		for i := range secs {
			own := signature.SignHop(secs[i:i+1], h, body)
			if err := signature.VerifyHop(secs, h, own, body, now, signature.DefaultTolerance); err != nil {
				t.Fatalf("SignHop's own signature does not verify: %v", err)
			}
			changed := *h
			changed.Attempt++
			if err := signature.VerifyHop(secs, &changed, own, body, now, signature.DefaultTolerance); !errors.Is(err, signature.ErrNoMatch) && changed.Attempt > 0 {
				t.Fatalf("attempt changed: VerifyHop = %v, want ErrNoMatch", err)
			}
			changed = *h
			changed.DeliveryID += "x"
			if err := signature.VerifyHop(secs, &changed, own, body, now, signature.DefaultTolerance); !errors.Is(err, signature.ErrNoMatch) && changed.Validate() == nil {
				t.Fatalf("delivery id changed: VerifyHop = %v, want ErrNoMatch", err)
			}
			if err := signature.VerifyHop(secs, h, own, append(append([]byte(nil), body...), 0), now, signature.DefaultTolerance); !errors.Is(err, signature.ErrNoMatch) {
				t.Fatalf("body changed: VerifyHop = %v, want ErrNoMatch", err)
			}
		}
	})
}
