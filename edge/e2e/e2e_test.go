// Package e2e_test runs the whole path on one machine: the real edgehook binary (serve) → a
// fault-injecting proxy → the local edge (edgehook edge local: the relay's WASI module in wazero) →
// receivers on 127.0.0.1 that verify the Standard Webhooks signature.
package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/edgehook/edgehook/edge/harness/harnesstest"
	"github.com/edgehook/edgehook/internal/httpserve"
	"github.com/edgehook/edgehook/internal/syncbuf"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// Built once in TestMain.
var edgehookBin, wasmPath string

// cacheHome is the XDG_CACHE_HOME of the edgehook processes (see edgehook).
var cacheHome string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edgehook-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		code = m.Run()
		if code == 0 {
			if err := goleak.Find(); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// build compiles the relay module, and the binary unless EDGEHOOK_BIN names one (make passes
// bin/edgehook, just built). The flags are those of `make build`, so both share go's build cache.
func build(dir string) error {
	var err error
	if cacheHome, err = filepath.Abs("../../build/cache"); err != nil {
		return err
	}
	if wasmPath, err = harnesstest.BuildWASM(dir, harnesstest.HostMACTag); err != nil {
		return err
	}
	if edgehookBin = os.Getenv("EDGEHOOK_BIN"); edgehookBin != "" {
		_, err := os.Stat(edgehookBin)
		return err
	}
	edgehookBin = filepath.Join(dir, "edgehook")
	cmd := exec.Command("go", "build", "-trimpath", "-o", edgehookBin, "github.com/edgehook/edgehook/origin/cmd/edgehook")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build edgehook: %v\n%s", err, out)
	}
	return nil
}

const (
	events      = 1000
	subscribers = 5
	eventType   = "video.rank_updated"
	edgeSecret  = "whsec_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE="
	// deadline bounds the whole delivery; the test fails rather than wait longer.
	deadline = 3 * time.Minute
)

