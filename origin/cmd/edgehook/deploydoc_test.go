package main_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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
		t.Fatalf("no sqlite3 command, which the document's backup runs (`make doc-tools` installs it): %v", err)
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

// phpSnippets returns the PHP blocks of docs/deploy.md, unindented, each without its example
// calls (lines that start with a call of a function the block defines).
func phpSnippets(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile("(?s)\n( *)```php\n(.*?)\n *```").FindAllStringSubmatch(deployDocText(t), -1) {
		var lines []string
		for _, l := range strings.Split(m[2], "\n") {
			l = strings.TrimPrefix(l, m[1])
			if !strings.HasPrefix(l, "edgehook_emit") {
				lines = append(lines, l)
			}
		}
		out = append(out, strings.Join(lines, "\n"))
	}
	if len(out) != 2 {
		t.Fatalf("docs/deploy.md has %d PHP blocks, want the two emit helpers", len(out))
	}
	return out
}

// runPHP runs a PHP script made of lib and then code, with env, and returns its output.
func runPHP(t *testing.T, env []string, lib, code string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.php")
	if err := os.WriteFile(path, []byte(lib+"\n"+code+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "php", path)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("php: %v\n%s", err, out)
	}
	return string(out)
}

// needPHP fails the test where php with its curl extension is not installed: a skip would let
// the document's PHP go untested wherever it is missing, CI's fresh machine first.
func needPHP(t *testing.T) {
	t.Helper()
	out, err := exec.Command("php", "-m").Output()
	if err != nil || !regexp.MustCompile(`(?m)^curl$`).Match(out) {
		t.Fatalf("no php with the curl extension, which runs the document's PHP (`make doc-tools` installs it): %v", err)
	}
}

// TestDeployPHPEmitRetriesAProxysGatewayErrors: deploy.md puts a TLS reverse proxy in front of
// serve and has PHP post through it. While serve restarts (an upgrade) or answers late, the proxy
// says 502 or 504, after which the event may or may not be stored: the helper retries with the
// same id, as after a timeout of its own, instead of throwing at the first 502.
func TestDeployPHPEmitRetriesAProxysGatewayErrors(t *testing.T) {
	t.Parallel()
	needPHP(t)
	lib := phpSnippets(t)[0]
	var mu sync.Mutex
	var bodies []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		n := len(bodies)
		mu.Unlock()
		switch n {
		case 1:
			http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
		case 2:
			http.Error(w, "<html>504 Gateway Time-out</html>", http.StatusGatewayTimeout)
		default:
			w.WriteHeader(http.StatusAccepted)
			fmt.Fprint(w, `{"id":"evt_php","deliveries":1}`)
		}
	}))
	t.Cleanup(proxy.Close)
	lib = strings.Replace(lib, "https://hooks.example.com", proxy.URL, 1)
	out := runPHP(t, []string{"EDGEHOOK_TOKEN=tok"}, lib,
		`try { echo edgehook_emit('t.x', ['n' => 1], 'evt_php'); } catch (RuntimeException $e) { echo 'threw: ', $e->getMessage(); }`)
	mu.Lock()
	defer mu.Unlock()
	if out != "evt_php" || len(bodies) != 3 || bodies[0] != bodies[2] {
		t.Fatalf("after a 502 and a 504 from the proxy the helper printed %q after %d requests (%q), want the id after a third with the same body",
			out, len(bodies), bodies)
	}
}

