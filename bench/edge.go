package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
)

// harnessReport is what `make bench-harness` writes (edge/harness/bench_test.go).
type harnessReport struct {
	Median      map[string]float64 `json:"median_ns_per_request"`
	Mean        map[string]float64 `json:"ns_per_request"` // the earlier form of the report
	GeneratedAt string             `json:"generated_at"`
	Runs        int                `json:"runs"` // processes the times are the median of; 0 in older reports: 1
}

// perRequest is the report's ns per request by upstream/runtime: medians, or means in the
// earlier form.
func (h *harnessReport) perRequest() map[string]float64 {
	if len(h.Median) > 0 {
		return h.Median
	}
	return h.Mean
}

// warmBatch is how many requests in a row each runtime gets in the harness's warm figures
// (edge/harness/bench_test.go).
const warmBatch = 100

// harnessFigures renders the harness report as rows: the issue-6 target on the warm figures, the
// cold ones and the floor beside it without a target. The warm and cold stub figures are required;
// the others appear when measured.
func harnessFigures(h *harnessReport) ([]figure, error) {
	ns := h.perRequest()
	for _, k := range []string{"stub-warm/native", "stub-warm/wasi", "stub/native", "stub/wasi"} {
		if _, ok := ns[k]; !ok {
			return nil, fmt.Errorf("no %s figure (make bench-harness writes it)", k)
		}
	}
	warm := fmt.Sprintf("warm, batches of %d per runtime", warmBatch)
	cold := "cold, runtimes in turn per request"
	figs := []figure{
		fig("relay, native core (stub upstream, "+warm+")", ns["stub-warm/native"]/1e3, "µs/request"),
		fig("relay, WASI in the harness (stub upstream, "+warm+")", ns["stub-warm/wasi"]/1e3, "µs/request"),
		fig("harness cost over native ("+warm+")", (ns["stub-warm/wasi"]-ns["stub-warm/native"])/1e3, "µs/request").atMost(20, "≤ 20 µs"),
		fig("relay, native core (stub upstream, "+cold+")", ns["stub/native"]/1e3, "µs/request"),
		fig("relay, WASI in the harness (stub upstream, "+cold+")", ns["stub/wasi"]/1e3, "µs/request"),
		fig("harness cost over native ("+cold+")", (ns["stub/wasi"]-ns["stub/native"])/1e3, "µs/request"),
	}
	for _, r := range []struct{ key, name string }{
		{"http/wasi", "relay, WASI, real subscriber on loopback (" + cold + ")"},
		{"reject-empty/wasi", "floor: WASI, empty request rejected at once (405)"},
		{"reject-1KB/wasi", "floor: WASI, 1 KB delivery rejected at once (405)"},
		{"host-roundtrip-1KB/wasi", "floor: host round trip alone, 1 KB request, module answers a ready 405"},
	} {
		if v, ok := ns[r.key]; ok {
			figs = append(figs, fig(r.name, v/1e3, "µs/request"))
		}
	}
	return figs, nil
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
		Requests    int     `json:"requests"` // to each worker
		PerTurn     int     `json:"per_turn"` // requests in each of a worker's turns; 0 in older reports
		GoRPS       float64 `json:"go_rps"`
		JSRPS       float64 `json:"js_rps"`
	} `json:"results"`
}

// sampling says how a worker report's requests/s were taken.
func (w *workerReport) sampling() string {
	var turns []string
	for _, r := range w.Results {
		if r.PerTurn == 0 {
			return "median of rounds, each round Go then JS (an older report)"
		}
		turns = append(turns, fmt.Sprintf("at concurrency %d, %d requests to each in turns of %d", r.Concurrency, r.Requests, r.PerTurn))
	}
	return fmt.Sprintf("Go and JS take turns in the order Go JS, JS Go, ..., so that both see the same machine (%s); a "+
		"worker's requests/s is its requests over the time of its turns", strings.Join(turns, "; "))
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
		figs, err := harnessFigures(&h)
		if err != nil {
			s.err = fmt.Errorf("%s: %w", b.cfg.harnessJSON, err)
			return s
		}
		s.figures = append(s.figures, figs...)
		s.notes = append(s.notes, fmt.Sprintf("Harness (%s, generated %s by `make bench-harness`): BenchmarkRelay1KB, the median "+
			"time of one 1 KB delivery through the relay core natively and through its WASI build in the wazero harness, with a "+
			"stub upstream that answers at once, so the difference is the harness's own cost. Warm (the target): each runtime "+
			"in turn serves a batch of %d requests, as `edge local` with its one module does; cold: each request goes to all "+
			"four runtimes (native and three WASI modules) in turn, so each starts with CPU caches the others filled, which a "+
			"real `edge local` never does. Floor (BenchmarkHandleFloor, warm): requests the relay rejects at once (405), and "+
			"a stand-in module that returns a ready 405, the host's round trip alone. Each time is the median over %d "+
			"processes: this machine runs a whole process fast or slow (about 1.5× apart for the WASI relay).",
			b.cfg.harnessJSON, h.GeneratedAt, warmBatch, max(h.Runs, 1)))
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
			"subscriber on 127.0.0.1, in one Miniflare (workerd %s); %s.",
			b.cfg.edgeJSON, w.Bundle.WasmBytes, w.Bundle.WasmGzipBytes, w.Workerd, w.sampling()))
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
