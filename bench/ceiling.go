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
// sink, with 1 and with 32 connections: what any delivery figure is compared with.
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
		s.notes = append(s.notes, fmt.Sprintf("%d connection(s): %d requests in %s. %s", conns, r.Requests, r.Elapsed.Round(time.Millisecond), cpu))
	}
	s.notes = append(s.notes, fmt.Sprintf("A second process (`bench client`) posts the same %d-byte event body with the same "+
		"Standard Webhooks headers the engine sends to the same sink the deliveries reach (answers 204), on keep-alive "+
		"connections, with no queue: at most -ceiling-n requests or -ceiling-for per connection count, after a warm-up. "+
		"Ratios in the table divide by the 32-connection figure.", b.cfg.bodyBytes))
	return s
}

// runCeiling runs the client role with conns connections and returns its result and CPU note.
func (b *bench) runCeiling(ctx context.Context, conns int) (loadResult, string, error) {
	b.sink.reset()
	defer b.sink.reset()
	var out bytes.Buffer
	p, err := startProc(b.dir, "ceiling-"+strconv.Itoa(conns), b.self, &out, "client", "-url", b.sink.url("ceiling"),
		"-conns", strconv.Itoa(conns), "-n", strconv.Itoa(b.cfg.ceilingN), "-for", b.cfg.ceilingFor.String(),
		"-warmup", strconv.Itoa(conns*20), "-body-bytes", strconv.Itoa(b.cfg.bodyBytes))
	if err != nil {
		return loadResult{}, "", err
	}
	cpu := startCPU(p)
	if err := p.wait(b.cfg.ceilingFor + time.Minute); err != nil {
		return loadResult{}, "", err
	}
	note := cpu.note()
	var r loadResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
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
	return r, note, ctx.Err()
}
