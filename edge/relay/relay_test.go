package relay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var now = time.Unix(1_800_000_000, 0)

type fixedClock struct{}

func (fixedClock) Now() time.Time { return now }

// faultyKV fails the operations whose key has a given prefix, or stalls them, and otherwise
// delegates.
type faultyKV struct {
	relay.KV
	failGet, failPut   string
	stallGet, stallPut string
	began              time.Time // when the request began, by the wall clock (see stall)
}

func (k faultyKV) Get(ctx context.Context, key string) (string, bool, error) {
	if k.failGet != "" && strings.HasPrefix(key, k.failGet) {
		return "", false, errors.New("kv down")
	}
	if k.stallGet != "" && strings.HasPrefix(key, k.stallGet) {
		return "", false, k.stall(ctx)
	}
	return k.KV.Get(ctx, key)
}

func (k faultyKV) Put(ctx context.Context, key, value string, ttl time.Duration) error {
	if k.failPut != "" && strings.HasPrefix(key, k.failPut) {
		return errors.New("kv full")
	}
	if k.stallPut != "" && (k.stallPut == anyKey || strings.HasPrefix(key, k.stallPut)) {
		return k.stall(ctx)
	}
	return k.KV.Put(ctx, key, value, ttl)
}

// stall is a KV call that never answers: it gives up at ctx's deadline, as the Worker's KV does
// (its loader keeps the time), or after stallLimit, which no test should reach. The deadline is
// by the relay's clock, fixed at now, so the time left is read as if that clock had run since
// the request began: a second call under the same deadline has less of it.
func (k faultyKV) stall(ctx context.Context) error {
	wait := stallLimit
	d, ok := ctx.Deadline()
	if ok {
		wait = min(wait, d.Sub(now)-time.Since(k.began))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		if ok && wait < stallLimit {
			return context.DeadlineExceeded
		}
		return errors.New("stalled call ended by the test after " + stallLimit.String())
	}
}

const stallLimit = 3 * relay.KVTimeout

// anyKey as faultyKV.stallPut stalls every write.
const anyKey = "*"

// upstreamFunc is a relay.Upstream made of a function.
type upstreamFunc func(*relay.UpstreamRequest) (*relay.UpstreamResponse, error)

func (f upstreamFunc) Do(_ context.Context, r *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	return f(r)
}

func ok200(*relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	return &relay.UpstreamResponse{Status: 200, Header: relay.Header{}}, nil
}

