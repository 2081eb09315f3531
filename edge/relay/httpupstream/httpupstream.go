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
// a gzip answer, dropping its Content-Encoding and Content-Length, even one a record's own
// Accept-Encoding asked for, as the Fetch API does: the excerpt is the subscriber's text, whatever
// transport sent it.
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
	var body io.Reader = resp.Body
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		if body, err = gzip.NewReader(resp.Body); err != nil {
			body = strings.NewReader("") // not gzip after all: no excerpt, as from net/http
		}
	}
	// The subscriber has answered once its status is here: a body that then breaks off or stalls
	// past the timeout costs the excerpt only, not the answer (a 2xx must get its dedup mark).
	excerpt, _ := io.ReadAll(io.LimitReader(body, wire.MaxExcerptBytes))
	return &relay.UpstreamResponse{Status: resp.StatusCode, Header: FromHTTP(resp.Header), Body: excerpt}, nil
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