// receiver is a subscriber endpoint that verifies every request's Standard Webhooks signature and
// counts each webhook-id it accepts.
type receiver struct {
	srv    *httptest.Server
	secret atomic.Pointer[signature.Secret]

	mu       sync.Mutex
	seen     map[string]int
	bad      []string
	complete chan struct{} // closed when every event arrived
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{seen: map[string]int{}, complete: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	id := req.Header.Get(wire.HeaderWebhookID)
	secret := r.secret.Load()
	if err == nil && secret != nil {
		err = signature.Verify([]signature.Secret{*secret}, id, req.Header.Get(wire.HeaderWebhookTimestamp),
			req.Header.Get(wire.HeaderWebhookSignature), body, time.Now(), signature.DefaultTolerance)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || secret == nil {
		r.bad = append(r.bad, fmt.Sprintf("%s: %v", id, err))
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	r.seen[id]++
	if r.seen[id] == 1 && len(r.seen) == events {
		close(r.complete)
	}
	w.WriteHeader(http.StatusNoContent)
}

// cutProxy sits between the origin and the edge. Armed, it lets one request through to the edge
// and then cuts the connection instead of answering: the subscriber has answered 2xx and the edge
// has written its dedup mark, but the origin sees a broken connection and must retry.
type cutProxy struct {
	edge   string
	client *http.Client
	armed  atomic.Bool

	mu      sync.Mutex
	cut     string   // the delivery whose answer was cut
	after   []string // outcomes of later requests for that delivery
	retried chan struct{}
}

func (p *cutProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.edge+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := p.client.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	respBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	delivery, outcome := r.Header.Get(wire.HeaderDeliveryID), resp.Header.Get(wire.HeaderOutcome)
	if resp.StatusCode/100 == 2 && outcome == string(wire.OutcomeForwarded) && p.armed.CompareAndSwap(true, false) {
		p.mu.Lock()
		p.cut = delivery
		p.mu.Unlock()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
		return
	}
	p.mu.Lock()
	if delivery != "" && delivery == p.cut {
		p.after = append(p.after, outcome)
		if outcome == string(wire.OutcomeDuplicate) {
			close(p.retried)
		}
	}
	p.mu.Unlock()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "edgehook.db")

	// Subscribers in edge mode, each with its own receiver; the receiver learns its secret from
	// the one-time output of `subscribers add`.
	receivers := make([]*receiver, subscribers)
	for i := range receivers {
		receivers[i] = newReceiver(t)
		var sub struct {
			ID     string `json:"id"`
			Secret string `json:"secret"`
		}
		mustJSON(t, run(t, "--db", db, "subscribers", "add", "--id", fmt.Sprintf("sub_%d", i), "--url", receivers[i].srv.URL+"/hook",
			"--events", "video.*", "--mode", "edge", "--rate", "1000", "--burst", "1000", "--max-in-flight", "16"), &sub)
		secret, err := signature.ParseSecret(sub.Secret)
		if err != nil {
			t.Fatalf("subscriber %s: secret: %v", sub.ID, err)
		}
		receivers[i].secret.Store(&secret)
	}
	kvFile := filepath.Join(dir, "subscribers.json")
	run(t, "--db", db, "edge", "export-kv", "--out", kvFile)

	_, edgeAddr := start(t, "edge", "local edge listening", "edge", "local", "--listen", "127.0.0.1:0", "--allow-network", "127.0.0.0/8", "--kv", kvFile,
		"--wasm", wasmPath, "--edge-secret", edgeSecret)
	proxy := &cutProxy{edge: "http://" + edgeAddr, client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, retried: make(chan struct{})}
	proxy.armed.Store(true)
	proxySrv := httptest.NewServer(proxy)
	t.Cleanup(proxy.client.CloseIdleConnections)
	t.Cleanup(proxySrv.Close)

	_, apiAddr := start(t, "origin", "serving", "--db", db, "serve", "--listen", "127.0.0.1:0",
		"--edge-url", proxySrv.URL+"/", "--edge-secret", edgeSecret, "--backoff-base", "100ms", "--backoff-cap", "1s", "--poll-interval", "100ms")

	emit(t, "http://"+apiAddr)

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for i, r := range receivers {
		select {
		case <-r.complete:
		case <-ctx.Done():
			r.mu.Lock()
			t.Fatalf("sub_%d received %d of %d events within %s (%d rejected)", i, len(r.seen), events, deadline, len(r.bad))
		}
	}
	select {
	case <-proxy.retried:
	case <-ctx.Done():
		proxy.mu.Lock()
		t.Fatalf("the origin did not retry the cut delivery %q (later outcomes %q)", proxy.cut, proxy.after)
	}

	for i, r := range receivers {
		r.mu.Lock()
		if len(r.bad) > 0 {
			t.Errorf("sub_%d rejected %d requests, first: %s", i, len(r.bad), r.bad[0])
		}
		for id, n := range r.seen {
			if n != 1 {
				t.Errorf("sub_%d received %s %d times, want once", i, id, n)
			}
		}
		r.mu.Unlock()
	}
	proxy.mu.Lock()
	t.Logf("cut the edge's answer for delivery %s; the origin's retries got %q", proxy.cut, proxy.after)
	proxy.mu.Unlock()
}

// emit posts the events in batches through the API; each event's id is its webhook-id.
func emit(t *testing.T, api string) {
	t.Helper()
	const batch = 250
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for start := 0; start < events; start += batch {
		type event struct {
			ID   string          `json:"id"`
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		}
		var req struct {
			Events []event `json:"events"`
		}
		for i := start; i < start+batch; i++ {
			data := fmt.Sprintf(`{"video_id":"v%d","rank":%d,"pad":%q}`, i, i%100, strings.Repeat("x", 200))
			req.Events = append(req.Events, event{ID: "evt_" + strconv.Itoa(i), Type: eventType, Data: json.RawMessage(data)})
		}
		body, _ := json.Marshal(req)
		resp, err := client.Post(api+"/v1/events/batch", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST /v1/events/batch: %d %s", resp.StatusCode, msg)
		}
	}
}

// TestDev runs `edgehook dev` (what `make run` starts) and waits for every sample delivery to be
// printed as received and verified: three events to the Standard Webhooks sample, the one
// video.trending to the legacy sample. Then a subscriber added through the API while dev runs
// must reach the local edge and get its event.
func TestDev(t *testing.T) {
	d, api := startDevSamples(t)
	// One /metrics for the engine and the API, as serve has (the outcome is written, and counted,
	// a moment after the receiver has it).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(api + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), "\nedgehook_deliveries_delivered_total{") && strings.Contains(string(body), "\nedgehook_queue_depth ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev's /metrics has no engine series after the sample deliveries:\n%s", body)
		}
	}

	got := addEdgeSubscriber(t, api, "added", "test.synced")
	post(t, api+"/v1/events", `{"type":"test.synced","data":{"n":1}}`, http.StatusAccepted)
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the subscriber added while dev runs got an unverifiable delivery: %v", r.err)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the subscriber added while dev runs got nothing in a minute:\n%s", d.stderr)
	}
}

