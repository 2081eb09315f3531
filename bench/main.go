// Command bench measures edgehook end to end on this machine and writes BENCHMARKS.md: the
// loopback HTTP ceiling, emit, drain (direct and through the local edge), delivery latency,
// rate-limit precision, isolation from a stuck subscriber, a million-delivery backlog, and the
// edge figures that `make bench-edge` and `make bench-harness` leave in build/.
//
// The origin under test is the real binary (bin/edgehook) in its own process; this program is
// the load generator and the subscribers' sink. Everything stays on 127.0.0.1, and every loop is
// bounded in count and in time. `go run ./bench -smoke` runs every section at a tiny size (seconds)
// and fails if any section errors; it asserts nothing about speed.
//
//	go run ./bench            # the full run of issue 7 (about 5 minutes), writes BENCHMARKS.md
//	go run ./bench -smoke     # the same program at a tiny size, writes nothing
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// config holds the sizes of a run; the defaults are the full run of issue 7.
type config struct {
	out, notes, edgehook, wasm, edgeJSON, harnessJSON, workDir string
	only, engineFlags                                          string

	bodyBytes, subscribers int

	ceilingN   int
	ceilingFor time.Duration

	emitN, emitConns, batchSize, batchConns int
	emitFor                                 time.Duration

	drainN, drainEdgeN int
	drainFor           time.Duration
	drainPairs         int

	latencyRate  float64
	latencyFor   time.Duration
	latencyConns int
	deliverWait  time.Duration
	isoRate      float64
	isoFor       time.Duration

	rate     float64
	burst    int
	rateFor  time.Duration
	backlogN int
	claims   int
	rssFor   time.Duration

	smoke bool
	args  []string // the command line, for the report
}

// maxConns bounds the client counts: each is a connection, and a file descriptor on both sides.
const maxConns = 512

// smokeSizes are the sizes of -smoke, for flags not given explicitly.
var smokeSizes = map[string]string{
	"out": "", "ceiling-n": "300", "ceiling-for": "2s", "emit-n": "300", "emit-for": "2s",
	"drain-n": "600", "drain-edge-n": "240", "drain-for": "20s", "drain-pairs": "1", "latency-rate": "100", "latency-for": "1s",
	"isolation-for": "1s", "deliver-wait": "20s", "rate": "50", "rate-for": "1s", "backlog": "6000", "claims": "5", "rss-for": "500ms",
}

