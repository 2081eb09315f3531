package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	var atSink []time.Duration
	for _, a := range b.sink.take() {
		if d := a.at.Sub(first); d <= cfg.rateFor {
			atSink = append(atSink, d)
		}
	}
	atSend, err := sendTimes(ctx, db, subscriberID(0), cfg.rateFor)
	if err != nil {
		s.err = err
		return s
	}
	rate := measuredRate(atSend, cfg.rateFor, cfg.burst)
	s.figures = append(s.figures,
		fig("deliveries/s sent", rate, "/s"),
		fig("rate error", 100*relErr(rate, cfg.rate), "%").atMost(3, "≤ 3%"),
		// The attempt log has millisecond times: a window may look up to 1 ms shorter than it was
		// (and 1e-9 absorbs the floating-point rounding of an excess of exactly that much).
		fig("worst window excess over burst + rate × t, sends", windowExcess(atSend, cfg.rate, cfg.burst), "deliveries").
			atMost(cfg.rate*resolution.Seconds()+1e-9, fmt.Sprintf("≤ 0 (± %.2f: 1 ms of tokens)", cfg.rate*resolution.Seconds())),
		fig("deliveries/s at the sink", measuredRate(atSink, cfg.rateFor, cfg.burst), "/s"),
		fig("worst window excess, arrivals at the sink", windowExcess(atSink, cfg.rate, cfg.burst), "deliveries"))
	s.notes = append(s.notes, fmt.Sprintf("One subscriber at %.0f/s with burst %d and a queue of %d events; `edgehook serve` with "+
		"the default engine settings. Over the %s from the first send (%d sends; %d arrivals in the %s from the first "+
		"arrival), the rate is (deliveries − burst) ÷ window, and the excess is the largest, over every window between "+
		"two deliveries, of the deliveries in it minus burst + rate × its length (0 or less: the bucket held). Sends are "+
		"timed by the origin's attempt log (millisecond resolution), where the bucket is spent; arrivals at the sink, as "+
		"the subscriber sees them, add each send's own loopback latency, so a window there can look tighter than the "+
		"sends were. %s", cfg.rate, cfg.burst, events, cfg.rateFor, len(atSend), len(atSink), cfg.rateFor, note))
	return s
}

// resolution is that of the attempt log's times.
const resolution = time.Millisecond

// sendTimes reads from the attempt log when each delivery of a subscriber was first sent, as
// offsets from the first send, keeping those within window.
func sendTimes(ctx context.Context, db, sub string, window time.Duration) ([]time.Duration, error) {
	var at []time.Time
	err := withStore(ctx, db, func(st *store.Store) error {
		f := store.DeliveryFilter{SubscriberID: sub, Status: store.StatusDelivered, Limit: store.MaxPageSize}
		for {
			page, err := st.ListDeliveries(ctx, f)
			if err != nil {
				return err
			}
			for _, d := range page.Deliveries {
				full, err := st.GetDelivery(ctx, d.ID)
				if err != nil {
					return err
				}
				if len(full.AttemptLog) == 0 {
					return fmt.Errorf("delivery %s is delivered with no attempt logged", d.ID)
				}
				at = append(at, full.AttemptLog[0].At)
			}
			if page.NextCursor == "" {
				return nil
			}
			f.Cursor = page.NextCursor
		}
	})
	if err != nil {
		return nil, err
	}
	if len(at) == 0 {
		return nil, errors.New("no delivery was sent")
	}
	slices.SortFunc(at, time.Time.Compare)
	var out []time.Duration
	for _, t := range at {
		if d := t.Sub(at[0]); d <= window {
			out = append(out, d)
		}
	}
	return out, nil
}
