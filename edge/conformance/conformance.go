// Package conformance loads the relay conformance scenarios (scenarios.json), written once and run
// by every runtime of the relay core: natively (this package's test), as the WASI module in the
// wazero harness, and as the Worker bundle in workerd (edge/workerd, node --test). README.md in
// this folder specifies the format; this package is its Go reading, plus the helpers the Go runners
// share: seeding KV, building the signed request, the scripted subscriber and the checks.
package conformance

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/signature"
)

//go:embed scenarios.json
var scenariosJSON []byte

// Placeholders in a subscriber record's "url" that runners replace.
const (
	// PlaceholderSubscriber is the scripted subscriber's base URL, e.g. http://127.0.0.1:41234.
	PlaceholderSubscriber = "{{subscriber}}"
	// PlaceholderUnreachable is a base URL on 127.0.0.1 where nothing listens.
	PlaceholderUnreachable = "{{unreachable}}"
)

// Suite is the whole scenario file.
type Suite struct {
	Version int `json:"version"`
	// Secrets names the whsec_ secrets scenarios sign with.
	Secrets map[string]string `json:"secrets"`
	// Config is the edge configuration every scenario runs under.
	Config    EdgeConfig `json:"config"`
	Scenarios []Scenario `json:"scenarios"`
}

// EdgeConfig is the relay configuration, in the units of the Worker's vars.
type EdgeConfig struct {
	Secrets          []string `json:"secrets"` // names in Suite.Secrets, in order
	ToleranceSeconds int64    `json:"tolerance_seconds"`
	DedupTTLSeconds  int64    `json:"dedup_ttl_seconds"`
	MaxBodyBytes     int64    `json:"max_body_bytes"`
}

// Scenario starts from empty KV namespaces, seeds them, then runs its steps in order.
type Scenario struct {
	Name  string `json:"name"`
	About string `json:"about"`
	// Subscribers seeds the SUBSCRIBERS namespace under "sub:<id>".
	Subscribers map[string]SubscriberSeed `json:"subscribers"`
	// Dedup seeds the DEDUP namespace.
	Dedup []KVSeed `json:"dedup"`
	Steps []Step   `json:"steps"`
}

// SubscriberSeed is a subscriber record (JSON-encoded by the runner, after replacing the URL
// placeholders) or, for malformed records, the raw KV value.
type SubscriberSeed struct {
	Record json.RawMessage `json:"record,omitempty"`
	Raw    *string         `json:"raw,omitempty"`
}

// KVSeed is one DEDUP entry. With NowOffsetMS set, the value is the runner's current unix time in
// milliseconds plus that offset, as a decimal string (a coalescing mark written that long ago).
type KVSeed struct {
	Key         string `json:"key"`
	Value       string `json:"value,omitempty"`
	NowOffsetMS *int64 `json:"now_offset_ms,omitempty"`
}

// Step is one request to the edge, the subscriber's scripted behaviour, and what must follow.
type Step struct {
	Request  StepRequest `json:"request"`
	Upstream Upstream    `json:"upstream"`
	Expect   Expect      `json:"expect"`
}

// StepRequest describes the request the origin would send.
type StepRequest struct {
	Method string `json:"method"`
	Hop    Hop    `json:"hop"`
	// SignWith names the secrets of the hop signature (several give a space-separated list).
	SignWith []string          `json:"sign_with"`
	Headers  map[string]string `json:"headers"`
	Body     string            `json:"body"`
	// BodyBytes, when positive, replaces Body with that many 'x' bytes.
	BodyBytes int `json:"body_bytes"`
	// SendBody, when set, is sent instead of the signed body (a tampered body).
	SendBody *string `json:"send_body"`
	// OmitHeaders are removed after signing; SetHeaders are set after signing.
	OmitHeaders []string          `json:"omit_headers"`
	SetHeaders  map[string]string `json:"set_headers"`
}