// parseFlags reads the command line; with -smoke, the smoke sizes replace the defaults.
func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&c.out, "out", "BENCHMARKS.md", "the report to write (empty: none)")
	fs.StringVar(&c.notes, "notes", "bench/notes.md", "hand-written diagnosis appended to the report, if the file exists")
	fs.StringVar(&c.edgehook, "edgehook", "bin/edgehook", "the origin binary under test (make build)")
	fs.StringVar(&c.wasm, "wasm", "build/relay.wasm", "the relay module the local edge runs (make edge-wasm)")
	fs.StringVar(&c.edgeJSON, "edge-json", "build/bench-edge.json", "figures of make bench-edge, merged if present")
	fs.StringVar(&c.harnessJSON, "harness-json", "build/bench-harness.json", "figures of make bench-harness, merged if present")
	fs.StringVar(&c.workDir, "workdir", "", "where databases and logs go (empty: a temporary directory, removed at the end)")
	fs.StringVar(&c.only, "only", "", "comma-separated sections to run (ceiling,emit,drain,latency,ratelimit,isolation,backlog,edge); empty: all")
	fs.StringVar(&c.engineFlags, "engine-flags", "", `extra flags for the origin's serve and drain, e.g. "--workers 64" (the report names them)`)
	fs.IntVar(&c.bodyBytes, "body-bytes", 1024, "event body size")
	fs.IntVar(&c.subscribers, "subscribers", 12, "subscribers each event matches")
	fs.IntVar(&c.ceilingN, "ceiling-n", 200_000, "ceiling: requests at most, per connection count")
	fs.DurationVar(&c.ceilingFor, "ceiling-for", 5*time.Second, "ceiling: time at most, per connection count")
	fs.IntVar(&c.emitN, "emit-n", 400_000, "emit: events at most, per endpoint")
	fs.DurationVar(&c.emitFor, "emit-for", 8*time.Second, "emit: time at most, per endpoint")
	fs.IntVar(&c.emitConns, "emit-conns", 128, "emit: concurrent clients of POST /v1/events")
	fs.IntVar(&c.batchSize, "batch-size", 100, "emit: events per POST /v1/events/batch")
	fs.IntVar(&c.batchConns, "batch-conns", 32, "emit: concurrent clients of the batch endpoint")
	fs.IntVar(&c.drainN, "drain-n", 60_000, "drain: deliveries queued for the direct drain")
	fs.IntVar(&c.drainEdgeN, "drain-edge-n", 24_000, "drain: deliveries queued for the drain through the local edge")
	fs.DurationVar(&c.drainFor, "drain-for", 30*time.Second, "drain: time at most (edgehook drain --for)")
	fs.IntVar(&c.drainPairs, "drain-pairs", 3, "drain: runs of each drain, each after a ceiling of its own (the figure is the median)")
	fs.Float64Var(&c.latencyRate, "latency-rate", 1000, "latency: events per second")
	fs.DurationVar(&c.latencyFor, "latency-for", 20*time.Second, "latency: how long")
	fs.IntVar(&c.latencyConns, "latency-conns", 32, "latency, isolation: concurrent clients pacing the emits")
	fs.DurationVar(&c.deliverWait, "deliver-wait", 20*time.Second, "latency, isolation: how long deliveries may still arrive after the last emit")
	fs.Float64Var(&c.isoRate, "isolation-rate", 25, "isolation: events per second, one the engine sustains")
	fs.DurationVar(&c.isoFor, "isolation-for", 10*time.Second, "isolation: how long each run lasts (two conditions, alternated twice)")
	fs.Float64Var(&c.rate, "rate", 50, "rate limit: the subscriber's rate per second")
	fs.IntVar(&c.burst, "burst", 10, "rate limit: the subscriber's burst")
	fs.DurationVar(&c.rateFor, "rate-for", 20*time.Second, "rate limit: the measured window")
	fs.IntVar(&c.backlogN, "backlog", 1_000_000, "backlog: pending deliveries")
	fs.IntVar(&c.claims, "claims", 500, "backlog: claims timed (each batch is settled before the next claim)")
	fs.DurationVar(&c.rssFor, "rss-for", 5*time.Second, "backlog: how long the origin works on the backlog before its RSS is read")
	fs.BoolVar(&c.smoke, "smoke", false, "tiny sizes (a few seconds per section), no report: proves the program still works")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.smoke {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name, v := range smokeSizes {
			if !set[name] {
				if err := fs.Set(name, v); err != nil {
					return c, err
				}
			}
		}
	}
	c.args = args
	return c, c.validate()
}

// validate names the first flag whose value is out of range.
func (c *config) validate() error {
	for _, p := range []struct {
		name string
		ok   bool
	}{
		{"body-bytes", c.bodyBytes >= 64 && c.bodyBytes <= 256<<10}, {"subscribers", c.subscribers >= 2 && c.subscribers <= 100},
		{"ceiling-n", c.ceilingN >= 1}, {"ceiling-for", c.ceilingFor > 0},
		{"emit-n", c.emitN >= 1}, {"emit-for", c.emitFor > 0}, {"emit-conns", c.emitConns >= 1 && c.emitConns <= maxConns},
		{"batch-size", c.batchSize >= 1 && c.batchSize <= 1000}, {"batch-conns", c.batchConns >= 1 && c.batchConns <= maxConns},
		{"drain-n", c.drainN >= 1}, {"drain-edge-n", c.drainEdgeN >= 1}, {"drain-for", c.drainFor >= time.Second}, {"drain-pairs", c.drainPairs >= 1 && c.drainPairs <= 9},
		{"latency-rate", c.latencyRate > 0 && c.latencyRate <= 100_000}, {"latency-for", c.latencyFor > 0}, {"latency-conns", c.latencyConns >= 1 && c.latencyConns <= maxConns}, {"deliver-wait", c.deliverWait > 0},
		{"isolation-rate", c.isoRate > 0 && c.isoRate <= 100_000}, {"isolation-for", c.isoFor > 0},
		{"rate", c.rate > 0 && c.rate <= 10_000}, {"burst", c.burst >= 1}, {"rate-for", c.rateFor > 0},
		{"backlog", c.backlogN >= 1}, {"claims", c.claims >= 1}, {"rss-for", c.rssFor > 0},
	} {
		if !p.ok {
			return fmt.Errorf("-%s: value out of range", p.name)
		}
	}
	for _, s := range c.sections() {
		if !knownSection[s] {
			return fmt.Errorf("-only: unknown section %q", s)
		}
	}
	return nil
}

