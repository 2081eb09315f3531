//go:build js && wasm

package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"syscall/js"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// fetchUpstream is relay.Upstream over the Workers fetch API. Fetch has no timeout of its own, so
// Do arms a timer that aborts the request (connection and all) when the subscriber's timeout
// expires, covering the headers and the body excerpt alike.
type fetchUpstream struct{}

var _ relay.Upstream = fetchUpstream{}

func (fetchUpstream) Do(ctx context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	abort := jsAbort.New()
	var timedOut atomic.Bool
	stop := afterFunc(req.Timeout, func() {
		timedOut.Store(true)
		abort.Call("abort")
	})
	defer stop()
	resp, err := doFetch(abort.Get("signal"), req)
	if err != nil && (timedOut.Load() || ctx.Err() != nil) {
		return nil, fmt.Errorf("%w (%s): %v", relay.ErrUpstreamTimeout, req.Timeout, err)
	}
	return resp, err
}

func doFetch(signal js.Value, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	headers := jsHeaders.New()
	for k, v := range req.Header {
		headers.Call("set", k, v)
	}
	body := jsUint8Array.New(len(req.Body))
	js.CopyBytesToJS(body, req.Body)
	init := jsObject.New()
	init.Set("method", "POST")
	init.Set("headers", headers)
	init.Set("body", body)
	init.Set("redirect", "manual") // the destination comes only from the record
	init.Set("signal", signal)
	res, err := await(jsFetch.Invoke(req.URL, init))
	if err != nil {
		return nil, err
	}
	out := &relay.UpstreamResponse{Status: res.Get("status").Int(), Header: relay.Header{}}
	entries := jsArray.Call("from", res.Get("headers")) // [[name, value], ...]
	for i, n := 0, entries.Length(); i < n; i++ {
		e := entries.Index(i)
		out.Header[e.Index(0).String()] = e.Index(1).String()
	}
	out.Body, err = readExcerpt(res)
	return out, err
}

// readExcerpt reads at most wire.MaxExcerptBytes of a response body: in one go when the
// subscriber declared a length that fits, else from the stream, cancelling the rest.
func readExcerpt(res js.Value) ([]byte, error) {
	stream := res.Get("body")
	if stream.IsNull() {
		return nil, nil
	}
	if n, err := strconv.Atoi(res.Get("headers").Call("get", "content-length").String()); err == nil && n <= wire.MaxExcerptBytes {
		buf, err := await(res.Call("arrayBuffer"))
		if err != nil {
			return nil, err
		}
		out := make([]byte, min(buf.Get("byteLength").Int(), wire.MaxExcerptBytes))
		js.CopyBytesToGo(out, jsUint8Array.New(buf))
		return out, nil
	}
	reader := stream.Call("getReader")
	var out []byte
	for len(out) < wire.MaxExcerptBytes {
		chunk, err := await(reader.Call("read"))
		if err != nil {
			return nil, err
		}
		if chunk.Get("done").Bool() {
			return out, nil
		}
		v := chunk.Get("value")
		buf := make([]byte, v.Get("byteLength").Int())
		js.CopyBytesToGo(buf, v)
		out = append(out, buf...)
	}
	reader.Call("cancel")
	return out[:wire.MaxExcerptBytes], nil
}
