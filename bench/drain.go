package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
)

// drain measures `edgehook drain` over a pre-filled queue with rate limits off, straight to the
// sink and through the local edge (`edgehook edge local`, the relay's WASI build in wazero). Each
// drain is run drainPairs times, each time right after a 32-connection ceiling of its own: the
// machine's speed drifts within minutes, and the ceiling section's, taken before the other
// sections, would put that drift into the ratio. The median pair by ratio is the figure; the
// note lists every pair.
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
		var pairs []drainPair
		for i := range b.cfg.drainPairs {
			c, cpu, err := b.runCeiling(ctx, 32)
			if err != nil {
				s.err = fmt.Errorf("%s: ceiling: %w", run.label, err)
				return s
			}
			r, err := b.runDrain(ctx, fmt.Sprintf("%s-%d", run.name, i+1), run.mode, run.n)
			if err != nil {
				s.err = fmt.Errorf("%s: %w", run.label, err)
				return s
			}
			pairs = append(pairs, drainPair{ceiling: c, ceilingNote: cpu, drainResult: r})
		}
		m := medianPair(pairs)
		s.figures = append(s.figures, fig("deliveries/s, "+run.label, m.rate, "/s").vs(m.ceiling.rate()).ratioAtLeast(run.target))
		s.notes = append(s.notes, fmt.Sprintf("Drain %s: %s. The median pair's ceiling: %d requests in %s. %s Its drain: %s",
			run.label, pairsNote(pairs), m.ceiling.Requests, m.ceiling.Elapsed.Round(time.Millisecond), m.ceilingNote, m.note))
	}
	s.notes = append(s.notes, fmt.Sprintf("The queue is filled through the store's batch emit (%d subscribers, rate and burst at the "+
		"maximum, in-flight cap at its default), then `edgehook drain --until-idle` runs with the default engine settings. "+
		"Deliveries/s is counted at the sink, from the first arrival to the last; the sink must have every delivery the drain reports delivered. "+
		"Through the edge, the origin signs the hop, `edgehook edge local` verifies it, checks dedup in KV, forwards to the sink "+
		"and marks the delivery done. Each drain's ratio is to the 32-connection ceiling measured just before it (%d pairs; "+
		"the figure is the median pair by ratio).", b.cfg.subscribers, b.cfg.drainPairs))
	return s
}

// drainPair is one drain and the ceiling measured just before it, with the ceiling's CPU note (to
// compare each one's CPU per request).
type drainPair struct {
	ceiling     ceilingResult
	ceilingNote string
	drainResult
}

func (p drainPair) ratio() float64 { return p.rate / p.ceiling.rate() }

// medianPair returns the pair of the median ratio (of an even count, the lower middle one).
func medianPair(pairs []drainPair) drainPair {
	sorted := slices.Clone(pairs)
	slices.SortFunc(sorted, func(a, b drainPair) int { return cmp.Compare(a.ratio(), b.ratio()) })
	return sorted[(len(sorted)-1)/2]
}

// pairsNote lists the pairs in the order they ran: each ratio, with its drain and ceiling.
func pairsNote(pairs []drainPair) string {
	var parts []string
	for _, p := range pairs {
		parts = append(parts, fmt.Sprintf("%s (%s ÷ %s)", formatRatio(p.ratio()), formatValue(p.rate, "/s"), formatValue(p.ceiling.rate(), "/s")))
	}
	return "ratios " + strings.Join(parts, ", ")
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
	p, err := startProc(b.dir, name+"-edge", b.cfg.edgehook, nil, "edge", "local", "--allow-network", "127.0.0.0/8", "--kv", kv, "--wasm", b.cfg.wasm,
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
