package faults

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
)

// TestSubscriberFaults runs one origin against one sink whose paths fail in each way, plus a
// healthy path, and checks each delivery's fate, its attempt log and what the sink saw.
func TestSubscriberFaults(t *testing.T) {
	t.Parallel()
	var tl timeline
	release := make(chan struct{}) // unblocks the hanging handlers at the end
	hungBodyCut := make(chan struct{}, 1)
	tenMB := strings.Repeat("0123456789", 1<<20)
	sink := rig.NewSink(t, func(w http.ResponseWriter, r *http.Request) {
		n := tl.add(r.URL.Path)
		switch r.URL.Path {
		case "/ok":
			w.WriteHeader(http.StatusOK)
		case "/500":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/503-seconds", "/429-date":
			if n > 1 {
				w.WriteHeader(http.StatusOK)
				return
			}
			if r.URL.Path == "/503-seconds" {
				w.Header().Set("Retry-After", "2")
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Retry-After", time.Now().Add(3*time.Second).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		case "/410":
			w.WriteHeader(http.StatusGone)
		case "/hang-headers":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case "/hang-body":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("partial "))
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				select {
				case hungBodyCut <- struct{}{}:
				default:
				}
			case <-release:
			}
		case "/reset":
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.(*net.TCPConn).SetLinger(0) // close with RST
				conn.Close()
			}
		case "/10mb":
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusOK)
			w.Write([]byte(tenMB))
		case "/redirect":
			http.Redirect(w, r, "/ok?from=redirect", http.StatusFound)
		}
	})
	defer close(release)
	e := newEnv(t)
	paths := []string{"/ok", "/500", "/503-seconds", "/429-date", "/410", "/hang-headers", "/hang-body", "/reset", "/10mb", "/redirect"}
	for _, p := range paths {
		e.subscribe(t, "s"+strings.NewReplacer("/", "", "-", "_").Replace(p), sink.URL()+p, map[string]any{"timeout_ms": 1000})
	}
	start := time.Now()
	e.emit(t, "evt_fault")
	id := func(p string) string { return "s" + strings.NewReplacer("/", "", "-", "_").Replace(p) }

	// Healthy: delivered once, whatever the others do.
	if st := e.settled(t, "evt_fault", id("/ok"), "delivered"); st.Attempts != 1 {
		t.Errorf("/ok: %+v, want delivered at the first attempt", st)
	}
	// 500: retried with backoff, dead after --max-attempts 3, last status kept.
	if st := e.settled(t, "evt_fault", id("/500"), "dead"); st.Attempts != 3 || st.LastStatus != 500 || st.Reason != "max_attempts" {
		t.Errorf("/500: %+v, want dead after 3 attempts with status 500", st)
	}
	// 503 with Retry-After in seconds and 429 with an HTTP date: the retry waits that long, then
	// delivers.
	for p, wait := range map[string]time.Duration{"/503-seconds": 2 * time.Second, "/429-date": 2 * time.Second} {
		e.settled(t, "evt_fault", id(p), "delivered")
		at := tl.get(p)
		atts := e.inspect.Attempts(t, "evt_fault", id(p))
		if len(at) != 2 || len(atts) != 2 || atts[0].Outcome != "throttled" {
			t.Errorf("%s: %d requests, attempts %+v; want 2, the first throttled", p, len(at), atts)
			continue
		}
		// The date form has one-second resolution: "now + 3s" is honoured as at least 2s. The
		// store keeps times in milliseconds, hence the few milliseconds of slack.
		if gap := at[1].Sub(at[0]); gap < wait-10*time.Millisecond {
			t.Errorf("%s: retried after %s, before the Retry-After of %s", p, gap, wait)
		}
	}
	// 410: the subscriber is disabled after one request, its delivery held, new events skip it.
	st := e.settled(t, "evt_fault", id("/410"), "held", "dead")
	if st.Status != "held" || e.inspect.SubscriberState(t, id("/410")) != "disabled" || len(tl.get("/410")) != 1 {
		t.Errorf("/410: delivery %+v, subscriber %s, %d requests; want held, disabled, 1", st, e.inspect.SubscriberState(t, id("/410")), len(tl.get("/410")))
	}
	// Hanging before the headers, hanging in the body, resetting: each attempt ends (timeout or
	// connection error), is retried, and the delivery dies after three attempts.
	for p, class := range map[string]string{"/hang-headers": "timeout", "/hang-body": "", "/reset": "connection"} {
		st := e.settled(t, "evt_fault", id(p), "dead")
		atts := e.inspect.Attempts(t, "evt_fault", id(p))
		if st.Attempts != 3 || len(atts) != 3 {
			t.Errorf("%s: %+v with %d attempts, want dead after 3", p, st, len(atts))
			continue
		}
		for _, a := range atts {
			if class != "" && a.Outcome != class {
				t.Errorf("%s: attempt %+v, want outcome %s", p, a, class)
			}
		}
	}
	// A body that hangs after a 500 status: the status decides (http_5xx), and the origin
	// cut the connection instead of waiting for the body for ever.
	for _, a := range e.inspect.Attempts(t, "evt_fault", id("/hang-body")) {
		if a.Status != 500 || !strings.HasPrefix(a.Excerpt, "partial") {
			t.Errorf("/hang-body: attempt %+v, want status 500 with the partial excerpt", a)
		}
	}
	select {
	case <-hungBodyCut:
	case <-time.After(10 * time.Second):
		t.Error("/hang-body: the origin never closed the hanging response")
	}
	// 10 MB answer: delivered, and only a bounded excerpt is kept.
	e.settled(t, "evt_fault", id("/10mb"), "delivered")
	if atts := e.inspect.Attempts(t, "evt_fault", id("/10mb")); len(atts) != 1 || len(atts[0].Excerpt) > 4096 || !strings.HasPrefix(atts[0].Excerpt, "0123456789") {
		t.Errorf("/10mb: attempts %d, excerpt of %d bytes; want one, at most 4 KiB", len(atts), len(atts[0].Excerpt))
	}
	// Redirect: not followed (the target path is never requested from the redirect).
	st = e.settled(t, "evt_fault", id("/redirect"), "dead")
	if st.LastStatus != http.StatusFound || len(tl.get("/ok")) != 1 {
		t.Errorf("/redirect: %+v; /ok requested %d times (want 1: its own delivery only)", st, len(tl.get("/ok")))
	}
	outcomes := map[string]string{}
	for _, p := range paths {
		st, _ := e.inspect.Delivery(t, "evt_fault", id(p))
		outcomes[p] = fmt.Sprintf("%s after %d attempt(s)", st.Status, st.Attempts)
	}
	rig.Record(t, "faults-subscriber", map[string]any{"requests": sink.Total(), "seconds": time.Since(start).Round(time.Second).Seconds(), "outcomes": outcomes})
}

