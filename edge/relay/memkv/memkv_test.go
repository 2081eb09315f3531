package memkv_test

import (
	"context"
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
