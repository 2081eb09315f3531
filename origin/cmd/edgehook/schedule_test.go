package main

import (
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestDefaultRetriesSpreadOverTheMaxAge: at the defaults serve and drain run with, a delivery to a
// subscriber that stays down is tried over hours, as webhook senders in the field do, and its
// last attempt still comes before --max-age. The defaults of --backoff-base 2s and
// --max-attempts 10 dead-lettered it after 8.5 minutes on average: a subscriber's deploy of
// twenty minutes lost every delivery. A property of the defaults, not a timing test: with full
// jitter a wait averages half its ceiling (Config.BackoffCeiling).
func TestDefaultRetriesSpreadOverTheMaxAge(t *testing.T) {
	var ef engineFlags
	ef.register(pflag.NewFlagSet("serve", pflag.ContinueOnError))
	c, err := ef.config()
	if err != nil {
		t.Fatal(err)
	}
	var ceilings time.Duration
	for attempts := range c.MaxAttempts - 1 { // the wait after each attempt but the last
		ceilings += c.BackoffCeiling(attempts)
	}
	// The latest the last attempt ends: every wait at its ceiling, every send cut at 3/4 lease.
	mean, latest := ceilings/2, ceilings+time.Duration(c.MaxAttempts)*c.LeaseDuration*3/4
	if mean < c.MaxAge/4 || latest > c.MaxAge {
		t.Errorf("%d attempts, backoff base %s, cap %s: the waits sum to %s on average, the last attempt ends %s at most after the first; want at least %s and at most --max-age %s",
			c.MaxAttempts, c.BackoffBase, c.BackoffCap, mean, latest, c.MaxAge/4, c.MaxAge)
	}
}
