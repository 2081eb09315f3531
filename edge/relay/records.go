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
	// compares raw with it instead of hashing raw for the map (a loop over its bytes in WASM).
	lastRaw string
	last    *wire.SubscriberRecord
}

// decode returns wire.DecodeSubscriberRecord(raw), from the cache when raw was decoded before.
// Records that do not decode are not cached, so the error is reported every time.
func (c *recordCache) decode(raw string) (*wire.SubscriberRecord, error) {
	c.mu.Lock()
	rec, ok := c.last, c.last != nil && c.lastRaw == raw
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
