package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// TestAReplayedCoalescedDeliveryIsNotSentAfterANewerOne: a coalesced delivery in flight when a
// newer event with its key is emitted is marked (newer_event) so that it is not queued again
// behind the newer one. If it dies instead (max attempts), or if the backlog cap dead-letters an
// older coalesced delivery, a replay of the dead (ReplayDead, RetryDelivery) must not queue it
// again either: the newer event with its key has been sent since, and the older one sent after it
// would leave the subscriber with the older state. It is superseded, and counted so.
func TestAReplayedCoalescedDeliveryIsNotSentAfterANewerOne(t *testing.T) {
	t.Parallel()
	rule := &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}
	for _, replay := range []string{"ReplayDead", "RetryDelivery"} {
		t.Run(replay, func(t *testing.T) {
			ctx := context.Background()
			s, clk := open(t, Options{})
			mustSub(t, s, SubscriberInput{ID: "co", Coalesce: rule})
			mustEmit(t, s, "old", "rank", `{"k":"a","rank":3}`)
			old := claim(t, s, clk.Now(), 10).Deliveries[0]
			clk.Advance(time.Second)
			mustEmit(t, s, "new", "rank", `{"k":"a","rank":1}`) // old is in flight: marked newer_event
			next := claim(t, s, clk.Now(), 10).Deliveries
			if len(next) != 1 || next[0].Event.ID != "new" {
				t.Fatalf("claimed %d, want new", len(next))
			}
			settle(t, s, clk.Now(), done(next[0], ResultDelivered))
			dead := done(old, ResultDead)
			dead.Reason = ReasonMaxAttempts
			settle(t, s, clk.Now(), dead)
			clk.Advance(time.Second)
			switch replay {
			case "ReplayDead":
				if _, err := s.ReplayDead(ctx, "co", time.Time{}, time.Time{}, clk.Now()); err != nil {
					t.Fatal(err)
				}
			case "RetryDelivery":
				// It died superseded: there is nothing to retry.
				if _, err := s.RetryDelivery(ctx, old.DeliveryID, clk.Now()); !errors.Is(err, ErrInvalidState) {
					t.Fatalf("retry of a delivery a newer one superseded: %v, want ErrInvalidState", err)
				}
			}
			for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
				settle(t, s, clk.Now(), done(c, ResultDelivered))
				if c.Event.ID == "old" {
					t.Errorf("after %s, old (rank 3) was sent again after new (rank 1) with its key %q was delivered", replay, c.CoalesceKey)
				}
			}
		})
	}
	for _, replay := range []string{"ReplayDead", "RetryDelivery"} {
		t.Run("backlog_overflow_"+replay, func(t *testing.T) {
			backlogOverflow(t, rule, replay)
		})
	}
}

// overflowedCoalesced returns a store whose subscriber co (coalescing by k, backlog cap 1) has two
// dead deliveries, of old (key a) and other (key b), and a delivered one of new (key a, newer
// than old), a second after the delivery.
func overflowedCoalesced(t *testing.T, rule *wire.CoalesceRule) (*Store, *clock) {
	t.Helper()
	s, clk := open(t, Options{BacklogCap: 1})
	mustSub(t, s, SubscriberInput{ID: "co", Coalesce: rule})
	mustEmit(t, s, "old", "rank", `{"k":"a","rank":3}`)
	mustEmit(t, s, "other", "rank", `{"k":"b"}`) // the cap dead-letters old
	clk.Advance(time.Second)
	mustEmit(t, s, "new", "rank", `{"k":"a","rank":1}`) // the cap dead-letters other
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		settle(t, s, clk.Now(), done(c, ResultDelivered))
	}
	clk.Advance(time.Second)
	return s, clk
}

// backlogOverflow: the backlog cap dead-letters an older coalesced delivery, a newer event with
// its key is delivered, and then the dead are put back (replay or retry): the older one is
// superseded, not sent after the newer.
func backlogOverflow(t *testing.T, rule *wire.CoalesceRule, replay string) {
	ctx := context.Background()
	s, clk := overflowedCoalesced(t, rule)
	if replay == "ReplayDead" {
		if _, err := s.ReplayDead(ctx, "co", time.Time{}, time.Time{}, clk.Now()); err != nil {
			t.Fatal(err)
		}
	} else {
		page, err := s.ListDeliveries(ctx, DeliveryFilter{Status: StatusDead})
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range page.Deliveries {
			if _, err := s.RetryDelivery(ctx, d.ID, clk.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		settle(t, s, clk.Now(), done(c, ResultDelivered))
		if c.Event.ID == "old" {
			t.Errorf("after %s, old (rank 3) was sent again after new (rank 1) with its key %q was delivered", replay, c.CoalesceKey)
		}
	}
	checkCounts(t, s)
}

// TestReplayCountsOnlyWhatItQueued: a replay answers what it did with each dead delivery it took
// (openapi: replayed, held, superseded). It answered the count of rows it updated as "replayed",
// so a dead coalesced delivery written superseded (a newer event has its key), or one held with
// its disabled subscriber, was reported as on its way.
func TestReplayCountsOnlyWhatItQueued(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rule := &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}
	s, clk := overflowedCoalesced(t, rule)
	r, err := s.ReplayDead(ctx, "co", time.Time{}, time.Time{}, clk.Now())
	if want := (Replayed{Pending: 1, Superseded: 1}); err != nil || r != want {
		t.Fatalf("replay of old (its key has a newer event) and other: %+v (%v), want %+v; statuses now %v", r, err, want, counts(t, s, "co"))
	}
	// other dies again; replayed while its subscriber is disabled, it is held.
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		settle(t, s, clk.Now(), Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: "co", Result: ResultDead, Reason: ReasonMaxAttempts})
	}
	if _, err := s.setState(ctx, "co", StateDisabled, "test"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if r, err := s.ReplayDead(ctx, "co", time.Time{}, time.Time{}, clk.Now()); err != nil || r != (Replayed{Held: 1}) {
		t.Fatalf("replay while the subscriber is disabled: %+v (%v), want 1 held; statuses now %v", r, err, counts(t, s, "co"))
	}
}