func secret(t *testing.T) signature.Secret {
	t.Helper()
	s, err := signature.ParseSecret("whsec_" + strings.Repeat("AQID", 8))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fixture is a relay over in-memory KV holding subscriber "sub_a", with hooks for faults.
type fixture struct {
	subs, dedup *memkv.Store
	secret      signature.Secret
}

func newFixture(t *testing.T, record string) *fixture {
	f := &fixture{subs: memkv.New(fixedClock{}), dedup: memkv.New(fixedClock{}), secret: secret(t)}
	_ = f.subs.Put(context.Background(), wire.SubscriberKey("sub_a"), record, 0)
	return f
}

func (f *fixture) relay(t *testing.T, subs, dedup relay.KV, up relay.Upstream) *relay.Relay {
	t.Helper()
	r, err := relay.New(relay.Config{Secrets: []signature.Secret{f.secret}, Tolerance: time.Minute, DedupTTL: time.Hour, MaxBody: 1024},
		relay.Deps{Subscribers: subs, Dedup: dedup, Upstream: up, Clock: fixedClock{}})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) request(coalesceKey string, extra map[string]string) *relay.Request {
	body := []byte(`{"a":1}`)
	h := relay.Header{}
	for k, v := range extra {
		h.Set(k, v)
	}
	signature.SetHopHeaders(&h, []signature.Secret{f.secret}, &signature.Hop{
		DeliveryID: "del_1", SubscriberID: "sub_a", EventType: "video.trending", CoalesceKey: coalesceKey,
		Attempt: 1, Timestamp: now.Unix(),
	}, body)
	return &relay.Request{Method: "POST", Header: h, Body: body}
}

const plainRecord = `{"url":"http://127.0.0.1:1/h","timeout_ms":1000,"active":true,"headers":{"X-Token":"t"}}`
const coalesceRecord = `{"url":"http://127.0.0.1:1/h","timeout_ms":1000,"active":true,
  "coalesce":{"event_types":["video.*"],"key":"id","window_seconds":30}}`

// faultyRead handles one request of subscriber sub_a (record) with fault (its KV left unset) over
// SUBSCRIBERS when inSubs, else over DEDUP; it returns the answer and whether the subscriber was
// called.
func faultyRead(t *testing.T, record string, fault faultyKV, inSubs bool, coalesceKey string) (*relay.Response, bool) {
	f := newFixture(t, record)
	var subs, dedup relay.KV = f.subs, f.dedup
	if inSubs {
		fault.KV, subs = f.subs, &fault
	} else {
		fault.KV, dedup = f.dedup, &fault
	}
	fault.began = time.Now()
	called := false
	resp := f.relay(t, subs, dedup, upstreamFunc(func(r *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
		called = true
		return ok200(r)
	})).Handle(context.Background(), f.request(coalesceKey, nil))
	return resp, called
}

func TestKVReadFailureIsRetryable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, record, failGet, coalesceKey string
		inSubs                             bool
	}{
		{"subscriber record", plainRecord, "sub:", "", true},
		{"dedup mark", plainRecord, "d:", "", false},
		{"coalesce mark", coalesceRecord, "c:", "k1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, called := faultyRead(t, tc.record, faultyKV{failGet: tc.failGet}, tc.inSubs, tc.coalesceKey)
			if resp.Status != 503 || resp.Header.Get(wire.HeaderOutcome) != "rejected:"+wire.ReasonKVUnavailable || called {
				t.Fatalf("got %d %q (forwarded %v), want 503 rejected:%s without forwarding", resp.Status, resp.Header.Get(wire.HeaderOutcome), called, wire.ReasonKVUnavailable)
			}
			if !strings.Contains(resp.Detail, "kv down") {
				t.Errorf("detail %q does not carry the KV error", resp.Detail)
			}
		})
	}
}

// TestStalledKVFailsAfterKVTimeout: a KV call that never answers ends after relay.KVTimeout as a
// failed one would: a read in 503 rejected:kv_unavailable (the edge's fault, waited out by the
// origin) without calling the subscriber; the mark writes after a 2xx, stalled both, together
// within one KVTimeout, in the subscriber's answer with Edgehook-Mark-Failed. Unbounded, the
// request waited for the origin's own timeout, counted against the subscriber's circuit.
func TestStalledKVFailsAfterKVTimeout(t *testing.T) {
	t.Parallel()
	within := relay.KVTimeout + relay.KVTimeout/2
	for _, tc := range []struct {
		name, stallGet, coalesceKey string
		inSubs                      bool
	}{
		{"subscriber record read", "sub:", "", true},
		{"dedup mark read", "d:", "", false},
		{"coalesce mark read", "c:", "k1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			resp, called := faultyRead(t, coalesceRecord, faultyKV{stallGet: tc.stallGet}, tc.inSubs, tc.coalesceKey)
			took := time.Since(start)
			if resp.Status != 503 || resp.Header.Get(wire.HeaderOutcome) != "rejected:"+wire.ReasonKVUnavailable || called {
				t.Fatalf("got %d %q (forwarded %v), want 503 rejected:%s without forwarding", resp.Status, resp.Header.Get(wire.HeaderOutcome), called, wire.ReasonKVUnavailable)
			}
			if took > within || !strings.Contains(resp.Detail, context.DeadlineExceeded.Error()) {
				t.Errorf("answered after %s (want within %s, relay.KVTimeout %s), detail %q", took, within, relay.KVTimeout, resp.Detail)
			}
		})
	}
	t.Run("mark writes", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, coalesceRecord)
		dedup := faultyKV{KV: f.dedup, stallPut: anyKey, began: time.Now()} // the dedup and the coalesce mark
		start := time.Now()
		resp := f.relay(t, f.subs, dedup, upstreamFunc(ok200)).Handle(context.Background(), f.request("k1", nil))
		took := time.Since(start)
		if resp.Status != 200 || resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeForwarded) {
			t.Fatalf("got %d %q, want 200 forwarded", resp.Status, resp.Header.Get(wire.HeaderOutcome))
		}
		if v := resp.Header.Get(wire.HeaderMarkFailed); v != wire.MarkDedup+", "+wire.MarkCoalesce {
			t.Errorf("%s %q, want %q", wire.HeaderMarkFailed, v, wire.MarkDedup+", "+wire.MarkCoalesce)
		}
		if took > within || !strings.Contains(resp.Detail, context.DeadlineExceeded.Error()) {
			t.Errorf("answered after %s (want within %s: one relay.KVTimeout %s for both writes), detail %q", took, within, relay.KVTimeout, resp.Detail)
		}
	})
}

