package engine

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// fakeEdge stands in for the edge Worker: it verifies the hop signature as the edge does and
// answers with the outcome the test chose.
func fakeEdge(t *testing.T, e *env, secrets []signature.Secret, answer func(w http.ResponseWriter, hop *signature.Hop)) *sink {
	return newSink(t, func(w http.ResponseWriter, r *recorded) {
		hop, sig, err := signature.ParseHopHeaders(r.header)
		if err == nil {
			err = signature.VerifyHop(secrets, hop, sig, r.body, e.clk.Now(), signature.DefaultTolerance)
		}
		if err != nil {
			w.Header().Set(wire.HeaderOutcome, string(wire.Rejected(wire.ReasonBadSignature)))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		answer(w, hop)
	})
}

// useEdge gives e an engine that sends edge-mode subscribers to url, signing the hop with the
// secrets; the edge client is not address-checked (the edge URL is the operator's own).
func (e *env) useEdge(url string, secrets ...signature.Secret) {
	e.t.Helper()
	cfg := e.eng.cfg
	cfg.EdgeURL, cfg.EdgeSecrets, cfg.AllowNetworks = url, secrets, nil
	eng, err := New(e.st, cfg, nil, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.eng = eng
}

func outcome(o wire.Outcome, code int, headers ...string) func(w http.ResponseWriter, _ *signature.Hop) {
	return func(w http.ResponseWriter, _ *signature.Hop) {
		w.Header().Set(wire.HeaderOutcome, string(o))
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(code)
	}
}

func edgeSecret(t *testing.T) signature.Secret {
	sec, err := signature.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

func TestEdgeMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		answer     func(w http.ResponseWriter, hop *signature.Hop)
		wrongKey   bool
		status     store.Status
		attempts   int
		retryIn    time.Duration // exact, when not zero
		pause      time.Duration // the subscriber's Retry-After pause, exact, when not zero; no retry before its end
		subState   store.State
		rejections float64
		onlyOne    bool // MaxAttempts 1
	}{
		{name: "forwarded 200", answer: outcome(wire.OutcomeForwarded, 200), status: store.StatusDelivered, attempts: 1},
		{name: "duplicate", answer: outcome(wire.OutcomeDuplicate, 200), status: store.StatusDelivered, attempts: 1},
		{name: "coalesced", answer: outcome(wire.OutcomeCoalesced, 429, "Retry-After", "7"), status: store.StatusPending, attempts: 0, retryIn: 7 * time.Second},
		{name: "forwarded 410", answer: outcome(wire.OutcomeForwarded, 410), status: store.StatusHeld, attempts: 1, subState: store.StateDisabled},
		{name: "forwarded 429", answer: outcome(wire.OutcomeForwarded, 429, "Retry-After", "30"), status: store.StatusPending, attempts: 1, pause: 30 * time.Second},
		// The Worker's fetch joins a subscriber's repeated Retry-After lines into one value, as
		// its Headers object does every repeated field; sent directly, the first line is read.
		{name: "forwarded 429, Retry-After lines joined", answer: outcome(wire.OutcomeForwarded, 429, "Retry-After", "30, 30"), status: store.StatusPending, attempts: 1, pause: 30 * time.Second},
		{name: "upstream timeout", answer: outcome(wire.OutcomeUpstreamTimeout, 504), status: store.StatusPending, attempts: 1},
		// The edge's faults, not the subscriber's: rescheduled without counting an attempt.
		{name: "no outcome header", answer: func(w http.ResponseWriter, _ *signature.Hop) { w.WriteHeader(502) }, status: store.StatusPending, attempts: 0},
		// The edge has another secret: a rejection, retried but never dead by attempt count.
		{name: "rejected", answer: outcome(wire.OutcomeForwarded, 200), wrongKey: true, status: store.StatusPending, attempts: 0, rejections: 1, onlyOne: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			originKey := edgeSecret(t)
			edgeKeys := []signature.Secret{originKey}
			if tc.wrongKey {
				edgeKeys = []signature.Secret{edgeSecret(t)}
			}
			maxAttempts := 5
			if tc.onlyOne {
				maxAttempts = 1
			}
			e := newEnv(t, Config{MaxAttempts: maxAttempts})
			edge := fakeEdge(t, e, edgeKeys, tc.answer)
			e.useEdge(edge.URL, originKey)
			rule := &wire.CoalesceRule{EventTypes: []string{"video.*"}, Key: "video_id", WindowSeconds: 10}
			sub := e.sub(store.SubscriberInput{ID: "s1", URL: "https://subscriber.example/hook", Mode: store.ModeEdge, Coalesce: rule})
			e.emit("evt_9", "video.rank_updated", `{"video_id":"v7"}`)
			e.drain()
			reqs := edge.received()
			if len(reqs) != 1 {
				t.Fatalf("edge got %d requests", len(reqs))
			}
			h := reqs[0].header
			if !tc.wrongKey {
				hop, _, _ := signature.ParseHopHeaders(h)
				if !strings.HasPrefix(hop.DeliveryID, "dlv_") || hop.SubscriberID != "s1" || hop.EventType != "video.rank_updated" ||
					hop.CoalesceKey != "v7" || hop.Attempt != 1 {
					t.Fatalf("hop fields %+v", hop)
				}
			}
			// The subscriber-facing signature is made by the origin; the edge forwards it untouched.
			if err := signature.Verify([]signature.Secret{sub.Secrets[0].Secret}, h.Get(wire.HeaderWebhookID), h.Get(wire.HeaderWebhookTimestamp),
				h.Get(wire.HeaderWebhookSignature), reqs[0].body, e.clk.Now(), signature.DefaultTolerance); err != nil {
				t.Fatalf("webhook signature: %v", err)
			}
			d := e.only()
			if d.Status != tc.status || d.Attempts != tc.attempts {
				t.Fatalf("delivery %s with %d attempts, want %s with %d", d.Status, d.Attempts, tc.status, tc.attempts)
			}
			if tc.retryIn != 0 && d.NextAttemptAt.Sub(e.clk.Now()) != tc.retryIn {
				t.Fatalf("next attempt in %s, want %s", d.NextAttemptAt.Sub(e.clk.Now()), tc.retryIn)
			}
			if tc.pause != 0 {
				if p, wait := e.pausedFor(), d.NextAttemptAt.Sub(e.clk.Now()); p != tc.pause || wait < tc.pause {
					t.Fatalf("subscriber paused for %s, next attempt in %s; want paused for %s, no attempt before", p, wait, tc.pause)
				}
			}
			if tc.subState != "" {
				got, _ := e.st.GetSubscriber(context.Background(), "s1")
				if got.State != tc.subState {
					t.Fatalf("subscriber %s, want %s", got.State, tc.subState)
				}
			}
			if v := testutil.ToFloat64(e.eng.m.edgeRejections.WithLabelValues(wire.ReasonBadSignature)); v != tc.rejections {
				t.Fatalf("edge rejections %v, want %v", v, tc.rejections)
			}
		})
	}
}

