package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

func TestConfigValidationNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Workers: -1}, "workers"},
		{Config{LeaseDuration: time.Millisecond}, "lease_duration"},
		{Config{BackoffBase: time.Hour, BackoffCap: time.Minute}, "backoff_cap"},
		{Config{EdgeURL: "not a url"}, "edge_url"},
		{Config{EdgeURL: "http://127.0.0.1:1"}, "edge_secrets"},
		{Config{RetryAfterCap: 30 * 24 * time.Hour}, "retry_after_cap"},
	} {
		_, err := tc.cfg.withDefaults()
		if err == nil || !strings.Contains(err.Error(), tc.field+":") {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
}

func TestDeliversSignedStandardWebhook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	k := newSink(t, status(200))
	sub := e.sub(store.SubscriberInput{URL: k.URL + "/hook", Headers: map[string]string{"X-Team": "video"}})
	body := `{"video_id": "v1",  "n": 1}`
	e.emit("evt_1", "video.trending", body)
	res := e.drain()
	if res.Claimed != 1 || res.Delivered != 1 {
		t.Fatalf("drain: %+v", res)
	}
	got := k.received()
	if len(got) != 1 {
		t.Fatalf("sink got %d requests", len(got))
	}
	h := got[0].header
	if string(got[0].body) != body {
		t.Fatalf("body %q is not the exact emitted bytes", got[0].body)
	}
	if h.Get("User-Agent") != "edgehook/test" || h.Get("Content-Type") != "application/json" || h.Get("X-Team") != "video" {
		t.Fatalf("headers: %v", h)
	}
	if h.Get(wire.HeaderWebhookID) != "evt_1" {
		t.Fatalf("webhook-id %q", h.Get(wire.HeaderWebhookID))
	}
	secrets := []signature.Secret{sub.Secrets[0].Secret}
	if err := signature.Verify(secrets, h.Get(wire.HeaderWebhookID), h.Get(wire.HeaderWebhookTimestamp), h.Get(wire.HeaderWebhookSignature),
		got[0].body, e.clk.Now(), signature.DefaultTolerance); err != nil {
		t.Fatalf("signature does not verify: %v", err)
	}
	d := e.only()
	if d.Status != store.StatusDelivered || d.Attempts != 1 || d.LastStatus != 200 || len(d.AttemptLog) != 1 || d.AttemptLog[0].Excerpt != "answer body" {
		t.Fatalf("delivery: %+v", d)
	}
	if v := testutil.ToFloat64(e.eng.m.delivered.WithLabelValues(sub.ID)); v != 1 {
		t.Fatalf("delivered metric %v", v)
	}
}

// TestDirectQueryAsTheWorkerSendsIt: a subscriber URL's query is written into the request line as
// the Worker's fetch writes it for the same URL in edge mode, non-ASCII, quotes, '<' and '>'
// percent-encoded: sent raw, a strict server (Node's) answered 400 to what the edge delivered.
func TestDirectQueryAsTheWorkerSendsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	k := newSink(t, status(200))
	e.sub(store.SubscriberInput{URL: k.URL + `/hook?city=Zürich&q="a"&s='b'&e=a<b>c&k=%41~`})
	e.emit("evt_q", "video.trending", `{}`)
	if res := e.drain(); res.Delivered != 1 {
		t.Fatalf("drain: %+v", res)
	}
	const want = "/hook?city=Z%C3%BCrich&q=%22a%22&s=%27b%27&e=a%3Cb%3Ec&k=%41~" // new URL(...) in JS
	if got := k.received(); len(got) != 1 || got[0].req.RequestURI != want {
		t.Fatalf("request target %q, want %q", got[0].req.RequestURI, want)
	}
}

func TestLegacyProfileAndRotation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	k := newSink(t, status(200))
	legacy := e.sub(store.SubscriberInput{ID: "legacy", URL: k.URL, Profile: store.ProfileLegacy, LegacyPrefix: "VVV", Events: []string{"legacy.*"}})
	std := e.sub(store.SubscriberInput{ID: "std", URL: k.URL, Events: []string{"std.*"}})
	rotated, err := e.st.RotateSecret(context.Background(), "std", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.emit("l1", "legacy.x", `{"a":1}`)
	e.emit("s1", "std.x", `{"a":2}`)
	e.drain()
	for _, r := range k.received() {
		switch r.header.Get(wire.HeaderWebhookID) {
		case "l1":
			ts := r.header.Get("X-VVV-Timestamp")
			var n int64
			fmt.Sscan(ts, &n)
			want := signature.SignLegacy(legacy.Secrets[0].Secret, n, r.body)
			if got := r.header.Get("X-VVV-Signature"); got != want || n != e.clk.Now().Unix() {
				t.Fatalf("legacy signature %q at %s, want %q", got, ts, want)
			}
		case "s1":
			// Each secret alone verifies: receivers on the old and on the new one both accept.
			for _, sec := range []signature.Secret{std.Secrets[0].Secret, rotated.Secrets[0].Secret} {
				if err := signature.Verify([]signature.Secret{sec}, "s1", r.header.Get(wire.HeaderWebhookTimestamp),
					r.header.Get(wire.HeaderWebhookSignature), r.body, e.clk.Now(), signature.DefaultTolerance); err != nil {
					t.Fatalf("during rotation a secret does not verify: %v", err)
				}
			}
		default:
			t.Fatalf("unexpected request %v", r.header)
		}
	}
}

