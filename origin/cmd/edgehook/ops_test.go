package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/shared/wire"
)

// TestSIGTERMDuringStartupExitsZero: serve and drain promise exit 0 on SIGTERM. A
// signal that arrives while the command is still starting (here: its startup write waits for
// another process's lock, up to --busy-timeout) must not turn into "edgehook: context canceled"
// and exit 1 (systemd then records a failed unit; cron mails an error).
func TestSIGTERMDuringStartupExitsZero(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("migrate")
	c.lockDB() // held while the commands start
	for _, args := range [][]string{{"serve", "--listen", "127.0.0.1:0"}, {"drain", "--for", "30s"}} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := c.command(ctx, append([]string{"--busy-timeout", "5s"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // past main's signal set-up, inside the startup's wait for the lock
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		cancel()
		if err != nil {
			t.Errorf("%s: SIGTERM during startup: %v, stderr %q; want exit 0", args[0], err, stderr.String())
		}
	}
}

// TestEdgeURLCredentialsAreNotShown: an edge URL carrying credentials is refused, but the
// refusal must not print the password: EDGEHOOK_EDGE_URL and the config file are exactly where
// the operator puts it, and stderr goes to the journal or cron's drain.log.
func TestEdgeURLCredentialsAreNotShown(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const url = "https://admin:hunter2pw@edge.example.com/"
	if err := os.WriteFile(filepath.Join(c.dir, "edgehook.json"), []byte(`{"edge_url": "`+url+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"EDGEHOOK_EDGE_URL=" + url, "EDGEHOOK_CONFIG=edgehook.json"} {
		c.env = []string{env}
		r := c.run("drain", "--for", "1s")
		if r.code != 2 || strings.Contains(r.stderr, "hunter2pw") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 without the password", env, r.code, r.stderr)
		}
	}
}

// TestServeStopsClaimingOnSIGTERM: serve's help says that on SIGTERM it "stops accepting
// requests and claiming deliveries". While an HTTP request is still in flight (a client slow to
// send its body), the engine keeps claiming: an event written after the SIGTERM (by the CLI on
// the same file) is sent. Such a late claim gets only what is left of the grace and is cut and
// released at the deadline, i.e. sent twice when the subscriber is slow.
func TestServeStopsClaimingOnSIGTERM(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var mu sync.Mutex
	var got []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get(wire.HeaderWebhookID))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	srv := startServe(t, c, "--allow-network", "127.0.0.0/8", "--poll-interval", "50ms", "--shutdown-grace", "4s")
	if code, body := srv.call(t, "POST", "/v1/subscribers", "", `{"url":"`+recv.URL+`/hook","events":["*"]}`); code != http.StatusCreated {
		t.Fatalf("create subscriber: %d %s", code, body)
	}
	// A request in flight: headers sent, body not yet.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
	time.Sleep(200 * time.Millisecond)
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	var res struct{ ID string }
	c.okJSON(&res, "emit", "--id", "late", "--type", "a.b", "--data", "{}")
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of SIGTERM")
	}
	srv.cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range got {
		if id == "late" {
			t.Fatalf("serve claimed and sent an event written after SIGTERM; log:\n%s", srv.logs.String())
		}
	}
}

// TestServeExitsOneWhenItCannotWriteOutcomes: a send answered as serve stops, whose outcome it
// cannot write (another process holds the database's lock past --busy-timeout), makes serve exit 1
// naming what failed, as drain does: it exited 0, and systemd or a supervisor saw a clean stop.
func TestServeExitsOneWhenItCannotWriteOutcomes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	sink := newHookSink(t, 0)
	srv := startServe(t, c, "--poll-interval", "1m", "--allow-network", "127.0.0.0/8", "--busy-timeout", "100ms")
	srv.must(t, http.StatusCreated, "POST", "/v1/subscribers", `{"id":"s","url":"`+sink.URL+`","events":["*"]}`)
	srv.emit(t, "e1", "a")
	sink.expect(t, "e1", "an emit") // and held: in flight
	c.lockDB()
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	sink.free <- struct{}{} // answered within the grace: its outcome is the stop's to write
	select {
	case <-srv.done:
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop within 30s of SIGTERM")
	}
	err := srv.cmd.Wait()
	logs := srv.logs.String()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(logs, "edgehook: writing outcomes") {
		t.Fatalf("serve ended with %v, unable to write an outcome, want exit 1 and a line naming it; log:\n%s", err, logs)
	}
}

