package main_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"
)

// bin is the edgehook binary, built once for all tests.
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "edgehook-cli-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "edgehook")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building edgehook:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// result is a finished run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs the binary in its own working directory with a clean environment.
type cli struct {
	t        *testing.T
	dir      string
	env      []string
	asNobody bool // run as the user nobody (the test runs as root)
	// ignored are the signals the process starts with ignored: "INT" as a shell starts
	// `edgehook serve &`, "HUP" as nohup does.
	ignored string
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	return &cli{t: t, dir: t.TempDir()}
}

// runLimit bounds every run of the binary, so a hung command fails its test instead of the
// whole package timing out.
const runLimit = 2 * time.Minute

func (c *cli) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	if c.ignored != "" {
		cmd = exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", `trap '' ` + c.ignored + `; exec "$0" "$@"`, bin}, args...)...)
	}
	cmd.Dir = c.dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + c.dir}, c.env...)
	if c.asNobody {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	return cmd
}

func (c *cli) runIn(stdin string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := c.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errb
	err := cmd.Run()
	code := 0
	if ctx.Err() != nil {
		c.t.Fatalf("edgehook %s did not finish within %s; stderr:\n%s", strings.Join(args, " "), runLimit, errb.String())
	}
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatal(err)
	}
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	return c.runIn("", args...)
}

// ok runs a command that must succeed.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("edgehook %s: exit %d\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// okJSON runs a command that must succeed and decodes its output.
func (c *cli) okJSON(v any, args ...string) {
	c.t.Helper()
	out := c.ok(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("edgehook %s printed %q: %v", strings.Join(args, " "), out, err)
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if out := c.ok("version"); !strings.HasPrefix(out, "edgehook ") {
		t.Fatalf("version printed %q", out)
	}
	broken := &cli{t: t, dir: c.dir, env: []string{"EDGEHOOK_CONFIG=missing.json", "EDGEHOOK_LOG_LEVEL=loud"}}
	if out := broken.ok("version"); !strings.HasPrefix(out, "edgehook ") {
		t.Fatalf("version with broken settings printed %q", out)
	}
	commands := [][]string{{}, {"serve"}, {"drain"}, {"emit"}, {"migrate"}, {"version"},
		{"subscribers"}, {"subscribers", "add"}, {"subscribers", "list"}, {"subscribers", "show"}, {"subscribers", "update"},
		{"subscribers", "pause"}, {"subscribers", "resume"}, {"subscribers", "rotate-secret"}, {"subscribers", "remove"},
		{"deliveries"}, {"deliveries", "list"}, {"deliveries", "show"}, {"deliveries", "retry"},
		{"dead"}, {"dead", "list"}, {"dead", "replay"}, {"events"}, {"events", "show"}, {"stats"}, {"edge"}, {"edge", "export-kv"}}
	for _, args := range commands {
		out := c.ok(append(args, "--help")...)
		if !strings.Contains(out, "Usage:") {
			t.Errorf("edgehook %s --help printed no usage:\n%s", strings.Join(args, " "), out)
		}
		if help := broken.ok(append([]string{"help"}, args...)...); help != out {
			t.Errorf("edgehook help %s printed\n%s\nnot what --help printed", strings.Join(args, " "), help)
		}
	}
	if out := c.ok("__complete", "help", "dead", "r"); !strings.HasPrefix(out, "replay\t") {
		t.Errorf("the completion of edgehook help dead r: %q, want replay", out)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "edgehook.db")); err == nil {
		t.Error("--help created the database")
	}
}