// TestOutcomes runs one delivery against each kind of answer and checks what was recorded.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	type check func(t *testing.T, e *env, d *store.Delivery, k *sink)
	// A Retry-After pauses the subscriber for exactly its wait (capped); the delivery waits the
	// later of that and the first backoff, up to an hour here (newEnv).
	throttled := func(pause time.Duration) check {
		return func(t *testing.T, e *env, d *store.Delivery, _ *sink) {
			latest := max(pause, time.Hour)
			if got := d.NextAttemptAt.Sub(e.clk.Now()); got < pause || got > latest || d.Status != store.StatusPending || d.Attempts != 1 {
				t.Fatalf("next attempt in %s (status %s, attempts %d), want pending after 1 attempt, due in %s to %s", got, d.Status, d.Attempts, pause, latest)
			}
			if p := e.pausedFor(); p != pause {
				t.Fatalf("subscriber paused for %s, want %s", p, pause)
			}
			if d.AttemptLog[0].Outcome != classThrottled {
				t.Fatalf("attempt outcome %q, want %q", d.AttemptLog[0].Outcome, classThrottled)
			}
		}
	}
	backoff := func(class string, last int) check {
		return func(t *testing.T, e *env, d *store.Delivery, _ *sink) {
			wait := d.NextAttemptAt.Sub(e.clk.Now())
			if d.Status != store.StatusPending || d.Attempts != 1 || wait < 0 || wait > time.Hour || d.LastStatus != last {
				t.Fatalf("delivery %+v: want pending, 1 attempt, retry within the first backoff (1h), last status %d", d, last)
			}
			if d.AttemptLog[0].Outcome != class {
				t.Fatalf("attempt outcome %q, want %q", d.AttemptLog[0].Outcome, class)
			}
			if v := testutil.ToFloat64(e.eng.m.failed.WithLabelValues(d.SubscriberID, class)); v != 1 {
				t.Fatalf("failed{class=%s} = %v", class, v)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		handle  func(w http.ResponseWriter, r *recorded)
		timeout int64
		check   check
	}{
		{"429 delta seconds", status(429, "Retry-After", "120"), 0, throttled(120 * time.Second)},
		{"503 http date", func(w http.ResponseWriter, r *recorded) {
			// The sink's date is computed from the engine's clock, in the HTTP-date form.
			status(503, "Retry-After", r.header.Get("X-Retry-Date"))(w, r)
		}, 0, throttled(300 * time.Second)},
		{"retry-after capped", status(429, "Retry-After", "86400"), 0, throttled(time.Hour)},
		{"429 without retry-after backs off", status(429), 0, backoff(classHTTP4xx, 429)},
		{"500", status(500), 0, backoff(classHTTP5xx, 500)},
		{"redirect not followed", status(302, "Location", "/elsewhere"), 0, backoff(classHTTP3xx, 302)},
		{"timeout", func(w http.ResponseWriter, r *recorded) { <-r.req.Context().Done() }, 150, backoff(classTimeout, 0)},
		{"410 disables and holds", status(410), 0, func(t *testing.T, e *env, d *store.Delivery, _ *sink) {
			sub, _ := e.st.GetSubscriber(context.Background(), d.SubscriberID)
			if d.Status != store.StatusHeld || sub.State != store.StateDisabled || !strings.Contains(sub.StateReason, "410") {
				t.Fatalf("delivery %s, subscriber %s %q; want held and disabled", d.Status, sub.State, sub.StateReason)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			k := newSink(t, tc.handle)
			e.sub(store.SubscriberInput{URL: k.URL, TimeoutMS: tc.timeout, Headers: map[string]string{
				"X-Retry-Date": e.clk.Now().Add(300 * time.Second).UTC().Format(http.TimeFormat)}})
			e.emit("e1", "t", `{}`)
			e.drain()
			if n := len(k.received()); n != 1 {
				t.Fatalf("sink got %d requests, want 1", n)
			}
			tc.check(t, e, e.only(), k)
		})
	}
}

func TestDeadAfterMaxAttemptsAndMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAttempts: 3, MaxAge: 48 * time.Hour})
	k := newSink(t, status(500))
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	for range 3 {
		e.drain()
		e.clk.Advance(2 * time.Hour) // past any backoff
	}
	d := e.only()
	if d.Status != store.StatusDead || d.Reason != store.ReasonMaxAttempts || d.Attempts != 3 || d.LastStatus != 500 || d.LastError == "" {
		t.Fatalf("after 3 failures: %+v", d)
	}
	if len(k.received()) != 3 {
		t.Fatalf("sink got %d", len(k.received()))
	}

	e2 := newEnv(t, Config{MaxAttempts: 100, MaxAge: time.Hour})
	k2 := newSink(t, status(500))
	e2.sub(store.SubscriberInput{URL: k2.URL})
	e2.emit("e1", "t", `{}`)
	e2.drain()
	e2.clk.Advance(2 * time.Hour)
	e2.drain()
	// Claimed past its max age, it dies unsent: its one attempt is all it made.
	if d := e2.only(); d.Status != store.StatusDead || d.Reason != store.ReasonMaxAge || d.Attempts != 1 || len(k2.received()) != 1 {
		t.Fatalf("past max age: %+v, %d requests", d, len(k2.received()))
	}
}