// TestDeployPHPEmitHelpers runs both PHP helpers of deploy.md against the real binary: through
// serve's API, twice with one id (the event is stored once), and with `edgehook emit` on the file.
func TestDeployPHPEmitHelpers(t *testing.T) {
	t.Parallel()
	needPHP(t)
	helpers := phpSnippets(t)
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", "https://example.com/hooks", "--events", "video.*")
	srv := startServe(t, c, "--token", "tok")
	api := strings.Replace(helpers[0], "https://hooks.example.com", srv.base, 1)
	out := runPHP(t, []string{"EDGEHOOK_TOKEN=tok"}, api,
		`echo edgehook_emit('video.trending', ['video_id' => 'v42'], 'evt_php'), ' ', edgehook_emit('video.trending', ['video_id' => 'v42'], 'evt_php');`)
	if out != "evt_php evt_php" {
		t.Fatalf("two emits with one id printed %q", out)
	}

	local := localEmitHelper(t, c, helpers[1], bin)
	out = runPHP(t, nil, local, `echo json_encode(edgehook_emit_local('video.trending', ['video_id' => 'v43']));`)
	if !regexp.MustCompile(`^\{"id":"evt_[0-9a-f]+","deliveries":1\}$`).MatchString(out) {
		t.Fatalf("edgehook_emit_local returned %s", out)
	}
	if _, err := srv.stop(t); err != nil {
		t.Fatal(err)
	}
	ids := queuedEventIDs(c)
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("deliveries queued for events %q, want one for evt_php and one for the local emit", ids)
	}
}

// localEmitHelper is deploy.md's edgehook_emit_local running binary on c's database, through a
// config file as on the host.
func localEmitHelper(t *testing.T, c *cli, helper, binary string) string {
	t.Helper()
	config := filepath.Join(c.dir, "edgehook.json")
	if err := os.WriteFile(config, []byte(`{"db": "`+filepath.Join(c.dir, "edgehook.db")+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("/home/me/edgehook/edgehook.json", config, "/home/me/edgehook/edgehook", binary).Replace(helper)
}

// queuedEventIDs lists the event of every delivery on c's database.
func queuedEventIDs(c *cli) []string {
	c.t.Helper()
	var page struct {
		Deliveries []struct {
			EventID string `json:"event_id"`
		} `json:"deliveries"`
	}
	c.okJSON(&page, "deliveries", "list", "--json")
	var ids []string
	for _, d := range page.Deliveries {
		ids = append(ids, d.EventID)
	}
	return ids
}

// TestDeployPHPLocalEmitSurvivesARuntimeCrash: under a shared host's NPROC an emit can die in the
// Go runtime ("runtime: failed to create new OS thread", exit 2) after it stored the event: 4 of 50
// measured did. The helper retries with the same id, so the event is stored once, and a
// failure's message is its first line, not the runtime's 70 to 140 lines of stacks.
func TestDeployPHPLocalEmitSurvivesARuntimeCrash(t *testing.T) {
	t.Parallel()
	needPHP(t)
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", "https://example.com/hooks", "--events", "video.*")
	// The binary as the host ran it: the first emit stores the event, then the runtime dies.
	crashy := filepath.Join(c.dir, "crashy")
	script := `#!/bin/sh
if [ ! -e "$0.crashed" ]; then
  touch "$0.crashed"
  "` + bin + `" "$@" >/dev/null
  printf 'runtime: failed to create new OS thread (have 7 already; errno=11)\nruntime: may need to increase max user processes (ulimit -u)\nfatal error: newosproc\n' >&2
  exit 2
fi
exec "` + bin + `" "$@"
`
	if err := os.WriteFile(crashy, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	local := localEmitHelper(t, c, phpSnippets(t)[1], crashy)
	out := runPHP(t, nil, local, `try { echo json_encode(edgehook_emit_local('video.trending', ['video_id' => 'v43'])); } catch (RuntimeException $e) { echo 'threw: ', $e->getMessage(); }`)
	ids := queuedEventIDs(c)
	if len(ids) != 1 || !strings.Contains(out, `"id":"`+ids[0]+`"`) {
		t.Fatalf("after an emit that stored its event and crashed, the helper printed %q and %d deliveries were queued, "+
			"want the stored event's id and one delivery", out, len(ids))
	}
	// A mistake is no crash: it is not retried, and the message is edgehook's one line.
	out = runPHP(t, nil, local, `try { edgehook_emit_local('', []); } catch (RuntimeException $e) { echo 'threw: ', $e->getMessage(); }`)
	if !strings.HasPrefix(out, "threw: edgehook: ") || strings.Contains(out, "\n") {
		t.Fatalf("an emit with no type: the helper printed %q, want one line of edgehook's", out)
	}
}