// TestEdgeFaultsAreTheOperators checks that what goes wrong between the origin and the edge is not
// held against the subscriber: with one attempt allowed and a circuit that opens at the first
// failure, the delivery stays pending and the circuit closed. A subscriber's own failure relayed
// by the edge, the control, is dead at once and opens it.
func TestEdgeFaultsAreTheOperators(t *testing.T) {
	t.Parallel()
	closed := newSink(t, status(200))
	closed.Close() // a port nothing listens on: the dial is refused
	for _, tc := range []struct {
		name    string
		edgeURL func(e *env) string // "" for no edge URL at all
		class   string
		dead    bool
	}{
		{name: "no edge URL", edgeURL: func(*env) string { return "" }, class: classConfig},
		{name: "edge refuses connections", edgeURL: func(*env) string { return closed.URL }, class: classEdgeDown},
		{name: "answer without an outcome", edgeURL: func(e *env) string {
			return newSink(e.t, status(502)).URL
		}, class: classEdgeError},
		{name: "edge rejects the hop", edgeURL: func(e *env) string {
			return fakeEdge(e.t, e, []signature.Secret{edgeSecret(e.t)}, outcome(wire.OutcomeForwarded, 200)).URL
		}, class: classEdgeRejected},
		{name: "subscriber unreachable (control)", edgeURL: func(e *env) string {
			return newSink(e.t, func(w http.ResponseWriter, _ *recorded) {
				w.Header().Set(wire.HeaderOutcome, string(wire.OutcomeUpstreamUnreachable))
				w.WriteHeader(502)
			}).URL
		}, class: classConnection, dead: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{MaxAttempts: 1, CircuitThreshold: 1})
			e.useEdge(tc.edgeURL(e), edgeSecret(t))
			e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge})
			e.emit("e1", "t", `{}`)
			e.drain()
			d := e.only()
			wantStatus := store.StatusPending
			if tc.dead {
				wantStatus = store.StatusDead
			}
			wantCounted := 0 // the subscriber was not tried
			if tc.dead {
				wantCounted = 1
			}
			if d.Status != wantStatus || len(d.AttemptLog) != 1 || d.AttemptLog[0].Outcome != tc.class || d.Attempts != wantCounted || d.AttemptLog[0].Number != wantCounted {
				t.Fatalf("delivery %s with %d attempts counted, log %+v; want %s after one attempt of %s, %d counted",
					d.Status, d.Attempts, d.AttemptLog, wantStatus, tc.class, wantCounted)
			}
			st, err := e.st.Stats(context.Background(), e.clk.Now())
			if err != nil {
				t.Fatal(err)
			}
			if st.Subscribers[0].CircuitOpen != tc.dead {
				t.Fatalf("circuit open %v, want %v", st.Subscribers[0].CircuitOpen, tc.dead)
			}
		})
	}
}

