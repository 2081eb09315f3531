package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/internal/h1"
	"github.com/edgehook/edgehook/internal/rawserve"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// bigHeadServer answers every request on loopback with a 200 whose head carries n small headers
// (about 10 bytes each), then closes the connection. Every write has a deadline, so the server
// stops by itself when the client gives up.
func bigHeadServer(t *testing.T, n int) string {
	t.Helper()
	ln := rawserve.Listen(t)
	rawserve.Each(t, ln, func(c net.Conn) {
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		w := bufio.NewWriterSize(c, 64<<10)
		io.WriteString(w, "HTTP/1.1 200 OK\r\n")
		for i := range n {
			fmt.Fprintf(w, "X%d: y\r\n", i)
		}
		io.WriteString(w, "Content-Length: 0\r\nConnection: close\r\n\r\n")
		w.Flush()
	})
	return "http://" + ln.Addr().String() + "/"
}

// TestDirectModeBoundsTheAnswerHeadLikeTheEdge: a subscriber's endpoint decides how large its
// answer's head is. The edge refuses a head over wire.MaxAnswerHeaderBytes (128 KiB, workerd's
// limit: "upstream_unreachable"); direct mode read up to net/http's default of 10 MiB per send,
// about 600,000 one-line headers, which cost the origin ~110 MiB of allocations and ~65 MiB live
// per send, with up to --workers (256) sends in flight: a hostile endpoint could run the origin
// out of memory. Such an answer is now a connection failure, as through the edge.
func TestDirectModeBoundsTheAnswerHeadLikeTheEdge(t *testing.T) {
	e := newEnv(t, Config{})
	u := bigHeadServer(t, 40_000) // ~330 KiB of headers: over the edge's limit, far under 10 MiB
	e.sub(store.SubscriberInput{URL: u, TimeoutMS: 5000})
	e.emit("e1", "t", `{}`)
	e.drain()
	d := e.only()
	if d.Status == store.StatusDelivered {
		t.Fatalf("an answer with a %d KiB head was taken as delivered; the edge refuses a head over %d KiB (upstream_unreachable)",
			40_000*9>>10, wire.MaxAnswerHeaderBytes>>10)
	}
	if a := d.AttemptLog[0]; a.Outcome != classConnection || a.Status != 0 {
		t.Fatalf("attempt %+v: want a %s failure without a status, as the edge's upstream_unreachable", a, classConnection)
	}
}

// TestDirectTransportAnswerHeadMemoryIsBounded: the memory one answer's head costs the origin is
// bounded by far less than the 10 MiB default.
func TestDirectTransportAnswerHeadMemoryIsBounded(t *testing.T) {
	u := bigHeadServer(t, 600_000) // ~6.5 MiB of headers
	rt, err := NewDirectTransport(loopback, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.(*h1.Transport).CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	resp, err := rt.RoundTrip(req)
	runtime.ReadMemStats(&after)
	if err == nil {
		resp.Body.Close()
	}
	const bound = 16 << 20
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > bound {
		t.Fatalf("one answer (err %v) allocated %d MiB in the origin, want at most %d MiB", err, alloc>>20, bound>>20)
	}
}
