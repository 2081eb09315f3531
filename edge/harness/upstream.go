package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// drainLimit is how much of a subscriber's body past the excerpt is read and thrown away so the
// connection can be reused; a longer body costs a new connection instead of unbounded reading.
const drainLimit = 64 << 10

// HTTPUpstream sends the relay's requests to subscribers over real HTTP.
type HTTPUpstream struct {
	client *http.Client
}

var _ relay.Upstream = (*HTTPUpstream)(nil)

// NewHTTPUpstream returns an upstream with its own connection pool. Like the Worker's fetch with
// redirect "manual", it does not follow redirects: a 3xx is the subscriber's answer.
func NewHTTPUpstream() *HTTPUpstream {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // the Worker's fetch knows no proxy either
	tr.MaxIdleConnsPerHost = 64
	return &HTTPUpstream{client: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Do POSTs req, giving up after req.Timeout (or when ctx ends) with an error wrapping
// relay.ErrUpstreamTimeout. It reads at most wire.MaxExcerptBytes of the answer's body.
func (u *HTTPUpstream) Do(ctx context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		return nil, fmt.Errorf("subscriber URL: %w", err)
	}
	for name, value := range req.Header {
		hreq.Header.Set(name, value)
	}
	start := time.Now()
	resp, err := u.client.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: no answer after %s: %v", relay.ErrUpstreamTimeout, time.Since(start).Round(time.Millisecond), err)
		}
		return nil, err
	}
	defer resp.Body.Close()
	// A body cut short by the timeout still leaves a valid status: keep what arrived.
	body, _ := io.ReadAll(io.LimitReader(resp.Body, wire.MaxExcerptBytes))
	_, _ = io.CopyN(io.Discard, resp.Body, drainLimit)
	return &relay.UpstreamResponse{Status: resp.StatusCode, Header: fromHTTPHeader(resp.Header), Body: body}, nil
}

// fromHTTPHeader converts to the relay's lower-case map, joining repeated headers with ", " as
// the Fetch API does.
func fromHTTPHeader(h http.Header) relay.Header {
	out := make(relay.Header, len(h))
	for name, values := range h {
		out[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	return out
}

// errTimeout tells whether err is a timeout the relay should see as relay.ErrUpstreamTimeout.
func errTimeout(err error) bool {
	return errors.Is(err, relay.ErrUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded)
}
