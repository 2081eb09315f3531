package signature_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

func baseHop() *signature.Hop {
	return &signature.Hop{
		DeliveryID:   "dlv_01JD6Q3ZP0",
		SubscriberID: "sub_acme",
		EventType:    "video.rank_updated",
		CoalesceKey:  "video:42",
		Attempt:      3,
		Timestamp:    1732270000,
	}
}

var hopBody = []byte(`{"video_id":42,"rank":7}`)

func TestHopCanonical(t *testing.T) {
	t.Parallel()
	want := "edgehook-hop-v1\ndlv_01JD6Q3ZP0\nsub_acme\nvideo.rank_updated\nvideo:42\n3\n1732270000\n"
	if got := string(baseHop().Canonical()); got != want {
		t.Fatalf("canonical = %q, want %q", got, want)
	}
	h := baseHop()
	h.CoalesceKey = ""
	if got, want := string(h.Canonical()), "edgehook-hop-v1\ndlv_01JD6Q3ZP0\nsub_acme\nvideo.rank_updated\n\n3\n1732270000\n"; got != want {
		t.Fatalf("canonical without coalesce key = %q, want %q", got, want)
	}
}

// TestHopEveryFieldCovered changes one field (or the body) after signing: verification must fail.
func TestHopEveryFieldCovered(t *testing.T) {
	t.Parallel()
	secs := []signature.Secret{mustSecret(t, secretText(32, 5))}
	sig := signature.SignHop(secs, baseHop(), hopBody)
	now := time.Unix(baseHop().Timestamp, 0)
	if err := signature.VerifyHop(secs, baseHop(), sig, hopBody, now, signature.DefaultTolerance); err != nil {
		t.Fatalf("unchanged hop: %v", err)
	}
	mutations := map[string]func(h *signature.Hop, body *[]byte){
		"delivery id":          func(h *signature.Hop, _ *[]byte) { h.DeliveryID = "dlv_01JD6Q3ZP1" },
		"subscriber id":        func(h *signature.Hop, _ *[]byte) { h.SubscriberID = "sub_acmf" },
		"event type":           func(h *signature.Hop, _ *[]byte) { h.EventType = "video.rank_updates" },
		"coalesce key":         func(h *signature.Hop, _ *[]byte) { h.CoalesceKey = "video:43" },
		"coalesce key dropped": func(h *signature.Hop, _ *[]byte) { h.CoalesceKey = "" },
		"attempt":              func(h *signature.Hop, _ *[]byte) { h.Attempt = 4 },
		"timestamp":            func(h *signature.Hop, _ *[]byte) { h.Timestamp++ },
		"body":                 func(_ *signature.Hop, b *[]byte) { *b = []byte(`{"video_id":42,"rank":8}`) },
		"empty body":           func(_ *signature.Hop, b *[]byte) { *b = nil },
		// Moving text between neighbouring fields must not keep the signature valid.
		"shift between fields": func(h *signature.Hop, _ *[]byte) { h.EventType, h.CoalesceKey = "video.rank_updatedvideo", ":42" },
	}
	for name, mutate := range mutations {
		h, body := baseHop(), append([]byte(nil), hopBody...)
		mutate(h, &body)
		if err := signature.VerifyHop(secs, h, sig, body, now, signature.DefaultTolerance); !errors.Is(err, signature.ErrNoMatch) {
			t.Errorf("after changing the %s: VerifyHop = %v, want ErrNoMatch", name, err)
		}
	}
}