var sectionOrder = []string{"ceiling", "emit", "drain", "latency", "ratelimit", "isolation", "backlog", "edge"}

var knownSection = func() map[string]bool {
	m := map[string]bool{}
	for _, s := range sectionOrder {
		m[s] = true
	}
	return m
}()

// sections lists the sections to run, in order.
func (c *config) sections() []string {
	if c.only == "" {
		return sectionOrder
	}
	return strings.Split(c.only, ",")
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "client" {
		if err := runClient(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "bench client:", err)
			os.Exit(1)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench is one run: its configuration, work directory, sink, and the ceiling the other figures
// are compared with.
type bench struct {
	cfg       config
	dir       string
	self      string // this program, for the client role
	sink      *sink
	ceiling32 float64
}

// run runs the sections, prints the table, writes the report, and fails if a section failed.
func run(ctx context.Context, cfg config) error {
	for _, f := range []string{cfg.edgehook, cfg.wasm} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w (run `make build edge-wasm` first)", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir := cfg.workDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "edgehook-bench-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	sk, err := newSink()
	if err != nil {
		return err
	}
	defer sk.close()
	b := &bench{cfg: cfg, dir: dir, self: self, sink: sk}

	m := describeMachine()
	start := time.Now()
	funcs := map[string]func(context.Context) section{
		"ceiling": b.ceiling, "emit": b.emit, "drain": b.drain, "latency": b.latency, "ratelimit": b.rateLimit,
		"isolation": b.isolation, "backlog": b.backlog, "edge": b.edge,
	}
	var sections []section
	failed := 0
	for _, name := range cfg.sections() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.Now()
		fmt.Fprintf(os.Stderr, "bench: %s ...\n", name)
		flushDisk()
		s := funcs[name](ctx)
		fmt.Fprintf(os.Stderr, "bench: %s done in %s\n", name, time.Since(t).Round(100*time.Millisecond))
		if s.err != nil {
			failed++
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, s.err)
		}
		sections = append(sections, s)
	}
	took := time.Since(start)
	m.loadEnd = loadAverage()
	fmt.Println()
	printTable(os.Stdout, sections)
	if cfg.out != "" {
		notes, err := os.ReadFile(cfg.notes)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		var buf bytes.Buffer
		writeMarkdown(&buf, start, took, m, cfg, sections, string(notes))
		if err := os.WriteFile(cfg.out, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Printf("\nwrote %s (%s)\n", cfg.out, took.Round(time.Second))
	}
	if failed > 0 {
		return fmt.Errorf("%d section(s) failed", failed)
	}
	return nil
}

// describeMachine reads the cores, CPU model, Go version, load and commit.
func describeMachine() machine {
	m := machine{cores: runtime.NumCPU(), cpu: "unknown CPU", goVersion: runtime.Version(), loadStart: loadAverage(), commit: "unknown"}
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil {
		m.commit = strings.TrimSpace(string(out))
	}
	return m
}

// loadAverage is the 1, 5 and 15 minute load average from /proc/loadavg.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// path is a file in the work directory.
func (b *bench) path(name string) string { return filepath.Join(b.dir, name) }