func TestRefusesInternalDestinations(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{AllowNetworks: []netip.Prefix{}})
	k := newSink(t, status(200))
	port := k.URL[strings.LastIndex(k.URL, ":"):]
	e.sub(store.SubscriberInput{ID: "ip", URL: k.URL, Events: []string{"ip"}})
	// A name resolving to loopback is caught at connect time too.
	e.sub(store.SubscriberInput{ID: "name", URL: "http://localhost" + port, Events: []string{"name"}})
	e.emit("e1", "ip", `{}`)
	e.emit("e2", "name", `{}`)
	e.drain()
	if n := len(k.received()); n != 0 {
		t.Fatalf("an internal address was reached %d times", n)
	}
	for _, id := range []string{"ip", "name"} {
		if v := testutil.ToFloat64(e.eng.m.failed.WithLabelValues(id, classBlocked)); v != 1 {
			t.Fatalf("%s: blocked counter %v", id, v)
		}
	}
}

// TestABlockedAddressFailsAlikeThroughTheEdge: a subscriber whose URL leads to an internal address
// is refused by the origin's dialer when sent directly and by the local edge's (here the real relay
// core over the same guard) through the edge, and the two are one failure: blocked_address, an
// attempt counted but not against the subscriber's circuit, its URL or the allow-list being the
// operator's to fix. Through the edge it was upstream_unreachable, a subscriber failure that opened
// the circuit.
func TestABlockedAddressFailsAlikeThroughTheEdge(t *testing.T) {
	t.Parallel()
	for _, mode := range []store.Mode{store.ModeDirect, store.ModeEdge} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{AllowNetworks: []netip.Prefix{}, MaxAttempts: 1, CircuitThreshold: 1})
			k := newSink(t, status(200))
			sub := e.sub(store.SubscriberInput{ID: "s", URL: k.URL, Mode: mode})
			if mode == store.ModeEdge {
				secret := edgeSecret(t)
				url, _ := realEdge(t, secret, sub, 0, nil)
				e.useEdge(url, secret)
			}
			e.emit("e1", "t", `{}`)
			e.drain()
			if n := len(k.received()); n != 0 {
				t.Fatalf("the internal address was reached %d times", n)
			}
			d := e.only()
			if d.Status != store.StatusDead || d.Attempts != 1 || len(d.AttemptLog) != 1 || d.AttemptLog[0].Outcome != classBlocked {
				t.Fatalf("delivery %s after %d attempts, log %+v; want dead after one attempt of %s", d.Status, d.Attempts, d.AttemptLog, classBlocked)
			}
			st, err := e.st.Stats(context.Background(), e.clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			if st.Subscribers[0].CircuitOpen {
				t.Fatal("the circuit opened: a blocked address was held against the subscriber")
			}
		})
	}
}

