package engine

import (
	"fmt"
	"net/http"
	"net/netip"
	"slices"

	"github.com/edgehook/edgehook/internal/netguard"
)

// NewDirectTransport returns the http.RoundTripper direct-mode deliveries are sent with: plain-http
// requests with a body of known size up to 8 KiB and an ASCII host go out on the caller's
// goroutine over HTTP/1.1 keep-alive connections (h1.Transport, on platforms where it can peek at
// an idle connection); https and every other request go through net/http's Transport. Its idle
// connections are closed with its CloseIdleConnections method (assert interface{
// CloseIdleConnections() }). Its dialer refuses loopback, private and other internal addresses
// that are not in allow, as the engine's does with Config.AllowNetworks, and it keeps at most
// maxIdlePerHost idle connections per host (the engine keeps Config.Workers).
//
// It is exported for the benchmark: issue 7's ceiling is raw POSTs "from the same client code" as
// the deliveries, so bench's ceiling client sends through this rather than through a copy or
// through net/http's slower Transport. Use it as the engine does: call RoundTrip directly (an
// http.Client would follow redirects, which deliveries never do), bound each request with its
// context, and read each answer's body to the end and close it so its connection is reused.
func NewDirectTransport(allow []netip.Prefix, maxIdlePerHost int) (http.RoundTripper, error) {
	if maxIdlePerHost < 1 {
		return nil, fmt.Errorf("maxIdlePerHost: %d, want at least 1", maxIdlePerHost)
	}
	return newTransport(netguard.Control(slices.Clone(allow)), maxIdlePerHost), nil
}
