package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// timed is one delivery of a steady run as the load generator and the sink saw it.
type timed struct {
	sub, event               string
	start, answered, arrived time.Time // emit request sent, its 202 received, the delivery at the sink
	created, sent, delivered time.Time // from the origin's database: emit planned, first attempt, settled
	latency                  time.Duration
}

// stageSample bounds how many deliveries' attempt logs the breakdown reads (one query each).
const stageSample = 2000

// stageNote splits the latency of a steady run's deliveries into stages, reading the origin's
// database after the run: the emit's plan time in the group commit (events.created_at, which
// the deliveries share), the first attempt (attempts.at) and the settle (deliveries.delivered_at),
// beside the emit request's start and answer and the arrival at the sink. The deliveries read are
// spread evenly over the latency ranks, so the slowest 5 % are represented in proportion.
func stageNote(ctx context.Context, db string, items []timed) (string, error) {
	if len(items) == 0 {
		return "", nil
	}
	slices.SortFunc(items, func(a, b timed) int { return cmp.Compare(a.latency, b.latency) })
	n := min(len(items), stageSample)
	want := make(map[arrival]*timed, n)
	picked := make([]*timed, 0, n)
	for k := range n {
		t := &items[k*len(items)/n]
		want[arrival{sub: t.sub, id: t.event}] = t
		picked = append(picked, t)
	}
	err := withStore(ctx, db, func(st *store.Store) error {
		f := store.DeliveryFilter{Limit: store.MaxPageSize}
		for {
			page, err := st.ListDeliveries(ctx, f)
			if err != nil {
				return err
			}
			for _, d := range page.Deliveries {
				t := want[arrival{sub: d.SubscriberID, id: d.EventID}]
				if t == nil {
					continue
				}
				full, err := st.GetDelivery(ctx, d.ID)
				if err != nil {
					return err
				}
				t.created, t.delivered = full.CreatedAt, full.DeliveredAt
				if len(full.AttemptLog) > 0 {
					t.sent = full.AttemptLog[0].At
				}
			}
			if page.NextCursor == "" {
				return nil
			}
			f.Cursor = page.NextCursor
		}
	})
	if err != nil {
		return "", fmt.Errorf("stage times: %w", err)
	}
	slow := picked[len(picked)-max(1, len(picked)/20):]
	stages := []struct {
		name     string
		from, to func(*timed) time.Time
	}{
		{"emit request → planned in a group commit", func(t *timed) time.Time { return t.start }, func(t *timed) time.Time { return t.created }},
		{"planned → first attempt sent", func(t *timed) time.Time { return t.created }, func(t *timed) time.Time { return t.sent }},
		{"sent → at the sink", func(t *timed) time.Time { return t.sent }, func(t *timed) time.Time { return t.arrived }},
		{"(planned → 202 answered)", func(t *timed) time.Time { return t.created }, func(t *timed) time.Time { return t.answered }},
		{"(at the sink → settled)", func(t *timed) time.Time { return t.arrived }, func(t *timed) time.Time { return t.delivered }},
	}
	var parts []string
	for _, s := range stages {
		span := func(ts []*timed) []time.Duration {
			var out []time.Duration
			for _, t := range ts {
				if a, b := s.from(t), s.to(t); !a.IsZero() && !b.IsZero() {
					out = append(out, b.Sub(a))
				}
			}
			return out
		}
		all, tail := span(picked), span(slow)
		if len(all) == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %s / %s / %s", s.name, stageMS(percentile(all, 0.5)), stageMS(percentile(all, 0.95)),
			stageMS(mean(tail))))
	}
	var tail []time.Duration
	for _, t := range slow {
		tail = append(tail, t.latency)
	}
	return fmt.Sprintf("Where the time goes (ms, p50 / p95 / mean over the slowest 5 %%, whose mean latency is %s ms; over %d "+
		"deliveries spread evenly over the latency ranks; the database's times have millisecond resolution, so a stage can read "+
		"up to 1 ms off, and the first three stages add up to the latency): %s.",
		stageMS(mean(tail)), len(picked), strings.Join(parts, "; ")), nil
}

// mean is the average of d, 0 if empty.
func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, v := range d {
		sum += v
	}
	return sum / time.Duration(len(d))
}

// stageMS renders a stage duration in milliseconds.
func stageMS(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f", msOf(d))
}