func TestCircuitBreakerStopsHammering(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{CircuitThreshold: 2, CircuitCooldown: time.Minute, CircuitMaxCooldown: time.Hour,
		BackoffBase: time.Millisecond, BackoffCap: time.Millisecond, MaxAttempts: 100})
	healthy := make(chan struct{})
	k := newSink(t, failingUntil(healthy))
	e.sub(store.SubscriberInput{URL: k.URL, MaxInFlight: 1})
	for i := range 5 {
		e.emit(fmt.Sprintf("e%d", i), "t", `{}`)
	}
	for range 4 { // the backoff is 1 ms: each round retries what is due
		e.clk.Advance(10 * time.Millisecond)
		e.drain()
	}
	if n := len(k.received()); n != 2 {
		t.Fatalf("sink got %d requests, want 2 (the circuit opens after 2 failures)", n)
	}
	e.clk.Advance(time.Minute) // cool-down over: one probe, still failing
	e.drain()
	e.clk.Advance(time.Minute)
	e.drain()
	if n := len(k.received()); n != 3 {
		t.Fatalf("sink got %d, want 3 (one probe, then a doubled cool-down)", n)
	}
	close(healthy)
	e.clk.Advance(time.Minute) // 2 minutes since the probe
	e.drain()
	st, _ := e.st.Stats(context.Background(), e.clk.Now())
	if c := st.Subscribers[0].Counts; c[store.StatusDelivered] != 5 {
		t.Fatalf("after recovery: %v", c)
	}
}

func TestDrainIdleAndStopIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	if res := e.drain(); res.Claimed != 0 {
		t.Fatalf("%+v", res)
	}
	if err := e.eng.Stop(context.Background()); err != nil {
		t.Fatal("Stop before Start:", err)
	}
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.eng.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// A daemon whose context is cancelled stops by itself; Stop then just returns.
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	e.eng.mu.Lock()
	stopped := e.eng.stopped
	e.eng.mu.Unlock()
	cancel()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not stop when its context was cancelled")
	}
	if err := e.eng.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.eng.Drain(context.Background(), DrainOptions{For: -1}); err == nil {
		t.Fatal("negative For accepted")
	}
}