// TestSecondSignalExits: the first SIGTERM, SIGINT or SIGHUP (a closed terminal) stops serve gracefully, which waits for a
// send in flight (here one to a subscriber that never answers, within a grace of a minute); a
// second signal ends the process at once, with the shell's status for it. Also for SIGINT when
// serve was started with it ignored, as a shell starts `edgehook serve &`: restoring the default
// action there would have ignored the second one.
func TestSecondSignalExits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sig     syscall.Signal
		ignored string
		status  int
	}{{syscall.SIGTERM, "", 143}, {syscall.SIGINT, "INT", 130}, {syscall.SIGHUP, "", 129}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			t.Parallel()
			c := newCLI(t)
			c.ignored = tc.ignored
			arrived, hang := make(chan struct{}, 1), make(chan struct{})
			recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-hang
			}))
			defer recv.Close()
			defer close(hang)
			srv := startServe(t, c, "--allow-network", "127.0.0.0/8", "--poll-interval", "50ms", "--shutdown-grace", "1m")
			if code, body := srv.call(t, "POST", "/v1/subscribers", "", `{"url":"`+recv.URL+`/hook","events":["*"],"timeout_ms":60000}`); code != http.StatusCreated {
				t.Fatalf("create subscriber: %d %s", code, body)
			}
			if code, body := srv.call(t, "POST", "/v1/events", "", `{"type":"a.b","data":{}}`); code != http.StatusAccepted {
				t.Fatalf("emit: %d %s", code, body)
			}
			select {
			case <-arrived:
			case <-time.After(30 * time.Second):
				t.Fatal("the send did not reach the subscriber within 30s")
			}
			if err := srv.cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			// The first signal is handled once the listener is closed.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				conn, err := net.Dial("tcp", strings.TrimPrefix(srv.base, "http://"))
				if err != nil {
					break
				}
				conn.Close()
				if time.Now().After(deadline) {
					t.Fatalf("serve still accepts connections 10s after %s", tc.sig)
				}
			}
			logs, err := srv.signalWithin(t, tc.sig, 10*time.Second)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.status {
				t.Fatalf("serve ended with %v after a second %s, want exit status %d; log:\n%s", err, tc.sig, tc.status, logs)
			}
		})
	}
}

// TestNohupKeepsServeRunning: serve stops on SIGHUP only when it was not started ignoring it: under
// nohup the terminal closing must leave it running (Go's signal.Notify would undo the ignore).
func TestNohupKeepsServeRunning(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ignored = "HUP"
	srv := startServe(t, c)
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.done:
		t.Fatalf("serve started under nohup stopped on SIGHUP; log:\n%s", srv.logs.String())
	case <-time.After(time.Second):
	}
	if code, body := srv.call(t, "GET", "/v1/stats", "", ""); code != http.StatusOK {
		t.Fatalf("stats after SIGHUP: %d %s", code, body)
	}
}

