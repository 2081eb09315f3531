// Package httpserve holds the bounds every edgehook HTTP server puts on its clients: serve's API,
// the local edge (`edgehook edge local`), and dev's API, edge and sample receivers. Without a read
// bound, a client that sent a head and stalled in the body held its connection, a goroutine and a
// buffer of its Content-Length for ever.
package httpserve

import (
	"net/http"
	"time"
)

const (
	// ReadHeaderTimeout bounds the reading of a request's head.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a keep-alive connection idle this long: longer than the origin keeps its
	// own idle connections (90 s), so that the origin closes one first rather than send a request
	// on a connection the server is closing.
	IdleTimeout = 2 * time.Minute
)

// ReadTimeout bounds the reading of a request, head and body, whose body may be up to limit bytes:
// a minute, and a second more per MiB, so the largest body allowed is not cut off from a client
// uploading at 1 MiB/s (a 100 MiB body needed 1.7 MB/s within a flat minute). The second per MiB
// stops at 2^20 (about 12 days), so no limit overflows it into no bound at all.
func ReadTimeout(limit int64) time.Duration {
	return time.Minute + time.Duration(min(limit>>20, 1<<20))*time.Second
}

// New returns a server for h, whose request bodies may be up to bodyLimit bytes, with the bounds
// above.
func New(h http.Handler, bodyLimit int64) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout(bodyLimit), IdleTimeout: IdleTimeout}
}