// TestDaemonDeliversAndStopsGracefully runs Start/Stop: new emits are sent without waiting for a
// poll, and a stop whose grace runs out releases the sends still in flight, unsent and unpunished.
func TestDaemonDeliversAndStopsGracefully(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour}) // only the emit wake-up can trigger a claim
	arrived := make(chan string, 10)
	release := make(chan struct{})
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		id := r.header.Get(wire.HeaderWebhookID)
		arrived <- id
		if id == "slow" {
			select {
			case <-release:
			case <-r.req.Context().Done():
			}
		}
		w.WriteHeader(200)
	})
	e.sub(store.SubscriberInput{URL: k.URL})
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.emit("fast", "t", `{}`)
	if id := <-arrived; id != "fast" {
		t.Fatal(id)
	}
	e.emit("slow", "t", `{}`)
	if id := <-arrived; id != "slow" {
		t.Fatal(id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.eng.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	close(release)
	page, _ := e.st.ListDeliveries(context.Background(), store.DeliveryFilter{EventID: "slow"})
	d := page.Deliveries[0]
	if d.Status != store.StatusPending || d.Attempts != 0 {
		t.Fatalf("in-flight delivery after stop: %s with %d attempts, want released (pending, 0)", d.Status, d.Attempts)
	}
	page, _ = e.st.ListDeliveries(context.Background(), store.DeliveryFilter{EventID: "fast"})
	if page.Deliveries[0].Status != store.StatusDelivered {
		t.Fatalf("fast: %s", page.Deliveries[0].Status)
	}
}

func TestMetricsRegistered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	reg := prometheus.NewRegistry()
	eng, err := New(e.st, Config{AllowNetworks: loopback, Now: e.clk.Now}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	e.sub(store.SubscriberInput{ID: "m", URL: "http://127.0.0.1:9/"})
	e.emit("e1", "t", `{}`)
	eng.m.delivered.WithLabelValues("m").Inc()
	if _, err := New(e.st, Config{}, nil, reg); err == nil {
		t.Fatal("registering twice on one registry must fail")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
	}
	for _, want := range []string{"edgehook_deliveries_delivered_total", "edgehook_queue_depth", "edgehook_queue_deliveries",
		"edgehook_queue_oldest_due_age_seconds", "edgehook_deliveries_superseded_total", "edgehook_deliveries_backlog_overflow_total",
		"edgehook_claimed_body_bytes"} {
		if !names[want] {
			t.Errorf("metric %s not exported", want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, "edgehook_queue_depth"); err != nil || n != 1 {
		t.Fatalf("queue depth: %d %v", n, err)
	}
	want := "# HELP edgehook_queue_depth Deliveries pending or in flight, all subscribers.\n# TYPE edgehook_queue_depth gauge\nedgehook_queue_depth 1\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "edgehook_queue_depth"); err != nil {
		t.Fatal(err)
	}
}

// TestSlowSubscriberDoesNotHoldOthersBack fills most of the engine's slots with sends to a
// subscriber that does not answer and checks another subscriber is still served.
func TestSlowSubscriberDoesNotHoldOthersBack(t *testing.T) {
	t.Parallel()
	// The poll interval is an hour: the fast deliveries must be claimed without waiting for it,
	// although 3 of the 4 slots stay taken by the slow subscriber, held at its cap.
	e := newEnv(t, Config{Workers: 4, PollInterval: time.Hour})
	release := make(chan struct{})
	slow := newSink(t, func(w http.ResponseWriter, r *recorded) {
		select {
		case <-release:
		case <-r.req.Context().Done():
		}
	})
	fastDone := make(chan struct{}, 10)
	fast := newSink(t, func(w http.ResponseWriter, _ *recorded) {
		w.WriteHeader(200)
		fastDone <- struct{}{}
	})
	e.sub(store.SubscriberInput{ID: "slow", URL: slow.URL, Events: []string{"slow"}, MaxInFlight: 3, TimeoutMS: 30000})
	e.sub(store.SubscriberInput{ID: "fast", URL: fast.URL, Events: []string{"fast"}})
	for i := range 3 {
		e.emit(fmt.Sprintf("s%d", i), "slow", `{}`)
	}
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		e.eng.Stop(context.Background())
	}()
	for i := range 5 {
		e.emit(fmt.Sprintf("f%d", i), "fast", `{}`)
	}
	for i := range 5 {
		select {
		case <-fastDone:
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 5 deliveries to the fast subscriber while the slow one holds 3 of 4 slots", i)
		}
	}
}

func TestEventsEmittedWhileEverySubscriberIsAtItsCapGoOutWhenOneSettles(t *testing.T) {
	t.Parallel()
	// The daemon leaves emits' wake-ups alone while it holds every subscriber at its cap; the
	// poll interval is an hour, so the second event must go out on the first one's settle.
	e := newEnv(t, Config{PollInterval: time.Hour})
	release := make(chan struct{})
	arrived := make(chan string, 2)
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		arrived <- r.header.Get(wire.HeaderWebhookID)
		if r.header.Get(wire.HeaderWebhookID) == "first" {
			<-release
		}
		w.WriteHeader(200)
	})
	e.sub(store.SubscriberInput{URL: k.URL, MaxInFlight: 1})
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer e.eng.Stop(context.Background())
	e.emit("first", "t", `{}`)
	for _, want := range []string{"first", "second"} {
		select {
		case id := <-arrived:
			if id != want {
				t.Fatalf("got %q, want %q", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q did not arrive", want)
		}
		if want == "first" {
			e.emit("second", "t", `{}`) // while the first holds the only place
			close(release)
		}
	}
}

func TestSettlesClaimTheSlotsTheyFreeExactlyOnce(t *testing.T) {
	t.Parallel()
	// With a poll interval of an hour and caps of 1 and 2, nearly every claim of this drain is
	// made by the settle that freed the place (one transaction): each delivery must go out once,
	// and the drain must reach idle.
	e := newEnv(t, Config{PollInterval: time.Hour})
	sinks := map[string]*sink{}
	for sub, inFlight := range map[string]int{"a": 1, "b": 2} {
		sinks[sub] = newSink(t, status(200))
		e.sub(store.SubscriberInput{ID: sub, URL: sinks[sub].URL, MaxInFlight: inFlight})
	}
	const events = 25
	for i := range events {
		e.emit(fmt.Sprintf("e%d", i), "t", `{}`)
	}
	if res := e.drain(); res.Delivered != 2*events || res.Claimed != 2*events {
		t.Fatalf("%+v, want %d claimed and delivered", res, 2*events)
	}
	for sub, k := range sinks {
		seen := map[string]bool{}
		for _, r := range k.received() {
			id := r.header.Get(wire.HeaderWebhookID)
			if seen[id] {
				t.Fatalf("%s received %s twice", sub, id)
			}
			seen[id] = true
		}
		if len(seen) != events {
			t.Fatalf("%s received %d events, want %d", sub, len(seen), events)
		}
	}
}

// drainAStaleOutcome drains one delivery to subscriber "a" whose answer (status) comes only
// after its lease has expired and another process has claimed it again, and returns the drain's
// result. The store keeps nothing of that late answer: the delivery is the other claim's.
func drainAStaleOutcome(t *testing.T, cfg Config, status int) (*env, DrainResult) {
	t.Helper()
	e := newEnv(t, cfg)
	arrived, answer := make(chan struct{}), make(chan struct{})
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		close(arrived)
		<-answer
		w.WriteHeader(status)
	})
	e.sub(store.SubscriberInput{ID: "a", URL: k.URL})
	e.emit("e1", "t", `{}`)
	done := e.drainInBackground()
	<-arrived
	e.clk.Advance(2 * DefaultLeaseDuration)
	other, err := e.st.Claim(context.Background(), store.ClaimParams{Now: e.clk.Now(), Limit: 10, LeaseDuration: DefaultLeaseDuration})
	close(answer)
	if err != nil || len(other.Deliveries) != 1 {
		t.Fatalf("the other process claimed %d deliveries (%v), want the expired one", len(other.Deliveries), err)
	}
	res := <-done
	if d := e.only(); d.Status != store.StatusLeased {
		t.Fatalf("the delivery is %s, want still leased by the other claim", d.Status)
	}
	return e, res
}

