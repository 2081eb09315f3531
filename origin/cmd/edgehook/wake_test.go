package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/shared/wire"
)

// wakeBound is how soon serve must send what an API request made due. These tests run it with a
// poll interval of a minute, so only a wake-up can deliver within the bound.
const wakeBound = 5 * time.Second

// hookSink is a subscriber endpoint on 127.0.0.1 answering with the status the test sets (0:
// holding each request until the test sends on free, which answers it 204, or it ends). It
// reports each request's event id on got.
type hookSink struct {
	*httptest.Server
	status atomic.Int32
	got    chan string
	free   chan struct{}
}

func newHookSink(t *testing.T, status int) *hookSink {
	s := &hookSink{got: make(chan string, 16), free: make(chan struct{})}
	s.status.Store(int32(status))
	release := make(chan struct{})
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		code := int(s.status.Load()) // before reporting: the test may change it once it has the report
		s.got <- r.Header.Get(wire.HeaderWebhookID)
		if code == 0 {
			select {
			case <-s.free:
				code = http.StatusNoContent
			case <-r.Context().Done():
				return
			case <-release:
				return
			}
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(release) }) // runs first
	return s
}

// expect fails unless the next request the sink gets, within wakeBound, carries event id.
func (s *hookSink) expect(t *testing.T, id, after string) {
	t.Helper()
	timer := time.NewTimer(wakeBound)
	defer timer.Stop()
	select {
	case got := <-s.got:
		if got != id {
			t.Fatalf("after %s the sink got %q, want %q", after, got, id)
		}
	case <-timer.C:
		t.Fatalf("after %s, %q was not sent within %s: serve was not woken (it polls once a minute here)", after, id, wakeBound)
	}
}

// startIdleServe runs serve with a poll interval of a minute and maxAttempts attempts per
// delivery, in c's directory.
func startIdleServe(t *testing.T, c *cli, maxAttempts int) *server {
	return startServe(t, c, "--poll-interval", "1m", "--max-attempts", strconv.Itoa(maxAttempts), "--allow-network", "127.0.0.0/8")
}

// sentOne starts serve (startIdleServe, maxAttempts), a sink answering status and subscriber "s"
// to every event there; it emits e1 and returns once the sink has it, so the engine is past its
// first claim, waiting for a wake-up.
func sentOne(t *testing.T, c *cli, status, maxAttempts int) (*hookSink, *server) {
	sink := newHookSink(t, status)
	srv := startIdleServe(t, c, maxAttempts)
	srv.must(t, http.StatusCreated, "POST", "/v1/subscribers", `{"id":"s","url":"`+sink.URL+`","events":["*"]}`)
	srv.emit(t, "e1", "a")
	sink.expect(t, "e1", "an emit")
	return sink, srv
}

// emit emits an event with an empty object as data.
func (s *server) emit(t *testing.T, id, typ string) {
	t.Helper()
	s.must(t, http.StatusAccepted, "POST", "/v1/events", `{"id":"`+id+`","type":"`+typ+`","data":{}}`)
}

// must sends a request without a token and fails unless it is answered with status.
func (s *server) must(t *testing.T, status int, method, path, body string) []byte {
	t.Helper()
	code, b := s.call(t, method, path, "", body)
	if code != status {
		t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, status)
	}
	return b
}

// until asks GET path every few milliseconds, for up to 30 s, until its answer contains want:
// the engine writes an outcome after the sink has answered, in another process, with nothing to
// wait on but the database.
func (s *server) until(t *testing.T, path, want string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(string(s.must(t, http.StatusOK, "GET", path, "")), want) {
			return
		}
	}
	t.Fatalf("GET %s never contained %s", path, want)
}

