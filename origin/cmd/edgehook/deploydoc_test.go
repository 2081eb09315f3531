package main_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
)

// The tests here run docs/deploy.md's snippets as an operator would paste them, so that the
// document cannot drift from what works.

const deployDoc = "../../../docs/deploy.md"

// deployDocText is docs/deploy.md.
func deployDocText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(deployDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deploySnippet returns the first match of re's group 1 in docs/deploy.md.
func deploySnippet(t *testing.T, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(deployDocText(t))
	if m == nil {
		t.Fatalf("docs/deploy.md has no %s", re)
	}
	return m[1]
}

// shell runs a command line with /bin/sh in dir, bounded in time, and fails the test unless it
// succeeds.
func shell(t *testing.T, dir string, env []string, line string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", line)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%v: %s", line, err, out)
	}
	return string(out)
}

// TestDeployBackupCommand runs the backup command of docs/deploy.md as a nightly job would,
// twice, while serve writes to the file, then restores a backup as the document says. Each copy
// must be whole (it passes SQLite's integrity check and edgehook opens it), readable by its owner
// only, and the second run must work like the first: VACUUM INTO refuses to write over a file,
// so a command with a fixed output name failed from its second run on.
func TestDeployBackupCommand(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sqlite3"); err != nil {
		t.Skip("no sqlite3 command on this machine")
	}
	backup := deploySnippet(t, "`(\\(umask 077; sqlite3 edgehook\\.db [^`]*VACUUM INTO[^`]*)`")
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", "https://example.com/hooks", "--events", "*")
	srv := startServe(t, c)

	// Emits commit all along, as they do on a live box.
	var stop atomic.Bool
	var emitted atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load() && i < 100000; i++ {
			req, _ := http.NewRequest(http.MethodPost, srv.base+"/v1/events",
				strings.NewReader(fmt.Sprintf(`{"type":"t.x","data":{"i":%d}}`, i)))
			req.Header.Set("Content-Type", "application/json")
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				emitted.Add(1)
			}
		}
	}()
	waitFor := func(n int64) {
		for deadline := time.Now().Add(30 * time.Second); emitted.Load() < n; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("only %d emits within 30s", emitted.Load())
			}
		}
	}
	waitFor(50)
	shell(t, c.dir, nil, backup)
	time.Sleep(1100 * time.Millisecond) // a name stamped to the second differs
	waitFor(emitted.Load() + 50)
	shell(t, c.dir, nil, backup) // the next night's run
	stop.Store(true)
	wg.Wait()

	var backups []string
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".db") && n != "edgehook.db" {
			backups = append(backups, n)
		}
	}
	if len(backups) != 2 {
		t.Fatalf("two runs of %s left %q, want two backups", backup, backups)
	}
	for _, n := range backups {
		path := filepath.Join(c.dir, n)
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v, want mode 0600 (it holds every signing secret)", n, fi.Mode(), err)
		}
		db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
		if err != nil {
			t.Fatal(err)
		}
		var check string
		var events int
		err = db.QueryRow("PRAGMA integrity_check").Scan(&check)
		if err == nil {
			err = db.QueryRow("SELECT count(*) FROM events").Scan(&events)
		}
		db.Close()
		if err != nil || check != "ok" || events == 0 {
			t.Fatalf("%s: integrity %q, %d events, %v", n, check, events, err)
		}
	}

	// The restore: stop every process, drop the old WAL, copy the backup, a new store id.
	if _, err := srv.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Remove(filepath.Join(c.dir, "edgehook.db"+suffix)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	shell(t, c.dir, nil, "cp "+backups[0]+" edgehook.db")
	c.ok("migrate", "--new-store-id")
	if out := c.ok("stats"); !strings.Contains(out, "depth:") {
		t.Fatalf("stats of the restored file printed %q", out)
	}
}

// TestDeployCronLine runs the cron line and the config file of docs/deploy.md's shared hosting
// section as cron would (sh -c, HOME set), with the account's home in a temporary directory and
// a shorter --for: an event emitted with the same config is delivered, and the run exits 0.
func TestDeployCronLine(t *testing.T) {
	t.Parallel()
	line := deploySnippet(t, "(?s)```cron\n\\s*([^\n]+)\n")
	fields := strings.Fields(line)
	if len(fields) < 6 || strings.Join(fields[:5], " ") != "* * * * *" {
		t.Fatalf("cron line %q does not run every minute", line)
	}
	command := strings.Join(fields[5:], " ")
	if !strings.Contains(command, " drain --for 55s") {
		t.Fatalf("cron line %q: no drain --for 55s", line)
	}
	command = strings.Replace(command, " drain --for 55s", " drain --for 5s --until-idle", 1)
	config := deploySnippet(t, "(?s)```json\n(\\s*\\{\\s*\"db\": \"/home/me/[^`]*\\})\n\\s*```")

	home := t.TempDir()
	if err := os.Mkdir(filepath.Join(home, "edgehook"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(home, "edgehook", "edgehook")); err != nil {
		t.Fatal(err)
	}
	config = strings.ReplaceAll(config, "/home/me", home)
	if err := os.WriteFile(filepath.Join(home, "edgehook", "edgehook.json"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	recv := newReceiver(t)
	c := &cli{t: t, dir: home, env: []string{"EDGEHOOK_CONFIG=" + filepath.Join(home, "edgehook", "edgehook.json")}}
	var sub api.SubscriberWithSecret
	c.okJSON(&sub, "subscribers", "add", "--id", "s", "--url", recv.URL+"/hook", "--events", "*")
	recv.setSecret(t, sub.Secret)
	c.ok("emit", "--type", "t.x", "--data", `{"n":1}`)

	// The receiver is on loopback: allowed through the environment, the line itself unchanged.
	shell(t, home, []string{"HOME=" + home, "EDGEHOOK_ALLOW_NETWORK=127.0.0.0/8"}, command)
	if bodies, bad := recv.got(); len(bodies) != 1 || bad != 0 {
		t.Fatalf("the cron line delivered %d events (%d badly signed), want 1; drain.log:\n%s", len(bodies), bad, readFile(t, filepath.Join(home, "edgehook", "drain.log")))
	}
	if fi, err := os.Stat(filepath.Join(home, "edgehook", "edgehook.db")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the config's database: %v %v, want it created with mode 0600", fi, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return string(b)
}