// TestDevEdgeTakesTheLargestEvent: an event whose data is dev's --body-limit, which dev's API
// accepts, is delivered through dev's edge, byte for byte. The edge took relay.DefaultMaxBody
// (1 MiB) whatever --body-limit said, and refused every send of a larger event (413
// body_too_large).
func TestDevEdgeTakesTheLargestEvent(t *testing.T) {
	const limit = 2 << 20
	d, api := startDevSamples(t, "--body-limit", "2MiB")

	got := addEdgeSubscriber(t, api, "large", "test.large")
	// A JSON string of exactly --body-limit bytes, which dev's API takes as emit does.
	data := `"` + strings.Repeat("x", limit-2) + `"`
	post(t, api+"/v1/events", `{"type":"test.large","data":`+data+`}`, http.StatusAccepted)
	for timeout := time.After(time.Minute); ; {
		select {
		case r := <-got:
			if r.err != nil {
				t.Fatalf("the event of --body-limit bytes reached its subscriber unverifiable: %v", r.err)
			}
			if len(r.body) != limit {
				t.Fatalf("the event of --body-limit bytes reached its subscriber as %d bytes, want %d", len(r.body), limit)
			}
			return
		case <-time.After(200 * time.Millisecond):
			// A failed send is a delivery row with its error: no need to wait out the minute.
			var page struct {
				Deliveries []struct {
					LastStatus int    `json:"last_status"`
					LastError  string `json:"last_error"`
				} `json:"deliveries"`
			}
			getJSON(t, api+"/v1/deliveries?subscriber=large", &page)
			if len(page.Deliveries) > 0 && page.Deliveries[0].LastError != "" {
				t.Fatalf("the event of --body-limit bytes was not delivered through dev's edge: %d %s",
					page.Deliveries[0].LastStatus, page.Deliveries[0].LastError)
			}
		case <-timeout:
			t.Fatalf("the event of --body-limit bytes did not arrive in a minute:\n%s", d.stderr)
		}
	}
}

// TestDevPrintsAnExcerptOfALargeBody: a sample receiver prints the start of a large delivery,
// marked as cut and with the body's size, on a line of bounded length; it printed the whole body,
// a line as long as the event.
func TestDevPrintsAnExcerptOfALargeBody(t *testing.T) {
	t.Parallel()
	d, api := startDevSamples(t)
	// U+009B (a terminal's control sequence introducer, valid raw in JSON) must come out escaped;
	// é is two bytes after three: the excerpt's end falls inside one and must not split it.
	data := "\"\u009b" + strings.Repeat("é", 100<<10) + `"`
	post(t, api+"/v1/events", `{"type":"video.large","data":`+data+`}`, http.StatusAccepted)
	line := d.printed(t, "received  sample-standard ")
	const maxLine = 1 << 10
	if len(line) > maxLine || !utf8.ValidString(line) || !strings.Contains(line, `signature verified  "\u009béé`) ||
		!strings.Contains(line, fmt.Sprintf("%d bytes", len(data))) {
		t.Fatalf("dev printed a %d-byte delivery as a line of %d bytes (valid UTF-8: %v), %.200q…; want at most %d bytes, "+
			"the body's start with controls escaped, and its size", len(data), len(line), utf8.ValidString(line), line, maxLine)
	}
}

// TestDevExitsOneWhenItCannotWriteOutcomes: a send answered as dev stops, whose outcome it cannot
// write (another process holds the database's lock past --busy-timeout), makes dev exit 1 naming
// what failed, as serve does: it ignored the engine's error and exited 0.
func TestDevExitsOneWhenItCannotWriteOutcomes(t *testing.T) {
	db := filepath.Join(t.TempDir(), "dev.db")
	d := startDev(t, db, "--busy-timeout", "100ms")
	api := d.samplesDelivered(t)
	sent, free := make(chan struct{}, 1), make(chan struct{})
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case sent <- struct{}{}:
		default:
		}
		select { // held: in flight until the test frees it
		case <-free:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer rcv.Close()
	post(t, api+"/v1/subscribers", `{"id":"held","url":"`+rcv.URL+`/hook","events":["test.held"],"mode":"edge"}`, http.StatusCreated)
	post(t, api+"/v1/events", `{"type":"test.held","data":{}}`, http.StatusAccepted)
	select {
	case <-sent:
	case <-time.After(time.Minute):
		t.Fatalf("the held subscriber got nothing in a minute:\n%s", d.stderr)
	}

	sqlDB, err := sql.Open("sqlite", "file:"+db+"?_txlock=immediate") // BEGIN IMMEDIATE: the write lock at once
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	lock, err := sqlDB.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	_ = d.cmd.Process.Signal(os.Interrupt)
	close(free) // answered within the grace: its outcome is the stop's to write
	err = d.wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(d.stderr.String(), "edgehook: writing outcomes") {
		t.Fatalf("dev ended with %v, unable to write an outcome, want exit 1 and a line naming it; log:\n%s", err, d.stderr)
	}
}

