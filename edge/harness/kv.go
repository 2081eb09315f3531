package harness

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// MemKV is an in-memory KV namespace with expiring keys, standing in for a Cloudflare KV
// namespace. It is safe for concurrent use.
type MemKV struct {
	clock relay.Clock

	mu sync.Mutex
	m  map[string]kvEntry
	// sweepAt is the size at which Put next drops expired entries, so a namespace of short-lived
	// marks stays bounded without a background goroutine.
	sweepAt int
}

type kvEntry struct {
	value   string
	expires time.Time // zero: never
}

const minSweep = 1024

var _ relay.KV = (*MemKV)(nil)

// NewMemKV returns an empty namespace whose expirations follow clock.
func NewMemKV(clock relay.Clock) *MemKV {
	return &MemKV{clock: clock, m: map[string]kvEntry{}, sweepAt: minSweep}
}

// Get returns the value under key; an expired key is missing.
func (k *MemKV) Get(_ context.Context, key string) (string, bool, error) {
	now := k.clock.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	e, ok := k.m[key]
	if !ok || e.expired(now) {
		return "", false, nil
	}
	return e.value, true, nil
}

// Put stores value under key for ttl; a ttl of zero or less never expires.
func (k *MemKV) Put(_ context.Context, key, value string, ttl time.Duration) error {
	now := k.clock.Now()
	e := kvEntry{value: value}
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m[key] = e
	if len(k.m) >= k.sweepAt {
		for key, e := range k.m {
			if e.expired(now) {
				delete(k.m, key)
			}
		}
		k.sweepAt = max(minSweep, 2*len(k.m))
	}
	return nil
}

// Len returns the number of keys, expired ones not yet dropped included.
func (k *MemKV) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

// Replace makes entries the whole content of the namespace, as a fresh `wrangler kv bulk put`
// into an empty namespace would.
func (k *MemKV) Replace(entries []wire.BulkEntry) {
	now := k.clock.Now()
	m := make(map[string]kvEntry, len(entries))
	for _, e := range entries {
		ke := kvEntry{value: e.Value}
		if e.ExpirationTTL > 0 {
			ke.expires = now.Add(time.Duration(e.ExpirationTTL) * time.Second)
		}
		m[e.Key] = ke
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.m = m
	k.sweepAt = max(minSweep, 2*len(m))
}

func (e kvEntry) expired(now time.Time) bool { return !e.expires.IsZero() && !now.Before(e.expires) }

// ReadBulkFile reads a `wrangler kv bulk put` file, as `edgehook edge export-kv` writes it.
func ReadBulkFile(path string) ([]wire.BulkEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	entries, err := wire.DecodeBulk(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}