// TestServeWakesOnAPIWrites: what an API request makes due (a resumed or re-enabled subscriber's
// backlog, a retried or replayed dead delivery, the backlog of a subscriber given a new URL, the
// event of a subscriber created while the engine holds every other one at its in-flight cap) is
// sent at once, not at the next poll.
func TestServeWakesOnAPIWrites(t *testing.T) {
	t.Parallel()
	t.Run("resume", func(t *testing.T) {
		t.Parallel()
		c := newCLI(t)
		sink, srv := sentOne(t, c, http.StatusNoContent, 1)
		// Paused from another process, which does not wake serve (the API's pause would, and
		// the claim it starts could send e2 whether or not the resume woke anything).
		c.ok("subscribers", "pause", "s")
		srv.emit(t, "e2", "a")
		srv.must(t, http.StatusOK, "POST", "/v1/subscribers/s/resume", "")
		sink.expect(t, "e2", "resuming a paused subscriber")
	})
	t.Run("re-enable", func(t *testing.T) {
		t.Parallel()
		// Two attempts: a 410 at a delivery's last is final, and leaves nothing held.
		sink, srv := sentOne(t, newCLI(t), http.StatusGone, 2)
		srv.until(t, "/v1/subscribers/s", `"state":"disabled"`) // and e1 held
		sink.status.Store(http.StatusNoContent)
		srv.must(t, http.StatusOK, "POST", "/v1/subscribers/s/resume", "")
		sink.expect(t, "e1", "re-enabling a disabled subscriber")
	})
	t.Run("retry and replay", func(t *testing.T) {
		t.Parallel()
		sink, srv := sentOne(t, newCLI(t), http.StatusInternalServerError, 1)
		srv.emit(t, "e2", "a")
		sink.expect(t, "e2", "an emit")
		srv.until(t, "/v1/stats", `"dead":2`)
		sink.status.Store(http.StatusNoContent)
		var page api.DeliveryPage
		if err := json.Unmarshal(srv.must(t, http.StatusOK, "GET", "/v1/deliveries?event=e1", ""), &page); err != nil || len(page.Deliveries) != 1 {
			t.Fatalf("e1's deliveries: %+v, %v", page, err)
		}
		srv.must(t, http.StatusOK, "POST", "/v1/deliveries/"+page.Deliveries[0].ID+"/retry", "")
		sink.expect(t, "e1", "retrying a dead delivery")
		srv.must(t, http.StatusOK, "POST", "/v1/subscribers/s/replay", "")
		sink.expect(t, "e2", "replaying the dead deliveries")
	})
	t.Run("new URL", func(t *testing.T) {
		t.Parallel()
		// The old URL's one failure opens the circuit for an hour, and backs e1 off an hour or
		// more: only the reset a new URL brings, and the wake-up of the PATCH, send it now.
		old, fresh := newHookSink(t, http.StatusInternalServerError), newHookSink(t, http.StatusNoContent)
		srv := startServe(t, newCLI(t), "--poll-interval", "1m", "--backoff-base", "1h", "--circuit-threshold", "1",
			"--circuit-cooldown", "1h", "--allow-network", "127.0.0.0/8")
		srv.must(t, http.StatusCreated, "POST", "/v1/subscribers", `{"id":"s","url":"`+old.URL+`","events":["*"]}`)
		srv.emit(t, "e1", "a")
		old.expect(t, "e1", "an emit")
		srv.until(t, "/v1/stats", `"circuit_open":true`)
		srv.must(t, http.StatusOK, "PATCH", "/v1/subscribers/s", `{"url":"`+fresh.URL+`"}`)
		fresh.expect(t, "e1", "pointing the subscriber at a new URL")
	})
	t.Run("create then emit", func(t *testing.T) {
		t.Parallel()
		stuck, late := newHookSink(t, 0), newHookSink(t, http.StatusNoContent)
		srv := startIdleServe(t, newCLI(t), 1)
		srv.must(t, http.StatusCreated, "POST", "/v1/subscribers",
			`{"id":"stuck","url":"`+stuck.URL+`","events":["job.stuck"],"max_in_flight":1,"timeout_ms":60000}`)
		srv.emit(t, "e1", "job.stuck")
		stuck.expect(t, "e1", "creating a subscriber and emitting")
		// The engine holds every active subscriber at its cap, so it leaves emits to the settle
		// that frees a place, and counts the active subscribers (once a poll interval) to know
		// it. e1b is claimed only after that count, on e1's settle.
		srv.emit(t, "e1b", "job.stuck")
		stuck.free <- struct{}{}
		stuck.expect(t, "e1b", "a settle freeing a place")
		// A new subscriber's events must not wait for the settle of e1b or the poll. The claim on
		// the creation's wake-up may come before or after e2's commit; either way, e3's must not
		// wait either.
		srv.must(t, http.StatusCreated, "POST", "/v1/subscribers", `{"id":"late","url":"`+late.URL+`","events":["job.late"]}`)
		for _, id := range []string{"e2", "e3"} {
			srv.emit(t, id, "job.late")
			late.expect(t, id, "creating a subscriber while another holds its cap, and emitting")
		}
	})
}
