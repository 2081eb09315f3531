package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

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

// TestARecreatedSubscriberGetsOnlyNewEvents: a subscriber deleted and created again under its id
// is a new subscriber (a new ordinal), in none of the fanouts of the events before; an event stays
// until the retention prune finds none of its deliveries pending.
func TestARecreatedSubscriberGetsOnlyNewEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	mustEmit(t, s, "before", "t", `{}`)
	if err := s.DeleteSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	mustSub(t, s, SubscriberInput{ID: "a"})
	if c := counts(t, s, "a"); c[StatusPending] != 0 {
		t.Fatalf("the new a: %v, want nothing pending", c)
	}
	mustEmit(t, s, "after", "t", `{}`)
	got := map[string]bool{}
	var items []Settlement
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		got[c.Subscriber.ID+"/"+c.Event.ID] = true
		items = append(items, done(c, ResultDelivered))
	}
	if want := map[string]bool{"b/before": true, "a/after": true, "b/after": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	mustEmit(t, s, "pending", "t", `{}`)
	settle(t, s, clk.Now(), items...)
	clk.Advance(48 * time.Hour)
	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for id, kept := range map[string]bool{"before": false, "after": false, "pending": true} {
		if _, err := s.GetEvent(ctx, id); (err == nil) != kept {
			t.Fatalf("event %s after the prune: %v, want kept %v", id, err, kept)
		}
	}
}

// TestOrdinalsRunOut: the 2^20th subscriber a database creates is its last, with an error that
// says why; deleting one gives no ordinal back.
func TestOrdinalsRunOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := open(t, Options{})
	if _, err := s.w.Exec(`UPDATE meta SET value = ? WHERE key = 'next_ordinal'`, maxOrdinals-1); err != nil {
		t.Fatal(err)
	}
	mustSub(t, s, SubscriberInput{ID: "last"})
	if err := s.DeleteSubscriber(ctx, "last"); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateSubscriber(ctx, SubscriberInput{ID: "one-more", URL: "https://example.com/hook", Events: []string{"*"}})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "1048576 subscribers") {
		t.Fatalf("one subscriber too many: %v", err)
	}
	if _, err := s.GetSubscriber(ctx, "one-more"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused subscriber was stored: %v", err)
	}
}

// TestFanoutQueriesStayOnTheirIndexes pins the plans that must stay cheap with a million
// deliveries pending in fanouts: a claim's search of each fanout, and a page of the listing, which
// reads the newest events first (only each event's few deliveries sorted), with or without a
// subscriber.
func TestFanoutQueriesStayOnTheirIndexes(t *testing.T) {
	t.Parallel()
	s, _ := open(t, Options{})
	for _, several := range []bool{false, true} {
		claimPlan := queryPlan(t, s, fanoutInsertSQL(fanoutFoundSQL(2, several), true), "leased", "", "", "t", 1, 1, "a", 0, 10, 1, 0, 10, "b", 1, 10, 1, 0, 10)
		if strings.Count(claimPlan, "COVERING INDEX events_fanout (fanout=? AND seq>?)") != 2 {
			t.Errorf("claim plan (several %v) %q, want two searches of events_fanout", several, claimPlan)
		}
	}
	if p := queryPlan(t, s, fanoutScanSQL, "a", 0, 5, 0, 10); !strings.Contains(p, "SCAN events") && !strings.Contains(p, "SEARCH events USING INTEGER PRIMARY KEY (rowid>?)") ||
		strings.Contains(p, "TEMP B-TREE") {
		t.Errorf("scan plan %q, want the events past the cursor in seq order", p)
	}
	for _, cond := range []string{"", " AND d.subscriber_id = ?"} {
		args := []any{101}
		if cond != "" {
			args = []any{"a", 101}
		}
		p := queryPlan(t, s, fanoutPageSQL+cond+fanoutPageOrder, args...)
		if !strings.HasPrefix(p, "SEARCH e USING INTEGER PRIMARY KEY (rowid>?)") || strings.Contains(p, "TEMP B-TREE FOR ORDER BY") {
			t.Errorf("listing plan%s: %q, want the newest events first and no whole sort", cond, p)
		}
	}
}

