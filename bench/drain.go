package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
)

// drain measures `edgehook drain` over a pre-filled queue with rate limits off, straight to the
// sink and through the local edge (`edgehook edge local`, the relay's WASI build in wazero).
func (b *bench) drain(ctx context.Context) section {
	s := section{title: "Drain"}
	for _, run := range []struct {
		name, label string
		mode        store.Mode
		n           int
		target      float64
	}{
		{"drain-direct", "direct", store.ModeDirect, b.cfg.drainN, 0.6},
		{"drain-edge", "through the local edge", store.ModeEdge, b.cfg.drainEdgeN, 0.35},
	} {
		r, err := b.runDrain(ctx, run.name, run.mode, run.n)
		if err != nil {
			s.err = fmt.Errorf("%s: %w", run.label, err)
			return s
		}
		s.figures = append(s.figures, fig("deliveries/s, "+run.label, r.rate, "/s").vs(b.ceiling32).ratioAtLeast(run.target))
		s.notes = append(s.notes, "Drain "+run.label+": "+r.note)
	}
	s.notes = append(s.notes, fmt.Sprintf("The queue is filled through the store's batch emit (%d subscribers, rate and burst at the "+
		"maximum, in-flight cap at its default), then `edgehook drain --until-idle` runs with the default engine settings. "+
		"Deliveries/s is counted at the sink, from the first arrival to the last; the sink must have every delivery the drain reports delivered. "+
		"Through the edge, the origin signs the hop, `edgehook edge local` verifies it, checks dedup in KV, forwards to the sink "+
		"and marks the delivery done.", b.cfg.subscribers))
	return s
}

// drainResult is one drain's deliveries per second and how it went.
type drainResult struct {
	rate float64
	note string
}

// runDrain queues deliveries (rounded up to whole events) in a new database and runs
// `edgehook drain` over them, through a local edge in edge mode.
func (b *bench) runDrain(ctx context.Context, name string, mode store.Mode, deliveries int) (drainResult, error) {
	n := b.cfg.subscribers
	events := (deliveries + n - 1) / n
	spec := subscriberSpec{n: n, url: b.sink.url, mode: mode}
	db, err := b.prepare(ctx, name, spec, events)
	if err != nil {
		return drainResult{}, err
	}
	want := events * n
	args := append(append([]string{"drain", "--until-idle", "--for", b.cfg.drainFor.String()}, originArgs(db, "info")...), b.engineArgs()...)
	procs := []*proc{}
	if mode == store.ModeEdge {
		edge, edgeURL, secret, err := b.startEdge(ctx, name, db)
		if err != nil {
			return drainResult{}, err
		}
		defer edge.stop(stopWait)
		procs = append(procs, edge)
		args = append(args, "--edge-url", edgeURL, "--edge-secret", secret)
	}
	b.sink.reset()
	p, err := startProc(b.dir, name, b.cfg.edgehook, nil, args...)
	if err != nil {
		return drainResult{}, err
	}
	cpu := startCPU(append([]*proc{p}, procs...)...)
	if err := p.wait(b.cfg.drainFor + time.Minute); err != nil {
		return drainResult{}, err
	}
	note := cpu.note()
	arrivals := b.sink.take()
	line, err := p.logLine(`"drain finished"`)
	if err != nil {
		return drainResult{}, err
	}
	var summary struct{ Delivered, Claimed int }
	if err := json.Unmarshal([]byte(line), &summary); err != nil {
		return drainResult{}, fmt.Errorf("drain summary %q: %w", line, err)
	}
	distinct := map[arrival]bool{}
	for _, a := range arrivals {
		distinct[arrival{sub: a.sub, id: a.id}] = true
	}
	if len(arrivals) < 2 || summary.Delivered != len(distinct) {
		return drainResult{}, fmt.Errorf("the sink got %d distinct deliveries (%d requests), the drain reports %d delivered",
			len(distinct), len(arrivals), summary.Delivered)
	}
	done := fmt.Sprintf("all %d deliveries", want)
	if len(distinct) < want {
		done = fmt.Sprintf("%d of the %d deliveries queued (the rest did not fit in --for %s)", len(distinct), want, b.cfg.drainFor)
	}
	window := arrivals[len(arrivals)-1].at.Sub(arrivals[0].at)
	rate := float64(len(arrivals)) / window.Seconds()
	return drainResult{rate: rate, note: fmt.Sprintf("%s (%d requests at the sink, on %d connections) in %s. %s",
		done, len(arrivals), b.sink.connections(), window.Round(time.Millisecond), note)}, nil
}

// startEdge exports the subscribers' KV records of db and starts `edgehook edge local` with a
// fresh edge secret. It returns the edge's URL and the secret.
func (b *bench) startEdge(ctx context.Context, name, db string) (*proc, string, string, error) {
	kv := b.path(name + "-kv.json")
	if _, err := b.runOrigin(name+"-export", time.Minute, append([]string{"edge", "export-kv", "--out", kv}, originArgs(db, "warn")...)...); err != nil {
		return nil, "", "", err
	}
	secret, err := signature.NewSecret()
	if err != nil {
		return nil, "", "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", "", err
	}
	p, err := startProc(b.dir, name+"-edge", b.cfg.edgehook, nil, "edge", "local", "--kv", kv, "--wasm", b.cfg.wasm,
		"--listen", addr, "--edge-secret", secret.String(), "--log-level", "warn", "--log-format", "json")
	if err != nil {
		return nil, "", "", err
	}
	if err := waitListening(ctx, p, addr, time.Minute); err != nil {
		p.stop(stopWait)
		return nil, "", "", err
	}
	return p, "http://" + addr + "/", secret.String(), nil
}
