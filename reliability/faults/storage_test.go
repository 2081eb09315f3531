package faults

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
)

// TestStorageContention has three processes deliver from one database — serve and two cron
// drains — while events arrive through the API and through `edgehook emit` (a fourth and fifth
// writer). Every emit is eventually accepted (a 503 must carry Retry-After and succeed on retry),
// every delivery is made, and, with no crash, none twice.
func TestStorageContention(t *testing.T) {
	t.Parallel()
	const apiEvents, cliEvents = 1200, 40
	sink := rig.NewSink(t, nil)
	db := filepath.Join(t.TempDir(), "edgehook.db")
	rig.MustRun(t, "subscribers", "add", "--db", db, "--id", "sub", "--url", sink.URL()+"/hook", "--events", "*",
		"--rate", "5000", "--burst", "5000", "--max-in-flight", "32")
	settings := []string{"--allow-network", "127.0.0.1/32", "--lease-duration", "60s", "--poll-interval", "20ms"}
	o := rig.Serve(t, db, settings...)
	var drains []*rig.Proc
	for i := range 2 {
		args := append(append([]string{"drain", "--db", db, "--for", "6s"}, rig.JSONLogs...), settings...)
		drains = append(drains, rig.Start(t, rig.Command{Name: fmt.Sprintf("drain%d", i), Args: args}))
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	unavailable := 0
	errs := make(chan error, apiEvents+cliEvents)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < apiEvents; i += 8 {
				body := []byte(fmt.Sprintf(`{"id":"evt_api_%d","type":"load.test","data":{"i":%d}}`, i, i))
				for try := 0; ; try++ {
					r, err := o.Try(http.MethodPost, "/v1/events", body, nil)
					if err != nil {
						errs <- err
						break
					}
					if r.Status == http.StatusAccepted {
						break
					}
					if r.Status != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" || try > 20 {
						errs <- fmt.Errorf("emit %d: %d %s", i, r.Status, r.Body)
						break
					}
					mu.Lock()
					unavailable++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range cliEvents {
			if r := rig.Run(t, "", "emit", "--db", db, "--id", fmt.Sprintf("evt_cli_%d", i), "--type", "load.test", "--data", `{"cli":true}`); r.Code != 0 {
				errs <- fmt.Errorf("cli emit %d: exit %d: %s", i, r.Code, r.Stderr)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := apiEvents + cliEvents
	sink.Until(t, 60*time.Second, "every delivery", func() bool { return sink.Total() >= total })
	for _, d := range drains {
		if exited, err := d.Wait(30 * time.Second); !exited || err != nil {
			t.Errorf("%s: exited %v, %v", d.Name, exited, err)
		}
	}
	inspect := rig.OpenDB(t, db)
	rig.Eventually(t, 10*time.Second, "every delivery settled", func() bool { return inspect.Statuses(t)["delivered"] == int64(total) })
	dups := 0
	for k, n := range sink.Counts() {
		if n != 1 {
			dups += n - 1
			t.Errorf("%s delivered %d times", k, n)
		}
	}
	drained := 0
	for _, d := range drains {
		drained += loggedInt(d.Logs(), "drain finished", "delivered")
	}
	if drained == 0 {
		t.Log("the drains delivered nothing: serve won every claim (contention on the file still happened)")
	}
	rig.Record(t, "faults-storage-contention", map[string]any{"processes": 5, "events": total, "delivered": inspect.Statuses(t)["delivered"],
		"delivered_by_drains": drained, "emit_503_retried": unavailable, "duplicates": dups, "lost": int64(total) - inspect.Statuses(t)["delivered"]})
}

// loggedInt returns the integer field key of the first JSON log line with message msg.
func loggedInt(logs, msg, key string) int {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"`+msg+`"`) {
			continue
		}
		i := strings.Index(line, `"`+key+`":`)
		if i < 0 {
			return 0
		}
		rest := line[i+len(key)+3:]
		end := strings.IndexAny(rest, ",}")
		n, _ := strconv.Atoi(rest[:end])
		return n
	}
	return 0
}

// TestStorageDiskFull runs serve with its database on a 16 MiB tmpfs of its own (a private mount
// namespace, created without privileges by unshare), fills the file system while emitting, and
// checks: every emit answers 202 or 503 with Retry-After (never a 500, never a hang), nothing
// accepted before or during the fill is lost, and emits are accepted again once space returns.
func TestStorageDiskFull(t *testing.T) {
	t.Parallel()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	wrap := []string{"unshare", "--user", "--map-root-user", "--mount", "sh", "-c", `mount -t tmpfs -o size=16m tmpfs "$0" && exec "$@"`, mnt}
	args := append([]string{"serve", "--db", filepath.Join(mnt, "edgehook.db"), "--listen", "127.0.0.1:0"}, rig.JSONLogs...)
	p := rig.Start(t, rig.Command{Name: "serve", Args: args, Wrap: wrap})
	o := &rig.Origin{Proc: p, URL: p.Listening(t, "serving")}
	// The tmpfs as this process sees it: through the server's own root.
	fs := filepath.Join("/proc", strconv.Itoa(p.Pid()), "root", mnt)
	if _, err := os.Stat(filepath.Join(fs, "edgehook.db")); err != nil {
		t.Fatalf("the database is not on the private tmpfs: %v", err)
	}
	// A paused subscriber: every event queues a delivery, and nothing but emits writes.
	o.AddSubscriber(t, map[string]any{"id": "sub", "url": "http://127.0.0.1:9/", "events": []string{"*"}})
	o.JSON(t, http.MethodPost, "/v1/subscribers/sub/pause", map[string]any{}, nil)

	accepted := map[string]bool{}
	n := 0
	emit := func() (int, http.Header) {
		id := fmt.Sprintf("evt_%d", n)
		n++
		body := fmt.Sprintf(`{"id":%q,"type":"disk.full","data":{"pad":%q}}`, id, strings.Repeat("p", 1024))
		r, err := o.Try(http.MethodPost, "/v1/events", []byte(body), nil)
		if err != nil {
			t.Fatalf("emit %s: %v", id, err)
		}
		switch r.Status {
		case http.StatusAccepted:
			accepted[id] = true
		case http.StatusServiceUnavailable:
			if e, ok := r.Error(); !ok || e.Code != "unavailable" || r.Header.Get("Retry-After") == "" {
				t.Fatalf("emit %s: 503 without the unavailable error and Retry-After: %s", id, r.Body)
			}
		default:
			t.Fatalf("emit %s: %d %s, want 202 or 503", id, r.Status, r.Body)
		}
		return r.Status, r.Header
	}
	for range 200 {
		if st, _ := emit(); st != http.StatusAccepted {
			t.Fatalf("emit %d before the disk is full: %d\n%s", n, st, p.Logs())
		}
	}
	before := len(accepted)

	// Fill the file system.
	ballast := filepath.Join(fs, "ballast")
	f, err := os.Create(ballast)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the tmpfs: %v", err)
			}
			break
		}
	}
	f.Close()
	// Emit until the database cannot grow (bounded: a free page or WAL space can absorb a few).
	refused := 0
	for range 2000 {
		if st, _ := emit(); st == http.StatusServiceUnavailable {
			refused++
			if refused >= 20 {
				break
			}
		}
	}
	if refused == 0 {
		t.Fatal("2000 emits on a full file system were all accepted: the disk was never full")
	}
	if r := o.Do(t, http.MethodGet, "/healthz", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("healthz while the disk is full: %d", r.Status)
	}
	// Space returns: emits are accepted again.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	recovered := false
	for range 100 {
		if st, _ := emit(); st == http.StatusAccepted {
			recovered = true
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !recovered {
		t.Fatal("emits still refused after the space returned")
	}
	// Nothing accepted is lost: every 202 is in the file. The server is idle now (its subscriber
	// is paused), so a copy of the database and its WAL is consistent; SQLite would resolve the
	// /proc/<pid>/root link to the host's empty directory, hence the copy.
	ids := rig.OpenDB(t, copyDB(t, fs)).EventIDs(t)
	lost := 0
	for id := range accepted {
		if !ids[id] {
			lost++
			t.Errorf("accepted event %s is not in the database", id)
		}
	}
	rig.Record(t, "faults-disk-full", map[string]any{"accepted_before_full": before, "accepted_total": len(accepted),
		"refused_503": refused, "lost": lost, "recovered": recovered})
}

// copyDB copies edgehook.db and its WAL from dir to a temporary directory and returns the copy.
func copyDB(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	for _, name := range []string{"edgehook.db", "edgehook.db-wal"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(out, "edgehook.db")
}
