package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// latency emits a steady rate of single events for a while through the origin binary (API and
// engine in one `serve`) and times every delivery from the start of its emit request to its
// arrival at the sink.
func (b *bench) latency(ctx context.Context) section {
	s := section{title: "Latency"}
	spec := subscriberSpec{n: b.cfg.subscribers, url: b.sink.url, mode: store.ModeDirect}
	r, err := b.runSteady(ctx, "latency", spec, b.cfg.latencyRate, b.cfg.latencyFor, nil)
	if err != nil {
		s.err = err
		return s
	}
	s.figures = append(s.figures,
		latencyFig("emit → sink p50", percentile(r.latencies, 0.50)),
		latencyFig("emit → sink p95", percentile(r.latencies, 0.95)).atMost(50, "≤ 50 ms"),
		latencyFig("emit → sink p99", percentile(r.latencies, 0.99)),
		latencyFig("emit → sink max", percentile(r.latencies, 1)),
		fig("events/s emitted (asked: "+formatValue(b.cfg.latencyRate, "/s")+")", r.rate, "/s"),
		fig("deliveries arrived", 100*float64(r.arrived)/float64(len(r.latencies)), "%"),
		// Below the rate asked for, the engine cannot keep up on this machine and a backlog builds:
		// the latency is then the backlog's.
		fig("deliveries/s at the sink (asked: "+formatValue(b.cfg.latencyRate*float64(spec.n), "/s")+")", r.drained, "/s"))
	s.notes = append(s.notes, r.note, fmt.Sprintf("`edgehook serve` with %d subscribers (rate limits off, direct mode) on a new "+
		"database; %d clients pace single-event POST /v1/events at %.0f/s for %s; the engine runs with its defaults. "+
		"Latency runs from just before the emit request is sent to the delivery's arrival at the sink, both read from this "+
		"process's clock; percentiles are nearest-rank over every delivery, and a delivery that has not arrived %s after the last emit counts as "+
		"not arrived (a percentile that reaches one says so). The isolation baseline below gives the latency at a rate the "+
		"engine sustains.", spec.n, b.cfg.latencyConns, b.cfg.latencyRate, b.cfg.latencyFor, b.cfg.deliverWait))
	return s
}

// isolationRounds is how many times the isolation section alternates its two runs. A healthy p95
// of a few milliseconds moves by a fifth with the machine's other work from one run to the next:
// alternating, and pooling each condition's deliveries, compares the two under the same spread of
// conditions instead of whichever minute each run fell in.
const isolationRounds = 2

// isolation runs the steady load with the healthy subscribers alone and with one more subscriber
// that accepts connections and never answers, isolationRounds times each, alternating, and
// compares the healthy p95 of each condition's pooled deliveries.
func (b *bench) isolation(ctx context.Context) section {
	s := section{title: "Isolation"}
	healthy := b.cfg.subscribers - 1
	hang, err := newHangingServer()
	if err != nil {
		s.err = err
		return s
	}
	defer hang.close()
	stuck := subscriberID(healthy)
	url := func(id string) string {
		if id == stuck {
			return hang.url(id)
		}
		return b.sink.url(id)
	}
	var base, with []time.Duration
	var notes []string
	for round := 1; round <= isolationRounds; round++ {
		r, err := b.runSteady(ctx, fmt.Sprintf("isolation-base-%d", round), subscriberSpec{n: healthy, url: b.sink.url, mode: store.ModeDirect}, b.cfg.isoRate, b.cfg.isoFor, nil)
		if err != nil {
			s.err = fmt.Errorf("baseline, round %d: %w", round, err)
			return s
		}
		base = append(base, r.latencies...)
		notes = append(notes, fmt.Sprintf("Baseline, round %d: %s", round, r.note))
		r, err = b.runSteady(ctx, fmt.Sprintf("isolation-stuck-%d", round), subscriberSpec{n: healthy + 1, url: url, mode: store.ModeDirect}, b.cfg.isoRate, b.cfg.isoFor, &stuck)
		if err != nil {
			s.err = fmt.Errorf("with a stuck subscriber, round %d: %w", round, err)
			return s
		}
		with = append(with, r.latencies...)
		notes = append(notes, fmt.Sprintf("With the stuck subscriber, round %d: %s", round, r.note))
	}
	p95base, p95with := percentile(base, 0.95), percentile(with, 0.95)
	ratio := float64(p95with) / float64(p95base)
	if p95with == notArrived || p95base == notArrived {
		ratio = math.NaN() // no ratio between latencies that are not known
	}
	s.figures = append(s.figures,
		latencyFig(fmt.Sprintf("healthy p95 at %.0f events/s, baseline", b.cfg.isoRate), p95base),
		latencyFig("healthy p95, with a stuck subscriber", p95with),
		fig("p95 with ÷ baseline", ratio, "×").atMost(1.2, "≤ 1.2×"))
	s.notes = append(notes,
		fmt.Sprintf("Runs like the latency one, at %.0f events/s for %s each (a rate the engine sustains here, so that "+
			"the comparison is of latencies and not of backlogs), each on a new database: %d healthy subscribers, then the "+
			"same plus one whose endpoint accepts connections and never answers (%d connections accepted in all); it keeps the default "+
			"timeout and in-flight cap. The two alternate, %d rounds of each, and each percentile is over all the rounds of its "+
			"condition: a p95 of a few milliseconds moves by a fifth from one run to the next with the machine's other work. "+
			"Only the healthy subscribers' deliveries are timed.",
			b.cfg.isoRate, b.cfg.isoFor, healthy, hang.accepted(), isolationRounds))
	return s
}

