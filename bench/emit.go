package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// emit measures POST /v1/events (one event per request) and POST /v1/events/batch against the
// origin binary, each event matching every subscriber. The subscribers are paused: deliveries are
// stored but not sent, so the figure is the durable emit path alone.
func (b *bench) emit(ctx context.Context) section {
	s := section{title: "Emit"}
	n := b.cfg.subscribers
	single, note, err := b.runEmit(ctx, "emit-single", b.cfg.emitConns, 1)
	if err != nil {
		s.err = fmt.Errorf("POST /v1/events: %w", err)
		return s
	}
	ev := single.rate()
	s.figures = append(s.figures,
		fig("events/s, single-event requests", ev, "/s").vs(b.ceiling32).atLeast(10_000, "≥ 10,000/s"),
		fig(fmt.Sprintf("deliveries queued/s (× %d subscribers)", n), ev*float64(n), "/s").atLeast(120_000, "≥ 120,000/s"))
	s.notes = append(s.notes, fmt.Sprintf("POST /v1/events, %d concurrent clients: %d events in %s, every one answered 202 after "+
		"its transaction committed (synchronous=NORMAL in WAL mode, the default: durable across a process crash). %s",
		b.cfg.emitConns, single.Requests, single.Elapsed.Round(time.Millisecond), note))

	batch, note, err := b.runEmit(ctx, "emit-batch", b.cfg.batchConns, b.cfg.batchSize)
	if err != nil {
		s.err = fmt.Errorf("POST /v1/events/batch: %w", err)
		return s
	}
	bev := batch.rate() * float64(b.cfg.batchSize)
	s.figures = append(s.figures,
		fig(fmt.Sprintf("events/s, batches of %d", b.cfg.batchSize), bev, "/s").vs(b.ceiling32).atLeast(50_000, "≥ 50,000/s"),
		fig("deliveries queued/s, batches", bev*float64(n), "/s"))
	s.notes = append(s.notes, fmt.Sprintf("POST /v1/events/batch, %d concurrent clients, %d events per request: %d requests in %s. %s",
		b.cfg.batchConns, b.cfg.batchSize, batch.Requests, batch.Elapsed.Round(time.Millisecond), note))
	s.notes = append(s.notes, fmt.Sprintf("Each run starts `edgehook serve` on a new database with %d subscribers (patterns *, "+
		"%s and video.*), all paused so the engine sends nothing; the events carry a %d-byte body. The clients are this program's, sending through "+
		"the engine's own transport as the ceiling's client does, the leanest here, so they take as little of the machine as they can. After the run the origin is "+
		"stopped and the database must hold exactly one pending delivery per subscriber for every accepted event. A delivery "+
		"is stored with its event (one row per event and its fanout, the subscribers it matched) and becomes a row of its own "+
		"when it settles (schema versions 9 and 11).",
		n, eventType, b.cfg.bodyBytes))
	return s
}

// runEmit emits through the API with conns clients and perRequest events per request, then
// checks that every accepted event's deliveries are in the database.
func (b *bench) runEmit(ctx context.Context, name string, conns, perRequest int) (loadResult, string, error) {
	spec := subscriberSpec{n: b.cfg.subscribers, url: b.sink.url, mode: store.ModeDirect}
	db, err := b.prepare(ctx, name, spec, 0)
	if err != nil {
		return loadResult{}, "", err
	}
	err = withStore(ctx, db, func(st *store.Store) error {
		for i := range spec.n {
			if _, err := st.PauseSubscriber(ctx, subscriberID(i), "benchmark: emit only"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return loadResult{}, "", err
	}
	p, base, err := b.serve(ctx, name, db)
	if err != nil {
		return loadResult{}, "", err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.stop(stopWait)
		}
	}()
	url, body := base+"/v1/events", eventBody(b.cfg.bodyBytes, 0)
	if perRequest > 1 {
		url = base + "/v1/events/batch"
	}
	header := http.Header{"Content-Type": {"application/json"}}
	req := func(prefix string) post {
		return func(i int) (string, []byte, http.Header) {
			return url, emitRequest(prefix, i, perRequest, body), header
		}
	}
	client, err := newEngineSender(conns)
	if err != nil {
		return loadResult{}, "", err
	}
	warm := load{client: client, conns: conns, n: conns * 4, d: time.Minute, req: req("warm"), status: http.StatusAccepted}.run(ctx)
	if err := warm.err(); err != nil {
		return warm, "", fmt.Errorf("warm-up: %w", err)
	}
	cpu := startCPU(p)
	requests := max(1, b.cfg.emitN/perRequest)
	r := load{client: client, conns: conns, n: requests, d: b.cfg.emitFor, req: req("e"), status: http.StatusAccepted}.run(ctx)
	note := cpu.note()
	client.CloseIdleConnections()
	stopped = true
	if err := p.stop(stopWait); err != nil {
		return r, "", err
	}
	if err := r.err(); err != nil {
		return r, "", err
	}
	// Every accepted event must be in the database with one delivery per subscriber.
	want := int64((warm.Requests + r.Requests) * perRequest * spec.n)
	err = withStore(ctx, db, func(st *store.Store) error {
		stats, err := st.Stats(ctx, time.Now())
		if err != nil {
			return err
		}
		if stats.Depth != want {
			return fmt.Errorf("the database holds %d pending deliveries, the accepted events make %d", stats.Depth, want)
		}
		return nil
	})
	return r, note, err
}

// emitRequest is the JSON body of the i-th request: one event, or a batch of n.
func emitRequest(prefix string, i, n int, data []byte) []byte {
	var b bytes.Buffer
	event := func(id string) {
		b.WriteString(`{"id":"` + id + `","type":"` + eventType + `","data":`)
		b.Write(data)
		b.WriteByte('}')
	}
	if n == 1 {
		event(prefix + "-" + strconv.Itoa(i))
		return b.Bytes()
	}
	b.WriteString(`{"events":[`)
	for j := range n {
		if j > 0 {
			b.WriteByte(',')
		}
		event(prefix + "-" + strconv.Itoa(i) + "-" + strconv.Itoa(j))
	}
	b.WriteString(`]}`)
	return b.Bytes()
}
