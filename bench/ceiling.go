package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// ceiling measures raw loopback POSTs from a second process (this program's client role) to the
// sink, with 1 and with 32 connections, sent through the engine's own direct-mode transport: what
// any delivery figure is compared with.
func (b *bench) ceiling(ctx context.Context) section {
	s := section{title: "Ceiling"}
	for _, conns := range []int{1, 32} {
		r, cpu, err := b.runCeiling(ctx, conns)
		if err != nil {
			s.err = fmt.Errorf("%d connection(s): %w", conns, err)
			return s
		}
		name := fmt.Sprintf("raw POST, %d connection", conns)
		if conns > 1 {
			name += "s"
			b.ceiling32 = r.rate()
		}
		s.figures = append(s.figures, fig(name, r.rate(), "/s"))
		s.notes = append(s.notes, fmt.Sprintf("%d connection(s): %d requests in %s; the sink accepted %d connection(s). %s",
			conns, r.Requests, r.Elapsed.Round(time.Millisecond), r.conns, cpu))
	}
	s.notes = append(s.notes, fmt.Sprintf("A second process (`bench client`) posts the same %d-byte event body with the same "+
		"Standard Webhooks headers the engine sends to the same sink the deliveries reach (answers 204), on keep-alive "+
		"connections, with no queue: at most -ceiling-n requests or -ceiling-for per connection count, after a warm-up. "+
		"It sends through the engine's own direct-mode transport (engine.NewDirectTransport: plain-http requests written "+
		"and read on the sender's goroutine, the dialer's address check allowing %s as the origin's --allow-network does), "+
		"called as the engine calls it, so the ceiling is the same client code as the deliveries and not net/http's "+
		"slower Transport. Ratios in the table divide by the 32-connection figure.", b.cfg.bodyBytes, loopbackNetwork))
	return s
}

// loopbackNetwork is the internal network the origin (its --allow-network, origin.go) and the
// ceiling's client may reach: the sink's.
const loopbackNetwork = "127.0.0.0/8"

// ceilingResult is a ceiling run's load and the connections the sink accepted for it.
type ceilingResult struct {
	loadResult
	conns int
}

// runCeiling runs the client role with conns connections and returns its result and CPU note.
// The sink must have seen no more than conns connections: a sender that could not reuse its
// keep-alive connection would measure connection set-up, not the ceiling.
func (b *bench) runCeiling(ctx context.Context, conns int) (ceilingResult, string, error) {
	b.sink.reset()
	defer b.sink.reset()
	var out bytes.Buffer
	p, err := startProc(b.dir, "ceiling-"+strconv.Itoa(conns), b.self, &out, "client", "-url", b.sink.url("ceiling"),
		"-conns", strconv.Itoa(conns), "-n", strconv.Itoa(b.cfg.ceilingN), "-for", b.cfg.ceilingFor.String(),
		"-warmup", strconv.Itoa(conns*20), "-body-bytes", strconv.Itoa(b.cfg.bodyBytes), "-allow-network", loopbackNetwork)
	if err != nil {
		return ceilingResult{}, "", err
	}
	cpu := startCPU(p)
	if err := p.wait(b.cfg.ceilingFor + time.Minute); err != nil {
		return ceilingResult{}, "", err
	}
	note := cpu.note()
	r := ceilingResult{conns: b.sink.connections()}
	if err := json.Unmarshal(out.Bytes(), &r.loadResult); err != nil {
		return r, "", fmt.Errorf("client output %q: %w", out.String(), err)
	}
	if err := r.err(); err != nil {
		return r, "", err
	}
	if r.Requests == 0 {
		return r, "", fmt.Errorf("no request was answered")
	}
	if got := b.sink.count(); got < r.Requests {
		return r, "", fmt.Errorf("the sink saw %d requests, the client counted %d answered", got, r.Requests)
	}
	if r.conns > conns {
		return r, "", fmt.Errorf("the sink accepted %d connections from a client of %d: keep-alive connections were not reused", r.conns, conns)
	}
	return r, note, ctx.Err()
}
