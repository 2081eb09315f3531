package main

import (
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ms(v ...float64) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x * float64(time.Millisecond))
	}
	return out
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond // 100 ms down to 1 ms: sorting is needed
	}
	for _, tc := range []struct {
		name string
		d    []time.Duration
		q    float64
		want time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one value", ms(7), 0.99, 7 * time.Millisecond},
		{"p50 of 1..100", hundred, 0.50, 50 * time.Millisecond},
		{"p95 of 1..100", hundred, 0.95, 95 * time.Millisecond},
		{"p99 of 1..100", hundred, 0.99, 99 * time.Millisecond},
		{"p100 of 1..100", hundred, 1, 100 * time.Millisecond},
		{"p50 of two is the lower", ms(9, 3), 0.5, 3 * time.Millisecond},
		{"p51 of two is the upper", ms(9, 3), 0.51, 9 * time.Millisecond},
		{"nearest rank, not interpolated", ms(1, 2, 3, 4, 1000), 0.9, 1000 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := append([]time.Duration(nil), tc.d...)
			if got := percentile(d, tc.q); got != tc.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", tc.d, tc.q, got, tc.want)
			}
		})
	}
}

// evenly returns n arrivals at the given rate starting at 0.
func evenly(n int, rate float64) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(i) / rate * float64(time.Second))
	}
	return out
}

// bucketed returns a burst at 0 followed by n arrivals at the bucket's rate, the fastest series
// the bucket allows.
func bucketed(burst, n int, rate float64) []time.Duration {
	out := make([]time.Duration, burst, burst+n)
	for i := 1; i <= n; i++ {
		out = append(out, time.Duration(float64(i)/rate*float64(time.Second)))
	}
	return out
}

func TestWindowExcess(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		at    []time.Duration
		rate  float64
		burst int
		want  float64
	}{
		{"empty", nil, 50, 10, -10},
		{"one arrival", ms(5), 50, 10, -9},
		{"burst at once is allowed", ms(0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 50, 10, 0},
		{"one over the burst at once", ms(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), 50, 10, 1},
		// Three at once with burst 1 and 1/s: [0,0] holds 3, allowed 1.
		{"late burst after idle", ms(0, 5000, 5000, 5000), 1, 1, 2},
		// 50/s exactly, burst 1: a window of k arrivals spans (k−1)/50 s, allowing 1 + (k−1).
		{"steady at rate", evenly(1000, 50), 50, 1, 0},
		// 100/s against 50/s: 1000 arrivals over 9.99 s, allowed 1 + 499.5.
		{"twice the rate", evenly(1000, 100), 50, 1, 1000 - (1 + 50*9.99)},
		{"full burst then the rate", bucketed(10, 1000, 50), 50, 10, 0},
		// The worst window is not at the start: 10 quiet arrivals, then 5 at once.
		{"worst window in the middle", append(evenly(10, 1), ms(20000, 20000, 20000, 20000, 20000)...), 1, 2, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := windowExcess(tc.at, tc.rate, tc.burst); math.Abs(got-tc.want) > 1e-6 {
				t.Errorf("windowExcess = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestWindowExcessMatchesBruteForce checks the one-pass form against every window.
func TestWindowExcessMatchesBruteForce(t *testing.T) {
	t.Parallel()
	at := ms(0, 1, 1, 3, 40, 41, 41, 42, 100, 180, 181, 182, 183, 184, 400)
	for _, rate := range []float64{1, 20, 50, 200} {
		for _, burst := range []int{1, 2, 5} {
			want := -float64(burst)
			for i := range at {
				for j := i; j < len(at); j++ {
					want = math.Max(want, float64(j-i+1)-(float64(burst)+rate*(at[j]-at[i]).Seconds()))
				}
			}
			if got := windowExcess(at, rate, burst); math.Abs(got-want) > 1e-9 {
				t.Errorf("rate %v burst %d: windowExcess = %v, brute force %v", rate, burst, got, want)
			}
		}
	}
}

func TestMeasuredRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		at     []time.Duration
		window time.Duration
		burst  int
		want   float64
	}{
		{"empty", nil, time.Second, 10, 0},
		{"zero window", ms(1, 2), 0, 0, 0},
		{"exact bucket", bucketed(10, 1000, 50), 20 * time.Second, 10, 50},
		// Arrivals after the window do not count: 2,000 at 100/s over 19.99 s, window 10 s
		// holds 1,001 (0 to 10 s inclusive).
		{"arrivals past the window", evenly(2000, 100), 10 * time.Second, 1, 100},
		{"window starts at the first arrival", append(ms(5000), ms(5500, 6000)...), time.Second, 1, 2},
		{"half the rate", bucketed(10, 500, 25), 20 * time.Second, 10, 25},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := measuredRate(tc.at, tc.window, tc.burst); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("measuredRate = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRelErr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ measured, want, err float64 }{{50, 50, 0}, {48.5, 50, 0.03}, {51.5, 50, 0.03}, {20, 50, 0.6}} {
		if got := relErr(tc.measured, tc.want); math.Abs(got-tc.err) > 1e-12 {
			t.Errorf("relErr(%v, %v) = %v, want %v", tc.measured, tc.want, got, tc.err)
		}
	}
}
