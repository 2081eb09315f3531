package main_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// prunableDB writes n events for one subscriber with a backlog cap of 1 into c's database: every
// event but the last leaves a dead delivery, all of them old enough for any --retention of 1ms.
func prunableDB(t *testing.T, c *cli, n int) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: filepath.Join(c.dir, "edgehook.db"), BacklogCap: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSubscriber(ctx, store.SubscriberInput{ID: "s", URL: "http://127.0.0.1:9/hook", Events: []string{"*"}}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += store.MaxBatchEvents {
		ins := make([]store.EmitInput, store.MaxBatchEvents)
		for j := range ins {
			ins[j] = store.EmitInput{ID: fmt.Sprintf("e%d", i+j), Type: "a.b", Body: []byte(fmt.Sprintf(`{"n":%d}`, i+j))}
		}
		if _, err := st.EmitBatch(ctx, ins); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(10 * time.Millisecond) // past a --retention of 1ms
}

// deadRows counts the dead deliveries left in c's database.
func deadRows(t *testing.T, c *cli) int64 {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(c.dir, "edgehook.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(`SELECT count(*) FROM deliveries WHERE status = 'dead'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// drainSummary returns the pruned count of a drain's summary line (json logs).
func drainSummary(t *testing.T, stderr string) (pruned int64) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var l struct {
			Msg    string
			Pruned int64
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "drain finished" {
			return l.Pruned
		}
	}
	t.Fatalf("no summary line:\n%s", stderr)
	return 0
}

// TestDrainEndsWithinForAndGraceWhilePruning: cron starts a drain every minute on the promise that
// it stops claiming at --for and is gone --shutdown-grace later. Its prune at the end had no
// bound: with a large backlog of rows past --retention (the first run after a pause, a lowered
// --retention) a `drain --for 500ms` ran for seconds, beside the next run.
func TestDrainEndsWithinForAndGraceWhilePruning(t *testing.T) {
	c := newCLI(t)
	prunableDB(t, c, 150_000)
	start := time.Now()
	d := c.run("drain", "--for", "500ms", "--shutdown-grace", "200ms", "--retention", "1ms", "--log-format", "json")
	took := time.Since(start)
	if d.code != 0 {
		t.Fatalf("drain: exit %d\n%s", d.code, d.stderr)
	}
	// --for and the grace, and 1.8 s for the process to start and write its last transaction (not
	// parallel with the other tests: alone, it took 0.75 s here, and 4.6 s before the prune had a
	// deadline).
	if limit := 2500 * time.Millisecond; took > limit {
		t.Fatalf("drain --for 500ms --shutdown-grace 200ms took %s (over %s); log:\n%s", took.Round(time.Millisecond), limit, d.stderr)
	}
}

// TestDrainSummaryCountsAPruneCutShort: a prune cut short by --for (or a signal) has deleted
// whole transactions of rows by then; the drain's summary line must count them.
func TestDrainSummaryCountsAPruneCutShort(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	prunableDB(t, c, 100_000)
	before := deadRows(t, c)
	d := c.run("drain", "--for", "300ms", "--shutdown-grace", "100ms", "--retention", "1ms", "--log-format", "json")
	if d.code != 0 {
		t.Fatalf("drain: exit %d\n%s", d.code, d.stderr)
	}
	deleted := before - deadRows(t, c)
	if pruned := drainSummary(t, d.stderr); pruned != deleted {
		t.Fatalf("the drain deleted %d dead deliveries, but its summary says pruned %d:\n%s", deleted, pruned, d.stderr)
	}
}

// TestDrainSendsWhileItPrunes: a drain's prune at its start ran before its first claim, for up to
// --for: with a large backlog of rows past --retention, a run sent nothing at all, and so did the
// next ones until the backlog was gone.
func TestDrainSendsWhileItPrunes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	prunableDB(t, c, 150_000)
	got := make(chan struct{}, 1)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		signal(got)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()
	c.ok("subscribers", "add", "--id", "ok", "--url", recv.URL+"/hook", "--events", "ok.*")
	c.ok("emit", "--type", "ok.x", "--data", "{}")
	d := c.run("drain", "--for", "1s", "--shutdown-grace", "200ms", "--retention", "1ms", "--allow-network", "127.0.0.0/8", "--log-format", "json")
	if d.code != 0 {
		t.Fatalf("drain: exit %d\n%s", d.code, d.stderr)
	}
	select {
	case <-got:
	default:
		t.Fatalf("a drain --for 1s did not send the one delivery due while it pruned:\n%s", d.stderr)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// TestDrainSignalledWhilePruningExitsZero: drain promises exit 0 on SIGTERM. One that arrived
// during the prune at its end (a large backlog past --retention) cut the prune, and its "context
// canceled" ended the drain with exit 1: cron mails an error for a clean stop.
func TestDrainSignalledWhilePruningExitsZero(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	prunableDB(t, c, 150_000)
	ctx, cancel := context.WithTimeout(context.Background(), runLimit)
	defer cancel()
	cmd := c.command(ctx, "drain", "--for", "300ms", "--shutdown-grace", "30s", "--retention", "1ms", "--log-format", "json")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // past --for: in the prune at the end
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("drain ended with %v after a SIGTERM during its prune, want exit 0; stderr:\n%s", err, stderr.String())
	}
}
