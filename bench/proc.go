package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// proc is a child process: the origin binary (serve, drain, edge local) or this program's client
// role. Its standard error goes to a log file in the work directory.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed when it has exited
	err     error         // its exit status, once done
}

// startProc starts bin with args; stdout, if not nil, receives its standard output.
func startProc(dir, name, bin string, stdout *bytes.Buffer, args ...string) (*proc, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	// The local edge's wazero compilation cache goes under build/ (gitignored), not the user's home.
	cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(dir, "cache"))
	cmd.Stderr = logFile
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the child's process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the child has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the child to exit on its own, at most d (then it is killed), and returns its
// exit error with the end of its log.
func (p *proc) wait(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not finish within %s and was killed%s", p.name, d, p.logTail())
	}
	if p.err != nil {
		return fmt.Errorf("%s: %w%s", p.name, p.err, p.logTail())
	}
	return nil
}

// stop asks the child to finish (SIGTERM), waits for it at most d, then kills it.
func (p *proc) stop(d time.Duration) error {
	if p.exited() {
		if p.err != nil {
			return fmt.Errorf("%s exited early: %w%s", p.name, p.err, p.logTail())
		}
		return fmt.Errorf("%s exited early%s", p.name, p.logTail())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	return p.wait(d)
}

// logTail is the end of the child's log, for error messages.
func (p *proc) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil || len(bytes.TrimSpace(data)) == 0 {
		return ""
	}
	if len(data) > 1500 {
		data = data[len(data)-1500:]
	}
	return "\n--- end of " + p.logPath + " ---\n" + string(data)
}

// logLine returns the last JSON log line of the child that contains marker.
func (p *proc) logLine(marker string) (string, error) {
	f, err := os.Open(p.logPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), marker) {
			last = sc.Text()
		}
	}
	if last == "" {
		return "", fmt.Errorf("%s: no log line with %q%s", p.name, marker, p.logTail())
	}
	return last, sc.Err()
}

// freeAddr returns a loopback address with a port free at the time of the call, for a child
// to listen on.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits until something accepts connections at addr, at most d, failing early if
// the child exits. The child gives no other signal of readiness, so this polls.
func waitListening(ctx context.Context, p *proc, addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited before listening on %s: %v%s", p.name, addr, p.err, p.logTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("%s is not listening on %s after %s%s", p.name, addr, d, p.logTail())
}

// memory is a process's resident set, from /proc/<pid>/status.
type memory struct {
	HWM, RSS int64 // peak and current resident set, bytes
}

// readMemory reads VmHWM and VmRSS of a process.
func readMemory(pid int) (memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memory{}, err
	}
	var m memory
	for _, line := range strings.Split(string(data), "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok || (name != "VmHWM" && name != "VmRSS") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			return memory{}, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		if name == "VmHWM" {
			m.HWM = kb << 10
		} else {
			m.RSS = kb << 10
		}
	}
	if m.HWM == 0 || m.RSS == 0 {
		return memory{}, fmt.Errorf("/proc/%d/status has no VmHWM or VmRSS", pid)
	}
	return m, nil
}

// clockTicks is USER_HZ, the unit of /proc CPU times; 100 on every Linux this runs on.
const clockTicks = 100

// cpuTime is the CPU a process has used (user + system), from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields are counted after its closing ')'.
	rest := string(data[bytes.LastIndexByte(data, ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// machineBusy is the CPU time every core has spent not idle, from /proc/stat.
func machineBusy() (time.Duration, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, errors.New("/proc/stat: no cpu line")
	}
	var busy int64
	// user nice system idle iowait irq softirq steal; guest time is already in user and nice.
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, err
		}
		if i != 3 && i != 4 { // idle and iowait
			busy += n
		}
	}
	return time.Duration(busy) * time.Second / clockTicks, nil
}

// cpu is the CPU the child has used: from /proc while it runs, from its exit status after.
func (p *proc) cpu() (time.Duration, error) {
	if p.exited() {
		s := p.cmd.ProcessState
		return s.UserTime() + s.SystemTime(), nil
	}
	return cpuTime(p.pid())
}