func TestAnOutcomeAfterItsLeaseExpiredIsStaleNotDelivered(t *testing.T) {
	t.Parallel()
	// The subscriber answers only after the lease has expired and another process has claimed the
	// delivery again: the store keeps nothing of the late 200, so the drain must not count it
	// delivered (the delivery is the other claim's, and will be sent again).
	if _, res := drainAStaleOutcome(t, Config{}, http.StatusOK); res.Claimed != 1 || res.Stale != 1 || res.Delivered != 0 {
		t.Fatalf("%+v, want 1 claimed, 1 stale and none delivered", res)
	}
}

// TestAStaleOutcomeIsNotCountedInTheMetrics: the Prometheus counters agree with the store about a
// stale outcome: the late 200 is not a delivery, and the late 500 at the last attempt did not
// dead-letter anything. They were counted when the answer was decided, before the settle found
// the outcome stale, so edgehook_deliveries_delivered_total and edgehook_deliveries_dead_total
// (alerted on in docs/deploy.md) counted deliveries the store does not have as delivered or dead
// (and the other claim counts them once more).
func TestAStaleOutcomeIsNotCountedInTheMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		status int
	}{{"delivered", http.StatusOK}, {"dead", http.StatusInternalServerError}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, res := drainAStaleOutcome(t, Config{MaxAttempts: 1}, tc.status)
			if res.Stale != 1 {
				t.Fatalf("%+v, want the outcome stale", res)
			}
			delivered := testutil.ToFloat64(e.eng.m.delivered.WithLabelValues("a"))
			dead := testutil.ToFloat64(e.eng.m.dead.WithLabelValues("a", store.ReasonMaxAttempts))
			if delivered != 0 || dead != 0 {
				t.Fatalf("metrics after a stale outcome: deliveries_delivered_total %v, deliveries_dead_total %v; the store has it leased by another claim, want 0 and 0 (drain result %+v)",
					delivered, dead, res)
			}
		})
	}
}

func TestDrainAppliesRetention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Retention: 24 * time.Hour})
	k := newSink(t, status(200))
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("old", "t", `{}`)
	e.drain()
	id := e.only().ID
	e.clk.Advance(25 * time.Hour)
	e.emit("new", "t", `{}`)
	e.drain()
	if _, err := e.st.GetDelivery(context.Background(), id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a delivery past the retention window is still there: %v", err)
	}
	if page, _ := e.st.ListDeliveries(context.Background(), store.DeliveryFilter{}); len(page.Deliveries) != 1 || page.Deliveries[0].EventID != "new" {
		t.Fatalf("left: %+v", page.Deliveries)
	}
}

// TestSettleBatchTakesADeliveryOnce: a delivery whose lease ran out mid-send can be claimed and
// sent again by the same run, and both outcomes can queue together; the store refuses a batch
// holding a delivery twice (every other outcome in it would be lost with it), so the second one
// ends the batch and starts the next.
func TestSettleBatchTakesADeliveryOnce(t *testing.T) {
	r := &run{e: &Engine{cfg: Config{SettleBatch: 64}}, outcomes: make(chan store.Settlement, 4), slots: make(chan struct{}, 4)}
	for _, it := range []store.Settlement{{Seq: 2}, {Seq: 1, LeaseToken: "second"}, {Seq: 3}} {
		r.outcomes <- it
	}
	close(r.outcomes)
	var batches [][]store.Settlement
	batch := []store.Settlement{{Seq: 1, LeaseToken: "first"}}
	for {
		batches = append(batches, r.take(batch, nil))
		first, ok := r.nextOutcome()
		if !ok {
			break
		}
		batch = []store.Settlement{first}
	}
	want := [][]store.Settlement{{{Seq: 1, LeaseToken: "first"}, {Seq: 2}}, {{Seq: 1, LeaseToken: "second"}, {Seq: 3}}}
	if !reflect.DeepEqual(batches, want) {
		t.Fatalf("batches %+v, want %+v", batches, want)
	}
}

