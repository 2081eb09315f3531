// Package httpupstream is a relay.Upstream over net/http, for native runtimes (the harness host
// and tests). It lives outside package relay so the WASM builds of the core never link net/http.
package httpupstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// Client sends the relay's requests with an http.Client that never follows redirects (the
// destination comes only from the subscriber's record) and reads at most wire.MaxExcerptBytes of
// the answer.
type Client struct {
	http *http.Client
}

var _ relay.Upstream = (*Client)(nil)

// MaxHeaderBytes bounds a subscriber's status line and headers, as workerd's fetch does (it fails
// on a response head over 128 KiB): an answer the Worker cannot read is unreachable here too, and
// the excerpt's few headers never cost the harness's module instances megabytes.
const MaxHeaderBytes = 128 << 10

// New returns a Client over transport (a clone of http.DefaultTransport with MaxHeaderBytes when
// nil; a caller's own transport should set MaxResponseHeaderBytes to it too).
func New(transport http.RoundTripper) *Client {
	if transport == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxResponseHeaderBytes = MaxHeaderBytes
		transport = tr
	}
	return &Client{http: &http.Client{
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Do POSTs req and returns the subscriber's answer, or an error wrapping relay.ErrUpstreamTimeout
// when req.Timeout or ctx expires before the answer's status and headers arrive.
func (c *Client) Do(ctx context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	for _, f := range req.Header {
		hreq.Header.Set(f.Name, f.Value)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer resp.Body.Close()
	// The subscriber has answered once its status is here: a body that then breaks off or stalls
	// past the timeout costs the excerpt only, not the answer (a 2xx must get its dedup mark).
	body, _ := io.ReadAll(io.LimitReader(resp.Body, wire.MaxExcerptBytes))
	h := make(relay.Header, 0, len(resp.Header))
	for k, vs := range resp.Header {
		h.Set(k, strings.Join(vs, ", "))
	}
	return &relay.UpstreamResponse{Status: resp.StatusCode, Header: h, Body: body}, nil
}

func classify(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %v", relay.ErrUpstreamTimeout, err)
	}
	return err
}
