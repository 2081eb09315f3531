package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/edgehook/edgehook/origin/engine"
	"github.com/edgehook/edgehook/origin/store"
	_ "modernc.org/sqlite" // checkpointWAL's connection
)

// backlog fills a database with -backlog pending deliveries through the store, times claiming a
// batch over it, and reads the resident memory of `edgehook serve` working on it.
func (b *bench) backlog(ctx context.Context) section {
	s := section{title: "Backlog"}
	n := b.cfg.subscribers
	events := (b.cfg.backlogN + n - 1) / n
	// An in-flight cap at the maximum, so that it never cuts a claim short.
	spec := subscriberSpec{n: n, url: b.sink.url, mode: store.ModeDirect, inFlight: store.MaxMaxInFlight}
	db := b.path("backlog.db")
	st, err := createDB(ctx, db, spec)
	if err != nil {
		s.err = err
		return s
	}
	start := time.Now()
	err = fill(ctx, st, events, b.cfg.bodyBytes, "backlog")
	took := time.Since(start)
	var ckpt time.Duration
	var size int64
	var claims []time.Duration
	if err == nil {
		ckpt, err = checkpointWAL(ctx, db)
	}
	if err == nil {
		size, err = dbSize(db) // the whole backlog, before the claims take some of it
	}
	if err == nil {
		claims, err = timeClaims(ctx, st, b.cfg.claims)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.err = err
		return s
	}
	mem, delivered, note, err := b.originMemory(ctx, db)
	if err != nil {
		s.err = err
		return s
	}
	const mb = 1 << 20
	batch := fmt.Sprintf("claim a batch of %d", engine.DefaultBatchSize)
	s.figures = append(s.figures,
		fig("pending deliveries", float64(events*n), ""),
		fig("filled at (deliveries/s, store batch emit)", float64(events*n)/took.Seconds(), "/s"),
		fig("database size", float64(size)/mb, "MB"),
		fig(batch+", p50", msOf(percentile(claims, 0.5)), "ms"),
		fig(batch+", p95", msOf(percentile(claims, 0.95)), "ms").atMost(5, "≤ 5 ms"),
		fig(batch+", p99", msOf(percentile(claims, 0.99)), "ms"),
		fig(batch+", max", msOf(percentile(claims, 1)), "ms"),
		fig("origin peak RSS (VmHWM)", float64(mem.HWM)/mb, "MB").atMost(150, "≤ 150 MB"),
		fig("origin RSS at the end (VmRSS)", float64(mem.RSS)/mb, "MB"))
	s.notes = append(s.notes, fmt.Sprintf("%d events × %d subscribers emitted through the store's batch emit in %s "+
		"(%d events per call, two calls in flight). What the fill left in the WAL was then copied into the database "+
		"file in %s (PRAGMA wal_checkpoint(TRUNCATE) from a separate connection, the store idle), so the claims see a "+
		"running origin's steady state, not the fill's last checkpoints. Then %d claims of %d (the engine's batch size) "+
		"one after another in this process, through the store, each one transaction with its expired-lease rescue, "+
		"round robin and token buckets; after each, untimed, the batch is settled as delivered (as the engine settles "+
		"a 200), so the in-flight caps never stop the claims. Percentiles of all the claims, nearest rank.",
		events, n, took.Round(time.Millisecond), fillBatch, ckpt.Round(time.Millisecond), len(claims), engine.DefaultBatchSize),
		fmt.Sprintf("Memory: `edgehook serve` on that database (%d deliveries pending after the claims) for %s, its "+
			"engine delivering to the sink at full speed (%d delivered) while this program reads GET /v1/stats and a "+
			"page of pending deliveries and emits a few events; VmHWM and VmRSS from /proc/<pid>/status of the origin's "+
			"own process. Size counts the database, WAL and shared-memory files, measured before the claims. %s",
			events*n-len(claims)*engine.DefaultBatchSize, b.cfg.rssFor, delivered, note))
	return s
}