// TestSettleGatherDoesNotWaitForSlowSends: the completer's gather waits for the outcomes of sends
// in flight, but not for sends past slowSend (a stuck subscriber's), which would otherwise hold
// every settle, and the claim made with it, for the whole gather.
func TestSettleGatherDoesNotWaitForSlowSends(t *testing.T) {
	r := &run{e: &Engine{cfg: Config{SettleBatch: 64}}, outcomes: make(chan store.Settlement, 4), slots: make(chan struct{}, 4)}
	for range 3 {
		r.slots <- struct{}{} // three sends in flight
	}
	batch := []store.Settlement{{Seq: 1}} // one has answered; the other two are slow
	r.slow.Store(2)
	never := make(chan time.Time) // a gather that never runs out
	takeNow := func(want int, waited string) {
		t.Helper()
		done := make(chan []store.Settlement, 1)
		go func() { done <- r.take(batch, never) }()
		select {
		case got := <-done:
			if len(got) != want {
				t.Fatalf("took %d outcomes, want %d", len(got), want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal(waited)
		}
	}
	takeNow(1, "the gather waited for sends that are all slow")
	// One of them answers after all: it is taken with the first.
	r.slow.Store(1)
	r.outcomes <- store.Settlement{Seq: 2}
	takeNow(2, "the gather waited for a slow send after taking every outcome it could")
}

// TestSendWithoutLeaseLeftIsReleased: a delivery whose lease has no more than its last quarter
// left when its send would start (the pacer held it back) is given back unsent: sent, it could
// still be in flight when another claim takes it over.
func TestSendWithoutLeaseLeftIsReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{LeaseDuration: 4 * time.Second})
	sink := newSink(t, status(200))
	sub := e.sub(store.SubscriberInput{ID: "s", URL: sink.URL})
	c := store.Claimed{Seq: 1, DeliveryID: "d1", LeaseToken: "t", Event: store.Event{ID: "e1", Type: "t", Body: []byte(`{}`)},
		Subscriber: sub, LeaseExpires: e.clk.Now().Add(time.Second)}
	if set := e.eng.deliver(context.Background(), c); set.Result != store.ResultRelease || set.Attempt != nil {
		t.Fatalf("settlement %+v, want a release without an attempt", set)
	}
	c.LeaseExpires = e.clk.Now().Add(2 * time.Second)
	if set := e.eng.deliver(context.Background(), c); set.Result != store.ResultDelivered {
		t.Fatalf("with half the lease left: %+v, want delivered", set)
	}
	if n := len(sink.received()); n != 1 {
		t.Fatalf("the sink got %d requests, want 1", n)
	}
}

// TestA410IsNotCountedRetried: a 410 disables the subscriber and holds the delivery (not due
// again until an operator resumes the subscriber): it is held in the drain's result, not retried,
// and not in edgehook_deliveries_retried_total ("Failed attempts that were scheduled again").
func TestA410IsNotCountedRetried(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	k := newSink(t, status(http.StatusGone))
	e.sub(store.SubscriberInput{ID: "a", URL: k.URL})
	e.emit("e1", "t", `{}`)
	res := e.drain()
	if d := e.only(); d.Status != store.StatusHeld {
		t.Fatalf("the delivery is %s, want held (the premise)", d.Status)
	}
	if v := testutil.ToFloat64(e.eng.m.retried.WithLabelValues("a")); v != 0 || res.Retried != 0 || res.Held != 1 {
		t.Fatalf("the delivery is held, not scheduled again, but deliveries_retried_total{subscriber=\"a\"} = %v and the drain result says retried %d, held %d", v, res.Retried, res.Held)
	}
}

