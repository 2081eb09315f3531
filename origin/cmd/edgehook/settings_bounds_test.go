package main_test

import (
	"strings"
	"testing"
)

// badSetting runs a command that must stop at once with a usage error: exit 2 and one line on
// stderr naming want.
func badSetting(t *testing.T, c *cli, want string, args ...string) {
	t.Helper()
	r := c.run(args...)
	line := strings.TrimSuffix(r.stderr, "\n")
	if r.code != 2 || strings.Contains(line, "\n") || !strings.HasPrefix(line, "edgehook: ") || !strings.Contains(line, want) {
		t.Errorf("edgehook %s: exit %d, stderr %q; want exit 2 and one line naming %q", strings.Join(args, " "), r.code, r.stderr, want)
	}
}

// TestHugeWorkersIsAUsageError: the engine sizes its queues by --workers before it sends
// anything, so a typo of a few digits crashed drain and serve with Go's out-of-memory error and a
// goroutine dump instead of naming the setting.
func TestHugeWorkersIsAUsageError(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	badSetting(t, c, "--workers", "drain", "--for", "1s", "--workers", "1000000000000")
	c.env = []string{"EDGEHOOK_WORKERS=1000000000000"}
	badSetting(t, c, "--workers (from EDGEHOOK_WORKERS)", "serve", "--listen", "127.0.0.1:0")
}

// TestListenAddressesAreCheckedAlike: serve refuses a --listen that is not host:port as a usage
// error naming it. dev's two addresses failed only when bound, with exit 1; edge local's once the
// relay module had been loaded (or not found), with exit 1 and without naming the flag.
func TestListenAddressesAreCheckedAlike(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	badSetting(t, c, "--listen", "edge", "local", "--kv", "kv.json", "--edge-secret", secret, "--listen", "nonsense")
	badSetting(t, c, "--listen", "edge", "local", "--kv", "kv.json", "--edge-secret", secret, "--listen", "127.0.0.1:99999")
	badSetting(t, c, "--listen", "dev", "--listen", "127.0.0.1:99999", "--edge-listen", "127.0.0.1:0")
	badSetting(t, c, "--edge-listen", "dev", "--listen", "127.0.0.1:0", "--edge-listen", "nonsense")
}

// TestHugeInstancesIsAUsageError: edge local creates every module instance at start, each about
// 6 MB: --instances 100000000 took all the machine's memory until the kernel killed it.
func TestHugeInstancesIsAUsageError(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	badSetting(t, c, "--instances", "edge", "local", "--kv", "kv.json", "--edge-secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "--instances", "100000000")
}

// TestCompletionIsAGroupAndReadsNoSettings: cobra's completion command answered a shell it does
// not know with its help and exit 0, as the other groups did before runGroup; and, like version
// and help, it reads no settings, so a broken config file must not break a shell's completion.
func TestCompletionIsAGroupAndReadsNoSettings(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	badSetting(t, c, `unknown command "tcsh"`, "completion", "tcsh")
	c.env = []string{"EDGEHOOK_CONFIG=missing.json", "EDGEHOOK_DB="}
	if r := c.run("completion", "bash"); r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "bash completion") {
		t.Errorf("completion bash with a broken config: exit %d, stderr %q; want exit 0 and the script", r.code, r.stderr)
	}
	// What the shell runs at each tab, its stderr hidden: the words, then ":" and a directive.
	if r := c.run("__complete", "subscr"); r.code != 0 || !strings.HasPrefix(r.stdout, "subscribers\t") {
		t.Errorf("__complete subscr with a broken config: exit %d, stdout %q, stderr %q; want exit 0 and the subscribers command", r.code, r.stdout, r.stderr)
	}
}

// TestAnEmptyIDIsRefused: an --id given empty (`--id "$ID"` with ID unset) took a generated id, so
// a script retrying an emit stored the event once per try instead of once, and re-running a
// provisioning script added the subscriber again instead of failing on the existing one.
func TestAnEmptyIDIsRefused(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	badSetting(t, c, "--id", "emit", "--id", "", "--type", "a.b", "--data", "1")
	badSetting(t, c, "--id", "subscribers", "add", "--id", "", "--url", "https://x.example", "--events", "*")
	if out := c.ok("stats", "--json"); !strings.Contains(out, `"depth": 0`) || !strings.Contains(out, `"subscribers": []`) {
		t.Errorf("something was stored: %s", out)
	}
}
