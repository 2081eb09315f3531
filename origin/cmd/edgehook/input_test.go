package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
)

// TestBusyTimeoutAboveSQLitesLimitIsRefused: SQLite takes busy_timeout as a 32-bit count of
// milliseconds, and a larger value (anything above about 596h) reads as 0. --busy-timeout 1000h
// then does not wait at all: a write fails at once with "locked ... longer than --busy-timeout
// 1000h0m0s". The value must be refused (exit 2 naming --busy-timeout) or honoured (still waiting).
func TestBusyTimeoutAboveSQLitesLimitIsRefused(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("migrate")
	c.lockDB()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cmd := c.command(ctx, "--busy-timeout", "1000h", "emit", "--id", "huge", "--type", "a.b", "--data", "1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		return // still waiting for the lock, as asked: fine
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code == 2 && strings.Contains(stderr.String(), "--busy-timeout") {
		return // refused as out of range: fine
	}
	t.Fatalf("--busy-timeout 1000h on a locked database: exit %d after %s, stderr %q; want a wait for the lock, or exit 2 naming --busy-timeout",
		code, time.Since(start).Round(time.Millisecond), stderr.String())
}

// TestForeignSQLiteDatabaseIsLeftAlone: --db naming another application's SQLite file (a
// typo, a wrong config) must be refused, not have edgehook's tables silently added to it.
func TestForeignSQLiteDatabaseIsLeftAlone(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	path := filepath.Join(c.dir, "other.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE invoices(id INTEGER PRIMARY KEY, total INTEGER); INSERT INTO invoices(total) VALUES (42)`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	r := c.run("--db", "other.db", "migrate")

	db, err = sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table'`).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || tables != 1 {
		t.Fatalf("edgehook --db other.db migrate on another application's database: exit %d, stdout %q, stderr %q, tables now %d; want a refusal and the file untouched (1 table)",
			r.code, r.stdout, r.stderr, tables)
	}
}

// TestAnEmptyTimeRangeNamesBothFlags: `dead replay --from X --to Y` with X not before Y was
// refused as "--from: must be before to", naming neither --to nor the values, after creating the
// database. Every command taking the range must name both flags with their values, before it
// touches the database.
func TestAnEmptyTimeRangeNamesBothFlags(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const from, to = "2030-01-02T00:00:00Z", "2030-01-01T00:00:00Z"
	want := "--from (" + from + ") must be before --to (" + to + ")"
	for _, args := range [][]string{{"dead", "replay", "--subscriber", "s"}, {"dead", "list"}, {"deliveries", "list"}} {
		args = append(args, "--from", from, "--to", to)
		if r := c.run(args...); r.code != 2 || !strings.Contains(r.stderr, want) {
			t.Errorf("edgehook %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(args, " "), r.code, r.stderr, want)
		}
	}
	if _, err := os.Stat(filepath.Join(c.dir, "edgehook.db")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the refused ranges created the database (%v)", err)
	}
}

// TestRangeErrorsNameWhereTheValueCameFrom: a value that parses but is out of range is reported
// naming only the flag (`--workers: must be at least 1, not 0`), even when it came from an
// EDGEHOOK_* variable or the config file and no such flag was given. The parse errors of the
// same settings name the variable or the file key; the range errors must too.
func TestRangeErrorsNameWhereTheValueCameFrom(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if err := os.WriteFile(filepath.Join(c.dir, "settings.json"), []byte(`{"workers": 0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		env  string
		args []string
		want string
	}{
		{"EDGEHOOK_WORKERS=0", []string{"drain", "--until-idle"}, "EDGEHOOK_WORKERS"},
		{"EDGEHOOK_BODY_LIMIT=10", []string{"migrate"}, "EDGEHOOK_BODY_LIMIT"},
		{"EDGEHOOK_BODY_BUDGET=100", []string{"drain", "--until-idle"}, "--body-budget (from EDGEHOOK_BODY_BUDGET): 100 is outside 1MiB"},
		{"EDGEHOOK_DB=", []string{"migrate"}, "EDGEHOOK_DB"},
		{"EDGEHOOK_LOG_LEVEL=", []string{"migrate"}, "EDGEHOOK_LOG_LEVEL"},
		{"EDGEHOOK_CONFIG=settings.json", []string{"drain", "--until-idle"}, "settings.json"},
	}
	for _, tc := range cases {
		cc := &cli{t: t, dir: c.dir, env: []string{tc.env}}
		r := cc.run(tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s edgehook %s: exit %d, stderr %q; want exit 2 naming %s, where the value came from",
				tc.env, strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// TestUpdateRefusesAnEmptyModeOrProfile: `subscribers update --mode ""` silently moves an
// edge subscriber to direct mode (the store reads "" as the creation default), the way a 0
// given to --rate would reset it, which checkGiven refuses. `--profile ""` fails naming
// --legacy-prefix. Both must be a usage error naming the flag given, with nothing changed.
func TestUpdateRefusesAnEmptyModeOrProfile(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "e1", "--url", "https://x.example/hook", "--events", "*", "--mode", "edge",
		"--profile", "legacy", "--legacy-prefix", "VVV")
	for _, flag := range []string{"--mode", "--profile"} {
		r := c.run("subscribers", "update", "e1", flag, "")
		if r.code != 2 || !strings.Contains(r.stderr, flag+":") {
			t.Errorf("subscribers update e1 %s '': exit %d, stderr %q; want exit 2 naming %s", flag, r.code, r.stderr, flag)
		}
	}
	var sub api.Subscriber
	c.okJSON(&sub, "subscribers", "show", "e1")
	if sub.Mode != "edge" || sub.Profile != "legacy" {
		t.Errorf("after the refused updates: mode %q, profile %q; want edge, legacy", sub.Mode, sub.Profile)
	}
}

// TestCoalesceWindowNotPositiveSaysSo: with all three coalescing flags given, a zero or
// negative --coalesce-window is reported as "--coalesce-types, --coalesce-key and
// --coalesce-window go together", which they do; the error must say the window is wrong.
func TestCoalesceWindowNotPositiveSaysSo(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, w := range []string{"-5s", "0s"} {
		r := c.run("subscribers", "add", "--url", "https://x.example/hook", "--events", "*",
			"--coalesce-types", "video.*", "--coalesce-key", "video_id", "--coalesce-window", w)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "edgehook: --coalesce-window:") {
			t.Errorf("--coalesce-window %s with the other two given: exit %d, stderr %q; want exit 2 and \"edgehook: --coalesce-window: ...\" saying it must be positive",
				w, r.code, r.stderr)
		}
	}
}

// TestLargestBackoffIsRefusedNotAPanic: --backoff-base and --backoff-cap accept any duration,
// and at the largest one (2562047h47m16.854775807s) the first failed send panics the engine
// (rand.N(cap+1) overflows), leaving the delivery leased. Such a value must be refused or work.
func TestLargestBackoffIsRefusedNotAPanic(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", "http://127.0.0.1:1/hook", "--events", "*")
	c.ok("emit", "--type", "a.b", "--data", "1")
	const largest = "2562047h47m16.854775807s"
	r := c.run("drain", "--until-idle", "--allow-network", "127.0.0.0/8", "--backoff-base", largest, "--backoff-cap", largest)
	if strings.Contains(r.stderr, "panic") || (r.code != 0 && !strings.HasPrefix(r.stderr, "edgehook: --backoff")) {
		t.Fatalf("drain with the largest backoff: exit %d, stderr starts %.200q; want a usage error naming the flag, or a run without panic", r.code, r.stderr)
	}
}

// TestSecretThatCannotBePrintedSaysHowToGetAnother: `subscribers add` whose standard output fails
// (a full disk under `> sub.json`) exits 1 with only "write /dev/stdout: no space left on
// device", yet the subscriber was created, and its secret, shown only this once, is lost; a
// rerun with the same --id is refused as a conflict. Either nothing is created, or the error
// says the subscriber exists and how to get a secret (rotate-secret).
func TestSecretThatCannotBePrintedSaysHowToGetAnother(t *testing.T) {
	t.Parallel()
	full, err := os.OpenFile("/dev/full", os.O_WRONLY, 0)
	if err != nil {
		t.Skip("no /dev/full:", err)
	}
	defer full.Close()
	c := newCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := c.command(ctx, "subscribers", "add", "--id", "lost", "--url", "https://x.example/hook", "--events", "*")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = full, &stderr
	runErr := cmd.Run()
	created := c.run("subscribers", "show", "lost").code == 0
	if runErr != nil && created && !strings.Contains(stderr.String(), "rotate-secret") {
		t.Fatalf("subscribers add with a failing stdout: %v, stderr %q, and the subscriber was created; want it not created, or the error saying it was and to rotate its secret",
			runErr, stderr.String())
	}
}
