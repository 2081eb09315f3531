package main_test

import (
	"strings"
	"testing"
)

// TestAnUnknownCommandOfAGroupIsAUsageError: a mistyped subcommand of a command group is a usage error
// (exit 2, one line naming it), as an unknown top-level command is; not the group's help on
// stdout with exit 0, which a script or cron job takes for success.
func TestAnUnknownCommandOfAGroupIsAUsageError(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	for _, args := range [][]string{{"subscribers", "lst"}, {"dead", "replya"}, {"edge", "export"}, {"events", "get", "evt_1"}, {"deliveries", "retyr", "dlv_x_1"}} {
		r := c.run(args...)
		if r.code != 2 || !strings.Contains(r.stderr, args[1]) || r.stdout != "" {
			t.Errorf("edgehook %s: exit %d, stdout %d bytes, stderr %q; want exit 2 and one line naming %q",
				strings.Join(args, " "), r.code, len(r.stdout), r.stderr, args[1])
		}
	}
}

// TestUpdateHelpShowsNoDefaults: `subscribers update` keeps every setting not given, so its help
// must not announce defaults (rate 10, burst 20, ...) that an update never applies.
func TestUpdateHelpShowsNoDefaults(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	out := c.ok("subscribers", "update", "--help")
	for _, claim := range []string{"(default 10)", "(default 20)", "(default 16)", "(default 8s)", "standard (default)", "direct (default)"} {
		if strings.Contains(out, claim) {
			t.Errorf("subscribers update --help says %q, but update keeps the current value when the flag is left out", claim)
		}
	}
}
