// Package faults runs the real edgehook binary against subscribers, edges and storage that fail
// in every way the issue lists, and checks what the origin does about each.
package faults

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fastRetry are engine settings that make retries quick enough to watch: short backoff, three
// attempts, a circuit breaker that never opens (so each test sees its own fault, not the breaker)
// and loopback allowed for direct mode.
var fastRetry = []string{"--allow-network", "127.0.0.1/32", "--backoff-base", "100ms", "--backoff-cap", "300ms",
	"--max-attempts", "3", "--circuit-threshold", "1000", "--poll-interval", "50ms", "--lease-duration", "5s"}

// env is one origin over a fresh database.
type env struct {
	o       *rig.Origin
	db      string
	inspect *rig.DB
}

func newEnv(t *testing.T, extra ...string) *env {
	t.Helper()
	db := filepath.Join(t.TempDir(), "edgehook.db")
	o := rig.Serve(t, db, append(append([]string{}, fastRetry...), extra...)...)
	return &env{o: o, db: db, inspect: rig.OpenDB(t, db)}
}

// subscribe creates a subscriber for every event type with a generous rate; fields override.
func (e *env) subscribe(t *testing.T, id, url string, fields map[string]any) {
	t.Helper()
	req := map[string]any{"id": id, "url": url, "events": []string{"*"}, "rate_per_sec": 1000, "burst": 1000, "max_in_flight": 16}
	for k, v := range fields {
		req[k] = v
	}
	e.o.AddSubscriber(t, req)
}

// emit emits one event with the given id and waits for its 202.
func (e *env) emit(t *testing.T, id string) {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"type":"fault.test","data":{"n":%q}}`, id, id)
	if r := e.o.Do(t, http.MethodPost, "/v1/events", []byte(body), nil); r.Status != http.StatusAccepted {
		t.Fatalf("emit %s: %d %s", id, r.Status, r.Body)
	}
}

// settled waits until the delivery of event to sub is in one of the statuses.
func (e *env) settled(t *testing.T, event, sub string, statuses ...string) rig.DeliveryState {
	t.Helper()
	var st rig.DeliveryState
	rig.Eventually(t, 30*time.Second, fmt.Sprintf("delivery of %s to %s to be %v", event, sub, statuses), func() bool {
		st, _ = e.inspect.Delivery(t, event, sub)
		for _, s := range statuses {
			if st.Status == s {
				return true
			}
		}
		return false
	})
	return st
}

// metric returns the value of one sample of /metrics whose line starts with prefix, or 0.
func (e *env) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	r := e.o.Do(t, http.MethodGet, "/metrics", nil, nil)
	for _, line := range strings.Split(string(r.Body), "\n") {
		if strings.HasPrefix(line, prefix) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			return v
		}
	}
	return 0
}

// timeline records when each request for a path arrived.
type timeline struct {
	mu sync.Mutex
	at map[string][]time.Time
}

func (tl *timeline) add(path string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.at == nil {
		tl.at = map[string][]time.Time{}
	}
	tl.at[path] = append(tl.at[path], time.Now())
	return len(tl.at[path])
}

func (tl *timeline) get(path string) []time.Time {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]time.Time(nil), tl.at[path]...)
}