// TestConcurrentDuplicatesAreBothForwarded pins docs/PROTOCOL.md §6: the d: mark is no lock, so
// two requests of one delivery in flight at once both reach the subscriber; the next is a
// duplicate.
func TestConcurrentDuplicatesAreBothForwarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, plainRecord)
	arrived, release := make(chan struct{}, 2), make(chan struct{})
	r := f.relay(t, f.subs, f.dedup, upstreamFunc(func(req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
		arrived <- struct{}{}
		<-release
		return ok200(req)
	}))
	answers := make(chan *relay.Response, 2)
	for range 2 {
		go func() { answers <- r.Handle(context.Background(), f.request("", nil)) }()
	}
	<-arrived
	<-arrived // both are at the subscriber before either is answered
	close(release)
	for range 2 {
		if resp := <-answers; resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeForwarded) {
			t.Errorf("outcome %q, want forwarded", resp.Header.Get(wire.HeaderOutcome))
		}
	}
	if resp := r.Handle(context.Background(), f.request("", nil)); resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeDuplicate) {
		t.Errorf("the next request: outcome %q, want duplicate", resp.Header.Get(wire.HeaderOutcome))
	}
}

func TestFailedMarkWriteKeepsTheSubscribersAnswer(t *testing.T) {
	t.Parallel()
	f := newFixture(t, coalesceRecord)
	dedup := faultyKV{KV: f.dedup, failPut: "d:"}
	resp := f.relay(t, f.subs, dedup, upstreamFunc(ok200)).Handle(context.Background(), f.request("k1", nil))
	if resp.Status != 200 || resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeForwarded) {
		t.Fatalf("got %d %q, want 200 forwarded", resp.Status, resp.Header.Get(wire.HeaderOutcome))
	}
	if !strings.Contains(resp.Detail, "write d:del_1: kv full") {
		t.Errorf("detail %q does not name the failed write", resp.Detail)
	}
	if v, ok := resp.Header.Lookup(wire.HeaderMarkFailed); v != wire.MarkDedup {
		t.Errorf("%s %q (present %v), want %q: the origin must be told", wire.HeaderMarkFailed, v, ok, wire.MarkDedup)
	}
	if ok := f.relay(t, f.subs, f.dedup, upstreamFunc(ok200)).Handle(context.Background(), f.request("k2", nil)); ok.Header.Get(wire.HeaderMarkFailed) != "" {
		t.Errorf("%s on a delivery whose marks were written", wire.HeaderMarkFailed)
	}
	if _, _, found := f.dedup.Lookup(wire.CoalesceKey("sub_a", "k1")); !found {
		t.Error("the coalesce mark was not written although only the dedup write failed")
	}
}

