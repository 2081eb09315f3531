//go:build js && wasm

package main

import (
	"context"
	"syscall/js"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
)

// kvStore adapts a Workers KV namespace binding to relay.KV.
type kvStore struct{ ns js.Value }

var _ relay.KV = kvStore{}

func (s kvStore) Get(_ context.Context, key string) (string, bool, error) {
	v, err := await(s.ns.Call("get", key))
	if err != nil || v.IsNull() || v.IsUndefined() { // null: a missing or expired key
		return "", false, err
	}
	return v.String(), true, nil
}

func (s kvStore) Put(_ context.Context, key, value string, ttl time.Duration) error {
	opts := js.Global().Get("Object").New()
	opts.Set("expirationTtl", int64(ttl/time.Second))
	_, err := await(s.ns.Call("put", key, value, opts))
	return err
}
