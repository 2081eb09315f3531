package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/edgehook/edgehook/shared/wire"
)

// TestFanoutDeliveriesExistBeforeTheirRows: an emit writes no row for a subscriber without
// coalescing, yet its delivery is pending from the commit on, under the id its row will have: it
// is listed, read and refused a retry as pending, and the claim that writes its row hands it out
// under that id.
func TestFanoutDeliveriesExistBeforeTheirRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	for _, id := range []string{"a", "b", "c"} {
		mustSub(t, s, SubscriberInput{ID: id})
	}
	if res := mustEmit(t, s, "e1", "t", `{}`); res.Deliveries != 3 {
		t.Fatalf("emit: %+v, want 3 deliveries", res)
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries`); n != 0 {
		t.Fatalf("%d delivery rows after the emit, want none", n)
	}
	page, err := s.ListDeliveries(ctx, DeliveryFilter{Status: StatusPending})
	if err != nil || len(page.Deliveries) != 3 {
		t.Fatalf("pending: %+v %v, want 3", page, err)
	}
	listed := map[string]string{} // id → subscriber
	for _, d := range page.Deliveries {
		got, err := s.GetDelivery(ctx, d.ID)
		if err != nil || got.Status != StatusPending || got.EventID != "e1" || got.SubscriberID != d.SubscriberID || got.Attempts != 0 {
			t.Fatalf("get %s: %+v %v", d.ID, got, err)
		}
		if _, err := s.RetryDelivery(ctx, d.ID, clk.Now()); !errors.Is(err, ErrInvalidState) || !strings.Contains(err.Error(), "is pending") {
			t.Fatalf("retry of pending %s: %v, want invalid state", d.ID, err)
		}
		listed[d.ID] = d.SubscriberID
	}
	if again := mustEmit(t, s, "e1", "t", `{}`); !again.Duplicate || again.Deliveries != 3 {
		t.Fatalf("re-emit: %+v, want a duplicate with 3 deliveries", again)
	}
	res := claim(t, s, clk.Now(), 10)
	if len(res.Deliveries) != 3 {
		t.Fatalf("claimed %d, want 3", len(res.Deliveries))
	}
	for _, c := range res.Deliveries {
		if listed[c.DeliveryID] != c.Subscriber.ID {
			t.Fatalf("claimed %s for %s, listed before as %q", c.DeliveryID, c.Subscriber.ID, listed[c.DeliveryID])
		}
		got, err := s.GetDelivery(ctx, c.DeliveryID)
		if err != nil || got.Status != StatusLeased {
			t.Fatalf("get %s after the claim: %+v %v", c.DeliveryID, got, err)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries`); n != 3 {
		t.Fatalf("%d rows after the claim, want 3", n)
	}
	if _, err := s.GetDelivery(ctx, s.deliveryID(deliverySeqOf(1, 7))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a delivery to no subscriber: %v, want not found", err)
	}
}

// TestListingMergesRowsAndFanouts pages through deliveries of both kinds (a coalescing subscriber
// gets rows at emit, the others not, some claimed since) a few at a time: every delivery once,
// newest first, as all_deliveries holds them.
func TestListingMergesRowsAndFanouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "co", Coalesce: &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}})
	mustSub(t, s, SubscriberInput{ID: "p1"})
	mustSub(t, s, SubscriberInput{ID: "p2", Events: []string{"rank"}})
	for i := range 12 {
		typ := []string{"rank", "other"}[i%2]
		mustEmit(t, s, fmt.Sprintf("e%d", i), typ, fmt.Sprintf(`{"k":"v%d"}`, i))
		if i == 5 {
			claim(t, s, clk.Now(), 4)
		}
	}
	var want []string
	rows, err := s.r.Query(`SELECT seq FROM all_deliveries ORDER BY seq DESC`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		want = append(want, s.deliveryID(seq))
	}
	rows.Close()
	if rowCount := countRows(t, s, `SELECT count(*) FROM deliveries`); rowCount == 0 || rowCount == int64(len(want)) {
		t.Fatalf("%d rows of %d deliveries: the listing would not merge both kinds", rowCount, len(want))
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		page, err := s.ListDeliveries(ctx, DeliveryFilter{Limit: 4, Cursor: cursor})
		if err != nil || pages > len(want) {
			t.Fatalf("page %d: %v", pages, err)
		}
		for _, d := range page.Deliveries {
			got = append(got, d.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("listed\n%v\nwant\n%v", got, want)
	}
	page, err := s.ListDeliveries(ctx, DeliveryFilter{SubscriberID: "p2", Status: StatusPending, EventID: "e10"})
	if err != nil || len(page.Deliveries) != 1 || page.Deliveries[0].SubscriberID != "p2" {
		t.Fatalf("filtered: %+v %v, want p2's delivery of e10", page, err)
	}
}

// TestClaimTakesTheOldestAcrossFanouts: a subscriber in several fanouts (event types matched by
// different sets of subscribers) is claimed its oldest events first across them, a few at a time,
// each once; the others' deliveries of the same events are left to them.
func TestClaimTakesTheOldestAcrossFanouts(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "all", MaxInFlight: 3})
	mustSub(t, s, SubscriberInput{ID: "odd", Events: []string{"t1"}})
	mustSub(t, s, SubscriberInput{ID: "third", Events: []string{"t2"}})
	for i := range 20 {
		mustEmit(t, s, fmt.Sprintf("e%02d", i), []string{"t0", "t1", "t2"}[i%3], `{}`)
	}
	if n := countRows(t, s, `SELECT count(*) FROM fanouts`); n != 3 {
		t.Fatalf("%d fanouts, want 3", n)
	}
	for _, id := range []string{"odd", "third"} {
		if _, err := s.PauseSubscriber(context.Background(), id, "not this test's"); err != nil {
			t.Fatal(err)
		}
	}
	var order []string
	for round := 0; round < 20; round++ {
		res := claim(t, s, clk.Now(), 10)
		if len(res.Deliveries) == 0 {
			break
		}
		if len(res.Deliveries) > 3 {
			t.Fatalf("claimed %d at an in-flight cap of 3", len(res.Deliveries))
		}
		var items []Settlement
		for _, c := range res.Deliveries {
			order = append(order, c.Event.ID)
			items = append(items, done(c, ResultDelivered))
		}
		settle(t, s, clk.Now(), items...)
	}
	want := make([]string, 20)
	for i := range want {
		want[i] = fmt.Sprintf("e%02d", i)
	}
	if !slices.Equal(order, want) {
		t.Fatalf("all's events claimed in the order %v", order)
	}
	for sub, n := range map[string]int64{"odd": 7, "third": 6} {
		if c := counts(t, s, sub); c[StatusPending] != n {
			t.Fatalf("%s: %v, want %d pending", sub, c, n)
		}
	}
}
