package main

import (
	"context"
	"fmt"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// rateLimit lets `edgehook serve` work through a backlog for one subscriber limited to -rate per
// second with -burst, and checks the arrivals at the sink against the token bucket.
func (b *bench) rateLimit(ctx context.Context) section {
	s := section{title: "Rate limit"}
	cfg := b.cfg
	spec := subscriberSpec{n: 1, url: b.sink.url, mode: store.ModeDirect, rate: cfg.rate, burst: cfg.burst}
	// Twice what the window can take, so the subscriber never runs dry.
	events := 2 * (cfg.burst + int(cfg.rate*cfg.rateFor.Seconds()))
	db, err := b.prepare(ctx, "ratelimit", spec, events)
	if err != nil {
		s.err = err
		return s
	}
	b.sink.reset()
	p, _, err := b.serve(ctx, "ratelimit", db)
	if err != nil {
		s.err = err
		return s
	}
	cpu := startCPU(p)
	if b.sink.waitFor(ctx, 1, 30*time.Second, 30*time.Second) == 0 {
		p.stop(stopWait)
		s.err = fmt.Errorf("no delivery arrived within 30 s")
		return s
	}
	first := b.sink.first()
	// The measurement window is a span of time: wait it out, and a little more for the last
	// arrivals in it.
	select {
	case <-time.After(time.Until(first.Add(cfg.rateFor + 200*time.Millisecond))):
	case <-ctx.Done():
	}
	note := cpu.note()
	if err := p.stop(stopWait); err != nil {
		s.err = err
		return s
	}
	var at []time.Duration
	for _, a := range b.sink.take() {
		if d := a.at.Sub(first); d <= cfg.rateFor {
			at = append(at, d)
		}
	}
	rate := measuredRate(at, cfg.rateFor, cfg.burst)
	s.figures = append(s.figures,
		fig("deliveries/s measured", rate, "/s"),
		fig("rate error", 100*relErr(rate, cfg.rate), "%").atMost(3, "≤ 3%"),
		fig("worst window excess over burst + rate × t", windowExcess(at, cfg.rate, cfg.burst), "deliveries").atMost(0, "≤ 0"))
	s.notes = append(s.notes, fmt.Sprintf("One subscriber at %.0f/s with burst %d and a queue of %d events; `edgehook serve` with "+
		"the default engine settings. Over the %s from the first arrival at the sink (%d arrivals), the rate is (arrivals − "+
		"burst) ÷ window, and the excess is the largest, over every window between two arrivals, of the arrivals in it minus "+
		"burst + rate × its length (0 or less: the bucket held). Arrivals are timed at the sink, as the subscriber sees "+
		"them: a send that leaves late (a connection being opened) can make a window look tighter than the claims were. %s",
		cfg.rate, cfg.burst, events, cfg.rateFor, len(at), note))
	return s
}