func TestVerifyHop(t *testing.T) {
	t.Parallel()
	oldS, newS, other := mustSecret(t, secretText(32, 1)), mustSecret(t, secretText(48, 2)), mustSecret(t, secretText(32, 3))
	h := baseHop()
	now := time.Unix(h.Timestamp, 0)
	both := signature.SignHop([]signature.Secret{newS, oldS}, h, hopBody)
	if n := len(strings.Fields(both)); n != 2 {
		t.Fatalf("SignHop with two secrets gave %d signatures: %q", n, both)
	}
	tests := []struct {
		name    string
		secrets []signature.Secret
		hop     func(*signature.Hop)
		sig     string
		now     time.Time
		want    error
	}{
		{name: "rotation: signed with both, edge knows old only", secrets: []signature.Secret{oldS}, sig: both},
		{name: "rotation: signed with both, edge knows new only", secrets: []signature.Secret{newS}, sig: both},
		{name: "rotation: signed with new, edge knows old and new", secrets: []signature.Secret{oldS, newS}, sig: signature.SignHop([]signature.Secret{newS}, h, hopBody)},
		{name: "299 s stale is fine", secrets: []signature.Secret{oldS}, sig: both, now: now.Add(299 * time.Second)},
		{name: "wrong secret", secrets: []signature.Secret{other}, sig: both, want: signature.ErrNoMatch},
		{name: "an unset secret never matches", secrets: []signature.Secret{{}}, sig: signature.SignHop([]signature.Secret{{}}, h, hopBody), want: signature.ErrNoMatch},
		{name: "a Standard Webhooks signature is not a hop signature", secrets: []signature.Secret{oldS}, sig: signature.Sign([]signature.Secret{oldS}, h.DeliveryID, h.Timestamp, hopBody), want: signature.ErrNoMatch},
		{name: "stale", secrets: []signature.Secret{oldS}, sig: both, now: now.Add(5*time.Minute + time.Second), want: signature.ErrTimestamp},
		{name: "from the future", secrets: []signature.Secret{oldS}, sig: both, now: now.Add(-6 * time.Minute), want: signature.ErrTimestamp},
		{name: "no signature", secrets: []signature.Secret{oldS}, sig: "", want: signature.ErrMissing},
		{name: "garbage signature", secrets: []signature.Secret{oldS}, sig: "sha256=00", want: signature.ErrMalformed},
		{name: "attempt 0", secrets: []signature.Secret{oldS}, sig: both, hop: func(h *signature.Hop) { h.Attempt = 0 }, want: signature.ErrMalformed},
		{name: "delivery id with a newline", secrets: []signature.Secret{oldS}, sig: both, hop: func(h *signature.Hop) { h.DeliveryID = "a\nb" }, want: signature.ErrMalformed},
		{name: "empty subscriber id", secrets: []signature.Secret{oldS}, sig: both, hop: func(h *signature.Hop) { h.SubscriberID = "" }, want: signature.ErrMalformed},
		{name: "bad event type", secrets: []signature.Secret{oldS}, sig: both, hop: func(h *signature.Hop) { h.EventType = "video..x" }, want: signature.ErrMalformed},
		{name: "coalesce key with a space", secrets: []signature.Secret{oldS}, sig: both, hop: func(h *signature.Hop) { h.CoalesceKey = "a b" }, want: signature.ErrMalformed},
		{name: "negative timestamp", secrets: []signature.Secret{oldS}, sig: both, hop: func(h *signature.Hop) { h.Timestamp = -1 }, want: signature.ErrMalformed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hop, at := baseHop(), now
			if tc.hop != nil {
				tc.hop(hop)
			}
			if !tc.now.IsZero() {
				at = tc.now
			}
			err := signature.VerifyHop(tc.secrets, hop, tc.sig, hopBody, at, signature.DefaultTolerance)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("VerifyHop = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestHopValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for want, mutate := range map[string]func(*signature.Hop){
		"delivery id":   func(h *signature.Hop) { h.DeliveryID = "a/b" },
		"subscriber id": func(h *signature.Hop) { h.SubscriberID = strings.Repeat("s", wire.MaxIDLen+1) },
		"event type":    func(h *signature.Hop) { h.EventType = "" },
		"coalesce key":  func(h *signature.Hop) { h.CoalesceKey = "k\x00" },
		"attempt":       func(h *signature.Hop) { h.Attempt = -2 },
	} {
		h := baseHop()
		mutate(h)
		if err := h.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate = %v, want an error naming %q", err, want)
		}
	}
	if err := baseHop().Validate(); err != nil {
		t.Fatalf("valid hop: %v", err)
	}
}

// exactHeaders is a HeaderGetter/HeaderSetter that keeps names as written, to check them exactly.
type exactHeaders map[string]string

func (m exactHeaders) Get(k string) string { return m[k] }
func (m exactHeaders) Set(k, v string)     { m[k] = v }

func TestSetParseHopHeadersRoundTrip(t *testing.T) {
	t.Parallel()
	secs := []signature.Secret{mustSecret(t, secretText(32, 1)), mustSecret(t, secretText(32, 2))}
	for _, coalesce := range []string{"video:42", ""} {
		want := baseHop()
		want.CoalesceKey = coalesce
		hdr := exactHeaders{}
		signature.SetHopHeaders(hdr, secs, want, hopBody)
		wantHeaders := exactHeaders{
			wire.HeaderDeliveryID: want.DeliveryID, wire.HeaderSubscriberID: want.SubscriberID,
			wire.HeaderEventType: want.EventType, wire.HeaderAttempt: "3",
			wire.HeaderHopTimestamp: "1732270000", wire.HeaderHopSignature: signature.SignHop(secs, want, hopBody),
		}
		if coalesce != "" {
			wantHeaders[wire.HeaderCoalesceKey] = coalesce
		}
		if len(hdr) != len(wantHeaders) {
			t.Fatalf("SetHopHeaders wrote %v, want %v", hdr, wantHeaders)
		}
		for k, v := range wantHeaders {
			if hdr[k] != v {
				t.Fatalf("header %s = %q, want %q", k, hdr[k], v)
			}
		}
		// Through net/http, which canonicalises names, as the origin and the harness do.
		httpHdr := http.Header{}
		signature.SetHopHeaders(httpHdr, secs, want, hopBody)
		got, sig, err := signature.ParseHopHeaders(httpHdr)
		if err != nil {
			t.Fatalf("ParseHopHeaders: %v", err)
		}
		if *got != *want {
			t.Fatalf("round trip = %+v, want %+v", *got, *want)
		}
		if err := signature.VerifyHop(secs[1:], got, sig, hopBody, time.Unix(want.Timestamp, 0), signature.DefaultTolerance); err != nil {
			t.Fatalf("VerifyHop after round trip: %v", err)
		}
		for _, name := range wire.HopHeaders {
			httpHdr.Del(name)
		}
		if len(httpHdr) != 0 {
			t.Fatalf("wire.HopHeaders does not list %v", httpHdr)
		}
	}
}

func TestParseHopHeadersErrors(t *testing.T) {
	t.Parallel()
	secs := []signature.Secret{mustSecret(t, secretText(32, 1))}
	valid := func() exactHeaders {
		hdr := exactHeaders{}
		signature.SetHopHeaders(hdr, secs, baseHop(), hopBody)
		return hdr
	}
	required := []string{wire.HeaderDeliveryID, wire.HeaderSubscriberID, wire.HeaderEventType, wire.HeaderAttempt, wire.HeaderHopTimestamp, wire.HeaderHopSignature}
	for _, name := range required {
		hdr := valid()
		delete(hdr, name)
		_, _, err := signature.ParseHopHeaders(hdr)
		if !errors.Is(err, signature.ErrMissing) || !strings.Contains(err.Error(), name) {
			t.Errorf("without %s: ParseHopHeaders = %v, want ErrMissing naming it", name, err)
		}
	}
	malformed := []struct{ header, value string }{
		{wire.HeaderAttempt, "three"},
		{wire.HeaderAttempt, "+3"},
		{wire.HeaderAttempt, "03"},
		{wire.HeaderAttempt, " 3"},
		{wire.HeaderAttempt, "3.0"},
		{wire.HeaderAttempt, "99999999999999999999"},
		{wire.HeaderHopTimestamp, "now"},
		{wire.HeaderHopTimestamp, "+1732270000"},
		{wire.HeaderHopTimestamp, "01732270000"},
		{wire.HeaderHopTimestamp, "-0"},
		{wire.HeaderHopTimestamp, "1732270000.5"},
		{wire.HeaderHopTimestamp, "99999999999999999999"},
	}
	for _, tc := range malformed {
		hdr := valid()
		hdr[tc.header] = tc.value
		_, _, err := signature.ParseHopHeaders(hdr)
		if !errors.Is(err, signature.ErrMalformed) || !strings.Contains(err.Error(), tc.header) {
			t.Errorf("%s: %q: ParseHopHeaders = %v, want ErrMalformed naming the header", tc.header, tc.value, err)
		}
	}
	// The coalesce key is optional; negative numbers parse here and are rejected by VerifyHop.
	hdr := valid()
	delete(hdr, wire.HeaderCoalesceKey)
	hdr[wire.HeaderAttempt] = "-1"
	h, _, err := signature.ParseHopHeaders(hdr)
	if err != nil || h.CoalesceKey != "" || h.Attempt != -1 {
		t.Fatalf("ParseHopHeaders = %+v, %v; want no coalesce key and attempt -1", h, err)
	}
	if err := signature.VerifyHop(secs, h, hdr[wire.HeaderHopSignature], hopBody, time.Unix(h.Timestamp, 0), time.Minute); !errors.Is(err, signature.ErrMalformed) {
		t.Fatalf("VerifyHop(attempt -1) = %v, want ErrMalformed", err)
	}
}

// TestParseCanonicalInt: a number parses exactly when strconv.ParseInt accepts it and
// strconv.FormatInt writes it back unchanged, to the same value, at both sizes.
func TestParseCanonicalInt(t *testing.T) {
	in := []string{"", "-", "+", "0", "-0", "00", "01", "+1", "1", "-1", "10", "-10", " 1", "1 ", "1a", "a1", "1.0",
		"--1", "-+1", "007", "1732270000", "-1732270000", "9223372036854775807", "9223372036854775808",
		"-9223372036854775808", "-9223372036854775809", "18446744073709551615", "18446744073709551616",
		"99999999999999999999", "2147483647", "2147483648", "-2147483648", "-2147483649", "1/", "1:", "\x00"}
	for _, s := range in {
		for _, bits := range []int{0, 32, 64} {
			n, ok := signature.ParseCanonicalInt(s, bits)
			want, err := strconv.ParseInt(s, 10, bits)
			wantOK := err == nil && strconv.FormatInt(want, 10) == s
			if ok != wantOK || ok && n != want {
				t.Errorf("parseCanonicalInt(%q, %d) = %d, %v; want %d, %v", s, bits, n, ok, want, wantOK)
			}
		}
	}
}