// TestDevCutsOffStalledBodies: dev's API, edge and sample receivers each close a connection whose
// client sent a request's head and stalled in its body, within the bound serve and edge local
// keep (httpserve.ReadTimeout of the largest body each takes). They had only a header timeout:
// such a client held a connection, a goroutine and a buffer for ever. It waits out the bounds,
// a minute and more.
func TestDevCutsOffStalledBodies(t *testing.T) {
	t.Parallel()
	d, api := startDevSamples(t)
	var sample struct {
		URL string `json:"url"`
	}
	getJSON(t, api+"/v1/subscribers/sample-standard", &sample)
	// The largest body each takes: the API's default batch and its 16 KiB for the JSON around the
	// data, the edge's and a receiver's 1 MiB.
	servers := []struct {
		name, url string
		limit     int64
	}{{"api", api + "/v1/events", 8<<20 + 16<<10}, {"edge", d.edge + "/", 1 << 20}, {"receiver", sample.URL, 1 << 20}}
	var wg sync.WaitGroup
	for _, srv := range servers {
		wg.Go(func() {
			u, err := url.Parse(srv.url)
			if err != nil {
				t.Error(err)
				return
			}
			c, err := net.Dial("tcp", u.Host)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			head := "POST " + u.Path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"n\":"
			if _, err := io.WriteString(c, head); err != nil {
				t.Error(err)
				return
			}
			// Whatever the server answers, it must then close: the read ends at EOF, not at this deadline.
			bound := httpserve.ReadTimeout(srv.limit)
			start := time.Now()
			c.SetReadDeadline(start.Add(bound + 20*time.Second))
			if answer, err := io.ReadAll(c); err != nil {
				t.Errorf("dev's %s: the connection was still open %s after the stalled body, with a bound of %s (%v); answered %q",
					srv.name, time.Since(start).Round(time.Second), bound, err, answer)
			}
		})
	}
	wg.Wait()
}

// received is what a subscriber of addEdgeSubscriber got: a body whose signature verified, or
// why it did not.
type received struct {
	body []byte
	err  error
}

// addEdgeSubscriber adds, through dev's API, a subscriber in edge mode of eventType whose receiver
// verifies the Standard Webhooks signature; the channel gets its first delivery.
func addEdgeSubscriber(t *testing.T, api, id, eventType string) <-chan received {
	t.Helper()
	got := make(chan received, 1)
	var secret atomic.Pointer[signature.Secret]
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		s := secret.Load()
		if err == nil && s == nil {
			err = errors.New("secret not known yet")
		}
		if err == nil {
			err = signature.Verify([]signature.Secret{*s}, r.Header.Get(wire.HeaderWebhookID), r.Header.Get(wire.HeaderWebhookTimestamp),
				r.Header.Get(wire.HeaderWebhookSignature), body, time.Now(), signature.DefaultTolerance)
		}
		select {
		case got <- received{body, err}:
		default:
		}
	}))
	t.Cleanup(rcv.Close)
	var sub struct {
		Secret string `json:"secret"`
	}
	mustJSON(t, post(t, api+"/v1/subscribers", `{"id":"`+id+`","url":"`+rcv.URL+`/hook","events":["`+eventType+`"],"mode":"edge"}`, http.StatusCreated), &sub)
	s, err := signature.ParseSecret(sub.Secret)
	if err != nil {
		t.Fatal(err)
	}
	secret.Store(&s)
	return got
}

// devRun is a running `edgehook dev` and what it prints.
type devRun struct {
	cmd       *exec.Cmd
	lines     chan string // its standard output, closed when dev closes it
	stderr    *syncbuf.Buffer
	api, edge string          // the addresses it printed, once samplesDelivered has returned
	later     *syncbuf.Buffer // the lines it printed after samplesDelivered returned
}