// TestStatsTableShowsEveryStatus: the stats table has a column for each status GET /v1/stats
// counts, superseded deliveries too.
func TestStatsTableShowsEveryStatus(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "co", "--url", "http://127.0.0.1:1/hook", "--events", "*",
		"--coalesce-types", "video.*", "--coalesce-key", "video_id", "--coalesce-window", "30s")
	c.ok("emit", "--type", "video.rank", "--data", `{"video_id":"v1","rank":2}`)
	c.ok("emit", "--type", "video.rank", "--data", `{"video_id":"v1","rank":1}`)
	out := c.ok("stats")
	header := regexp.MustCompile(`(?m)^SUBSCRIBER +STATE +PENDING +LEASED +HELD +DEAD +DELIVERED +SUPERSEDED +OLDEST DUE +LAST MINUTE +CIRCUIT$`)
	if !header.MatchString(out) || !regexp.MustCompile(`(?m)^co +active +1 +0 +0 +0 +0 +1 `).MatchString(out) {
		t.Fatalf("stats table, want a SUPERSEDED column counting 1:\n%s", out)
	}
}

// TestEmitDataOverTheBodyLimit: data over --body-limit is refused with exit 2, naming the flag it
// came from and the setting; from standard input, without claiming to know its size.
func TestEmitDataOverTheBodyLimit(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	big := `"` + strings.Repeat("a", 2000) + `"`
	if err := os.WriteFile(filepath.Join(c.dir, "big.json"), []byte(big), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stdin string
		args  []string
		want  string
	}{
		{"", []string{"--data", big}, "edgehook: --data: 2002 bytes, more than --body-limit 1KiB\n"},
		{"", []string{"--data-file", "big.json"}, "edgehook: --data-file: 2002 bytes, more than --body-limit 1KiB\n"},
		{big, []string{"--data-file", "-"}, "edgehook: --data-file: standard input holds more than --body-limit 1KiB\n"},
	} {
		r := c.runIn(tc.stdin, append([]string{"emit", "--type", "a.b", "--body-limit", "1KiB"}, tc.args...)...)
		if r.code != 2 || r.stderr != tc.want {
			t.Errorf("emit %s: exit %d, stderr %q; want 2 and %q", tc.args[0], r.code, r.stderr, tc.want)
		}
	}
}

// TestServeTakesDataOfTheBodyLimit: serve's API takes an event whose data is exactly --body-limit,
// as emit does, alone or in a batch, and refuses a byte more with a 413 naming the field. It
// counted the JSON around the data against --body-limit too, and refused what emit takes.
func TestServeTakesDataOfTheBodyLimit(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	srv := startServe(t, c, "--body-limit", "1KiB")
	data := `"` + strings.Repeat("a", 1022) + `"`
	over := `"` + strings.Repeat("a", 1023) + `"`
	c.ok("emit", "--type", "a.b", "--body-limit", "1KiB", "--data", data)
	for _, r := range []struct{ path, body, field string }{
		{"/v1/events", `{"type":"a.b","data":%s}`, "data"},
		{"/v1/events/batch", `{"events":[{"type":"a.b","data":%s}]}`, "events[0].data"},
	} {
		if code, answer := srv.call(t, "POST", r.path, "", fmt.Sprintf(r.body, data)); code != http.StatusAccepted {
			t.Errorf("POST %s, data of --body-limit bytes: %d %s, want 202 as emit takes it", r.path, code, bytes.TrimSpace(answer))
		}
		code, answer := srv.call(t, "POST", r.path, "", fmt.Sprintf(r.body, over))
		var e api.Error
		if code != http.StatusRequestEntityTooLarge || json.Unmarshal(answer, &e) != nil || e.Code != api.CodeTooLarge || e.Field != r.field {
			t.Errorf("POST %s, data a byte over --body-limit: %d %s, want 413 %s naming %s", r.path, code, bytes.TrimSpace(answer), api.CodeTooLarge, r.field)
		}
	}
}

// TestListenInUseSaysWhatToDo: serve and dev on an address another process holds stop at once
// with one line naming the flag and what to do; dev before printing that anything runs.
func TestListenInUseSaysWhatToDo(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"serve", "--listen", addr}, "--listen"},
		{[]string{"dev", "--listen", addr}, "--listen"},
		{[]string{"dev", "--listen", "127.0.0.1:0", "--edge-listen", addr}, "--edge-listen"},
	} {
		r := c.run(tc.args...)
		want := "edgehook: " + tc.flag + ": " + addr + " is in use (another edgehook?): stop what listens there, or choose another address with " + tc.flag + "\n"
		if r.code != 1 || r.stderr != want || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1, nothing, %q", tc.args, r.code, r.stdout, r.stderr, want)
		}
	}
}

