// Package memkv is an in-memory relay.KV with expirations, for the local harness and tests. It
// loads the same `wrangler kv bulk put` files as Cloudflare KV.
package memkv

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/shared/wire"
)

// Store is a KV namespace in memory. It is safe for concurrent use.
type Store struct {
	clock relay.Clock
	mu    sync.Mutex
	items map[string]item
	// sweepAt is the size at which Put next drops expired items: a dedup mark's key is never
	// read again, so expiring only on lookup would keep every mark a long-running edge ever wrote.
	// Twice the size after each sweep, so sweeps cost O(1) per Put.
	sweepAt int
}

// minSweep is the smallest sweepAt.
const minSweep = 1024

type item struct {
	value   string
	expires time.Time // zero: never
}

var _ relay.KV = (*Store)(nil)

// New returns an empty Store whose expirations follow clock.
func New(clock relay.Clock) *Store {
	return &Store{clock: clock, items: map[string]item{}}
}

// Get returns the value under key unless it is missing or expired.
func (s *Store) Get(_ context.Context, key string) (string, bool, error) {
	v, _, ok := s.Lookup(key)
	return v, ok, nil
}

// Put stores copies of key and value (the relay's may be memory it reuses); a ttl of zero or less
// means no expiration.
func (s *Store) Put(_ context.Context, key, value string, ttl time.Duration) error {
	key, value = strings.Clone(key), strings.Clone(value)
	it := item{value: value}
	if ttl > 0 {
		it.expires = s.clock.Now().Add(ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.items[key] = it
	if len(s.items) >= s.sweepAt {
		now := s.clock.Now()
		for k, it := range s.items {
			if !it.expires.IsZero() && !now.Before(it.expires) {
				delete(s.items, k)
			}
		}
		s.sweepAt = max(2*len(s.items), minSweep)
	}
	return nil
}

// Lookup returns the value and expiration (zero for none) of key unless it is missing or expired.
func (s *Store) Lookup(key string) (value string, expires time.Time, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	it, ok := s.items[key]
	if !ok {
		return "", time.Time{}, false
	}
	if !it.expires.IsZero() && !s.clock.Now().Before(it.expires) {
		delete(s.items, key)
		return "", time.Time{}, false
	}
	return it.value, it.expires, true
}

// LoadBulk stores the entries of a `wrangler kv bulk put` file (see wire.DecodeBulk).
func (s *Store) LoadBulk(entries []wire.BulkEntry) {
	for _, e := range entries {
		_ = s.Put(context.Background(), e.Key, e.Value, time.Duration(e.ExpirationTTL)*time.Second)
	}
}
