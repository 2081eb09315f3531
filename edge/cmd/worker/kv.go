//go:build js && wasm

package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
)

// kvStore adapts a Workers KV namespace binding, named as in wrangler.toml, to relay.KV. The
// loader finds the namespace in the isolate's env by that name.
type kvStore struct{ binding string }

var _ relay.KV = kvStore{}

func (s kvStore) Get(ctx context.Context, key string) (string, bool, error) {
	r := []relay.KVRead{{KV: s, Key: key}}
	readAll(ctx, r)
	return r[0].Value, r[0].Found, r[0].Err
}

func (s kvStore) Put(ctx context.Context, key, value string, ttl time.Duration) error {
	args := pack(nil, s.binding, key, value)
	_, err := call(ioPut, addr(args), len(args), int64(ttl/time.Second), waitMs(ctx))
	runtime.KeepAlive(args)
	return err
}

// Result codes of io.getAll, per read: the first item of each read's two.
const (
	readValue   = "0"
	readMissing = "1"
	readFailed  = "2"
)

// waitMs is how long the loader waits for a KV call in ctx before failing it: until ctx's
// deadline (relay.KVTimeout), in whole milliseconds, at least 1; 0 (no limit) without a deadline.
// The loader, not Go, keeps the time, so that each operation still settles exactly once.
func waitMs(ctx context.Context) int64 {
	d, ok := ctx.Deadline()
	if !ok {
		return 0
	}
	return max(1, time.Until(d).Milliseconds())
}

// readAll is relay.Deps.ReadAll: io.getAll starts every read at once and settles when all have
// (or have failed, a read that stalls past ctx's deadline among them), so a request waits for its
// reads with one call and one resumption.
func readAll(ctx context.Context, reads []relay.KVRead) {
	args := make([]byte, 0, 128)
	for _, r := range reads {
		args = pack(args, r.KV.(kvStore).binding, r.Key)
	}
	res, err := call(ioGetAll, addr(args), len(args), waitMs(ctx))
	runtime.KeepAlive(args)
	for i := range reads {
		r := &reads[i]
		if err != nil { // io.getAll itself failed; it reports each read's failure otherwise
			r.Err = err
			continue
		}
		code, _ := nextItem(&res)
		v, _ := nextItem(&res)
		switch code {
		case readValue:
			r.Value, r.Found = v, true
		case readMissing:
		case readFailed:
			r.Err = errors.New(v)
		default:
			r.Err = fmt.Errorf("io.getAll: result code %q", code)
		}
	}
}
