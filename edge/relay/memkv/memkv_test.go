package memkv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/wire"
)

type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func TestExpiry(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := memkv.New(c)
	ctx := context.Background()
	_ = s.Put(ctx, "a", "1", time.Minute)
	_ = s.Put(ctx, "b", "2", 0)
	if v, exp, ok := s.Lookup("a"); !ok || v != "1" || !exp.Equal(c.now.Add(time.Minute)) {
		t.Fatalf("a = %q, %v, %v", v, exp, ok)
	}
	c.now = c.now.Add(time.Minute - time.Nanosecond)
	if _, ok, _ := s.Get(ctx, "a"); !ok {
		t.Error("a expired early")
	}
	c.now = c.now.Add(time.Nanosecond)
	if _, ok, _ := s.Get(ctx, "a"); ok {
		t.Error("a outlived its TTL")
	}
	if v, ok, _ := s.Get(ctx, "b"); !ok || v != "2" {
		t.Errorf("b (no TTL) = %q, %v", v, ok)
	}
}

func TestLoadBulk(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := memkv.New(c)
	s.LoadBulk([]wire.BulkEntry{{Key: "sub:a", Value: "{}"}, {Key: "d:x", Value: "1", ExpirationTTL: 60}})
	if _, exp, ok := s.Lookup("sub:a"); !ok || !exp.IsZero() {
		t.Errorf("sub:a: %v %v", exp, ok)
	}
	if _, exp, ok := s.Lookup("d:x"); !ok || !exp.Equal(c.now.Add(time.Minute)) {
		t.Errorf("d:x: %v %v", exp, ok)
	}
}

// TestExpiredMarksAreDropped: the local edge writes a dedup mark for every delivery, each under a
// new key that is never read again. Expired marks must not stay in memory for good, or a
// long-running `edgehook edge local` grows with every delivery it ever made.
func TestExpiredMarksAreDropped(t *testing.T) {
	t.Parallel()
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := memkv.New(c)
	ctx := context.Background()
	_ = s.Put(ctx, "sub:a", "{}", 0) // no TTL: kept
	for day := range 10 {
		for i := range 10_000 {
			_ = s.Put(ctx, fmt.Sprintf("d:%d_%d", day, i), "1", 24*time.Hour)
		}
		c.now = c.now.Add(25 * time.Hour)
	}
	if n := s.Len(); n > 2*10_000+1 {
		t.Errorf("%d items held after 10 days of 10,000 marks a day living a day each, want at most a day's and a bit", n)
	}
	if _, ok, _ := s.Get(ctx, "sub:a"); !ok {
		t.Error("a key without TTL was dropped")
	}
}
