package engine

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/internal/syncbuf"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// logLines captures an engine's log as JSON lines.
type logLines struct{ syncbuf.Buffer }

// withMsg returns the lines whose msg starts with prefix.
func (l *logLines) withMsg(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if msg, _ := m["msg"].(string); strings.HasPrefix(msg, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// captureLog makes e's engine log to the returned lines.
func (e *env) captureLog() *logLines {
	l := &logLines{}
	e.eng.log = slog.New(slog.NewJSONHandler(l, nil))
	return l
}

// TestCircuitChangesAreLogged: an open circuit holds every delivery of its subscriber back, so
// its opening is a warning naming the subscriber, the failures and the end of the cool-down, and
// its closing is logged too.
func TestCircuitChangesAreLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{CircuitThreshold: 2, CircuitCooldown: time.Minute, CircuitMaxCooldown: time.Hour,
		BackoffBase: time.Millisecond, BackoffCap: time.Millisecond, MaxAttempts: 100})
	logs := e.captureLog()
	healthy := make(chan struct{})
	k := newSink(t, failingUntil(healthy))
	e.sub(store.SubscriberInput{ID: "flaky", URL: k.URL, MaxInFlight: 1})
	for i := range 3 {
		e.emit(fmt.Sprintf("e%d", i), "t", `{}`)
	}
	for range 3 {
		e.clk.Advance(10 * time.Millisecond)
		e.drain()
	}
	opened := logs.withMsg(t, "circuit opened")
	if len(opened) != 1 {
		t.Fatalf("%d 'circuit opened' lines after 2 failures at threshold 2, want 1: %v", len(opened), opened)
	}
	want := e.clk.Now().Add(time.Minute - 20*time.Millisecond).UTC().Format(time.RFC3339Nano)
	if o := opened[0]; o["level"] != "WARN" || o["subscriber"] != "flaky" || o["consecutive_failures"] != 2.0 || o["openings"] != 1.0 || o["until"] != want {
		t.Fatalf("circuit opened line %v, want WARN for flaky, 2 consecutive failures, opening 1, until %s", o, want)
	}
	if closed := logs.withMsg(t, "circuit closed"); len(closed) != 0 {
		t.Fatalf("circuit closed logged while it was open: %v", closed)
	}
	close(healthy)
	e.clk.Advance(time.Minute)
	e.drain()
	closed := logs.withMsg(t, "circuit closed")
	if len(closed) != 1 || closed[0]["level"] != "INFO" || closed[0]["subscriber"] != "flaky" {
		t.Fatalf("after the probe succeeded: circuit closed lines %v, want one INFO for flaky", closed)
	}
}

// TestDeadDeliveriesAreLogged: deliveries given up are a warning, one line per subscriber and
// reason in a settle batch, with their count, one delivery's id and its last error.
func TestDeadDeliveriesAreLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAttempts: 1})
	logs := e.captureLog()
	e.sub(store.SubscriberInput{ID: "broken", URL: newSink(t, status(500)).URL})
	e.sub(store.SubscriberInput{ID: "fine", URL: newSink(t, status(200)).URL})
	for i := range 5 {
		e.emit(fmt.Sprintf("e%d", i), "t", `{}`)
	}
	if res := e.drain(); res.Dead != 5 || res.Delivered != 5 {
		t.Fatalf("drain %+v, want 5 dead and 5 delivered", res)
	}
	lines := logs.withMsg(t, "deliveries dead-lettered")
	total := 0
	for _, l := range lines {
		if l["level"] != "WARN" || l["subscriber"] != "broken" || l["reason"] != store.ReasonMaxAttempts || l["last_error"] != "subscriber answered 500" {
			t.Fatalf("dead-letter line %v, want a WARN for broken, max_attempts, last error 'subscriber answered 500'", l)
		}
		id, _ := l["delivery"].(string)
		d, err := e.st.GetDelivery(t.Context(), id)
		if err != nil || d.Status != store.StatusDead || d.SubscriberID != "broken" {
			t.Fatalf("the line names delivery %q: %+v, %v; want one of broken's dead deliveries", id, d, err)
		}
		total += int(l["count"].(float64))
	}
	if total != 5 || len(lines) > 5 {
		t.Fatalf("dead-letter lines %v count %d deliveries, want 5", lines, total)
	}
}

// TestEdgeRejectionSaysWhatToCheck: the error logged for a hop the edge refused names what to
// check for its reason: a stale timestamp is the clocks', not the edge secret's.
func TestEdgeRejectionSaysWhatToCheck(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		wire.ReasonStaleTimestamp: "clocks",
		wire.ReasonBadSignature:   "EDGE_SECRET",
		wire.ReasonBadRecord:      "KV record",
	} {
		t.Run(reason, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{})
			edge := newSink(t, func(w http.ResponseWriter, _ *recorded) {
				w.Header().Set(wire.HeaderOutcome, string(wire.Rejected(reason)))
				w.WriteHeader(401)
			})
			e.useEdge(edge.URL, edgeSecret(t))
			logs := e.captureLog()
			e.sub(store.SubscriberInput{ID: "s", URL: "https://subscriber.example/", Mode: store.ModeEdge})
			e.emit("e1", "t", `{}`)
			e.drain()
			lines := logs.withMsg(t, "EDGE REJECTED")
			if len(lines) != 1 || lines[0]["reason"] != reason || !strings.Contains(lines[0]["msg"].(string), want) {
				t.Fatalf("rejected:%s logged %v, want one line whose message names %q", reason, lines, want)
			}
		})
	}
}