// movableClock is a Clock a test moves.
type movableClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *movableClock) Now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *movableClock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// TestAReplayOfAHopFromAheadIsAnsweredFromItsMark: a hop is accepted while its stamp is within
// the tolerance either side of the clock. One from an origin whose clock is a minute ahead stays
// acceptable two minutes after it was forwarded; its mark (DedupTTL a minute, as short as Config
// allows) must last as long, or a replay of the captured request after a minute and a second
// reaches the subscriber again. Once the stamp is out of tolerance the replay is refused.
func TestAReplayOfAHopFromAheadIsAnsweredFromItsMark(t *testing.T) {
	t.Parallel()
	clock := &movableClock{t: now}
	subs, dedup := memkv.New(clock), memkv.New(clock)
	_ = subs.Put(context.Background(), wire.SubscriberKey("sub_a"), plainRecord, 0)
	sec := secret(t)
	forwards := 0
	r, err := relay.New(relay.Config{Secrets: []signature.Secret{sec}, Tolerance: time.Minute, DedupTTL: time.Minute, MaxBody: 1024},
		relay.Deps{Subscribers: subs, Dedup: dedup, Clock: clock, Upstream: upstreamFunc(func(req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
			forwards++
			return ok200(req)
		})})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"a":1}`)
	h := relay.Header{}
	signature.SetHopHeaders(&h, []signature.Secret{sec}, &signature.Hop{
		DeliveryID: "del_replay", SubscriberID: "sub_a", EventType: "video.trending", Attempt: 1, Timestamp: now.Unix() + 60,
	}, body)
	captured := func() *relay.Request {
		return &relay.Request{Method: "POST", Header: append(relay.Header(nil), h...), Body: body}
	}
	for _, tc := range []struct {
		after   time.Duration
		status  int
		outcome wire.Outcome
	}{
		{0, 200, wire.OutcomeForwarded},
		{61 * time.Second, 200, wire.OutcomeDuplicate},                     // the stamp is a second old
		{120 * time.Second, 200, wire.OutcomeDuplicate},                    // the last second within tolerance
		{121 * time.Second, 401, wire.Rejected(wire.ReasonStaleTimestamp)}, // out of tolerance
	} {
		clock.Set(now.Add(tc.after))
		resp := r.Handle(context.Background(), captured())
		if resp.Status != tc.status || resp.Header.Get(wire.HeaderOutcome) != string(tc.outcome) {
			t.Errorf("after %s: %d %q (%s), want %d %s", tc.after, resp.Status, resp.Header.Get(wire.HeaderOutcome), resp.Detail, tc.status, tc.outcome)
		}
	}
	if forwards != 1 {
		t.Errorf("the subscriber got the delivery %d times, want once", forwards)
	}
}

// forward relays a request carrying extra headers to a subscriber that answers 200, and returns
// the headers the subscriber got and the edge's answer.
func (f *fixture) forward(t *testing.T, extra map[string]string) (relay.Header, *relay.Response) {
	t.Helper()
	var got relay.Header
	r := f.relay(t, f.subs, f.dedup, upstreamFunc(func(req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
		got = req.Header
		return ok200(req)
	}))
	resp := r.Handle(context.Background(), f.request("", extra))
	return got, resp
}

func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	got, _ := newFixture(t, plainRecord).forward(t, map[string]string{
		"Webhook-Id": "evt_1", "Content-Type": "application/json", "X-VVV-Signature": "sha256=ab",
		"Host": "edge.example", "Content-Length": "7", "Connection": "keep-alive", "CF-Connecting-IP": "192.0.2.1",
		"X-Forwarded-For": "192.0.2.1", "X-Real-IP": "192.0.2.1", "Edgehook-Unknown": "x", "X-Token": "from-origin",
		"Keep-Alive": "timeout=5", "Proxy-Connection": "close", "Proxy-Authorization": "Basic x", "TE": "trailers",
		"Trailer": "X", "Transfer-Encoding": "chunked", "Upgrade": "h2c",
		// The origin's address as Cloudflare's True-Client-IP transform or an RFC 7239 proxy puts it.
		"True-Client-IP": "192.0.2.1", "Forwarded": "for=192.0.2.1", "Accept-Encoding": "gzip",
		// Cloudflare's loop detection on the origin's request to the edge (RFC 8586).
		"CDN-Loop": "cloudflare; loops=1",
		// Near misses of stripped names are forwarded.
		"Hosts": "h", "Upgrade-Insecure-Requests": "1", "Tea": "t", "Content-Language": "en", "Edgehook": "e",
		"True-Client": "t", "Forwarded-By": "f", "Accept": "*/*", "CDN": "c",
	})
	want := map[string]string{"webhook-id": "evt_1", "content-type": "application/json", "x-vvv-signature": "sha256=ab", "x-token": "t",
		"hosts": "h", "upgrade-insecure-requests": "1", "tea": "t", "content-language": "en", "edgehook": "e",
		"true-client": "t", "forwarded-by": "f", "accept": "*/*", "cdn": "c"}
	if fmt.Sprint(got.Map()) != fmt.Sprint(want) || len(got) != len(want) {
		t.Errorf("forwarded %v, want %v", got, want)
	}
}

func TestUnparsableCoalesceMarkForwards(t *testing.T) {
	t.Parallel()
	f := newFixture(t, coalesceRecord)
	key := wire.CoalesceKey("sub_a", "k1")
	_ = f.dedup.Put(context.Background(), key, "not-a-time", 0)
	resp := f.relay(t, f.subs, f.dedup, upstreamFunc(ok200)).Handle(context.Background(), f.request("k1", nil))
	if resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeForwarded) {
		t.Fatalf("outcome %q, want forwarded", resp.Header.Get(wire.HeaderOutcome))
	}
	if v, exp, _ := f.dedup.Lookup(key); v != fmt.Sprint(now.UnixMilli()) || !exp.Equal(now.Add(relay.MinKVTTL)) {
		t.Errorf("mark %q expiring %v, want %d expiring %v", v, exp, now.UnixMilli(), now.Add(relay.MinKVTTL))
	}
}

func TestUpstreamErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err     error
		status  int
		outcome wire.Outcome
	}{
		{fmt.Errorf("x: %w", relay.ErrUpstreamTimeout), 504, wire.OutcomeUpstreamTimeout},
		{context.DeadlineExceeded, 504, wire.OutcomeUpstreamTimeout},
		{errors.New("connection refused"), 502, wire.OutcomeUpstreamUnreachable},
		{fmt.Errorf("x: %w", relay.ErrUpstreamBlocked), 403, wire.Rejected(wire.ReasonBlockedAddress)},
	} {
		f := newFixture(t, plainRecord)
		resp := f.relay(t, f.subs, f.dedup, upstreamFunc(func(*relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
			return nil, tc.err
		})).Handle(context.Background(), f.request("", nil))
		if resp.Status != tc.status || resp.Header.Get(wire.HeaderOutcome) != string(tc.outcome) {
			t.Errorf("%v: got %d %q, want %d %q", tc.err, resp.Status, resp.Header.Get(wire.HeaderOutcome), tc.status, tc.outcome)
		}
		if _, _, found := f.dedup.Lookup(wire.DedupKey("del_1")); found {
			t.Errorf("%v: dedup mark written", tc.err)
		}
	}
}

func TestNewRefusesMissingDeps(t *testing.T) {
	t.Parallel()
	cfg := relay.Config{Secrets: []signature.Secret{secret(t)}, Tolerance: time.Minute, DedupTTL: time.Hour, MaxBody: 1}
	kv := memkv.New(fixedClock{})
	full := relay.Deps{Subscribers: kv, Dedup: kv, Upstream: upstreamFunc(ok200), Clock: fixedClock{}}
	for name, mutate := range map[string]func(*relay.Deps){
		"Subscribers": func(d *relay.Deps) { d.Subscribers = nil },
		"Dedup":       func(d *relay.Deps) { d.Dedup = nil },
		"Upstream":    func(d *relay.Deps) { d.Upstream = nil },
		"Clock":       func(d *relay.Deps) { d.Clock = nil },
	} {
		d := full
		mutate(&d)
		if _, err := relay.New(cfg, d); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("nil %s: error %v, want one naming it", name, err)
		}
	}
	if _, err := relay.New(cfg, full); err != nil {
		t.Errorf("complete deps: %v", err)
	}
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	sec := secret(t).String()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cfg, err := relay.ParseConfig(env(relay.EnvSecret, sec+", "+sec))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Secrets) != 2 || cfg.Tolerance != relay.DefaultTolerance || cfg.DedupTTL != relay.DefaultDedupTTL || cfg.MaxBody != relay.DefaultMaxBody {
		t.Errorf("defaults: %+v", cfg)
	}
	cfg, err = relay.ParseConfig(env(relay.EnvSecret, sec, relay.EnvTolerance, "30", relay.EnvDedupTTL, "60", relay.EnvMaxBody, "10"))
	if err != nil || cfg.Tolerance != 30*time.Second || cfg.DedupTTL != time.Minute || cfg.MaxBody != 10 {
		t.Errorf("explicit: %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		env  []string
		name string
	}{
		{nil, relay.EnvSecret},
		{[]string{relay.EnvSecret, "whsec_short"}, relay.EnvSecret},
		{[]string{relay.EnvSecret, sec, relay.EnvTolerance, "soon"}, relay.EnvTolerance},
		{[]string{relay.EnvSecret, sec, relay.EnvTolerance, "0"}, relay.EnvTolerance},
		{[]string{relay.EnvSecret, sec, relay.EnvDedupTTL, "59"}, relay.EnvDedupTTL},
		{[]string{relay.EnvSecret, sec, relay.EnvDedupTTL, "99999999999999"}, relay.EnvDedupTTL},
		// Marks must outlive the tolerance: a replay past the mark would be forwarded again.
		{[]string{relay.EnvSecret, sec, relay.EnvDedupTTL, "120"}, relay.EnvDedupTTL}, // default tolerance 300 s
		{[]string{relay.EnvSecret, sec, relay.EnvTolerance, "3601", relay.EnvDedupTTL, "3600"}, relay.EnvDedupTTL},
		{[]string{relay.EnvSecret, sec, relay.EnvMaxBody, "0"}, relay.EnvMaxBody},
		{[]string{relay.EnvSecret, sec, relay.EnvMaxBody, "-1"}, relay.EnvMaxBody},
	} {
		if _, err := relay.ParseConfig(env(tc.env...)); err == nil || !strings.HasPrefix(err.Error(), tc.name+":") {
			t.Errorf("%v: error %v, want one starting with %s", tc.env, err, tc.name)
		}
	}
}

func TestHeaderIsCaseInsensitive(t *testing.T) {
	t.Parallel()
	h := relay.Header{}
	h.Set("Retry-After", "5")
	h.Set("retry-AFTER", "6") // replaces
	if h.Get("retry-after") != "6" || h.Get("RETRY-AFTER") != "6" || len(h) != 1 {
		t.Errorf("header %v", h)
	}
	if _, ok := h.Lookup("Retry"); ok {
		t.Errorf("Lookup of a prefix found it: %v", h)
	}
	h.Del("rEtry-after")
	if len(h) != 0 {
		t.Errorf("after Del: %v", h)
	}
	// Get lower-cases short ASCII names in a buffer and falls back to strings.ToLower otherwise.
	long := "X-" + strings.Repeat("Long", 20)
	h.Set(long, "l")
	h.Set("X-Ünicode", "u")
	if h.Get(strings.ToLower(long)) != "l" || h.Get(strings.ToUpper(long)) != "l" || h.Get("x-ünicode") != "u" || h.Get("X-ÜNICODE") != "u" {
		t.Errorf("long or non-ASCII names: %v", h)
	}
	// Every ASCII byte, at every position of names of every length up to the buffer's 64 bytes,
	// finds the entry strings.ToLower names, past one that no such name matches.
	filler := strings.Repeat("f", 65)
	for n := 1; n <= 64; n++ {
		for c := range 128 {
			name := []byte(strings.Repeat("Ab-", 22)[:n])
			name[c%n] = byte(c)
			h := relay.Header{{Name: filler, Value: "f"}, {Name: strings.ToLower(string(name)), Value: "v"}}
			if h.Get(string(name)) != "v" {
				t.Fatalf("Get(%q) missed the entry %q", name, strings.ToLower(string(name)))
			}
		}
	}
}

// The decoded-record cache is keyed by the exact KV value, so an updated record takes effect.
func TestUpdatedRecordTakesEffect(t *testing.T) {
	t.Parallel()
	f := newFixture(t, plainRecord)
	r := f.relay(t, f.subs, forgetfulKV{}, upstreamFunc(ok200))
	if resp := r.Handle(context.Background(), f.request("", nil)); resp.Status != 200 {
		t.Fatalf("active: %d %s", resp.Status, resp.Detail)
	}
	_ = f.subs.Put(context.Background(), wire.SubscriberKey("sub_a"), strings.Replace(plainRecord, `"active":true`, `"active":false`, 1), 0)
	if resp := r.Handle(context.Background(), f.request("", nil)); resp.Status != 404 {
		t.Fatalf("after deactivation: %d %s, want 404", resp.Status, resp.Detail)
	}
	// Back to the first record, which the relay has decoded before.
	_ = f.subs.Put(context.Background(), wire.SubscriberKey("sub_a"), plainRecord, 0)
	if resp := r.Handle(context.Background(), f.request("", nil)); resp.Status != 200 {
		t.Fatalf("reactivated: %d %s", resp.Status, resp.Detail)
	}
}

// TestReadAll: with Deps.ReadAll the relay hands it every key of the request in one call, in the
// order subscriber record, dedup mark, coalesce mark, and acts on the results it fills in.
func TestReadAll(t *testing.T) {
	t.Parallel()
	f := newFixture(t, coalesceRecord)
	var calls [][]string
	readAll := func(ctx context.Context, reads []relay.KVRead) {
		var keys []string
		for i := range reads {
			keys = append(keys, reads[i].Key)
			reads[i].Value, reads[i].Found, reads[i].Err = reads[i].KV.Get(ctx, reads[i].Key)
		}
		calls = append(calls, keys)
	}
	r, err := relay.New(relay.Config{Secrets: []signature.Secret{f.secret}, Tolerance: time.Minute, DedupTTL: time.Hour, MaxBody: 1024},
		relay.Deps{Subscribers: f.subs, Dedup: faultyKV{KV: f.dedup, failGet: "c:"}, Upstream: upstreamFunc(ok200), Clock: fixedClock{}, ReadAll: readAll})
	if err != nil {
		t.Fatal(err)
	}
	resp := r.Handle(context.Background(), f.request("k1", nil))
	want := [][]string{{wire.SubscriberKey("sub_a"), wire.DedupKey("del_1"), wire.CoalesceKey("sub_a", "k1")}}
	if fmt.Sprint(calls) != fmt.Sprint(want) {
		t.Fatalf("ReadAll calls %v, want %v", calls, want)
	}
	if resp.Status != 503 || !strings.Contains(resp.Detail, "kv down") {
		t.Fatalf("got %d %q, want 503 with the coalesce mark's read error", resp.Status, resp.Detail)
	}
}

// TestHopHeadersReadInOnePass: the relay collects the hop headers in one pass over the request's
// (hopText), so each required one is still required by its exact name, a name that only starts
// like one does not stand in for it, and an optional coalesce key is read.
func TestHopHeadersReadInOnePass(t *testing.T) {
	t.Parallel()
	f := newFixture(t, coalesceRecord)
	r := f.relay(t, f.subs, f.dedup, upstreamFunc(ok200))
	for _, name := range []string{wire.HeaderDeliveryID, wire.HeaderSubscriberID, wire.HeaderEventType,
		wire.HeaderAttempt, wire.HeaderHopTimestamp, wire.HeaderHopSignature} {
		req := f.request("", nil)
		v := req.Header.Get(name)
		req.Header.Del(name)
		req.Header.Set(name+"x", v) // a near miss
		req.Header.Set(name[:len(name)-1], v)
		resp := r.Handle(context.Background(), req)
		if resp.Status != 400 || resp.Header.Get(wire.HeaderOutcome) != "rejected:"+wire.ReasonMissingHeader || !strings.Contains(resp.Detail, name) {
			t.Errorf("without %s: got %d %q %q, want 400 rejected:%s naming it", name, resp.Status, resp.Header.Get(wire.HeaderOutcome), resp.Detail, wire.ReasonMissingHeader)
		}
	}
	// The coalesce key is signed: dropping it breaks the signature, so the relay read it.
	req := f.request("k1", nil)
	req.Header.Del(wire.HeaderCoalesceKey)
	if resp := r.Handle(context.Background(), req); resp.Status != 401 {
		t.Errorf("without the signed coalesce key: got %d %q, want 401", resp.Status, resp.Detail)
	}
	if resp := r.Handle(context.Background(), f.request("k1", nil)); resp.Status != 200 {
		t.Errorf("with every hop header: got %d %q, want 200", resp.Status, resp.Detail)
	}
}

// TestHandleWithReusedScratch relays deliveries to several subscribers through one Scratch, as the
// WASI module does: every answer, forwarded request and dedup mark is the one of its own delivery,
// and the marks stay right after later requests reused the memory their keys were built in.
func TestHandleWithReusedScratch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, plainRecord)
	var forwarded []string
	r := f.relay(t, f.subs, f.dedup, upstreamFunc(func(req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
		forwarded = append(forwarded, fmt.Sprint(req.URL, req.Header.Map()))
		return ok200(req)
	}))
	var s relay.Scratch
	var want []string
	for i := range 6 {
		sub, del := fmt.Sprintf("sub_%d", i%3), fmt.Sprintf("del_%s_%d", strings.Repeat("x", 100*(i%2)), i)
		record := fmt.Sprintf(`{"url":"http://127.0.0.1:1/%d","timeout_ms":1000,"active":true,"headers":{"X-Sub":%q}}`, i%3, sub)
		_ = f.subs.Put(context.Background(), wire.SubscriberKey(sub), record, 0)
		body := []byte(fmt.Sprintf(`{"n":%d}`, i))
		h := relay.Header{{Name: "webhook-id", Value: "evt_" + del}}
		signature.SetHopHeaders(&h, []signature.Secret{f.secret}, &signature.Hop{
			DeliveryID: del, SubscriberID: sub, EventType: "video.trending", Attempt: 1, Timestamp: now.Unix(),
		}, body)
		resp := r.HandleWith(context.Background(), &relay.Request{Method: "POST", Header: h, Body: body}, &s)
		if resp.Status != 200 || resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeForwarded) {
			t.Fatalf("delivery %d: %d %q (%s), want 200 forwarded", i, resp.Status, resp.Header.Get(wire.HeaderOutcome), resp.Detail)
		}
		want = append(want, fmt.Sprint(fmt.Sprintf("http://127.0.0.1:1/%d", i%3), map[string]string{"webhook-id": "evt_" + del, "x-sub": sub}))
		if again := r.HandleWith(context.Background(), &relay.Request{Method: "POST", Header: h, Body: body}, &s); again.Status != 200 ||
			again.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeDuplicate) {
			t.Fatalf("delivery %d again: %d %q, want 200 duplicate", i, again.Status, again.Header.Get(wire.HeaderOutcome))
		}
	}
	if fmt.Sprint(forwarded) != fmt.Sprint(want) {
		t.Errorf("forwarded\n%v\nwant\n%v", forwarded, want)
	}
	for i := range 6 {
		del := fmt.Sprintf("del_%s_%d", strings.Repeat("x", 100*(i%2)), i)
		if v, _, found := f.dedup.Lookup(wire.DedupKey(del)); !found || v != fmt.Sprint(now.UnixMilli()) {
			t.Errorf("dedup mark of %s: %q (found %v), want %d", del, v, found, now.UnixMilli())
		}
	}
}
