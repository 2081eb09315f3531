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