// TestBacklogCapDeadLettersTheOldestOfBothKinds: first-attempt rows (held and resumed, or
// coalesced) are often of older events than the fanout deliveries; the cap dead-letters the oldest
// event's delivery whichever kind it is.
func TestBacklogCapDeadLettersTheOldestOfBothKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	deadEvents := func(s *Store) []string {
		t.Helper()
		page, err := s.ListDeliveries(ctx, DeliveryFilter{Status: StatusDead})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range page.Deliveries {
			out = append(out, d.EventID)
		}
		return out
	}
	t.Run("resumed", func(t *testing.T) {
		s, _ := open(t, Options{BacklogCap: 3})
		mustSub(t, s, SubscriberInput{ID: "s"})
		for i := range 3 {
			mustEmit(t, s, fmt.Sprintf("e%d", i), "t", `{}`)
		}
		if _, err := s.setState(ctx, "s", StateDisabled, "gone"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ResumeSubscriber(ctx, "s"); err != nil {
			t.Fatal(err)
		}
		mustEmit(t, s, "e3", "t", `{}`)
		mustEmit(t, s, "e4", "t", `{}`)
		if got := deadEvents(s); !slices.Equal(got, []string{"e1", "e0"}) {
			t.Fatalf("dead-lettered %v, want e0 and e1", got)
		}
	})
	t.Run("coalesced", func(t *testing.T) {
		s, _ := open(t, Options{BacklogCap: 3})
		mustSub(t, s, SubscriberInput{ID: "co", Coalesce: &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}})
		mustEmit(t, s, "f0", "other", `{}`)
		for i := range 2 {
			mustEmit(t, s, fmt.Sprintf("r%d", i), "rank", fmt.Sprintf(`{"k":"v%d"}`, i))
		}
		mustEmit(t, s, "f1", "other", `{}`)
		mustEmit(t, s, "f2", "other", `{}`)
		if got := deadEvents(s); !slices.Equal(got, []string{"r0", "f0"}) {
			t.Fatalf("dead-lettered %v, want f0 and r0", got)
		}
	})
}

// TestCoalescedRowsWaitForOlderFanoutDeliveries: a coalescing subscriber's rows do not overtake
// its older deliveries that are not rows yet.
func TestCoalescedRowsWaitForOlderFanoutDeliveries(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "co", MaxInFlight: 1, Coalesce: &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}})
	mustEmit(t, s, "older", "other", `{}`)
	var order []string
	for i := range 3 {
		mustEmit(t, s, fmt.Sprintf("r%d", i), "rank", fmt.Sprintf(`{"k":"v%d"}`, i))
		for _, c := range claim(t, s, clk.Now(), 1).Deliveries {
			order = append(order, c.Event.ID)
			settle(t, s, clk.Now(), done(c, ResultDelivered))
		}
	}
	if !slices.Equal(order, []string{"older", "r0", "r1"}) {
		t.Fatalf("claimed in the order %v, want older, r0, r1", order)
	}
}