// stalledTLSEdge listens on loopback, accepts connections and never answers: an https edge URL
// pointing there never completes its TLS handshake (an edge behind a stuck load balancer, or the
// wrong port). No request ever reaches an edge.
func stalledTLSEdge(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "https://" + ln.Addr().String() + "/"
}

// TestEdgeUnreachableOverHTTPSIsTheOperators: the production edge (a Worker) is reached over
// https, through net/http's transport. A connection to it that is never made (here the TLS
// handshake never completes within the send's timeout; a dial whose SYNs are dropped is the same
// for that transport: it returns the context's error, no *net.OpError) reached no edge and no
// subscriber: edge_unreachable, circuit closed, not dead by attempt count.
func TestEdgeUnreachableOverHTTPSIsTheOperators(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAttempts: 1, CircuitThreshold: 1})
	e.useEdge(stalledTLSEdge(t), edgeSecret(t))
	e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge, TimeoutMS: 300})
	e.emit("e1", "t", `{}`)
	e.drain()
	d := e.only()
	st, err := e.st.Stats(context.Background(), e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != store.StatusPending || len(d.AttemptLog) != 1 || d.AttemptLog[0].Outcome != classEdgeDown || st.Subscribers[0].CircuitOpen {
		t.Fatalf("no connection to the edge was made: delivery %s, attempts %+v, circuit open %v; want pending after one %s attempt, circuit closed",
			d.Status, d.AttemptLog, st.Subscribers[0].CircuitOpen, classEdgeDown)
	}
}

// TestEdgeOutageLeavesTheSubscriberItsAttempts: attempts the edge's outage made are not counted
// (PROTOCOL.md §5: "fixing the edge delivers what it held up"). Once the edge is back, the
// subscriber's first transient failure (a 500) must not make the delivery dead by --max-attempts:
// the subscriber has had one attempt of its 2.
func TestEdgeOutageLeavesTheSubscriberItsAttempts(t *testing.T) {
	t.Parallel()
	closed := newSink(t, status(200))
	closed.Close() // the edge is down: nothing listens
	e := newEnv(t, Config{MaxAttempts: 2})
	originKey := edgeSecret(t)
	e.useEdge(closed.URL, originKey)
	e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge})
	e.emit("e1", "t", `{}`)
	for range 3 { // the edge is down for three attempts
		e.drain()
		if d := e.only(); d.Status != store.StatusPending {
			t.Fatalf("while the edge is down: delivery %s, attempts %+v", d.Status, d.AttemptLog)
		}
		e.clk.Advance(3 * time.Hour)
	}
	// The edge is back; the subscriber answers 500 once.
	e.useEdge(fakeEdge(t, e, []signature.Secret{originKey}, func(w http.ResponseWriter, _ *signature.Hop) {
		w.Header().Set(wire.HeaderOutcome, string(wire.OutcomeForwarded))
		w.WriteHeader(500)
	}).URL, originKey)
	e.drain()
	d := e.only()
	if d.Status != store.StatusPending {
		t.Fatalf("after the edge came back, one 500 from the subscriber made the delivery %s (reason %q); attempts %+v",
			d.Status, d.Reason, d.AttemptLog)
	}
}

