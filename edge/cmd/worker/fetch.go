//go:build js && wasm

package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// fetchUpstream is relay.Upstream over the Workers fetch API, through the loader's io.post: fetch
// has no timeout of its own, so io.post aborts the request (connection and all) when the
// subscriber's timeout expires, a timeout before the status arrives and a shorter excerpt after,
// and it never follows redirects.
type fetchUpstream struct{}

var _ relay.Upstream = fetchUpstream{}

func (fetchUpstream) Do(_ context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	headers := headerText(req.Header)
	res, err := call(ioPost, strAddr(req.URL), len(req.URL), strAddr(headers), len(headers),
		addr(req.Body), len(req.Body), req.Timeout.Milliseconds(), wire.MaxExcerptBytes)
	runtime.KeepAlive(req)
	runtime.KeepAlive(headers)
	if err != nil {
		return nil, err
	}
	// [status, headerText, body excerpt or null]
	s, _ := nextItem(&res)
	h, _ := nextItem(&res)
	body, _ := nextItem(&res)
	status, err := strconv.Atoi(s)
	if err != nil {
		return nil, fmt.Errorf("io.post: status %q", s)
	}
	if status < 0 {
		return nil, fmt.Errorf("%w (%s)", relay.ErrUpstreamTimeout, req.Timeout)
	}
	// The body is the loader's excerpt: at most wire.MaxExcerptBytes.
	return &relay.UpstreamResponse{Status: status, Header: parseHeaderText(h), Body: []byte(body)}, nil
}
