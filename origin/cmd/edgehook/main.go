// Command edgehook is the origin of edgehook: the HTTP API and delivery engine (serve), a bounded
// drain for cron (drain), and the commands that manage events, subscribers and deliveries directly
// on the database file.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/edgehook/edgehook/origin/config"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/spf13/cobra"
)

// The engine and the API allocate a little per delivery and per request, and on a small box the
// collector competes with the sends and the one SQLite writer for the same cores: twice the
// default heap growth drained about a third more deliveries per second (9 alternated end-to-end
// pairs, each won by 200), for a heap of up to 3× the live data instead of 2×. GOGC, when set, wins.
func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(200)
	}
}

// allCores is the annotation of the commands that keep a Go processor for every core: the
// servers, which run for good on a machine of their own.
const allCores = "edgehook/all-cores"

// A shared host's NPROC counts threads, and Go runs about one per processor plus 5 or 6: at one
// processor per core of the host, whatever CPU the account may use, a drain ran 36 threads at 32
// cores (8 at 2), two overlapping drains and a few emits passed an NPROC of 100, and a thread the
// runtime cannot make is a fatal crash. Drain and the data commands wait on the network and on the
// one SQLite writer: two processors serve them. GOMAXPROCS, when set, wins.
const oneShotProcs = 2

// limitProcs runs cmd on oneShotProcs processors at most, unless it is a server.
func limitProcs(cmd *cobra.Command) {
	if os.Getenv("GOMAXPROCS") == "" && cmd.Annotations[allCores] == "" && runtime.GOMAXPROCS(0) > oneShotProcs {
		runtime.GOMAXPROCS(oneShotProcs)
	}
}

func main() {
	initCompletionCmd()
	ctx := stopOnSignals()
	cmd, err := rootCmd.ExecuteContextC(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "edgehook: "+withSource(cmd, oneLine(err))+busyHint(err))
		os.Exit(exitCode(err))
	}
}

// withSource adds to a message about a setting ("--workers: must be at least 1") where its value
// came from, when that was not the command line: an operator whose cron job sets EDGEHOOK_WORKERS
// has no --workers to look for.
func withSource(cmd *cobra.Command, msg string) string {
	name, rest, ok := strings.Cut(strings.TrimPrefix(msg, "--"), ":")
	if !ok || !strings.HasPrefix(msg, "--") || cmd == nil {
		return msg
	}
	if f := cmd.Flags().Lookup(name); f != nil && config.Source(f) != "" {
		return "--" + name + " (from " + config.Source(f) + "):" + rest
	}
	return msg
}

// stopOnSignals returns a context that SIGINT, SIGTERM or SIGHUP cancels: serve, drain and dev stop
// claiming, finish or release what is in flight, and exit 0 (1 if they could not write the outcomes
// of some sends). A second signal ends the process at once, with
// the shell's status for it (130, 143): an operator who presses Ctrl-C twice means it, and an exit
// loses nothing committed, the leases of what was in flight expire and it is sent again. Handled
// here rather than by restoring the default action, which is to ignore SIGINT in a process
// started in the background by a shell.
func stopOnSignals() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// A closed terminal stops it as Ctrl-C does, rather than killing it with deliveries leased for
	// a lease's length; not under nohup, which ignores SIGHUP so that it runs on (Notify would
	// undo that).
	if !signal.Ignored(syscall.SIGHUP) {
		signal.Notify(sigs, syscall.SIGHUP)
	}
	go func() {
		<-sigs
		cancel()
		sig := <-sigs
		fmt.Fprintln(os.Stderr, "edgehook: a second "+sig.String()+": stopping at once")
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	return ctx
}

// usageError is a mistake on the command line (a flag, a value or an argument): exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func exitCode(err error) int {
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
		return 2
	}
	return 1
}

// oneLine keeps the first line of an error: cobra appends suggestions and hints on further lines.
func oneLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return strings.TrimSpace(msg)
}

// busyHint tells the operator what a bare "database is locked" means: another process kept the
// write lock for longer than this one was willing to wait.
func busyHint(err error) string {
	if store.ResultCode(err) == store.CodeBusy {
		return fmt.Sprintf(" (another process held the write lock for longer than --busy-timeout %s)", global.busyTimeout)
	}
	return ""
}
