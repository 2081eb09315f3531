package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// stopWait bounds how long a child gets to stop after SIGTERM: its shutdown grace (originArgs)
// and then some.
const stopWait = 20 * time.Second

// originArgs are the settings every origin child shares: the database, JSON logs, the sink on
// loopback allowed, caps that a benchmark does not hit, and a short shutdown grace (a stuck
// subscriber would otherwise hold the stop for the default 10 s).
func originArgs(db, level string) []string {
	caps := strconv.Itoa(bigCap)
	return []string{"--db", db, "--log-level", level, "--log-format", "json", "--backlog-cap", caps, "--queue-cap", caps}
}

// engineArgs are the engine settings of serve and drain: the sink's loopback allowed, a short
// shutdown grace, and then -engine-flags (to try other engine settings; empty in the report's run).
func (b *bench) engineArgs() []string {
	return append([]string{"--allow-network", loopbackNetwork, "--shutdown-grace", "2s"}, strings.Fields(b.cfg.engineFlags)...)
}

// serve starts `edgehook serve` on db and waits until it listens; it returns the API's base URL.
func (b *bench) serve(ctx context.Context, name, db string, extra ...string) (*proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	args := append(append(append([]string{"serve", "--listen", addr}, originArgs(db, "warn")...), b.engineArgs()...), extra...)
	p, err := startProc(b.dir, name, b.cfg.edgehook, nil, args...)
	if err != nil {
		return nil, "", err
	}
	if err := waitListening(ctx, p, addr, 30*time.Second); err != nil {
		p.stop(stopWait)
		return nil, "", err
	}
	return p, "http://" + addr, nil
}

// runOrigin runs an origin command to its end, at most d.
func (b *bench) runOrigin(name string, d time.Duration, args ...string) (*proc, error) {
	p, err := startProc(b.dir, name, b.cfg.edgehook, nil, args...)
	if err != nil {
		return nil, err
	}
	return p, p.wait(d)
}

// prepare creates a database with the subscribers of spec and, if events > 0, that many events
// emitted through the store (each one a delivery per subscriber). It returns the database path.
func (b *bench) prepare(ctx context.Context, name string, spec subscriberSpec, events int) (string, error) {
	db := b.path(name + ".db")
	st, err := createDB(ctx, db, spec)
	if err != nil {
		return "", err
	}
	if events > 0 {
		err = fill(ctx, st, events, b.cfg.bodyBytes, name)
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	flushDisk() // the run that follows starts with no writeback pending, of this database or older ones
	return db, err
}

// flushDisk writes every dirty page of the machine to disk (sync(2)) and waits for it, so that the
// kernel's writeback of the databases earlier runs wrote does not land inside the next measurement.
// Without it the isolation rounds ran slower one after another (their healthy p95 by up to a
// half), while the kernel's flush threads took 0.03–0.24 cores that no process of the bench did.
func flushDisk() { syscall.Sync() }

// withStore opens db in this process, runs f and closes it.
func withStore(ctx context.Context, db string, f func(*store.Store) error) error {
	st, err := openDB(ctx, db)
	if err != nil {
		return err
	}
	err = f(st)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// dbSize is the size of a database with its WAL and shared-memory files.
func dbSize(db string) (int64, error) {
	var total int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		fi, err := os.Stat(db + suffix)
		if err == nil {
			total += fi.Size()
		} else if suffix == "" {
			return 0, err
		}
	}
	return total, nil
}

// cpuSpan measures the CPU used during a measurement by this program, by children and by the
// whole machine (which others share), to tell a CPU-bound figure from a contended one.
type cpuSpan struct {
	start   time.Time
	procs   []*proc
	before  []time.Duration
	self    time.Duration
	machine time.Duration
}

// startCPU starts measuring the CPU of procs, of this program and of the machine.
func startCPU(procs ...*proc) *cpuSpan {
	c := &cpuSpan{start: time.Now(), procs: procs}
	for _, p := range procs {
		t, _ := p.cpu()
		c.before = append(c.before, t)
	}
	c.self, _ = cpuTime(os.Getpid())
	c.machine, _ = machineBusy()
	return c
}

// note renders the CPU used since start, in cores.
func (c *cpuSpan) note() string {
	wall := time.Since(c.start).Seconds()
	cores := func(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()/wall) }
	var parts []string
	var ours time.Duration
	for i, p := range c.procs {
		t, err := p.cpu()
		if err != nil {
			continue
		}
		ours += t - c.before[i]
		parts = append(parts, p.name+" "+cores(t-c.before[i]))
	}
	if self, err := cpuTime(os.Getpid()); err == nil {
		ours += self - c.self
		parts = append(parts, "bench "+cores(self-c.self))
	}
	machine, err := machineBusy()
	if err != nil {
		return "CPU: " + strings.Join(parts, ", ")
	}
	busy := machine - c.machine
	return fmt.Sprintf("CPU during the measurement (cores of %d): %s; the whole machine %s, of which other processes %s.",
		runtime.NumCPU(), strings.Join(parts, ", "), cores(busy), cores(max(0, busy-ours)))
}
