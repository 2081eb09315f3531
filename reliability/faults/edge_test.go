package faults

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// edgeSetup creates edge-mode subscribers on a fresh database with the CLI and exports their KV
// records; it returns the database and the KV file.
func edgeSetup(t *testing.T, subs map[string]string, timeout string) (db, kv string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "edgehook.db")
	for id, u := range subs {
		rig.MustRun(t, "subscribers", "add", "--db", db, "--id", id, "--url", u, "--events", "*", "--mode", "edge",
			"--rate", "1000", "--burst", "1000", "--timeout", timeout)
	}
	return db, rig.ExportKV(t, db, dir)
}

func newSecret(t *testing.T) string {
	t.Helper()
	s, err := signature.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s.String()
}

// freePort returns a loopback address nothing listens on (it was just free).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestEdgeDown points the origin at an edge address where nothing listens: each attempt fails
// as edge_unreachable and is retried with backoff, past --max-attempts (the operator's fault, not
// the subscriber's: it stays active), and once the edge comes up there, the delivery goes through,
// once.
func TestEdgeDown(t *testing.T) {
	t.Parallel()
	sink := rig.NewSink(t, nil)
	secret := newSecret(t)
	db, kv := edgeSetup(t, map[string]string{"sub": sink.URL() + "/hook"}, "2s")
	addr := freePort(t)
	o := rig.Serve(t, db, append(append([]string{}, fastRetry...), "--max-attempts", "2", "--edge-url", "http://"+addr, "--edge-secret", secret)...)
	e := &env{o: o, db: db, inspect: rig.OpenDB(t, db)}
	e.emit(t, "evt_down")
	rig.Eventually(t, 20*time.Second, "three refused attempts", func() bool { return len(e.inspect.Attempts(t, "evt_down", "sub")) >= 3 })
	for _, a := range e.inspect.Attempts(t, "evt_down", "sub") {
		if a.Outcome != "edge_unreachable" || a.Status != 0 {
			t.Errorf("attempt %+v while the edge is down, want edge_unreachable", a)
		}
	}
	if st := e.inspect.SubscriberState(t, "sub"); st != "active" {
		t.Errorf("subscriber %s after the edge was down, want active", st)
	}
	refused := len(e.inspect.Attempts(t, "evt_down", "sub"))
	rig.Edge(t, kv, secret, "--listen", addr)
	st := e.settled(t, "evt_down", "sub", "delivered")
	sink.Until(t, 10*time.Second, "the delivery", func() bool { return sink.Total() >= 1 })
	if sink.Seen("/hook", "evt_down") != 1 {
		t.Errorf("the subscriber got the event %d times, want 1", sink.Seen("/hook", "evt_down"))
	}
	rig.Record(t, "faults-edge-down", map[string]any{"refused_attempts": refused, "final": st.Status, "subscriber_requests": sink.Total()})
}

// TestEdgeWrongSecret runs the edge with another secret than the origin's: every hop is answered
// 401 rejected:bad_signature, which the origin counts as an edge rejection (metric, loud log), not
// as a subscriber failure: the delivery is not killed by --max-attempts, the subscriber's circuit
// stays closed, and the subscriber is never called.
func TestEdgeWrongSecret(t *testing.T) {
	t.Parallel()
	sink := rig.NewSink(t, nil)
	db, kv := edgeSetup(t, map[string]string{"sub": sink.URL() + "/hook"}, "2s")
	_, edgeURL := rig.Edge(t, kv, newSecret(t))
	o := rig.Serve(t, db, append(append([]string{}, fastRetry...), "--edge-url", edgeURL, "--edge-secret", newSecret(t))...)
	e := &env{o: o, db: db, inspect: rig.OpenDB(t, db)}
	e.emit(t, "evt_wrong")
	// --max-attempts is 3: five rejected attempts prove rejections do not count against it.
	rig.Eventually(t, 30*time.Second, "five rejected attempts", func() bool { return len(e.inspect.Attempts(t, "evt_wrong", "sub")) >= 5 })
	for _, a := range e.inspect.Attempts(t, "evt_wrong", "sub") {
		if a.Outcome != "edge_rejected" || a.Status != http.StatusUnauthorized || !strings.Contains(a.Error, wire.ReasonBadSignature) {
			t.Errorf("attempt %+v, want 401 edge_rejected bad_signature", a)
		}
	}
	final, _ := e.inspect.Delivery(t, "evt_wrong", "sub")
	if final.Status == "dead" {
		t.Errorf("delivery %+v: an edge rejection must not use up the attempts", final)
	}
	if c := e.inspect.Circuit(t, "sub"); c == "open" {
		t.Errorf("circuit %s: edge rejections are not the subscriber's failures", c)
	}
	rejections := e.metric(t, `edgehook_edge_rejections_total{reason="bad_signature"}`)
	if rejections < 5 {
		t.Errorf("edgehook_edge_rejections_total{bad_signature} = %v, want at least 5", rejections)
	}
	for _, class := range []string{"http_4xx", "http_5xx", "timeout", "connection"} {
		if v := e.metric(t, `edgehook_delivery_failures_total{class="`+class+`",subscriber="sub"}`); v != 0 {
			t.Errorf("subscriber failures of class %s = %v, want 0", class, v)
		}
	}
	if !strings.Contains(o.Logs(), "EDGE REJECTED") {
		t.Error("the origin did not log the edge rejection loudly")
	}
	if sink.Total() != 0 {
		t.Errorf("the subscriber was called %d times through an edge that rejects the hop", sink.Total())
	}
	rig.Record(t, "faults-edge-wrong-secret", map[string]any{"rejected_attempts": rejections, "max_attempts": 3,
		"delivery_status": final.Status, "circuit": e.inspect.Circuit(t, "sub"), "subscriber_requests": sink.Total()})
}

