package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// harnessReport is what `make bench-harness` writes (edge/harness/bench_test.go).
type harnessReport struct {
	Median      map[string]float64 `json:"median_ns_per_request"`
	Mean        map[string]float64 `json:"ns_per_request"` // the earlier form of the report
	OverheadNs  map[string]float64 `json:"overhead_ns_vs_native"`
	GeneratedAt string             `json:"generated_at"`
}

// perRequest is the report's ns per request by upstream/runtime: medians, or means in the
// earlier form.
func (h *harnessReport) perRequest() map[string]float64 {
	if len(h.Median) > 0 {
		return h.Median
	}
	return h.Mean
}

// workerReport is what `make bench-edge` writes (edge/workerd/bench.mjs).
type workerReport struct {
	Workerd string `json:"workerd"`
	Bundle  struct {
		WasmBytes     int64 `json:"wasm_bytes"`
		WasmGzipBytes int64 `json:"wasm_gzip_bytes"`
	} `json:"bundle"`
	Results []struct {
		Concurrency int     `json:"concurrency"`
		GoRPS       float64 `json:"go_rps"`
		JSRPS       float64 `json:"js_rps"`
	} `json:"results"`
}

// edge merges the figures the edge areas' own benchmarks left in build/ (make bench runs them
// before this program). A missing file is reported as not measured; an unreadable one is an error.
func (b *bench) edge(context.Context) section {
	s := section{title: "Edge"}
	var h harnessReport
	switch found, err := readReport(b.cfg.harnessJSON, &h); {
	case err != nil:
		s.err = err
		return s
	case !found:
		s.notes = append(s.notes, "Harness: not measured ("+b.cfg.harnessJSON+" is missing; `make bench-harness` writes it).")
	default:
		ns := h.perRequest()
		over, okO := h.OverheadNs["stub/wasi"]
		native, okN := ns["stub/native"]
		wasi, okW := ns["stub/wasi"]
		if !okO || !okN || !okW {
			s.err = fmt.Errorf("%s lacks the stub/native and stub/wasi figures", b.cfg.harnessJSON)
			return s
		}
		s.figures = append(s.figures,
			fig("relay, native core (stub upstream)", native/1e3, "µs/request"),
			fig("relay, WASI in the harness (stub upstream)", wasi/1e3, "µs/request"),
			fig("harness cost over native", over/1e3, "µs/request").atMost(20, "≤ 20 µs"))
		if v, ok := ns["http/wasi"]; ok {
			s.figures = append(s.figures, fig("relay, WASI, real subscriber on loopback", v/1e3, "µs/request"))
		}
		s.notes = append(s.notes, fmt.Sprintf("Harness (%s, generated %s by `make bench-harness`): BenchmarkRelay1KB, one 1 KB "+
			"delivery at a time through the relay core natively and through its WASI build in the wazero harness; the stub "+
			"upstream answers at once, so the difference is the harness's own cost.", b.cfg.harnessJSON, h.GeneratedAt))
	}
	var w workerReport
	switch found, err := readReport(b.cfg.edgeJSON, &w); {
	case err != nil:
		s.err = err
	case !found:
		s.notes = append(s.notes, "Worker: not measured ("+b.cfg.edgeJSON+" is missing; `make bench-edge` writes it).")
	case len(w.Results) == 0:
		s.err = fmt.Errorf("%s has no results", b.cfg.edgeJSON)
	default:
		for _, r := range w.Results {
			s.figures = append(s.figures,
				fig(fmt.Sprintf("Go Worker, concurrency %d", r.Concurrency), r.GoRPS, "/s"),
				fig(fmt.Sprintf("plain JS Worker, concurrency %d", r.Concurrency), r.JSRPS, "/s"),
				fig(fmt.Sprintf("Go ÷ JS, concurrency %d", r.Concurrency), r.GoRPS/r.JSRPS, "×").atLeast(0.8, "≥ 0.8×"))
		}
		s.notes = append(s.notes, fmt.Sprintf("Worker (%s, by `make bench-edge`): requests/s of the Go Worker (build/worker, app.wasm "+
			"%d bytes, %d gzipped) and of a plain JS Worker doing the same KV reads and write and the same fetch to a "+
			"subscriber on 127.0.0.1, in one Miniflare (workerd %s); median of rounds.",
			b.cfg.edgeJSON, w.Bundle.WasmBytes, w.Bundle.WasmGzipBytes, w.Workerd))
	}
	return s
}

// readReport decodes the JSON file at path into v; found is false when there is no file.
func readReport(path string, v any) (found bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return true, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}
