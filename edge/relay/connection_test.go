package relay_test

import "testing"

// TestConnectionNominatedHeadersAreNotForwarded: the headers the origin's Connection header names
// are options of the origin's connection to the edge (RFC 9110 §7.6.1, PROTOCOL.md §4): like
// Connection itself, they do not reach the subscriber; the others do.
func TestConnectionNominatedHeadersAreNotForwarded(t *testing.T) {
	t.Parallel()
	got, resp := newFixture(t, plainRecord).forward(t, map[string]string{
		"Webhook-Id": "evt_1", "Connection": "keep-alive, X-Origin-Hop", "X-Origin-Hop": "origin-connection-only",
	})
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