// TestClaimServesSubscribersInManyFanouts: fanouts are never deleted, and subscriber churn puts a
// long-lived subscriber in a new one with every change. Hundreds of them, most long past its
// cursor, do not fail its claims; in more than one statement's worth with events past its cursor,
// its claims still take its oldest events first, each once.
func TestClaimServesSubscribersInManyFanouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", MaxInFlight: 5, RatePerSec: MaxRatePerSec, Burst: MaxBurst})
	for i := range 300 {
		id := fmt.Sprintf("tmp%d", i)
		mustSub(t, s, SubscriberInput{ID: id, Events: []string{fmt.Sprintf("t%d", i%40)}})
		mustEmit(t, s, fmt.Sprintf("e%03d", i), fmt.Sprintf("t%d", i%40), `{}`)
		if i < 260 {
			if err := s.DeleteSubscriber(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The first 260 events are a's alone by now; claim and settle them, then the last 40 are in
	// 40 fanouts with events past a's cursor.
	var order []string
	for len(order) < 300 {
		res, err := s.Claim(ctx, ClaimParams{Now: clk.Now(), Limit: 10, LeaseDuration: time.Minute})
		if err != nil {
			t.Fatalf("claim after %d: %v", len(order), err)
		}
		var items []Settlement
		for _, c := range res.Deliveries {
			if c.Subscriber.ID == "a" {
				order = append(order, c.Event.ID)
			}
			items = append(items, done(c, ResultDelivered))
		}
		if len(items) == 0 {
			t.Fatalf("nothing claimed after %d of a's", len(order))
		}
		settle(t, s, clk.Now(), items...)
	}
	for i, id := range order {
		if want := fmt.Sprintf("e%03d", i); id != want {
			t.Fatalf("a's claim %d was %s, want %s (order %v)", i, id, want, order)
		}
	}
}

// TestAnOlderBinaryWritesClearOfFanoutSeqs: a binary of schema version 8 still running on a
// migrated file gives its first row the seq past the deliveries mark (emit then, when the mark is
// above every seq stored): migration 0009 puts the mark where that seq is no delivery's of this
// scheme, and claims go on.
func TestAnOlderBinaryWritesClearOfFanoutSeqs(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	mustEmit(t, s, "e1", "t", `{}`)
	if _, err := s.w.Exec(`INSERT INTO deliveries(seq, event_seq, subscriber_id, status, next_attempt_at, age_from, created_at, updated_at)
		SELECT (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'deliveries_seq') + 1, max(seq), 'a', 'pending', 0, 0, 0, 0 FROM events`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`UPDATE queue_counts SET n = n + 1 WHERE subscriber_id = 'a' AND status = 'pending'`); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries WHERE seq >> 20 < 1 << 40`); n != 0 {
		t.Fatalf("the older binary's row is among this scheme's seqs")
	}
	if res := claim(t, s, clk.Now(), 10); len(res.Deliveries) != 3 {
		t.Fatalf("claimed %d, want the 2 fanout deliveries and the older binary's row", len(res.Deliveries))
	}
}

// TestBacklogCapPrefersAResumedOlderRow: the cap takes its row candidates earliest due first,
// then merges them by event. A resumed row keeps its earlier due time, so an older event's row,
// held and resumed, is dead-lettered before a newer one's rescued from an expired lease.
func TestBacklogCapPrefersAResumedOlderRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{BacklogCap: 3})
	mustSub(t, s, SubscriberInput{ID: "s"})
	mustEmit(t, s, "e0", "t", `{}`)
	clk.Advance(time.Millisecond)
	mustEmit(t, s, "e1", "t", `{}`)
	res := claim(t, s, clk.Now(), 2)
	for _, c := range res.Deliveries {
		if c.Event.ID == "e0" {
			settle(t, s, clk.Now(), done(c, ResultRelease))
		}
	}
	clk.Advance(time.Second)
	if _, err := s.setState(ctx, "s", StateDisabled, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ResumeSubscriber(ctx, "s"); err != nil { // e0 due now
		t.Fatal(err)
	}
	if _, err := s.PauseSubscriber(ctx, "s", "x"); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	claim(t, s, clk.Now(), 1) // rescues e1's lease: pending, due at its emit
	mustEmit(t, s, "e2", "t", `{}`)
	mustEmit(t, s, "e3", "t", `{}`)
	page, err := s.ListDeliveries(ctx, DeliveryFilter{Status: StatusDead})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range page.Deliveries {
		if d.EventID != "e0" {
			t.Errorf("dead-lettered %s, want the oldest, e0", d.EventID)
		}
	}
	if len(page.Deliveries) != 1 {
		t.Errorf("%d dead, want 1", len(page.Deliveries))
	}
}