// TestAnEdgeOutageUntilTheMaxAgeCountsNoAttempt: an edge fault's attempt is not counted
// (PROTOCOL.md §5: its log shows it with number 0), and only the max age makes such a delivery
// dead. The one that found the edge down past the max age was counted: the delivery died with an
// attempt its subscriber never had, logged as number 1.
func TestAnEdgeOutageUntilTheMaxAgeCountsNoAttempt(t *testing.T) {
	t.Parallel()
	closed := newSink(t, status(200))
	closed.Close() // the edge is down: nothing listens
	e := newEnv(t, Config{MaxAge: time.Hour})
	e.useEdge(closed.URL, edgeSecret(t))
	e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge})
	e.emit("e1", "t", `{}`)
	e.drain()
	e.clk.Advance(2 * time.Hour)
	e.drain()
	d := e.only()
	if d.Status != store.StatusDead || d.Reason != store.ReasonMaxAge || d.Attempts != 0 || len(d.AttemptLog) != 2 ||
		d.AttemptLog[1].Number != 0 || d.LastError != d.AttemptLog[1].Error {
		t.Fatalf("edge down until past the max age: %s (%q), %d attempts, last error %q, log %+v; want dead by max_age, no attempt counted, its last edge fault the error",
			d.Status, d.Reason, d.Attempts, d.LastError, d.AttemptLog)
	}
}

// TestEdgeMarkFailuresAreCounted: a delivery the edge forwarded and the subscriber acknowledged,
// but whose marks the edge could not write, is delivered, and the failure is counted by mark: on
// Cloudflare's free plan that is how an operator learns the day's KV writes ran out.
func TestEdgeMarkFailuresAreCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	originKey := edgeSecret(t)
	edge := fakeEdge(t, e, []signature.Secret{originKey}, outcome(wire.OutcomeForwarded, 200, wire.HeaderMarkFailed, wire.MarkDedup+", "+wire.MarkCoalesce))
	e.useEdge(edge.URL, originKey)
	e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge})
	e.emit("e1", "t", `{}`)
	e.drain()
	if d := e.only(); d.Status != store.StatusDelivered {
		t.Fatalf("delivery %s, want delivered", d.Status)
	}
	for _, m := range []string{wire.MarkDedup, wire.MarkCoalesce} {
		if v := testutil.ToFloat64(e.eng.m.markFailures.WithLabelValues(m)); v != 1 {
			t.Errorf("mark failures of %s: %v, want 1", m, v)
		}
	}
}

// TestEdgeRejectionReasonsAreBounded: edgehook_edge_rejections_total is labelled by reason, and the
// edge may send any token as one (wire.ParseOutcome); an edge that is not ours, or misbehaves, must
// not grow the label set: a reason the protocol does not name is counted as "other".
func TestEdgeRejectionReasonsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	originKey := edgeSecret(t)
	edge := fakeEdge(t, e, []signature.Secret{originKey}, func(w http.ResponseWriter, hop *signature.Hop) {
		outcome(wire.Rejected(hop.DeliveryID), http.StatusBadRequest)(w, hop) // a new reason every time
	})
	e.useEdge(edge.URL, originKey)
	e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge})
	for _, id := range []string{"e1", "e2", "e3"} {
		e.emit(id, "t", `{}`)
	}
	e.drain()
	if n := testutil.CollectAndCount(e.eng.m.edgeRejections); n != 1 {
		t.Fatalf("3 rejections for 3 reasons the protocol does not name: %d series, want 1", n)
	}
	if v := testutil.ToFloat64(e.eng.m.edgeRejections.WithLabelValues("other")); v != 3 {
		t.Fatalf(`edge rejections {reason="other"}: %v, want 3`, v)
	}
}
