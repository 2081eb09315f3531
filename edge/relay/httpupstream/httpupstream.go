// Package httpupstream is a relay.Upstream over net/http, for native runtimes (the harness host
// and tests). It lives outside package relay so the WASM builds of the core never link net/http.
package httpupstream

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/andybalholm/brotli"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/shared/wire"
)

// Client sends the relay's requests with a transport's RoundTrip, never through an http.Client:
// a redirect is relayed, not followed (the destination comes only from the subscriber's record).
// It reads at most wire.MaxExcerptBytes of the answer.
type Client struct {
	transport http.RoundTripper
}

var _ relay.Upstream = (*Client)(nil)

// New returns a Client over transport (a clone of http.DefaultTransport with
// wire.MaxAnswerHeaderBytes when nil; a caller's own transport should set MaxResponseHeaderBytes
// to it too).
func New(transport http.RoundTripper) *Client {
	if transport == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxResponseHeaderBytes = wire.MaxAnswerHeaderBytes
		transport = tr
	}
	return &Client{transport: transport}
}

// Do POSTs req and returns the subscriber's answer, or an error wrapping relay.ErrUpstreamTimeout
// when req.Timeout or ctx expires before the answer's status and headers arrive, or
// relay.ErrUpstreamBlocked when the transport's dialer refused the address (netguard.Control).
//
// Unless the request names an Accept-Encoding (or a Range) of its own, it asks for gzip. It decodes
// the answer as the Worker's fetch does (decode), even one a record's own Accept-Encoding asked
// for: the excerpt is the subscriber's text, whatever transport sent it.
func (c *Client) Do(ctx context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	// The query as the Worker's fetch sends it (its raw non-ASCII bytes made strict servers answer
	// 400 here where the Worker delivered).
	hreq.URL.RawQuery = wire.RequestQuery(hreq.URL.RawQuery)
	SetHTTP(hreq.Header, req.Header)
	if hreq.Header.Get("Accept-Encoding") == "" && hreq.Header.Get("Range") == "" {
		hreq.Header.Set("Accept-Encoding", "gzip")
	}
	resp, err := c.transport.RoundTrip(hreq)
	if err != nil {
		// In http.Client's words, which name the method and the URL.
		return nil, classify(ctx, &url.Error{Op: "Post", URL: hreq.URL.String(), Err: err})
	}
	defer resp.Body.Close()
	// The subscriber has answered once its status is here: a body that then breaks off or stalls
	// past the timeout, or fails to decode, costs the excerpt only, not the answer (a 2xx must get
	// its dedup mark).
	excerpt, _ := io.ReadAll(io.LimitReader(decode(resp), wire.MaxExcerptBytes))
	return &relay.UpstreamResponse{Status: resp.StatusCode, Header: FromHTTP(resp.Header), Body: excerpt}, nil
}

// decode returns resp's body decoded as workerd's fetch decodes it: only a Content-Encoding of
// exactly "gzip" or "br" (lower case, one coding on one line; br under its compatibility flag
// brotli_content_encoding, on from 2024-04-29, before wrangler.toml's date). Any other is relayed
// as it came: "deflate", "GZIP", stacked codings ("gzip, br"). A body that fails to decode gives
// what decoded before the failure, as the Worker's excerpt does. A decoded answer loses its
// Content-Encoding and Content-Length, as from net/http's own decoding (workerd keeps them; the
// relay reads neither).
func decode(resp *http.Response) io.Reader {
	coding := resp.Header.Values("Content-Encoding")
	if len(coding) != 1 || (coding[0] != "gzip" && coding[0] != "br") {
		return resp.Body
	}
	resp.Header.Del("Content-Encoding")
	resp.Header.Del("Content-Length")
	if coding[0] == "br" {
		return brotli.NewReader(resp.Body)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		return strings.NewReader("") // not gzip after all: nothing decoded
	}
	return zr
}

func classify(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, netguard.ErrBlocked):
		return fmt.Errorf("%w: %v", relay.ErrUpstreamBlocked, err)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%w: %v", relay.ErrUpstreamTimeout, err)
	}
	return err
}
