package main_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestOutOfFileDescriptorsIsNotTheSubscribers: shared hosts cap open files (`ulimit -n`).
// A drain that runs out of descriptors cannot even open a socket; that failure is this host's,
// not the subscriber's, and must not cost the delivery an attempt (here --max-attempts 1 makes
// the first counted attempt final), open healthy subscribers' circuits, or dead-letter
// deliveries "until the subscriber is fixed". It used to count as a "connection" failure of
// each subscriber: most deliveries ended dead with "socket: too many open files". It is now held
// as an edge fault is (no attempt, no circuit), and logged as the operator's to fix.
func TestOutOfFileDescriptorsIsNotTheSubscribers(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	// A healthy subscriber that takes a moment, so that sends overlap and need sockets at once.
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(recv.Close)
	for _, id := range []string{"s1", "s2", "s3"} {
		c.ok("subscribers", "add", "--id", id, "--url", recv.URL+"/"+id, "--events", "n.*")
	}
	for i := range 10 {
		c.ok("emit", "--type", "n.x", "--data", fmt.Sprintf(`{"i":%d}`, i))
	}

	// The drain as cron starts it on a host with a low open-files limit.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := []string{"drain", "--until-idle", "--for", "20s", "--max-attempts", "1", "--allow-network", "127.0.0.0/8", "--log-format", "json"}
	cmd := c.command(ctx, args...)
	cmd.Path = "/bin/sh"
	cmd.Args = append([]string{"/bin/sh", "-c", `ulimit -n 20 && exec "$0" "$@"`, bin}, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); ctx.Err() != nil {
		t.Fatalf("drain did not finish within a minute: %s", stderr.String())
	} else if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatal(err)
	}

	var dead struct {
		Deliveries []struct {
			SubscriberID string `json:"subscriber_id"`
			LastError    string `json:"last_error"`
		} `json:"deliveries"`
	}
	c.okJSON(&dead, "dead", "list", "--json")
	if n := len(dead.Deliveries); n > 0 {
		t.Errorf("a drain short of file descriptors dead-lettered %d of 30 deliveries to healthy subscribers, e.g. %s: %q; "+
			"want them left pending (no attempt counted) and one error naming the open-files limit",
			n, dead.Deliveries[0].SubscriberID, dead.Deliveries[0].LastError)
	}
	if strings.Contains(stderr.String(), "circuit opened") {
		t.Errorf("the drain opened healthy subscribers' circuits for its own lack of descriptors:\n%.1500s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "OUT OF FILE DESCRIPTORS") {
		t.Errorf("the drain did not say it ran out of file descriptors:\n%.1500s", stderr.String())
	}
}