// checkpointTries bounds checkpointWAL's attempts: one fails while the store's own checkpointer
// (which runs after each commit) holds the checkpoint lock.
const checkpointTries = 50

// checkpointWAL copies every page of db's WAL into the database file and empties the WAL, from its
// own connection, while the store that wrote them is idle, and returns how long that took. It
// retries while another checkpoint is running.
func checkpointWAL(ctx context.Context, db string) (time.Duration, error) {
	c, err := sql.Open("sqlite", "file:"+db+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	for range checkpointTries {
		var busy, pages, copied int
		if err := c.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &pages, &copied); err != nil {
			return 0, fmt.Errorf("checkpoint %s: %w", db, err)
		}
		if busy == 0 {
			return time.Since(start), nil
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("checkpoint %s: still busy after %d tries", db, checkpointTries)
}

// timeClaims claims k batches through the store and returns how long each took. After each
// claim, untimed, it settles the batch as delivered, as the engine does when the sink answers 200:
// unsettled, the claims would stop at the subscribers' in-flight caps (1,000 each: 12,000
// deliveries, 93 batches, with the default 12 subscribers).
func timeClaims(ctx context.Context, st *store.Store, k int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, k)
	settle := make([]store.Settlement, 0, engine.DefaultBatchSize)
	for range k {
		start := time.Now()
		res, err := st.Claim(ctx, store.ClaimParams{Now: time.Now(), Limit: engine.DefaultBatchSize, LeaseDuration: time.Minute})
		d := time.Since(start)
		if err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		if len(res.Deliveries) != engine.DefaultBatchSize {
			return nil, fmt.Errorf("claim took %d deliveries, want %d", len(res.Deliveries), engine.DefaultBatchSize)
		}
		out = append(out, d)
		settle = settle[:0]
		now := time.Now()
		for _, c := range res.Deliveries {
			settle = append(settle, store.Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID,
				Result: store.ResultDelivered, Status: http.StatusOK, Circuit: store.CircuitSuccess,
				Attempt: &store.Attempt{At: now, Status: http.StatusOK, Outcome: "delivered"}})
		}
		if written, err := st.Settle(ctx, now, store.CircuitPolicy{}, settle); err != nil {
			return nil, fmt.Errorf("settle a claimed batch: %w", err)
		} else if len(written.Stale) > 0 {
			return nil, fmt.Errorf("settle a claimed batch: %d of its leases lost", len(written.Stale))
		}
	}
	return out, nil
}

// originMemory runs serve on db for -rss-for with some API traffic and returns its memory, how
// many deliveries reached the sink, and the CPU note.
func (b *bench) originMemory(ctx context.Context, db string) (memory, int, string, error) {
	b.sink.reset()
	defer b.sink.reset()
	p, base, err := b.serve(ctx, "backlog", db)
	if err != nil {
		return memory{}, 0, "", err
	}
	cpu := startCPU(p)
	client := newClient(1)
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(b.cfg.rssFor)
	body := eventBody(b.cfg.bodyBytes, 0)
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		if err := get(ctx, client, base+"/v1/stats"); err != nil {
			p.stop(stopWait)
			return memory{}, 0, "", err
		}
		if err := get(ctx, client, base+"/v1/deliveries?status=pending&limit=100"); err != nil {
			p.stop(stopWait)
			return memory{}, 0, "", err
		}
		if err := send(ctx, client, base+"/v1/events", emitRequest("backlog-extra", i, 1, body), http.Header{"Content-Type": {"application/json"}}, http.StatusAccepted); err != nil {
			p.stop(stopWait)
			return memory{}, 0, "", err
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	mem, err := readMemory(p.pid())
	note := cpu.note()
	if stopErr := p.stop(stopWait); err == nil {
		err = stopErr
	}
	return mem, b.sink.count(), note, err
}

// get fetches url and wants 200, within requestTimeout.
func get(ctx context.Context, c *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body) // so the connection is reused
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return nil
}
