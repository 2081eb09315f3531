package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/edgehook/edgehook/origin/engine"
	"github.com/edgehook/edgehook/origin/store"
)

// backlog fills a database with -backlog pending deliveries through the store, times claiming a
// batch over it, and reads the resident memory of `edgehook serve` working on it.
func (b *bench) backlog(ctx context.Context) section {
	s := section{title: "Backlog"}
	n := b.cfg.subscribers
	events := (b.cfg.backlogN + n - 1) / n
	// The claims below are never settled: an in-flight cap at the maximum lets every one of them
	// take a full batch.
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
	var claims []time.Duration
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
	size, err := dbSize(db)
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
	p50, p95 := percentile(claims, 0.5), percentile(claims, 0.95)
	s.figures = append(s.figures,
		fig("pending deliveries", float64(events*n), ""),
		fig("filled at (rows/s, store batch emit)", float64(events*n)/took.Seconds(), "/s"),
		fig("database size", float64(size)/mb, "MB"),
		fig(fmt.Sprintf("claim a batch of %d, p50", engine.DefaultBatchSize), msOf(p50), "ms"),
		fig(fmt.Sprintf("claim a batch of %d, p95", engine.DefaultBatchSize), msOf(p95), "ms").atMost(5, "≤ 5 ms"),
		fig("origin peak RSS (VmHWM)", float64(mem.HWM)/mb, "MB").atMost(150, "≤ 150 MB"),
		fig("origin RSS at the end (VmRSS)", float64(mem.RSS)/mb, "MB"))
	s.notes = append(s.notes, fmt.Sprintf("%d events × %d subscribers emitted through the store's batch emit in %s (%d events per "+
		"call, two calls in flight). Then %d claims of %d (the engine's batch size) in this process, through the store, "+
		"each one transaction with its expired-lease rescue, round robin and token buckets.",
		events, n, took.Round(time.Millisecond), fillBatch, len(claims), engine.DefaultBatchSize),
		fmt.Sprintf("Memory: `edgehook serve` on that database for %s, its engine delivering to the sink at full speed (%d "+
			"delivered) while this program reads GET /v1/stats and a page of pending deliveries and emits a few events; "+
			"VmHWM and VmRSS from /proc/<pid>/status of the origin's own process. Size counts the database, WAL and "+
			"shared-memory files. %s", b.cfg.rssFor, delivered, note))
	return s
}

// timeClaims claims k batches through the store and returns how long each took.
func timeClaims(ctx context.Context, st *store.Store, k int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, k)
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