// startDevSamples runs `edgehook dev` on a fresh database file, with the global flags args, and
// returns it with its API's URL once its sample deliveries are printed (samplesDelivered). When
// the test ends it stops dev, which must then exit 0.
func startDevSamples(t *testing.T, args ...string) (*devRun, string) {
	t.Helper()
	d := startDev(t, filepath.Join(t.TempDir(), "dev.db"), args...)
	t.Cleanup(func() {
		if err := d.stop(); err != nil {
			t.Errorf("dev after Ctrl-C: %v\n%s", err, d.stderr)
		}
	})
	return d, d.samplesDelivered(t)
}

// startDev runs `edgehook dev` on the database file db, with the global flags args, on free ports.
// The test stops it (stop) and says how it should have exited.
func startDev(t *testing.T, db string, args ...string) *devRun {
	t.Helper()
	cmd := edgehook(append(append([]string{"--db", db, "--log-level", "warn"}, args...),
		"dev", "--listen", "127.0.0.1:0", "--edge-listen", "127.0.0.1:0", "--wasm", wasmPath)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &devRun{cmd: cmd, lines: make(chan string), stderr: &syncbuf.Buffer{}, later: &syncbuf.Buffer{}}
	cmd.Stderr = d.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(d.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20) // a line longer than the test's events is dev's fault, for the test to name
		for sc.Scan() {
			d.lines <- sc.Text()
		}
	}()
	return d
}

// stop interrupts dev as Ctrl-C does and returns how it exited.
func (d *devRun) stop() error {
	_ = d.cmd.Process.Signal(os.Interrupt)
	return d.wait()
}

// wait returns how dev exited.
func (d *devRun) wait() error {
	for range d.lines { // drain until dev closes its output
	}
	return d.cmd.Wait()
}

// samplesDelivered reads dev's output until every sample delivery is printed as received and
// verified, each after its emit: three events to the Standard Webhooks sample, the one
// video.trending to the legacy sample. It returns the API's URL, and keeps reading the output
// (dev blocks on a full pipe).
func (d *devRun) samplesDelivered(t *testing.T) string {
	t.Helper()
	want := map[string]int{"sample-standard": 3, "sample-legacy": 1}
	timeout := time.After(time.Minute)
	var seen []string
	for remaining := 4; remaining > 0; {
		select {
		case line, ok := <-d.lines:
			if !ok {
				t.Fatalf("dev exited early:\n%s\n%s", strings.Join(seen, "\n"), d.stderr)
			}
			seen = append(seen, line)
			f := strings.Fields(line)
			switch {
			case len(f) >= 2 && f[0] == "api":
				d.api = f[1]
			case len(f) >= 2 && f[0] == "edge":
				d.edge = f[1]
			case len(f) >= 2 && f[0] == "received" && want[f[1]] > 0:
				if !strings.Contains(line, "signature verified") {
					t.Fatalf("a sample receiver rejected a delivery: %s", line)
				}
				_, data, _ := strings.Cut(line, "signature verified  ")
				if !slices.ContainsFunc(seen, func(l string) bool { return strings.HasPrefix(l, "emit") && strings.HasSuffix(l, " "+data) }) {
					t.Fatalf("a delivery printed before its emit: %s\n%s", line, strings.Join(seen, "\n"))
				}
				want[f[1]]--
				remaining--
			}
		case <-timeout:
			t.Fatalf("missing deliveries %v after a minute:\n%s\n%s", want, strings.Join(seen, "\n"), d.stderr)
		}
	}
	go func() {
		for line := range d.lines {
			d.later.Write([]byte(line + "\n"))
		}
	}()
	if d.api == "" || d.edge == "" {
		t.Fatalf("dev did not print its api and edge lines:\n%s", strings.Join(seen, "\n"))
	}
	return d.api
}

// printed waits for the first line dev prints, after samplesDelivered, that starts with prefix.
func (d *devRun) printed(t *testing.T, prefix string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for line := range strings.Lines(d.later.String()) {
			if strings.HasPrefix(line, prefix) {
				return strings.TrimSuffix(line, "\n")
			}
		}
	}
	t.Fatalf("dev printed no line starting %q in a minute:\n%.2000s\n%s", prefix, d.later, d.stderr)
	return ""
}

// getJSON reads the JSON answer of a GET into v.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// post sends a JSON body and wants the status; it returns the response body.
func post(t *testing.T, url, body string, status int) []byte {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		t.Fatalf("POST %s: %d %s, want %d", url, resp.StatusCode, data, status)
	}
	return data
}
