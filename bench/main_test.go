package main

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	full, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if full.backlogN != 1_000_000 || full.latencyRate != 1000 || full.latencyFor != 20*time.Second || full.out != "BENCHMARKS.md" {
		t.Errorf("defaults are not issue 7's full run: %+v", full)
	}
	smoke, err := parseFlags([]string{"-smoke", "-backlog", "1234"})
	if err != nil {
		t.Fatal(err)
	}
	if smoke.out != "" || smoke.latencyFor != time.Second || smoke.backlogN != 1234 {
		t.Errorf("-smoke must shrink the sizes, write nothing and keep explicit flags: %+v", smoke)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-ceiling-n", "0"}, "-ceiling-n"},
		{[]string{"-rate", "-5"}, "-rate"},
		{[]string{"-batch-size", "1001"}, "-batch-size"},
		{[]string{"-drain-pairs", "0"}, "-drain-pairs"},
		{[]string{"-drain-pairs", "10"}, "-drain-pairs"},
		{[]string{"-emit-conns", "513"}, "-emit-conns"},
		{[]string{"-latency-conns", "0"}, "-latency-conns"},
		{[]string{"-only", "emit,nope"}, `"nope"`},
		{[]string{"extra"}, `"extra"`},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

func TestEventBody(t *testing.T) {
	t.Parallel()
	for _, size := range []int{64, 1024, 4096} {
		b := eventBody(size, 42)
		if len(b) != size || !json.Valid(b) {
			t.Errorf("eventBody(%d) is %d bytes, valid JSON %v: %s", size, len(b), json.Valid(b), b)
		}
	}
}

func TestEmitRequest(t *testing.T) {
	t.Parallel()
	data := eventBody(100, 1)
	var one struct {
		ID, Type string
		Data     json.RawMessage
	}
	if err := json.Unmarshal(emitRequest("e", 7, 1, data), &one); err != nil || one.ID != "e-7" || one.Type != eventType || string(one.Data) != string(data) {
		t.Errorf("single request: %+v, %v", one, err)
	}
	var batch struct{ Events []struct{ ID string } }
	if err := json.Unmarshal(emitRequest("b", 3, 5, data), &batch); err != nil || len(batch.Events) != 5 || batch.Events[4].ID != "b-3-4" {
		t.Errorf("batch request: %+v, %v", batch, err)
	}
}

func TestFormatValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{1234567, "/s", "1,234,567/s"}, {-4321, "", "-4,321"}, {999.6, "ms", "1,000 ms"}, {123.4, "MB", "123 MB"},
		{12.34, "ms", "12.3 ms"}, {0.052, "deliveries", "0.05 deliveries"}, {3, "%", "3.00%"},
		{math.NaN(), "×", "—"}, {math.Inf(1), "ms", "not arrived"},
	} {
		if got := formatValue(tc.v, tc.unit); got != tc.want {
			t.Errorf("formatValue(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
	// A ratio just under a target must not print as the target.
	if got := formatRatio(11072.0 / 18582); got != "0.596×" {
		t.Errorf("formatRatio(11072/18582) = %q, want 0.596×", got)
	}
}

// TestMedianPair: a drain's figure is the pair of the median ratio to its own ceiling, not the
// median drain rate, and every pair is listed in the order it ran.
func TestMedianPair(t *testing.T) {
	t.Parallel()
	pair := func(rate float64, ceiling int) drainPair { // the ceiling's requests in one second
		return drainPair{ceiling: ceilingResult{loadResult: loadResult{Requests: ceiling, Elapsed: time.Second}}, drainResult: drainResult{rate: rate}}
	}
	pairs := []drainPair{pair(9000, 15000), pair(12000, 24000), pair(11000, 20000)} // 0.60, 0.50, 0.55
	if m := medianPair(pairs); m.rate != 11000 || m.ceiling.rate() != 20000 {
		t.Errorf("median of %v: %+v, want the 0.55× pair", pairs, m)
	}
	if m := medianPair(pairs[:2]); m.rate != 12000 {
		t.Errorf("median of two: %+v, want the lower ratio", m)
	}
	if got, want := pairsNote(pairs), "ratios 0.600× (9,000/s ÷ 15,000/s), 0.500× (12,000/s ÷ 24,000/s), 0.550× (11,000/s ÷ 20,000/s)"; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
}