// TestBadInput checks that every mistake ends in one line on stderr naming the flag, the
// variable or the argument, and a non-zero exit.
func TestBadInput(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	badConfig := filepath.Join(c.dir, "bad.json")
	if err := os.WriteFile(badConfig, []byte(`{"listen":"127.0.0.1:1","colour":"red"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badConfig+".array", []byte(`{"db":["a.db","b.db"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(badConfig+".notjson", []byte(`{"a":`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		env  []string
		args []string
		code int
		want string
	}{
		{nil, []string{"serve", "--bogus"}, 2, "--bogus"},
		{nil, []string{"nosuchcommand"}, 2, "nosuchcommand"},
		{nil, []string{"help", "nosuchcommand"}, 2, `unknown help topic "nosuchcommand"`},
		{nil, []string{"help", "dead", "nosuchcommand"}, 2, `unknown help topic "dead nosuchcommand"`},
		{nil, []string{"version", "extra"}, 2, "no arguments"},
		{nil, []string{"drain", "--for", "soon"}, 2, "--for"},
		{nil, []string{"drain", "--for", "0s"}, 2, "--for"},
		{nil, []string{"drain", "--workers", "0"}, 2, "--workers"},
		{nil, []string{"drain", "--body-budget", "512KiB"}, 2, "--body-budget: 512KiB is outside 1MiB to 64GiB"},
		{nil, []string{"serve", "--body-budget", "65GiB"}, 2, "--body-budget: 65GiB is outside 1MiB to 64GiB"},
		{nil, []string{"drain", "--body-budget", "lots"}, 2, `invalid argument "lots" for "--body-budget" flag: "lots" is not a size`},
		{nil, []string{"drain", "--allow-network", "localhost"}, 2, "--allow-network"},
		{nil, []string{"serve", "--listen", "0.0.0.0:8080"}, 2, "--token"},
		{nil, []string{"serve", "--listen", "nonsense"}, 2, "--listen"},
		{nil, []string{"serve", "--edge-url", "https://edge.example"}, 2, "--edge-secret"},
		{nil, []string{"serve", "--edge-url", "ftp://edge.example", "--edge-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 2, "--edge-url"},
		{nil, []string{"drain", "--edge-url", "edge.example", "--edge-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, 2, "--edge-url"},
		{nil, []string{"drain", "--retry-after-cap", "1000h"}, 2, "--retry-after-cap"},
		{nil, []string{"edge", "local", "--kv", "kv.json", "--edge-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--dedup-ttl", "2m"}, 2, "--dedup-ttl"},
		{nil, []string{"drain", "--poll-interval", "1ns"}, 2, "--poll-interval"},
		{nil, []string{"serve", "--poll-interval", "5ms"}, 2, "--poll-interval"},
		{nil, []string{"serve", "--listen", "127.0.0.1:99999"}, 2, "--listen"},
		{nil, []string{"dev", "--listen", "0.0.0.0:18080"}, 2, "--listen"},
		{nil, []string{"serve", "--edge-url", "https://edge.example", "--edge-secret", "nope"}, 2, "--edge-secret"},
		{nil, []string{"serve", "--body-limit", "lots"}, 2, "--body-limit"},
		{nil, []string{"serve", "--body-limit", "2GiB"}, 2, "--body-limit"},
		{nil, []string{"--log-format", "xml", "migrate"}, 2, "--log-format"},
		{nil, []string{"--synchronous", "sometimes", "migrate"}, 2, "--synchronous"},
		{[]string{"EDGEHOOK_BUSY_TIMEOUT=soon"}, []string{"migrate"}, 2, "EDGEHOOK_BUSY_TIMEOUT"},
		{nil, []string{"--busy-timeout", "500us", "migrate"}, 2, "--busy-timeout"},
		{[]string{"EDGEHOOK_CONFIG=" + badConfig}, []string{"migrate"}, 2, `"colour": unknown setting`},
		{[]string{"EDGEHOOK_CONFIG=" + badConfig + ".array"}, []string{"migrate"}, 2, `"db" (--db) takes one value, not an array`},
		{nil, []string{"--config", "missing.json", "migrate"}, 2, "config file"},
		{nil, []string{"dead", "replay", "--subscriber", "s", "--to", "0001-01-01T00:00:00Z"}, 2, "--to: \"0001-01-01T00:00:00Z\" is not after 1970"},
		{nil, []string{"emit", "--type", "a.b"}, 2, "--data"},
		{nil, []string{"emit", "--type", "a.b", "--data", "1", "--data-file", "x"}, 2, "--data"},
		{nil, []string{"emit", "--type", "a b", "--data", "1"}, 2, "--type"},
		{nil, []string{"emit", "--type", "a.b", "--data", "{"}, 2, "--data"},
		{nil, []string{"emit", "--type", "a.b", "--data-file", "missing.json"}, 2, "--data-file"},
		{nil, []string{"emit", "--type", "a.b", "--data-file", badConfig + ".notjson"}, 2, "--data-file: is not valid JSON"},
		{nil, []string{"subscribers", "add", "--url", "ftp://x", "--events", "*"}, 2, "--url"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "a..b"}, 2, "--events"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--rate", "-1"}, 2, "--rate"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--rate", "fast"}, 2, "--rate"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--header", "nocolon"}, 2, "--header"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--coalesce-key", "id"}, 2, "--coalesce-key"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--header", "X-A: 1", "--header", "X-A: 2"}, 2, "--header"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--header", "X-A: 1", "--header", "x-a: 2"}, 2, "--header:"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--header", "webhook-id: 1"}, 2, "--header:"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--timeout", "500us"}, 2, "--timeout"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--timeout", "-5s"}, 2, "--timeout: -5s"},
		{nil, []string{"subscribers", "add", "--url", "https://x.example", "--events", "*", "--rate", "0"}, 2, "--rate"},
		{nil, []string{"subscribers", "update", "x", "--burst", "0"}, 2, "--burst"},
		{nil, []string{"subscribers", "update", "x", "--coalesce-types", "*", "--coalesce-key", "k", "--coalesce-window", "48h"}, 2, "--coalesce-window: 48h0m0s is above 24h0m0s"},
		{nil, []string{"subscribers", "update", "x", "--max-in-flight", "0"}, 2, "--max-in-flight"},
		{nil, []string{"subscribers", "update", "x", "--timeout", "0s"}, 2, "--timeout"},
		{nil, []string{"subscribers", "show"}, 2, "ID"},
		{nil, []string{"subscribers", "update", "x", "--no-coalesce", "--coalesce-key", "k"}, 2, "--no-coalesce"},
		{nil, []string{"subscribers", "rotate-secret", "x", "--overlap", "forever"}, 2, "--overlap"},
		{nil, []string{"subscribers", "show", "nobody"}, 1, "not found"},
		{nil, []string{"deliveries", "list", "--status", "lost"}, 2, "--status"},
		{nil, []string{"deliveries", "list", "--limit", "0"}, 2, "--limit"},
		{nil, []string{"deliveries", "list", "--from", "monday"}, 2, "--from"},
		{nil, []string{"dead", "list", "--from", "2030-01-01T00:00:00Z", "--to", "2020-01-01T00:00:00Z"}, 2, "--from"},
		{nil, []string{"deliveries", "show", "dlv_x_1"}, 1, "not found"},
		{nil, []string{"dead", "replay"}, 2, "--subscriber"},
		{nil, []string{"dead", "replay", "--subscriber", "s", "--to", "later"}, 2, "--to"},
		{nil, []string{"edge", "export-kv", "--out", filepath.Join(c.dir, "no", "such", "dir.json")}, 1, "--out"},
	}
	for _, tc := range cases {
		cc := &cli{t: t, dir: c.dir, env: tc.env}
		r := cc.run(tc.args...)
		line := strings.TrimSuffix(r.stderr, "\n")
		if r.code != tc.code || strings.Contains(line, "\n") || !strings.Contains(line, tc.want) || !strings.HasPrefix(line, "edgehook: ") {
			t.Errorf("edgehook %s: exit %d, stderr %q; want exit %d and one line naming %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.want)
		}
		if r.stdout != "" {
			t.Errorf("edgehook %s printed to stdout on error: %q", strings.Join(tc.args, " "), r.stdout)
		}
	}
}

// TestSecretNotInErrors: a token that fails to parse (a quote in a comma-separated list) is
// reported naming the variable or key, never with its value, which would land in the journal.
func TestSecretNotInErrors(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if err := os.WriteFile(filepath.Join(c.dir, "edgehook.json"), []byte(`{"token": "fr\"om-file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{`EDGEHOOK_TOKEN=s3cr"et`, "EDGEHOOK_CONFIG=edgehook.json"} {
		c.env = []string{env}
		r := c.run("serve", "--listen", "127.0.0.1:0")
		if r.code != 2 || !strings.Contains(r.stderr, "token") || strings.Contains(r.stderr, "s3cr") || strings.Contains(r.stderr, "om-file") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 naming the token setting without its value", env, r.code, r.stderr)
		}
	}
}

// TestSettingsPrecedence: a flag beats the environment, which beats the config file.
func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	if err := os.WriteFile(filepath.Join(c.dir, "edgehook.json"), []byte(`{"db": "file.db", "log_level": "warn"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = []string{"EDGEHOOK_CONFIG=edgehook.json"}
	if out := c.ok("migrate"); out != "file.db: schema up to date\n" {
		t.Fatalf("config file: %q", out)
	}
	c.env = append(c.env, "EDGEHOOK_DB=env.db")
	if out := c.ok("migrate"); out != "env.db: schema up to date\n" {
		t.Fatalf("environment: %q", out)
	}
	if out := c.ok("migrate", "--db", "flag.db"); out != "flag.db: schema up to date\n" {
		t.Fatalf("flag: %q", out)
	}
	// A misspelt variable is not silently ignored; the known ones raise no warning.
	if r := c.run("migrate"); r.code != 0 || r.stderr != "" {
		t.Fatalf("known variables only: %+v", r)
	}
	c.env = append(c.env, "EDGEHOOK_TOKENS=t0ken")
	if r := c.run("migrate"); r.code != 0 || !strings.Contains(r.stderr, "variable=EDGEHOOK_TOKENS") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("misspelt variable: %+v", r)
	}
	for _, f := range []string{"file.db", "env.db", "flag.db"} {
		if _, err := os.Stat(filepath.Join(c.dir, f)); err != nil {
			t.Errorf("%s was not created: %v", f, err)
		}
	}
}

func TestSubscriberCommands(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("migrate")
	var created api.SubscriberWithSecret
	c.okJSON(&created, "subscribers", "add", "--id", "shop", "--url", "https://shop.example/hooks", "--events", "order.*,user.created",
		"--header", "X-Team: growth", "--mode", "edge", "--timeout", "3s")
	if created.ID != "shop" || !strings.HasPrefix(created.Secret, "whsec_") || len(created.Events) != 2 || created.TimeoutMS != 3000 ||
		created.Headers["X-Team"] != "growth" || created.Mode != "edge" {
		t.Fatalf("created = %+v", created)
	}
	if r := c.run("subscribers", "add", "--id", "shop", "--url", "https://x.example", "--events", "*"); r.code != 1 || !strings.Contains(r.stderr, "conflict") {
		t.Fatalf("duplicate id: %+v", r)
	}
	c.ok("subscribers", "add", "--id", "direct", "--url", "https://d.example/in", "--events", "*")

	table := c.ok("subscribers", "list")
	if !strings.HasPrefix(table, "ID") || !strings.Contains(table, "shop") || !strings.Contains(table, "https://d.example/in") {
		t.Fatalf("list table:\n%s", table)
	}
	var list api.SubscriberList // the shape of GET /v1/subscribers
	c.okJSON(&list, "subscribers", "list", "--json")
	if len(list.Subscribers) != 2 {
		t.Fatalf("list --json = %+v", list)
	}
	for _, args := range [][]string{{"subscribers", "show", "shop"}, {"subscribers", "list", "--json"}, {"subscribers", "list"}} {
		if out := c.ok(args...); strings.Contains(out, "whsec_") {
			t.Fatalf("%v shows a secret", args)
		}
	}

	var sub api.Subscriber
	c.okJSON(&sub, "subscribers", "update", "shop", "--rate", "50", "--burst", "80",
		"--coalesce-types", "order.*", "--coalesce-key", "order_id", "--coalesce-window", "30s")
	if sub.RatePerSec != 50 || sub.Burst != 80 || sub.Coalesce == nil || sub.Coalesce.WindowSeconds != 30 || sub.URL != "https://shop.example/hooks" {
		t.Fatalf("updated = %+v", sub)
	}
	// A 0 would read as "the default" and silently reset the setting: refused, nothing changed.
	if r := c.run("subscribers", "update", "shop", "--rate", "0"); r.code != 2 || !strings.Contains(r.stderr, "--rate") {
		t.Fatalf("update --rate 0: %+v", r)
	}
	var unchanged api.Subscriber
	if c.okJSON(&unchanged, "subscribers", "show", "shop"); unchanged.RatePerSec != 50 {
		t.Fatalf("a refused update changed the rate: %+v", unchanged)
	}
	var unheaded api.Subscriber
	if c.okJSON(&unheaded, "subscribers", "update", "shop", "--no-headers"); len(unheaded.Headers) != 0 || unheaded.RatePerSec != 50 {
		t.Fatalf("--no-headers = %+v", unheaded)
	}
	if r := c.run("subscribers", "update", "shop", "--no-headers", "--header", "X-A: 1"); r.code != 2 || !strings.Contains(r.stderr, "--no-headers") {
		t.Fatalf("--no-headers with --header: %+v", r)
	}
	c.ok("subscribers", "update", "shop", "--header", "X-Team: growth") // as before, for export-kv below
	var uncoalesced api.Subscriber
	c.okJSON(&uncoalesced, "subscribers", "update", "shop", "--no-coalesce")
	if uncoalesced.Coalesce != nil || uncoalesced.RatePerSec != 50 {
		t.Fatalf("--no-coalesce = %+v", uncoalesced)
	}
	c.okJSON(&sub, "subscribers", "pause", "shop", "--reason", "receiver migrating")
	if sub.State != "paused" || sub.StateReason != "receiver migrating" {
		t.Fatalf("paused = %+v", sub)
	}
	if r := c.run("subscribers", "pause", "shop", "--reason", "a\x07b"); r.code != 2 || !strings.Contains(r.stderr, "--reason") {
		t.Fatalf("pause --reason with a control character: %+v", r)
	}
	c.okJSON(&sub, "subscribers", "resume", "shop")
	if sub.State != "active" {
		t.Fatalf("resumed = %+v", sub)
	}
	var rotated api.SubscriberWithSecret
	c.okJSON(&rotated, "subscribers", "rotate-secret", "shop", "--overlap", "2h")
	if rotated.Secret == created.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") || len(rotated.Secrets) != 2 {
		t.Fatalf("rotated = %+v", rotated)
	}

	// export-kv: only edge-mode subscribers unless --all; the file is what wrangler and the harness read.
	out := filepath.Join(c.dir, "kv.json")
	c.ok("edge", "export-kv", "--out", out)
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := wire.DecodeBulk(data)
	if err != nil || len(entries) != 1 || entries[0].Key != wire.SubscriberKey("shop") {
		t.Fatalf("export-kv = %s (%v)", data, err)
	}
	rec, err := wire.DecodeSubscriberRecord([]byte(entries[0].Value))
	if err != nil || rec.URL != "https://shop.example/hooks" || rec.TimeoutMS != 3000 || !rec.Active || rec.Headers["X-Team"] != "growth" {
		t.Fatalf("record = %+v (%v)", rec, err)
	}
	if bytes.Contains(data, []byte("whsec_")) {
		t.Fatal("export-kv leaked a secret")
	}
	all, err := wire.DecodeBulk([]byte(c.ok("edge", "export-kv", "--all")))
	if err != nil || len(all) != 2 {
		t.Fatalf("export-kv --all: %d entries, %v", len(all), err)
	}

	// A drain (or serve) without --edge-url says that the edge-mode subscriber's deliveries
	// cannot be sent, instead of letting them fail quietly until they are dead.
	warning := regexp.MustCompile(`"level":"WARN","msg":"[^"]*--edge-url[^"]*","subscribers":\["shop"\]`)
	if r := c.run("drain", "--until-idle", "--log-format", "json"); r.code != 0 || !warning.MatchString(r.stderr) {
		t.Fatalf("drain without --edge-url: %+v", r)
	}
	if r := c.run("drain", "--until-idle", "--log-format", "json", "--edge-url", "https://edge.example",
		"--edge-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"); r.code != 0 || strings.Contains(r.stderr, "WARN") {
		t.Fatalf("drain with --edge-url: %+v", r)
	}

	if r := c.ok("subscribers", "remove", "direct"); !strings.Contains(r, `"removed": "direct"`) {
		t.Fatalf("remove printed %q", r)
	}
	if r := c.run("subscribers", "show", "direct"); r.code != 1 {
		t.Fatalf("show after remove: %+v", r)
	}
}

// receiver is a subscriber endpoint on 127.0.0.1 that verifies Standard Webhooks signatures.
type receiver struct {
	*httptest.Server
	mu      sync.Mutex
	secret  []signature.Secret
	bodies  []string
	bad     int
	arrived chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{arrived: make(chan struct{}, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		err := signature.Verify(r.secret, req.Header.Get(wire.HeaderWebhookID), req.Header.Get(wire.HeaderWebhookTimestamp),
			req.Header.Get(wire.HeaderWebhookSignature), body, time.Now(), 5*time.Minute)
		if err != nil {
			r.bad++
		} else {
			r.bodies = append(r.bodies, string(body))
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		r.arrived <- struct{}{}
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setSecret(t *testing.T, s string) {
	sec, err := signature.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	r.secret = []signature.Secret{sec}
	r.mu.Unlock()
}

func (r *receiver) got() (bodies []string, bad int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies...), r.bad
}

func TestEmitDrainAndDeadLetters(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	recv := newReceiver(t)
	var sub api.SubscriberWithSecret
	c.okJSON(&sub, "subscribers", "add", "--id", "ok", "--url", recv.URL+"/hook", "--events", "video.*")
	recv.setSecret(t, sub.Secret)
	// A subscriber nobody listens on: every attempt is refused at once.
	c.ok("subscribers", "add", "--id", "gone", "--url", "http://127.0.0.1:1/hook", "--events", "video.*")

	data := `{"video_id":"v42",  "rank": 1}`
	var res api.EmitResult
	c.okJSON(&res, "emit", "--id", "evt_1", "--type", "video.trending", "--data", data)
	if res.ID != "evt_1" || res.Deliveries != 2 {
		t.Fatalf("emit = %+v", res)
	}
	c.okJSON(&res, "emit", "--id", "evt_1", "--type", "video.trending", "--data", data)
	if !res.Duplicate {
		t.Fatalf("re-emit = %+v, want a duplicate", res)
	}
	if r := c.run("emit", "--id", "evt_1", "--type", "video.trending", "--data", "{}"); r.code != 1 || !strings.Contains(r.stderr, "conflict") {
		t.Fatalf("conflicting re-emit: %+v", r)
	}
	// The coalesce key changes how the event is delivered: another one is a conflict too.
	if r := c.run("emit", "--id", "evt_1", "--type", "video.trending", "--data", data, "--coalesce-key", "v42"); r.code != 1 ||
		!strings.Contains(r.stderr, "conflict") || !strings.Contains(r.stderr, "coalesce key") {
		t.Fatalf("re-emit with a coalesce key: %+v", r)
	}
	r := c.runIn(`{"from":"stdin"}`, "emit", "--type", "video.rank_updated", "--data-file", "-")
	if r.code != 0 {
		t.Fatalf("emit from stdin: %+v", r)
	}
	// events show: the event as GET /v1/events/{id} has it; --data, the body byte for byte.
	var ev api.Event
	if c.okJSON(&ev, "events", "show", "evt_1"); ev.ID != "evt_1" || ev.Type != "video.trending" || ev.CreatedAt.IsZero() {
		t.Fatalf("events show = %+v", ev)
	}
	if out := c.ok("events", "show", "--data", "evt_1"); out != data {
		t.Fatalf("events show --data printed %q, want %q", out, data)
	}
	if r := c.run("events", "show", "evt_none"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("events show of no event: %+v", r)
	}

	table := c.ok("deliveries", "list", "--status", "pending")
	if n := strings.Count(table, "\n"); n != 5 { // header + 4 deliveries
		t.Fatalf("pending deliveries table has %d lines:\n%s", n, table)
	}
	// stats: the queue as GET /v1/stats has it, from the file alone.
	var stats api.Stats
	c.okJSON(&stats, "stats", "--json")
	if stats.Depth != 4 || len(stats.Subscribers) != 2 || stats.Subscribers[0].Counts[store.StatusPending] != 2 ||
		stats.Subscribers[1].Counts[store.StatusPending] != 2 {
		t.Fatalf("stats = %+v", stats)
	}
	if out := c.ok("stats"); !strings.HasPrefix(out, "depth: 4 ") || !regexp.MustCompile(`(?m)^ok +active +2 +0 `).MatchString(out) {
		t.Fatalf("stats table:\n%s", out)
	}
	var page api.DeliveryPage
	c.okJSON(&page, "deliveries", "list", "--limit", "3", "--json")
	if len(page.Deliveries) != 3 || page.NextCursor == "" {
		t.Fatalf("first page = %+v", page)
	}
	var last api.DeliveryPage
	c.okJSON(&last, "deliveries", "list", "--limit", "3", "--json", "--cursor", page.NextCursor)
	if len(last.Deliveries) != 1 || last.NextCursor != "" {
		t.Fatalf("second page = %+v", last)
	}
	if out := c.ok("deliveries", "list", "--limit", "3"); !strings.Contains(out, "more: --cursor ") {
		t.Fatalf("the table does not say how to continue:\n%s", out)
	}

	drain := c.run("drain", "--until-idle", "--for", "30s", "--max-attempts", "1", "--allow-network", "127.0.0.0/8", "--log-format", "json")
	if drain.code != 0 || !strings.Contains(drain.stderr, `"msg":"drain finished"`) || !strings.Contains(drain.stderr, `"delivered":2`) {
		t.Fatalf("drain: %+v", drain)
	}
	bodies, bad := recv.got()
	if bad != 0 || len(bodies) != 2 || bodies[0] != data && bodies[1] != data {
		t.Fatalf("receiver got %q with %d bad signatures; want both events, %q byte for byte", bodies, bad, data)
	}

	var dead api.DeliveryPage
	c.okJSON(&dead, "dead", "list", "--subscriber", "gone", "--json")
	if len(dead.Deliveries) != 2 || dead.Deliveries[0].Status != "dead" {
		t.Fatalf("dead list = %+v", dead)
	}
	if out := c.ok("dead", "list"); strings.Count(out, "\n") != 3 {
		t.Fatalf("dead list table:\n%s", out)
	}
	var one api.Delivery
	c.okJSON(&one, "deliveries", "show", dead.Deliveries[0].ID)
	if len(one.AttemptLog) != 1 || one.LastError == "" {
		t.Fatalf("dead delivery = %+v", one)
	}
	c.okJSON(&one, "deliveries", "retry", dead.Deliveries[0].ID)
	if one.Status != "pending" {
		t.Fatalf("retried = %+v", one)
	}
	if r := c.run("deliveries", "retry", dead.Deliveries[0].ID); r.code != 1 || !strings.Contains(r.stderr, "invalid state") {
		t.Fatalf("retrying a pending delivery: %+v", r)
	}
	var replay api.ReplayResult
	c.okJSON(&replay, "dead", "replay", "--subscriber", "gone", "--from", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	if replay.Replayed != 1 {
		t.Fatalf("replayed %d, want the 1 left dead", replay.Replayed)
	}

	// A drain applies the retention window at its end; the delivered ones are older than 1ms.
	drain = c.run("drain", "--until-idle", "--for", "30s", "--max-attempts", "1", "--retention", "1ms", "--log-format", "json")
	if drain.code != 0 || !strings.Contains(drain.stderr, `"msg":"drain finished"`) {
		t.Fatalf("second drain: %+v", drain)
	}
	var kept api.DeliveryPage
	c.okJSON(&kept, "deliveries", "list", "--subscriber", "ok", "--json")
	if len(kept.Deliveries) != 0 {
		t.Fatalf("delivered deliveries past the retention were kept: %+v", kept.Deliveries)
	}
}

// server is a running `edgehook serve`.
type server struct {
	cmd  *exec.Cmd
	base string
	logs bytes.Buffer  // stderr, complete once done is closed
	done chan struct{} // stderr reached EOF: the process exited
}

// startServe runs `edgehook serve` on a free loopback port and returns once it listens.
func startServe(t *testing.T, c *cli, args ...string) *server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	t.Cleanup(cancel) // kills the process if the test left it running
	s := &server{cmd: c.command(ctx, append([]string{"serve", "--listen", "127.0.0.1:0", "--log-format", "json"}, args...)...), done: make(chan struct{})}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addr := make(chan string, 1)
	go func() {
		defer close(s.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "serving" {
				addr <- line.Addr
			}
			s.logs.Write(sc.Bytes())
			s.logs.WriteByte('\n')
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
		s.cmd.Wait()
	})
	select {
	case a := <-addr:
		s.base = "http://" + a
		return s
	case <-s.done:
		t.Fatalf("serve exited before listening:\n%s", s.logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("serve did not listen within 30s")
	}
	return nil
}

// call sends a request with a JSON body (and token, unless empty) and returns the answer.
func (s *server) call(t *testing.T, method, path, token, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, s.base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// stop sends SIGTERM and returns the whole log and the exit error.
func (s *server) stop(t *testing.T) (string, error) {
	t.Helper()
	return s.signalWithin(t, syscall.SIGTERM, 30*time.Second)
}

// signalWithin sends sig, fails the test unless serve exits within d, and returns the whole log
// and the exit error.
func (s *server) signalWithin(t *testing.T, sig syscall.Signal, d time.Duration) (string, error) {
	t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	case <-time.After(d):
		t.Fatalf("serve did not stop within %s of %s", d, sig)
	}
	err := s.cmd.Wait()
	return s.logs.String(), err
}

func TestServeDeliversAndStopsOnSIGTERM(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	recv := newReceiver(t)
	// Settings from a config file, the token from the environment.
	if err := os.WriteFile(filepath.Join(c.dir, "edgehook.json"), []byte(`{"allow_network": ["127.0.0.0/8"], "poll_interval": "50ms"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = []string{"EDGEHOOK_CONFIG=edgehook.json", "EDGEHOOK_TOKEN=t0ken"}
	srv := startServe(t, c)
	call := func(method, path, token, body string) (int, []byte) { return srv.call(t, method, path, token, body) }
	if code, _ := call("GET", "/v1/stats", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	code, body := call("POST", "/v1/subscribers", "t0ken", `{"url":"`+recv.URL+`/hook","events":["*"]}`)
	if code != http.StatusCreated {
		t.Fatalf("create subscriber: %d %s", code, body)
	}
	var sub api.SubscriberWithSecret
	if err := json.Unmarshal(body, &sub); err != nil {
		t.Fatal(err)
	}
	recv.setSecret(t, sub.Secret)
	if code, body := call("POST", "/v1/events", "t0ken", `{"type":"video.trending","data":{"n":1}}`); code != http.StatusAccepted {
		t.Fatalf("emit: %d %s", code, body)
	}
	select {
	case <-recv.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("the event was not delivered within 30s")
	}
	if bodies, bad := recv.got(); bad != 0 || len(bodies) != 1 || bodies[0] != `{"n":1}` {
		t.Fatalf("receiver got %q, %d bad", bodies, bad)
	}
	// The receiver answers before the engine writes the outcome: wait for the write.
	var metrics []byte
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, metrics = call("GET", "/metrics", "t0ken", ""); bytes.Contains(metrics, []byte(`edgehook_deliveries_delivered_total{subscriber="`+sub.ID+`"} 1`)) {
			break
		}
	}
	for _, want := range []string{"edgehook_deliveries_delivered_total", "edgehook_queue_depth", "go_goroutines", "process_cpu_seconds_total", "edgehook_http_requests_total"} {
		if !bytes.Contains(metrics, []byte(want)) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	logs, err := srv.stop(t)
	if err != nil {
		t.Fatalf("serve exited with %v after SIGTERM:\n%s", err, logs)
	}
	if !strings.Contains(logs, `"msg":"stopped"`) || strings.Contains(logs, "whsec_") || strings.Contains(logs, "t0ken") {
		t.Fatalf("serve log must end with stopped and hold no secret or token:\n%s", logs)
	}
}

// TestGCPercent checks the binary's collector setting: 200 by default, GOGC's value when set.
func TestGCPercent(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set: the runtime's parsing of it applies, not edgehook's default")
	}
	got := debug.SetGCPercent(200)
	if got != 200 {
		t.Errorf("GC percent = %d, want 200", got)
	}
}

// TestMigrateNewStoreID: `migrate --new-store-id` (after restoring a backup) puts the delivery
// ids, stored and new, under a new store id.
func TestMigrateNewStoreID(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "shop", "--url", "https://shop.example/hooks", "--events", "*")
	c.ok("emit", "--type", "order.created", "--data", "{}")
	pattern := regexp.MustCompile(`(?m)^(dlv_[0-9a-f]+_)[0-9]+ `)
	prefix := func() string {
		t.Helper()
		m := pattern.FindStringSubmatch(c.ok("deliveries", "list"))
		if m == nil {
			t.Fatal("deliveries list shows no delivery id")
		}
		return m[1]
	}
	before := prefix()
	out := c.ok("migrate", "--new-store-id")
	m := regexp.MustCompile(`^edgehook\.db: schema up to date\nedgehook\.db: new store id ([0-9a-f]{8}) \(delivery ids dlv_([0-9a-f]{8})_…\)\n$`).FindStringSubmatch(out)
	if m == nil || m[1] != m[2] {
		t.Fatalf("migrate --new-store-id printed %q", out)
	}
	if after := prefix(); after != "dlv_"+m[1]+"_" || after == before {
		t.Fatalf("delivery ids under %s before and %s after the new store id %s", before, after, m[1])
	}
}

// lockDB takes the write lock of the CLI's database as another process would, with a write
// transaction (BEGIN IMMEDIATE takes it at once), until the transaction ends or the test does.
func (c *cli) lockDB() *sql.Tx {
	c.t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(c.dir, "edgehook.db")+"?_txlock=immediate")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { db.Close() })
	tx, err := db.Begin()
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { tx.Rollback() })
	return tx
}

// TestLockedDatabase: a write that waits past --busy-timeout for another process's lock fails
// with exit 1, one line that says so, and nothing written.
func TestLockedDatabase(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("migrate")
	tx := c.lockDB()
	r := c.run("--busy-timeout", "100ms", "emit", "--id", "locked", "--type", "a.b", "--data", "1")
	if line := strings.TrimSuffix(r.stderr, "\n"); r.code != 1 || strings.Contains(line, "\n") ||
		!strings.Contains(line, "locked") || !strings.Contains(line, "--busy-timeout 100ms") {
		t.Fatalf("emit on a locked database: exit %d, stderr %q; want exit 1 and one line naming --busy-timeout", r.code, r.stderr)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	var again api.EmitResult
	if c.okJSON(&again, "emit", "--id", "locked", "--type", "a.b", "--data", "1"); again.Duplicate {
		t.Fatal("the refused event was written")
	}
}

// TestReadOnlyDatabase: serve and drain, which must write the file, refuse at once a database
// this process may only read, with exit 1 and one line saying so; the data commands that only
// read it still work. As root, which file modes do not stop, the commands run as nobody.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("migrate")
	db := filepath.Join(c.dir, "edgehook.db")
	if os.Geteuid() == 0 {
		// nobody must reach the binary and the directory (for the WAL's files), not write the file.
		for _, dir := range []string{filepath.Dir(bin), filepath.Dir(c.dir)} {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(c.dir, 0o777); err != nil {
			t.Fatal(err)
		}
		// A new database is its owner's only: this one is made readable by others.
		for _, f := range []string{db, db + "-wal", db + "-shm"} {
			if err := os.Chmod(f, 0o644); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
		}
		c.asNobody = true
	} else if err := os.Chmod(db, 0o444); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"drain", "--for", "5s"}, {"serve", "--listen", "127.0.0.1:0"}} {
		// Bounded, so that a serve which starts anyway fails the test rather than holding it.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var stderr bytes.Buffer
		cmd := c.command(ctx, args...)
		cmd.Stderr = &stderr
		err := cmd.Run()
		timedOut := ctx.Err() != nil
		cancel()
		line := strings.TrimSuffix(stderr.String(), "\n")
		if ee, ok := err.(*exec.ExitError); timedOut || !ok || ee.ExitCode() != 1 || strings.Contains(line, "\n") || !strings.Contains(line, "may not write it") {
			t.Errorf("%s on a read-only database: %v, stderr %q; want exit 1 at once and one line saying it", args[0], err, stderr.String())
		}
	}
	if r := c.run("subscribers", "list"); r.code != 0 {
		t.Errorf("subscribers list on a read-only database: %+v", r)
	}
}

// TestDatabaseInAReadOnlyDirectory: SQLite makes the -wal and -shm files beside the database, so a
// directory this process may not write stops every command, the reading ones too; the error says
// where to look, as for a read-only file. As root, which modes do not stop, the commands run as
// nobody.
func TestDatabaseInAReadOnlyDirectory(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("migrate")
	db := filepath.Join(c.dir, "edgehook.db")
	for _, f := range []string{db + "-wal", db + "-shm"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
	mode := os.FileMode(0o555)
	if os.Geteuid() == 0 {
		for _, dir := range []string{filepath.Dir(bin), filepath.Dir(c.dir)} {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(db, 0o644); err != nil {
			t.Fatal(err)
		}
		mode, c.asNobody = 0o755, true
	}
	if err := os.Chmod(c.dir, mode); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(c.dir, 0o755) })
	for _, args := range [][]string{{"stats"}, {"drain", "--for", "1s"}} {
		if r := c.run(args...); r.code != 1 || !strings.Contains(r.stderr, "may not write it (file or directory permissions?)") {
			t.Errorf("%s with the database in a read-only directory: exit %d, stderr %q; want exit 1 and the permissions hint", args[0], r.code, r.stderr)
		}
	}
}
