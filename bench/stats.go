package main

import (
	"math"
	"slices"
	"time"
)

// percentile returns the q-quantile (0 < q ≤ 1) of durations by the nearest-rank method: the
// smallest value with at least q·n values at or below it. It sorts d in place; an empty slice
// gives 0.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	rank := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(rank, 0), len(d)-1)]
}

// windowExcess is the worst violation of a token bucket (rate per second, burst) by a series of
// arrival times in increasing order: the maximum over every window [t_i, t_j] of the arrivals in
// it, j−i+1, minus what the bucket allows in it, burst + rate·(t_j − t_i). A series that keeps the
// limit gives at most 0; an empty one gives -burst.
//
// For a fixed end j the worst start minimises i − rate·t_i, so one pass keeping that minimum finds
// the worst window in O(n).
func windowExcess(at []time.Duration, rate float64, burst int) float64 {
	worst := -float64(burst)
	best := math.Inf(1)
	for j, t := range at {
		v := float64(j) - rate*t.Seconds()
		best = math.Min(best, v)
		worst = math.Max(worst, v-best+1-float64(burst))
	}
	return worst
}

// measuredRate is the sustained rate of a token-bucketed series seen over a window of length
// window starting at the first arrival: the arrivals in it beyond the initial burst, per second.
// at must be in increasing order.
func measuredRate(at []time.Duration, window time.Duration, burst int) float64 {
	if len(at) == 0 || window <= 0 {
		return 0
	}
	end := at[0] + window
	n := 0
	for _, t := range at {
		if t <= end {
			n++
		}
	}
	return float64(n-burst) / window.Seconds()
}

// relErr is |measured − want| / want.
func relErr(measured, want float64) float64 { return math.Abs(measured-want) / want }
