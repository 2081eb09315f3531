//go:build js && wasm

package main

import (
	"context"
	"fmt"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// fetchUpstream is relay.Upstream over the Workers fetch API, through the loader's io.post: fetch
// has no timeout of its own, so io.post aborts the request (connection and all) when the
// subscriber's timeout expires, covering the headers and the body excerpt alike, and it never
// follows redirects.
type fetchUpstream struct{}

var _ relay.Upstream = fetchUpstream{}

func (fetchUpstream) Do(_ context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	res, err := call("post", req.URL, headerText(req.Header), bytesToJS(req.Body), req.Timeout.Milliseconds(), wire.MaxExcerptBytes)
	if err != nil {
		return nil, err
	}
	// [status, headerText, body excerpt, its length]
	status := res.Index(0).Int()
	if status < 0 {
		return nil, fmt.Errorf("%w (%s)", relay.ErrUpstreamTimeout, req.Timeout)
	}
	return &relay.UpstreamResponse{
		Status: status,
		Header: parseHeaderText(res.Index(1).String()),
		Body:   bytesFromJS(res.Index(2), min(res.Index(3).Int(), wire.MaxExcerptBytes)),
	}, nil
}
