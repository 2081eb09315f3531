package e2e_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// process is a running edgehook command whose JSON log lines the test reads.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the log is drained and the process has exited

	mu   sync.Mutex
	tail []string // the last log lines, shown when the test fails
}

const tailLines = 40

// start runs edgehook with args and waits for the log line whose msg is ready, returning its
// "addr" attribute. The process is stopped with SIGTERM when the test ends.
func start(t *testing.T, name, ready string, args ...string) (*process, string) {
	t.Helper()
	cmd := edgehook(append([]string{"--log-format", "json"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go p.read(stderr, ready, addr)
	t.Cleanup(func() { p.stop(t) })
	select {
	case a := <-addr:
		return p, a
	case <-p.done:
		t.Fatalf("%s exited before it was ready:\n%s", name, p.log())
	case <-time.After(time.Minute):
		t.Fatalf("%s not ready after a minute:\n%s", name, p.log())
	}
	return nil, ""
}

// read keeps the tail of the log, reports the address of the ready line, and reaps the process.
func (p *process) read(r io.Reader, ready string, addr chan<- string) {
	defer close(p.done)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.tail = append(p.tail, line)
		if len(p.tail) > tailLines {
			p.tail = p.tail[1:]
		}
		p.mu.Unlock()
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == ready && rec.Addr != "" {
			select {
			case addr <- rec.Addr:
			default:
			}
		}
	}
	_ = p.cmd.Wait()
}

func (p *process) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.tail, "\n")
}

// stop sends SIGTERM and waits for a clean exit; a process that does not stop is killed.
func (p *process) stop(t *testing.T) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s ignored SIGTERM for 30s", p.name)
	}
	if t.Failed() {
		t.Logf("%s log tail:\n%s", p.name, p.log())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("%s exited with status %d:\n%s", p.name, code, p.log())
	}
}

// edgehook is a command of the binary under test. Its wazero compilation cache goes under the
// checkout's build directory (gitignored), not the user's home: every test build of the module is
// a new entry of about 15 MB. Only edgehook's: Go's build cache lives under the same variable.
func edgehook(args ...string) *exec.Cmd {
	cmd := exec.Command(edgehookBin, args...)
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+cacheHome)
	return cmd
}

// run runs a short edgehook command and returns its standard output.
func run(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := edgehook(args...).Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("edgehook %s: %s", strings.Join(args, " "), msg)
	}
	return out
}

func mustJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%v in %s", err, fmt.Sprintf("%.500s", data))
	}
}