// drainASupersededFailure sends e1 to subscriber "a" (coalescing on video_id), emits e2 with the
// same key while e1 is in flight, then lets the subscriber answer e1 with 500 (and e2 with 200).
// The store settles e1 superseded: it is neither retried nor dead.
func drainASupersededFailure(t *testing.T, cfg Config) (*env, DrainResult) {
	t.Helper()
	e := newEnv(t, cfg)
	arrived, answer := make(chan struct{}), make(chan struct{})
	first := true
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		if first {
			first = false
			close(arrived)
			<-answer
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	e.sub(store.SubscriberInput{ID: "a", URL: k.URL, Coalesce: &wire.CoalesceRule{EventTypes: []string{"video.*"}, Key: "video_id", WindowSeconds: 10}})
	e.emit("e1", "video.updated", `{"video_id":"v1","n":1}`)
	done := e.drainInBackground()
	<-arrived
	e.emit("e2", "video.updated", `{"video_id":"v1","n":2}`)
	close(answer)
	res := <-done
	page, err := e.st.ListDeliveries(context.Background(), store.DeliveryFilter{EventID: "e1"})
	if err != nil || len(page.Deliveries) != 1 {
		t.Fatalf("e1's deliveries: %d (%v)", len(page.Deliveries), err)
	}
	if d := page.Deliveries[0]; d.Status != store.StatusSuperseded {
		t.Fatalf("e1's delivery is %s, want superseded (the premise of this test)", d.Status)
	}
	return e, res
}

// TestASupersededFailureIsNotCountedRetried: a delivery in flight when a newer event with its
// coalesce key is emitted, and that then fails, is settled superseded by the store (not sent
// again): it is counted superseded only, not also retried.
func TestASupersededFailureIsNotCountedRetried(t *testing.T) {
	t.Parallel()
	e, res := drainASupersededFailure(t, Config{})
	retried := testutil.ToFloat64(e.eng.m.retried.WithLabelValues("a"))
	superseded := e.st.Counters().Superseded
	if retried != 0 || res.Retried != 0 || superseded != 1 {
		t.Fatalf("e1 was settled superseded (superseded_total %d), but deliveries_retried_total{subscriber=\"a\"} = %v and the drain result says retried %d; want 0: nothing was scheduled again (drain result %+v)",
			superseded, retried, res.Retried, res)
	}
	if res.Superseded != 1 {
		t.Fatalf("the drain result says superseded %d, want 1: e1's outcome was written superseded (drain result %+v)", res.Superseded, res)
	}
}

// TestASupersededLastAttemptIsNotCountedDead: likewise at the last attempt: the store keeps the
// delivery superseded (so `dead list` and a replay leave it), and deliveries_dead_total, which
// deploy.md says to alert on, must not count a dead letter that does not exist.
func TestASupersededLastAttemptIsNotCountedDead(t *testing.T) {
	t.Parallel()
	e, res := drainASupersededFailure(t, Config{MaxAttempts: 1})
	dead := testutil.ToFloat64(e.eng.m.dead.WithLabelValues("a", store.ReasonMaxAttempts))
	page, _ := e.st.ListDeliveries(context.Background(), store.DeliveryFilter{Status: store.StatusDead})
	if dead != 0 || res.Dead != 0 {
		t.Fatalf("the store holds %d dead deliveries, but deliveries_dead_total{subscriber=\"a\",reason=\"max_attempts\"} = %v and the drain result says dead %d (drain result %+v)",
			len(page.Deliveries), dead, res.Dead, res)
	}
}

// TestDeletedSubscribersSeriesGoAway: the per-subscriber counters keep a series for each
// subscriber counted; a daemon's prune tick drops those of subscribers since deleted, and keeps
// the others'.
func TestDeletedSubscribersSeriesGoAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	k := newSink(t, status(200))
	for _, id := range []string{"gone", "kept"} {
		e.sub(store.SubscriberInput{ID: id, URL: k.URL})
	}
	e.emit("e1", "t", `{}`)
	e.drain()
	if err := e.st.DeleteSubscriber(context.Background(), "gone"); err != nil {
		t.Fatal(err)
	}
	e.eng.newRun(false, nil).forgetGone(context.Background())
	if got := subscribersIn(e.eng.m.delivered); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("delivered series of %v after the prune tick, want only kept's", got)
	}
}

// TestBackoffCeilingDoublesUpToTheCap: base·2^attempts, never above the cap and never less
// after more attempts, for bases whose shift overflows (2^26+1 ns wrapped to 4.6 minutes after 38).
func TestBackoffCeilingDoublesUpToTheCap(t *testing.T) {
	for _, base := range []time.Duration{time.Second, 1<<26 + 1, 3*time.Second + 7} {
		c := Config{BackoffBase: base, BackoffCap: 24 * time.Hour}
		want := base
		for attempts := range 100 {
			if got := c.BackoffCeiling(attempts); got != min(want, c.BackoffCap) {
				t.Fatalf("base %s: ceiling after %d attempts %s, want %s", base, attempts, got, min(want, c.BackoffCap))
			}
			want = min(2*want, c.BackoffCap)
		}
	}
}
