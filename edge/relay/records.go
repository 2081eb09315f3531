package relay

import (
	"sync"

	"github.com/edgehook/edgehook/shared/wire"
)

// maxCachedRecords bounds the decoded-record cache; when full it starts over.
const maxCachedRecords = 256

// recordCache remembers decoded subscriber records by their exact KV value: decoding is half of
// the relay's CPU per request, and a Worker isolate sees the same few records again and again.
// The cached records are shared and never modified.
type recordCache struct {
	mu      sync.Mutex
	records map[string]*wire.SubscriberRecord
	// last is the record found last and its raw value: a run of deliveries to one subscriber
	// compares raw with it (sameString) instead of hashing raw for the map (a loop over its bytes
	// in WASM).
	lastRaw string
	last    *wire.SubscriberRecord
}

// decode returns wire.DecodeSubscriberRecord(raw), from the cache when raw was decoded before.
// Records that do not decode are not cached, so the error is reported every time.
func (c *recordCache) decode(raw string) (*wire.SubscriberRecord, error) {
	c.mu.Lock()
	rec, ok := c.last, c.last != nil && sameString(c.lastRaw, raw)
	if !ok {
		if rec, ok = c.records[raw]; ok {
			c.lastRaw, c.last = raw, rec
		}
	}
	c.mu.Unlock()
	if ok {
		return rec, nil
	}
	rec, err := wire.DecodeSubscriberRecord([]byte(raw))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.records) >= maxCachedRecords || c.records == nil {
		c.records = make(map[string]*wire.SubscriberRecord)
	}
	c.records[raw] = rec
	c.lastRaw, c.last = raw, rec
	c.mu.Unlock()
	return rec, nil
}

// sameString reports whether a == b, eight bytes at a time: in the WASM builds == is a call of
// memeqbody, a loop over single bytes, whereas the eight byte loads of load64 compile to one.
func sameString(a, b string) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	if n < 8 {
		return a == b
	}
	for i := 0; i < n-8; i += 8 {
		if load64(a[i:]) != load64(b[i:]) {
			return false
		}
	}
	return load64(a[n-8:]) == load64(b[n-8:]) // the last eight bytes, overlapping the loop's
}

// load64 returns s's first eight bytes as one little-endian number.
func load64(s string) uint64 {
	s = s[:8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
