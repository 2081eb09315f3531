package harness_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/origin/engine"
	"github.com/edgehook/edgehook/shared/wire"
)

// TestAnAnswerTheOriginReadsDirectlyItReadsThroughTheEdge: the origin reads at most
// wire.MaxAnswerHeaderBytes of an answer's head, from a subscriber as from the edge. A subscriber
// whose head fits, one long header being its Retry-After or its Content-Type, must give an edge
// answer that fits too: otherwise the origin cannot read it and takes the subscriber's answer for
// a broken edge (edge_unreachable: not counted, the operator blamed, the subscriber's circuit
// untouched), where sent directly the same answer is the subscriber's failure.
func TestAnAnswerTheOriginReadsDirectlyItReadsThroughTheEdge(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"Retry-After", "Content-Type"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// A head of exactly the limit: the status line, the one long header and Content-Length.
			const status, length = "HTTP/1.1 503 Service Unavailable\r\n", "Content-Length: 4\r\n\r\n"
			long := strings.Repeat("9", wire.MaxAnswerHeaderBytes-len(status)-len(name)-len(": \r\n")-len(length))
			head := status + name + ": " + long + "\r\n" + length
			sub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				c, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				_, _ = buf.WriteString(head + "busy")
				_ = buf.Flush()
			}))
			defer sub.Close()
			loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
			origin, err := engine.NewDirectTransport(loopback, 1) // the origin's sends, direct and to the edge
			if err != nil {
				t.Fatal(err)
			}

			direct, _ := http.NewRequest("POST", sub.URL, strings.NewReader("{}"))
			resp, err := origin.RoundTrip(direct)
			if err != nil {
				t.Fatalf("sent directly, the origin cannot read the subscriber's answer: %v", err)
			}
			resp.Body.Close()

			e := newHost(t, harness.NewUpstream(loopback), 1, 10*time.Second)
			e.addSubscriber(t, "sub_long", sub.URL+"/hook")
			edge := httptest.NewServer(harness.NewHandler(e.host, relayConfig().MaxBody, quiet))
			defer edge.Close()
			r := signedRequest("del_long_"+strings.ToLower(name), "sub_long", []byte("{}"), time.Now())
			hop, _ := http.NewRequest("POST", edge.URL, bytes.NewReader(r.Body))
			for _, f := range r.Header {
				hop.Header.Set(f.Name, f.Value)
			}
			resp, err = origin.RoundTrip(hop)
			if err != nil {
				t.Fatalf("through the edge, the origin cannot read the answer: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 503 || resp.Header.Get(wire.HeaderOutcome) != string(wire.OutcomeForwarded) {
				t.Errorf("got %d %q, want 503 forwarded", resp.StatusCode, resp.Header.Get(wire.HeaderOutcome))
			}
		})
	}
}