// Hop is the signed hop fields; the timestamp is relative to the runner's clock.
type Hop struct {
	DeliveryID             string `json:"delivery_id"`
	SubscriberID           string `json:"subscriber_id"`
	EventType              string `json:"event_type"`
	CoalesceKey            string `json:"coalesce_key"`
	Attempt                int    `json:"attempt"`
	TimestampOffsetSeconds int64  `json:"timestamp_offset_seconds"`
}

// Upstream scripts the subscriber for one step.
type Upstream struct {
	Status  int               `json:"status"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	// BodyBytes, when positive, replaces Body with that many 'y' bytes.
	BodyBytes int `json:"body_bytes"`
	// Hang makes the subscriber never answer (until the edge gives up).
	Hang bool `json:"hang"`
	// CutBody makes the subscriber declare a Content-Length 100 bytes longer than its body, send
	// the status, headers and body, and close the connection: the body breaks off.
	CutBody bool `json:"cut_body"`
	// StallBody is CutBody with the connection left open until the edge gives up: the body stalls.
	StallBody bool `json:"stall_body"`
	// HeaderBytes, when positive, adds a header X-Pad of that many 'p' bytes.
	HeaderBytes int `json:"header_bytes"`
	// ContentEncoding, when set ("gzip", "br" or "deflate", the zlib format of RFC 9110), sends
	// the body compressed so, with that Content-Encoding.
	ContentEncoding string `json:"content_encoding"`
}

// Expect is what the edge must do.
type Expect struct {
	Status  int    `json:"status"`
	Outcome string `json:"outcome"`
	// Headers must be present with exactly these values (names in any case).
	Headers map[string]string `json:"headers"`
	// HeadersAbsent must not be present.
	HeadersAbsent []string `json:"headers_absent"`
	// Body, when set, must equal the response body; BodyLength, when set, its length.
	Body       *string `json:"body"`
	BodyLength *int    `json:"body_length"`
	// BodyAsAnswered requires the response body to be the subscriber's answer byte for byte, as it
	// was sent (still encoded): a Content-Encoding the edge does not decode.
	BodyAsAnswered bool `json:"body_as_answered"`
	// UpstreamLatency requires Edgehook-Upstream-Latency-Ms to be a non-negative integer.
	UpstreamLatency bool `json:"upstream_latency"`
	// Forwarded says whether the subscriber received the request (exactly once) in this step.
	Forwarded bool `json:"forwarded"`
	// ForwardedRequest checks what the subscriber received, when Forwarded.
	ForwardedRequest *ForwardedRequest `json:"forwarded_request"`
	// KV checks the DEDUP namespace after the step.
	KV *KVExpect `json:"kv"`
}

// ForwardedRequest checks the request the subscriber received.
type ForwardedRequest struct {
	// Path is the request target the subscriber received, its query included, as it came.
	Path          string            `json:"path"`
	Headers       map[string]string `json:"headers"`
	HeadersAbsent []string          `json:"headers_absent"`
	// BodyIdentical requires the body to be byte-identical to the body the edge received.
	BodyIdentical bool `json:"body_identical"`
}

// KVExpect checks the DEDUP namespace.
type KVExpect struct {
	Present []string `json:"present"`
	Absent  []string `json:"absent"`
	// TTLSeconds are the expected expirations, relative to the time of the write (±2 s).
	TTLSeconds map[string]int64 `json:"ttl_seconds"`
	// NowMS lists keys whose value must be a unix time in milliseconds within 5 s of now.
	NowMS []string `json:"now_ms"`
}

// Load parses the embedded scenarios.json strictly and checks it.
func Load() (*Suite, error) { return Parse(scenariosJSON) }

// Parse parses a scenario file strictly (unknown fields are errors) and checks it.
func Parse(data []byte) (*Suite, error) {
	var s Suite
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("conformance: scenarios: %w", err)
	}
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("conformance: scenarios: %w", err)
	}
	return &s, nil
}

// SecretsNamed parses the named secrets, in order.
func (s *Suite) SecretsNamed(names []string) ([]signature.Secret, error) {
	out := make([]signature.Secret, 0, len(names))
	for _, n := range names {
		text, ok := s.Secrets[n]
		if !ok {
			return nil, fmt.Errorf("secret %q is not in \"secrets\"", n)
		}
		sec, err := signature.ParseSecret(text)
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", n, err)
		}
		out = append(out, sec)
	}
	return out, nil
}

func (s *Suite) check() error {
	if s.Version != 1 {
		return fmt.Errorf("version %d, want 1", s.Version)
	}
	if _, err := s.SecretsNamed(s.Config.Secrets); err != nil {
		return fmt.Errorf("config.secrets: %w", err)
	}
	seen := map[string]bool{}
	for i := range s.Scenarios {
		sc := &s.Scenarios[i]
		if sc.Name == "" || seen[sc.Name] {
			return fmt.Errorf("scenarios[%d]: name %q is empty or repeated", i, sc.Name)
		}
		seen[sc.Name] = true
		if len(sc.Steps) == 0 {
			return fmt.Errorf("scenario %s: no steps", sc.Name)
		}
		for id, sub := range sc.Subscribers {
			if (sub.Record == nil) == (sub.Raw == nil) {
				return fmt.Errorf("scenario %s: subscriber %s needs exactly one of record and raw", sc.Name, id)
			}
		}
		for j, st := range sc.Steps {
			if _, err := s.SecretsNamed(st.Request.SignWith); err != nil {
				return fmt.Errorf("scenario %s step %d: sign_with: %w", sc.Name, j+1, err)
			}
			if st.Expect.Status == 0 || st.Expect.Outcome == "" {
				return fmt.Errorf("scenario %s step %d: expect.status and expect.outcome are required", sc.Name, j+1)
			}
			if ce := st.Upstream.ContentEncoding; ce != "" && encoders[ce] == nil {
				return fmt.Errorf("scenario %s step %d: upstream.content_encoding %q is none of gzip, br, deflate", sc.Name, j+1, ce)
			}
		}
	}
	return nil
}

// RelayConfig is the suite's edge configuration as a relay.Config.
func (s *Suite) RelayConfig() (relay.Config, error) {
	secrets, err := s.SecretsNamed(s.Config.Secrets)
	if err != nil {
		return relay.Config{}, err
	}
	return relay.Config{
		Secrets:   secrets,
		Tolerance: time.Duration(s.Config.ToleranceSeconds) * time.Second,
		DedupTTL:  time.Duration(s.Config.DedupTTLSeconds) * time.Second,
		MaxBody:   s.Config.MaxBodyBytes,
	}, nil
}

// ValueAt is the seed's value for a runner whose clock reads now.
func (k KVSeed) ValueAt(now time.Time) string {
	if k.NowOffsetMS != nil {
		return strconv.FormatInt(now.UnixMilli()+*k.NowOffsetMS, 10)
	}
	return k.Value
}

// SubscriberValue returns the KV value for a seed, with the URL placeholders replaced.
func SubscriberValue(seed SubscriberSeed, subscriberURL, unreachableURL string) string {
	if seed.Raw != nil {
		return *seed.Raw
	}
	r := strings.NewReplacer(PlaceholderSubscriber, subscriberURL, PlaceholderUnreachable, unreachableURL)
	return r.Replace(string(seed.Record))
}

// StillClock is the Go runners' clock: it reads the same instant for a whole scenario, so every
// Retry-After and TTL is exact (workerd, on the real clock, is allowed the seconds that passed).
type StillClock struct{ At time.Time }

// Now returns the instant the clock stands at.
func (c StillClock) Now() time.Time { return c.At }

// RunnerEpoch is where the Go runners' StillClock stands.
var RunnerEpoch = time.Unix(1_800_000_000, 0)