// TestDrainSummaryCountsWhatItPruned: a drain prunes at its start (the engine's run) and again at
// its end; its one summary line counts both (it said pruned 0 for a drain that had deleted one at
// its start).
func TestDrainSummaryCountsWhatItPruned(t *testing.T) {
	t.Parallel()
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer recv.Close()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "ok", "--url", recv.URL+"/hook", "--events", "*")
	c.ok("emit", "--type", "t", "--data", `{"n":1}`)
	if d := c.run("drain", "--until-idle", "--for", "30s", "--allow-network", "127.0.0.0/8", "--log-format", "json"); d.code != 0 {
		t.Fatalf("first drain: %+v", d)
	}
	d := c.run("drain", "--until-idle", "--for", "30s", "--allow-network", "127.0.0.0/8", "--retention", "1ms", "--log-format", "json")
	if d.code != 0 {
		t.Fatalf("second drain: %+v", d)
	}
	var kept struct {
		Deliveries []json.RawMessage `json:"deliveries"`
	}
	c.okJSON(&kept, "deliveries", "list", "--json")
	if len(kept.Deliveries) != 0 {
		t.Fatalf("the delivered delivery was kept: the test's premise fails")
	}
	var summary struct {
		Msg    string `json:"msg"`
		Pruned int    `json:"pruned"`
	}
	for _, line := range strings.Split(strings.TrimSpace(d.stderr), "\n") {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "drain finished" {
			_ = json.Unmarshal([]byte(line), &summary)
		}
	}
	if summary.Msg == "" {
		t.Fatalf("no summary line:\n%s", d.stderr)
	}
	if summary.Pruned != 1 {
		t.Fatalf("the drain deleted 1 delivery past --retention, but its summary says pruned %d:\n%s", summary.Pruned, d.stderr)
	}
}

// TestExportKVWritesThroughASymlink: --out naming a symbolic link (kv.json kept in a shared
// directory, linked from where the deploy script runs) replaced the link with a plain file and
// left the file it names with the old records. The link must stay and its target get the
// records, also when the target is not there yet, with no temporary file left behind.
func TestExportKVWritesThroughASymlink(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "e1", "--url", "https://x.example/hook", "--events", "*", "--mode", "edge")
	shared := filepath.Join(c.dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(shared, "kv.json"), []byte("[]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"kv.json": "shared/kv.json", "new.json": "shared/new.json"} {
		if err := os.Symlink(target, filepath.Join(c.dir, link)); err != nil {
			t.Fatal(err)
		}
		c.ok("edge", "export-kv", "--out", link)
		if got, err := os.Readlink(filepath.Join(c.dir, link)); err != nil || got != target {
			t.Errorf("export-kv --out %s: the link now reads %q (%v), want %s", link, got, err, target)
		}
		data, err := os.ReadFile(filepath.Join(c.dir, target))
		if entries, derr := wire.DecodeBulk(data); err != nil || derr != nil || len(entries) != 1 {
			t.Errorf("export-kv --out %s: %s holds %q (%v, %v), want e1's record", link, target, data, err, derr)
		}
	}
	// The file replaced keeps its mode; the one created is private.
	for target, want := range map[string]os.FileMode{"shared/kv.json": 0o644, "shared/new.json": 0o600} {
		if fi, err := os.Stat(filepath.Join(c.dir, target)); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", target, fi.Mode().Perm(), err, want)
		}
	}
	for _, dir := range []string{c.dir, shared} {
		if tmp, _ := filepath.Glob(filepath.Join(dir, ".edgehook-*")); len(tmp) > 0 {
			t.Errorf("temporary files left: %v", tmp)
		}
	}
}