// TestEdgeSlow puts a delaying proxy in front of the edge. A sluggish answer is delivered at once;
// one slower than the origin waits (the subscriber's timeout plus 10 s for the edge's own work,
// at most three quarters of the lease: 1.5 s here) makes the origin give up and retry; the edge
// finishes every forward it starts and deduplicates on the delivery id, so the subscriber gets the
// event exactly once either way.
func TestEdgeSlow(t *testing.T) {
	t.Parallel()
	sink := rig.NewSink(t, nil)
	db, kv := edgeSetup(t, map[string]string{"sluggish": sink.URL() + "/sluggish", "slow": sink.URL() + "/slow"}, "1s")
	secret := newSecret(t)
	_, edgeURL := rig.Edge(t, kv, secret)
	// "sluggish" is always 300 ms late; "slow" is 2.5 s late the first time only (a slow spell).
	var slowCalls atomic.Int32
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	slow := rig.NewSink(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get(wire.HeaderSubscriberID) {
		case "sluggish":
			time.Sleep(300 * time.Millisecond)
		case "slow":
			if slowCalls.Add(1) == 1 {
				time.Sleep(2500 * time.Millisecond)
			}
		}
		// The edge runs a request to its end even when the origin hangs up; so does this proxy.
		req, err := http.NewRequestWithContext(context.Background(), r.Method, edgeURL, r.Body)
		if err != nil {
			t.Error(err)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	})
	o := rig.Serve(t, db, append(append([]string{}, fastRetry...), "--lease-duration", "2s", "--edge-url", slow.URL(), "--edge-secret", secret)...)
	e := &env{o: o, db: db, inspect: rig.OpenDB(t, db)}
	e.emit(t, "evt_slow")
	if st := e.settled(t, "evt_slow", "sluggish", "delivered"); st.Attempts != 1 {
		t.Errorf("sluggish edge: %+v, want delivered at the first attempt", st)
	}
	e.settled(t, "evt_slow", "slow", "delivered")
	atts := e.inspect.Attempts(t, "evt_slow", "slow")
	// The retry may reach the edge before or after the timed-out forward completes: it is then
	// forwarded (and the late one answered "duplicate") or answered "duplicate" itself.
	if last := atts[len(atts)-1].Outcome; len(atts) < 2 || atts[0].Outcome != "timeout" || (last != "duplicate" && last != "forwarded") {
		t.Errorf("slow edge: attempts %+v, want a timeout, then forwarded or duplicate", atts)
	}
	for _, p := range []string{"/sluggish", "/slow"} {
		if n := sink.Seen(p, "evt_slow"); n != 1 {
			t.Errorf("%s: the subscriber got the event %d times, want 1", p, n)
		}
	}
	rig.Record(t, "faults-edge-slow", map[string]any{"slow_attempts": len(atts), "subscriber_requests": sink.Total(), "duplicates": sink.Total() - 2})
}
