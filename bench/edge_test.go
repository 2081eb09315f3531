package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEdgeWorkerReport reads a bench-edge.json of each form (edge/workerd/bench.mjs writes the
// one in turns) and checks the ratio figures and the note's account of how they were sampled.
func TestEdgeWorkerReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, json, sampling string
	}{
		{"turns", `{"workerd":"1.2","results":[{"concurrency":1,"requests":1000,"per_turn":1,"go_rps":80,"js_rps":100},` +
			`{"concurrency":8,"requests":3200,"per_turn":16,"go_rps":150,"js_rps":120}]}`,
			"(at concurrency 1, 1000 requests to each in turns of 1; at concurrency 8, 3200 requests to each in turns of 16)"},
		{"rounds", `{"workerd":"1.2","rounds":20,"results":[{"concurrency":1,"go_rps":80,"js_rps":100},` +
			`{"concurrency":8,"go_rps":150,"js_rps":120}]}`,
			"median of rounds, each round Go then JS (an older report)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			edgeJSON := filepath.Join(dir, "bench-edge.json")
			if err := os.WriteFile(edgeJSON, []byte(tc.json), 0o644); err != nil {
				t.Fatal(err)
			}
			b := &bench{cfg: config{edgeJSON: edgeJSON, harnessJSON: filepath.Join(dir, "missing.json")}}
			s := b.edge(context.Background())
			if s.err != nil {
				t.Fatal(s.err)
			}
			ratios := map[string]float64{}
			for _, f := range s.figures {
				if strings.HasPrefix(f.name, "Go ÷ JS") {
					ratios[f.name] = f.value
				}
			}
			if ratios["Go ÷ JS, concurrency 1"] != 0.8 || ratios["Go ÷ JS, concurrency 8"] != 1.25 {
				t.Errorf("ratios %v, want 0.8 at concurrency 1 and 1.25 at 8", ratios)
			}
			if notes := strings.Join(s.notes, "\n"); !strings.Contains(notes, tc.sampling) {
				t.Errorf("notes do not say %q:\n%s", tc.sampling, notes)
			}
		})
	}
}