// steadyResult is what a steady run measured.
type steadyResult struct {
	latencies []time.Duration // one per delivery to a measured subscriber; notArrived if it did not
	arrived   int             // deliveries that arrived
	rate      float64         // events per second achieved
	drained   float64         // deliveries per second at the sink, from the first arrival to the last
	note      string
}

// runSteady starts serve on a new database with spec's subscribers, paces single emits at rate
// for d, waits for every delivery to a subscriber other than skip and times them.
func (b *bench) runSteady(ctx context.Context, name string, spec subscriberSpec, rate float64, d time.Duration, skip *string) (steadyResult, error) {
	db, err := b.prepare(ctx, name, spec, 0)
	if err != nil {
		return steadyResult{}, err
	}
	p, base, err := b.serve(ctx, name, db)
	if err != nil {
		return steadyResult{}, err
	}
	stopped := false
	defer func() {
		if !stopped {
			p.stop(stopWait)
		}
	}()
	measured := spec.n
	if skip != nil {
		measured--
	}
	body := eventBody(b.cfg.bodyBytes, 0)
	prefix := name + "-"
	header := http.Header{"Content-Type": {"application/json"}}
	b.sink.reset()
	cpu := startCPU(p)
	client, err := newEngineSender(b.cfg.latencyConns)
	if err != nil {
		return steadyResult{}, err
	}
	r := paced{client: client, conns: b.cfg.latencyConns, rate: rate, d: d, status: http.StatusAccepted,
		req: func(i int) (string, []byte, http.Header) {
			return base + "/v1/events", emitRequest(name, i, 1, body), header
		}}.run(ctx)
	client.CloseIdleConnections()
	if err := r.err(); err != nil {
		return steadyResult{}, err
	}
	want := r.Requests * measured
	b.sink.waitFor(ctx, want, 15*time.Second, b.cfg.deliverWait)
	note := cpu.note()
	stopped = true
	if err := p.stop(stopWait); err != nil {
		return steadyResult{}, err
	}
	arrivals := b.sink.take()
	lat := make([]time.Duration, 0, len(arrivals))
	items := make([]timed, 0, len(arrivals))
	seen := make(map[arrival]bool, len(arrivals))
	var first, last time.Time
	for _, a := range arrivals {
		i, err := strconv.Atoi(strings.TrimPrefix(a.id, prefix))
		if err != nil || !strings.HasPrefix(a.id, prefix) || i >= len(r.starts) || r.starts[i].IsZero() {
			return steadyResult{}, fmt.Errorf("the sink got an unexpected event id %q", a.id)
		}
		key := arrival{sub: a.sub, id: a.id}
		if (skip != nil && a.sub == *skip) || seen[key] {
			continue // a repeated delivery is timed at its first arrival
		}
		seen[key] = true
		if first.IsZero() || a.at.Before(first) {
			first = a.at
		}
		if a.at.After(last) {
			last = a.at
		}
		lat = append(lat, a.at.Sub(r.starts[i]))
		items = append(items, timed{sub: a.sub, event: a.id, start: r.starts[i], answered: r.answers[i], arrived: a.at, latency: lat[len(lat)-1]})
	}
	stages, err := stageNote(ctx, db, items)
	if err != nil {
		return steadyResult{}, err
	}
	arrived := len(lat)
	for range want - arrived {
		lat = append(lat, notArrived)
	}
	var drained float64
	if span := last.Sub(first); span > 0 {
		drained = float64(arrived-1) / span.Seconds()
	}
	return steadyResult{latencies: lat, arrived: arrived, rate: float64(r.Requests) / r.Elapsed.Seconds(), drained: drained,
		note: fmt.Sprintf("%d events emitted in %s; %d of %d deliveries arrived within %s of the last emit (or before 15 s "+
			"without any). %s %s", r.Requests, r.Elapsed.Round(time.Millisecond), arrived, want, b.cfg.deliverWait, note, stages)}, nil
}

// notArrived stands for the latency of a delivery that did not arrive: longer than any other, so
// a percentile that reaches it says so rather than hiding it.
const notArrived = time.Duration(math.MaxInt64)

// latencyFig is a latency figure in milliseconds; +Inf when the percentile is a delivery that never
// arrived.
func latencyFig(name string, d time.Duration) figure {
	if d == notArrived {
		return fig(name, math.Inf(1), "ms")
	}
	return fig(name, msOf(d), "ms")
}

// msOf is a duration in milliseconds.
func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
