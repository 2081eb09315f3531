package engine

import (
	"sync"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// maxPace bounds how long the pacer holds a send back. Its waits make up for scheduling delays
// (milliseconds); a longer one would mean its buckets disagree with the store's (a subscriber's
// limits just changed), and the store's, spent at claim, is the limit.
const maxPace = time.Second

// pacer spaces each subscriber's sends by its token bucket on the clock of the sends themselves.
// The store spends the bucket when it leases deliveries, which keeps claims within it; but a
// claimed delivery is sent after a scheduling delay that varies from one send to the next, so a
// send delayed more than a later one would bring the two closer together than the bucket allows.
// The pacer holds such a send back by that difference. It is this process's own view: with no
// jitter it never waits, since the store already spaced the claims.
type pacer struct {
	mu      sync.Mutex
	buckets map[string]*bucket // by subscriber id
}

// bucket is a token bucket whose tokens may go negative: a reservation waits for them.
type bucket struct {
	tokens float64
	at     time.Time
}

func newPacer() *pacer { return &pacer{buckets: map[string]*bucket{}} }

// reserve takes a token of sub's bucket at now and returns how long to wait before sending.
func (p *pacer) reserve(sub *store.Subscriber, now time.Time) time.Duration {
	if sub.RatePerSec <= 0 {
		return 0 // the store refuses such a rate; nothing to pace by
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	burst := float64(sub.Burst)
	b := p.buckets[sub.ID]
	if b == nil {
		b = &bucket{tokens: burst, at: now}
		p.buckets[sub.ID] = b
	}
	if now.After(b.at) {
		b.tokens = min(burst, b.tokens+sub.RatePerSec*now.Sub(b.at).Seconds())
		b.at = now
	}
	b.tokens = max(b.tokens, -sub.RatePerSec*maxPace.Seconds()) - 1
	if b.tokens >= 0 {
		return 0
	}
	return min(maxPace, time.Duration(-b.tokens/sub.RatePerSec*float64(time.Second)))
}
