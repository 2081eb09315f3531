// Package testclock is a settable clock for tests of the origin's store and engine, so lease,
// backoff and rate-limit tests advance time instead of sleeping.
package testclock

import (
	"sync"
	"time"
)

// Clock is a goroutine-safe settable clock. Pass its Now method where a func() time.Time is wanted.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's reading.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