// rawSink answers on a TCP listener with a hand-written response, for faults net/http will not
// produce.
func rawSink(t *testing.T, answer func(c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				bufio.NewReader(c).Peek(1)
				answer(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestSubscriberGarbage answers with bytes that are not HTTP: the attempt fails as a connection
// error and is retried, like a reset.
func TestSubscriberGarbage(t *testing.T) {
	t.Parallel()
	url := rawSink(t, func(c net.Conn) { c.Write([]byte("SSH-2.0-OpenSSH_9.0\r\n\x00\xff garbage\r\n\r\n")) })
	e := newEnv(t)
	e.subscribe(t, "garbage", url+"/", nil)
	e.emit(t, "evt_garbage")
	st := e.settled(t, "evt_garbage", "garbage", "dead")
	if atts := e.inspect.Attempts(t, "evt_garbage", "garbage"); st.Attempts != 3 || len(atts) != 3 || atts[0].Outcome != "connection" {
		t.Errorf("%+v %+v: want dead after three connection failures", st, atts)
	}
}

// TestRetryAfterCountsFromTheAnswer has a subscriber take 1.5 s to answer "503, Retry-After: 2":
// the retry must come at least 2 s after that answer, not 2 s after the request was sent (which
// would be 0.5 s after the answer).
func TestRetryAfterCountsFromTheAnswer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var answered, retried time.Time
	sink := rig.NewSink(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !answered.IsZero() {
			retried = time.Now()
			w.WriteHeader(http.StatusNoContent)
			return
		}
		time.Sleep(1500 * time.Millisecond)
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusServiceUnavailable)
		answered = time.Now()
	})
	e := newEnv(t)
	e.subscribe(t, "slow503", sink.URL()+"/", map[string]any{"timeout_ms": 5000})
	e.emit(t, "evt_slow503")
	e.settled(t, "evt_slow503", "slow503", "delivered")
	mu.Lock()
	defer mu.Unlock()
	if gap := retried.Sub(answered); gap < 2*time.Second-10*time.Millisecond { // the store keeps milliseconds
		t.Errorf("retried %s after the answer \"503, Retry-After: 2\"; want at least 2s", gap.Round(time.Millisecond))
	}
}
