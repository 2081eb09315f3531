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

// minSweep is the smallest number of buckets at which the pacer looks for some to forget.
const minSweep = 1024

// pacer spaces each subscriber's sends by its token bucket on the clock of the sends themselves.
// The store spends the bucket when it leases deliveries, which keeps claims within it; but a
// claimed delivery is sent after a scheduling delay that varies from one send to the next, so a
// send delayed more than a later one would bring the two closer together than the bucket allows.
// The pacer holds such a send back by that difference. It is this process's own view: with no
// jitter it never waits, since the store already spaced the claims.
type pacer struct {
	mu      sync.Mutex
	buckets map[string]*bucket // by subscriber id
	sweepAt int                // forget full buckets once there are this many
}

// bucket is a token bucket whose tokens may go negative: a reservation waits for them.
type bucket struct {
	tokens, rate, burst float64
	at                  time.Time
}

func newPacer() *pacer { return &pacer{buckets: map[string]*bucket{}, sweepAt: minSweep} }

// reserve takes a token of sub's bucket at now and returns how long to wait before sending.
func (p *pacer) reserve(sub *store.Subscriber, now time.Time) time.Duration {
	if sub.RatePerSec <= 0 {
		return 0 // the store refuses such a rate; nothing to pace by
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.buckets[sub.ID]
	if b == nil {
		p.sweep(now)
		b = &bucket{tokens: float64(sub.Burst), at: now}
		p.buckets[sub.ID] = b
	}
	b.rate, b.burst = sub.RatePerSec, float64(sub.Burst) // the subscriber's latest limits
	b.tokens = b.level(now)
	// A reading older than the bucket's is a send scheduled late (milliseconds), or, older than
	// any wait the pacer hands out, a clock set back: then the bucket refills from now on, or it
	// would hold every send back until the clock had caught up.
	if now.After(b.at) || b.at.Sub(now) > maxPace {
		b.at = now
	}
	b.tokens = max(b.tokens, -b.rate*maxPace.Seconds()) - 1
	if b.tokens >= 0 {
		return 0
	}
	return min(maxPace, time.Duration(-b.tokens/b.rate*float64(time.Second)))
}

// level is the bucket's tokens refilled up to now, at most its burst.
func (b *bucket) level(now time.Time) float64 {
	if !now.After(b.at) {
		return min(b.tokens, b.burst)
	}
	return min(b.burst, b.tokens+b.rate*now.Sub(b.at).Seconds())
}

// sweep keeps the map bounded as subscribers come and go: a bucket refilled to its burst is the
// same as none. It runs when the map reaches sweepAt, which then doubles past what is left, so
// the cost per reservation stays constant.
func (p *pacer) sweep(now time.Time) {
	if len(p.buckets) < p.sweepAt {
		return
	}
	for id, b := range p.buckets {
		if b.level(now) >= b.burst {
			delete(p.buckets, id)
		}
	}
	p.sweepAt = max(minSweep, 2*len(p.buckets))
}
