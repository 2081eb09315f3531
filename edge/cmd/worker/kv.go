//go:build js && wasm

package main

import (
	"context"
	"errors"
	"syscall/js"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
)

// kvStore adapts a Workers KV namespace binding to relay.KV.
type kvStore struct{ ns js.Value }

var _ relay.KV = kvStore{}

func (s kvStore) Get(ctx context.Context, key string) (string, bool, error) {
	r := []relay.KVRead{{KV: s, Key: key}}
	readAll(ctx, r)
	return r[0].Value, r[0].Found, r[0].Err
}

func (s kvStore) Put(_ context.Context, key, value string, ttl time.Duration) error {
	_, err := call("put", s.ns, key, value, int64(ttl/time.Second))
	return err
}

// Result codes of io.getAll, per read.
const (
	readValue   = 0
	readMissing = 1
	readFailed  = 2
)

// readAll is relay.Deps.ReadAll: io.getAll starts every read at once and settles when all have,
// so a request waits for its reads with one call and one resumption.
func readAll(_ context.Context, reads []relay.KVRead) {
	args := make([]any, 0, 2*len(reads))
	for _, r := range reads {
		args = append(args, r.KV.(kvStore).ns, r.Key)
	}
	res, err := call("getAll", args...)
	for i := range reads {
		r := &reads[i]
		switch {
		case err != nil: // io.getAll itself failed; it reports each read's failure otherwise
			r.Err = err
		default:
			switch code, v := res.Index(2*i).Int(), res.Index(2*i+1); code {
			case readValue:
				r.Value, r.Found = v.String(), true
			case readFailed:
				r.Err = errors.New(v.String())
			}
		}
	}
}
