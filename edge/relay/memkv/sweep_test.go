package memkv

import (
	"context"
	"fmt"
	"testing"
	"time"
)

type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time { return c.now }

// TestExpiredMarksAreDropped: the local edge writes a dedup mark for every delivery, each under a
// new key that is never read again. Expired marks must not stay in memory for good, or a
// long-running `edgehook edge local` grows with every delivery it ever made.
func TestExpiredMarksAreDropped(t *testing.T) {
	t.Parallel()
	c := &stepClock{now: time.Unix(1_800_000_000, 0)}
	s := New(c)
	ctx := context.Background()
	_ = s.Put(ctx, "sub:a", "{}", 0) // no TTL: kept
	for day := range 10 {
		for i := range 10_000 {
			_ = s.Put(ctx, fmt.Sprintf("d:%d_%d", day, i), "1", 24*time.Hour)
		}
		c.now = c.now.Add(25 * time.Hour)
	}
	s.mu.Lock()
	n := len(s.items)
	s.mu.Unlock()
	if n > 2*10_000+1 {
		t.Errorf("%d items held after 10 days of 10,000 marks a day living a day each, want at most a day's and a bit", n)
	}
	if _, ok, _ := s.Get(ctx, "sub:a"); !ok {
		t.Error("a key without TTL was dropped")
	}
}
