package main_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/origin/api"
)

// TestRetryAndReplayPastTheQueueCap: `dead replay` and `deliveries retry` that would take the
// queue past --queue-cap exit 1 saying the queue is full, and requeue nothing, as `emit` does
// at the cap; a replay that does not fit whole requeues none.
func TestRetryAndReplayPastTheQueueCap(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("subscribers", "add", "--id", "s", "--url", "https://s.example/hook", "--events", "*")
	for i := range 3 { // a backlog cap of 1 dead-letters all but the last: 2 dead, 1 pending
		c.ok("--backlog-cap", "1", "emit", "--type", "a", "--data", strconv.Itoa(i))
	}
	deadIDs := func() []string {
		t.Helper()
		var page api.DeliveryPage
		c.okJSON(&page, "dead", "list", "--json")
		var ids []string
		for _, d := range page.Deliveries {
			ids = append(ids, d.ID)
		}
		return ids
	}
	refused := func(says string, args ...string) {
		t.Helper()
		r := c.run(append([]string{"--queue-cap", "2"}, args...)...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "queue full") || !strings.Contains(r.stderr, says) {
			t.Fatalf("edgehook --queue-cap 2 %s: exit %d, stdout %q, stderr %q; want exit 1 saying the queue is full, %q",
				strings.Join(args, " "), r.code, r.stdout, r.stderr, says)
		}
	}
	dead := deadIDs()
	if len(dead) != 2 {
		t.Fatalf("dead %v, want 2", dead)
	}
	refused("cannot take 2 more", "dead", "replay", "--subscriber", "s") // at depth 1
	if got := deadIDs(); len(got) != 2 {
		t.Fatalf("a refused replay requeued some: dead %v", got)
	}
	c.ok("--queue-cap", "2", "deliveries", "retry", dead[0])
	refused("cannot take 1 more", "deliveries", "retry", dead[1])
	if got := deadIDs(); len(got) != 1 || got[0] != dead[1] {
		t.Fatalf("dead %v, want %s alone", got, dead[1])
	}
}
