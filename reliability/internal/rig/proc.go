// Package rig runs the real edgehook binary for the reliability suite: it starts `serve`, `drain`
// and `edge local` as child processes on loopback, captures their logs, talks to their HTTP API,
// hosts subscriber sinks, inspects the SQLite file read-only and records the figures a test
// produced for RELIABILITY.md.
//
// Everything here is on 127.0.0.1; nothing ever dials another address.
package rig

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Root returns the repository root (the directory holding go.mod).
func Root(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("rig: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Binary returns the edgehook binary under test: $EDGEHOOK_BIN, or bin/edgehook (`make
// bin/edgehook` builds it; mk/reliability.mk depends on it). A missing binary fails the test.
func Binary(t testing.TB) string {
	t.Helper()
	return artifact(t, "EDGEHOOK_BIN", "bin/edgehook", "make bin/edgehook")
}

// WASM returns the relay module for `edge local`: $EDGEHOOK_WASM or build/relay.wasm.
func WASM(t testing.TB) string {
	t.Helper()
	return artifact(t, "EDGEHOOK_WASM", "build/relay.wasm", "make edge-wasm")
}

func artifact(t testing.TB, env, rel, how string) string {
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(Root(t), rel)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("rig: %s is missing (%v): run `%s` first, or set %s", p, err, how, env)
	}
	return p
}

// Proc is a running edgehook process. Its stdout and stderr are kept (Logs) and scanned line by
// line, so a test can wait for a log line instead of sleeping.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited and its output is read

	mu      sync.Mutex
	logs    bytes.Buffer
	waiters []waiter
	exitErr error
}

type waiter struct {
	match func(map[string]any) bool
	ch    chan map[string]any
}

// Command describes a process to start: the binary's arguments, optionally wrapped (e.g. by
// unshare) and with extra environment.
type Command struct {
	Name string
	Args []string
	Env  []string
	// Wrap, when set, is prepended: the binary runs as Wrap... <binary> Args...
	Wrap []string
}

// Start starts the binary with c.Args and kills it at the end of the test if it still runs.
func Start(t testing.TB, c Command) *Proc {
	t.Helper()
	bin := Binary(t)
	argv := append(append(append([]string{}, c.Wrap...), bin), c.Args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	p := &Proc{Name: c.Name, cmd: cmd, done: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		t.Fatalf("rig: start %s: %v", c.Name, err)
	}
	go p.read(out)
	t.Cleanup(func() {
		p.Signal(syscall.SIGKILL)
		<-p.done
	})
	return p
}

// read collects the output until the process exits, then waits for it.
func (p *Proc) read(out io.Reader) {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.mu.Lock()
		p.logs.Write(line)
		p.logs.WriteByte('\n')
		var rec map[string]any
		if json.Unmarshal(line, &rec) == nil {
			kept := p.waiters[:0]
			for _, w := range p.waiters {
				if w.match(rec) {
					w.ch <- rec
					continue
				}
				kept = append(kept, w)
			}
			p.waiters = kept
		}
		p.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, out)
	err := p.cmd.Wait()
	p.mu.Lock()
	p.exitErr = err
	p.mu.Unlock()
	close(p.done)
}

// WaitLog waits for a JSON log line (the processes run with --log-format json) whose "msg" is msg
// and returns it. It fails the test if the process exits first or timeout passes.
func (p *Proc) WaitLog(t testing.TB, msg string, timeout time.Duration) map[string]any {
	t.Helper()
	ch := make(chan map[string]any, 1)
	p.mu.Lock()
	p.waiters = append(p.waiters, waiter{match: func(r map[string]any) bool { return r["msg"] == msg }, ch: ch})
	p.mu.Unlock()
	select {
	case rec := <-ch:
		return rec
	case <-p.done:
		select {
		case rec := <-ch:
			return rec
		default:
		}
		t.Fatalf("rig: %s exited (%v) before logging %q; output:\n%s", p.Name, p.ExitErr(), msg, p.Logs())
	case <-time.After(timeout):
		t.Fatalf("rig: %s did not log %q within %s; output:\n%s", p.Name, msg, timeout, p.Logs())
	}
	return nil
}

// Signal sends sig to the process (ignored once it has exited).
func (p *Proc) Signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// Wait waits up to timeout for the process to exit by itself; exited is false on timeout.
func (p *Proc) Wait(timeout time.Duration) (exited bool, err error) {
	select {
	case <-p.done:
		return true, p.ExitErr()
	case <-time.After(timeout):
		return false, nil
	}
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// ExitErr is the process's exit error once it has exited.
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Logs returns everything the process has written so far.
func (p *Proc) Logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// Result is a finished command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// Run runs the binary to completion (at most a minute) with stdin and returns its output.
func Run(t testing.TB, stdin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, Binary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("rig: run %v: %v", args, err)
		}
		r.Code = ee.ExitCode()
	}
	return r
}

// MustRun runs the binary and fails the test unless it exits 0.
func MustRun(t testing.TB, args ...string) string {
	t.Helper()
	r := Run(t, "", args...)
	if r.Code != 0 {
		t.Fatalf("rig: edgehook %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.Code, r.Stdout, r.Stderr)
	}
	return r.Stdout
}

// Listening waits for the "msg" log line that carries the listening address in "addr" and
// returns "http://<addr>".
func (p *Proc) Listening(t testing.TB, msg string) string {
	t.Helper()
	rec := p.WaitLog(t, msg, 30*time.Second)
	addr, _ := rec["addr"].(string)
	if addr == "" {
		t.Fatalf("rig: %s logged %q without an addr: %v", p.Name, msg, rec)
	}
	return "http://" + addr
}
