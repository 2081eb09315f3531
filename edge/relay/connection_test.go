package relay_test

import (
	"context"
	"testing"

	"github.com/edgehook/edgehook/edge/relay"
)

// TestConnectionNominatedHeadersAreNotForwarded: the headers the origin's Connection header names
// are options of the origin's connection to the edge (RFC 9110 §7.6.1, PROTOCOL.md §4): like
// Connection itself, they do not reach the subscriber; the others do.
func TestConnectionNominatedHeadersAreNotForwarded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, plainRecord)
	var got relay.Header
	r := f.relay(t, f.subs, f.dedup, upstreamFunc(func(req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
		got = req.Header
		return ok200(req)
	}))
	resp := r.Handle(context.Background(), f.request("", map[string]string{
		"Webhook-Id": "evt_1", "Connection": "keep-alive, X-Origin-Hop", "X-Origin-Hop": "origin-connection-only",
	}))
	if resp.Status != 200 {
		t.Fatalf("status %d %s", resp.Status, resp.Detail)
	}
	if v, ok := got.Lookup("X-Origin-Hop"); ok {
		t.Errorf("forwarded X-Origin-Hop: %q, a header the origin's Connection header names (hop-by-hop); forwarded %v", v, got)
	}
	if got.Get("webhook-id") != "evt_1" {
		t.Errorf("webhook-id not forwarded: %v", got)
	}
}
