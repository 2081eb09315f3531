package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
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
	// Leased as a range of events (migration 0011): their rows come with their settle.
	if n, leases := countRows(t, s, `SELECT count(*) FROM deliveries`), countRows(t, s, `SELECT count(*) FROM leases`); n != 0 || leases != 3 {
		t.Fatalf("%d rows and %d leases after the claim, want none and one per subscriber", n, leases)
	}
	if _, err := s.GetDelivery(ctx, s.DeliveryID(deliverySeqOf(1, 7))); !errors.Is(err, ErrNotFound) {
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
		want = append(want, s.DeliveryID(seq))
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
	if got, want := deliverClaimed(t, s, clk.Now()), map[string]bool{"b/before": true, "a/after": true, "b/after": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	mustEmit(t, s, "pending", "t", `{}`)
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
// deliveries pending in fanouts: a claim's search of each fanout, a page of the listing, which
// reads the newest events first (only each event's few deliveries sorted), with or without a
// subscriber, and the prune's look for fanouts without events (a seek of events_fanout each) and
// their delete.
func TestFanoutQueriesStayOnTheirIndexes(t *testing.T) {
	t.Parallel()
	s, _ := open(t, Options{})
	for _, several := range []bool{false, true} {
		claimPlan := queryPlan(t, s, fanoutFoundRowsSQL(fanoutFoundSQL(2, several)), "a", 0, 10, 1, 0, 10, "b", 1, 10, 1, 0, 10)
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
	if p := queryPlan(t, s, deadFanoutsSQL); !strings.Contains(p, "SEARCH events USING COVERING INDEX events_fanout (fanout=?)") ||
		strings.Contains(p, "SCAN events") {
		t.Errorf("dead fanouts plan %q, want a seek of events_fanout per fanout", p)
	}
	for i, index := range []string{"fanout_members USING PRIMARY KEY (fanout=?)", "fanouts USING INTEGER PRIMARY KEY (rowid=?)"} {
		if p := queryPlan(t, s, deleteFanoutsSQL[i], "[1]"); !strings.Contains(p, "SEARCH "+index) {
			t.Errorf("fanout delete plan %q, want SEARCH %s", p, index)
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

// TestClaimServesSubscribersInManyFanouts: fanouts stay as long as their events, and churn puts a
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

// deliverClaimed claims up to 10 deliveries, settles them delivered and returns them as
// "subscriber/event".
func deliverClaimed(t *testing.T, s *Store, now time.Time) map[string]bool {
	t.Helper()
	got := map[string]bool{}
	var items []Settlement
	for _, c := range claim(t, s, now, 10).Deliveries {
		got[c.Subscriber.ID+"/"+c.Event.ID] = true
		items = append(items, done(c, ResultDelivered))
	}
	settle(t, s, now, items...)
	return got
}

// fanoutOf returns the fanout id of a stored event.
func fanoutOf(t *testing.T, s *Store, event string) int64 {
	t.Helper()
	return countRows(t, s, `SELECT fanout FROM events WHERE id = ?`, event)
}

// fanoutSets returns the stored fanouts, id → ordinals, and checks each has its members.
func fanoutSets(t *testing.T, s *Store) map[int64]string {
	t.Helper()
	rows, err := s.r.Query(`SELECT id, ordinals, (SELECT json_group_array(ordinal) FROM (SELECT ordinal FROM fanout_members WHERE fanout = id ORDER BY 1))
		FROM fanouts`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var ordinals, members string
		if err := rows.Scan(&id, &ordinals, &members); err != nil {
			t.Fatal(err)
		}
		if members != ordinals {
			t.Errorf("fanout %d of %s has the members %s", id, ordinals, members)
		}
		out[id] = ordinals
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM fanout_members m WHERE NOT EXISTS (SELECT 1 FROM fanouts f WHERE f.id = m.fanout)`); n != 0 {
		t.Errorf("%d members of fanouts that are gone", n)
	}
	return out
}

// TestPruneDeletesDeadFanouts: subscriber churn leaves a fanout for every set of subscribers an
// event matched. Once the prune has deleted their events, those fanouts and their members go too;
// one with an event retained, or pending for a paused subscriber, stays, and no pending delivery
// is lost. A set whose fanout was pruned (its id cached by emit) comes back with its next event,
// which is claimed and delivered to it.
func TestPruneDeletesDeadFanouts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	a := mustSub(t, s, SubscriberInput{ID: "a", MaxInFlight: 10})
	mustSub(t, s, SubscriberInput{ID: "p", Events: []string{"p"}})
	if _, err := s.PauseSubscriber(ctx, "p", "slow"); err != nil {
		t.Fatal(err)
	}
	mustEmit(t, s, "alone1", "t", `{}`) // {a}
	mustEmit(t, s, "alone2", "t", `{}`) // reads {a}'s id back: emit caches it
	mustEmit(t, s, "stuck", "p", `{}`)  // {a, p}, pending for p
	for i := range 4 {
		id := fmt.Sprintf("tmp%d", i)
		mustSub(t, s, SubscriberInput{ID: id, Events: []string{"t"}})
		mustEmit(t, s, fmt.Sprintf("churn%d", i), "t", `{}`) // {a, tmp<i>}
		if err := s.DeleteSubscriber(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	deliverAll(t, s, clk.Now())
	clk.Advance(48 * time.Hour)
	mustSub(t, s, SubscriberInput{ID: "k", Events: []string{"k"}})
	mustEmit(t, s, "recent", "k", `{}`) // {a, k}, within the retention
	if n := len(fanoutSets(t, s)); n != 7 {
		t.Fatalf("%d fanouts before the prune, want 7", n)
	}
	kept := map[int64]bool{fanoutOf(t, s, "stuck"): true, fanoutOf(t, s, "recent"): true}
	pendingSQL := `SELECT count(*) FROM all_deliveries WHERE status = 'pending'`
	pending := countRows(t, s, pendingSQL)
	if pending != 3 {
		t.Fatalf("%d pending before the prune, want p's stuck and a's and k's recent", pending)
	}

	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	left := fanoutSets(t, s)
	for id := range left {
		if !kept[id] {
			t.Errorf("fanout %d of %s outlived its events", id, left[id])
		}
	}
	if len(left) != len(kept) {
		t.Errorf("fanouts left %v, want those of stuck and recent", left)
	}
	if n := countRows(t, s, pendingSQL); n != pending {
		t.Errorf("%d pending after the prune, %d before", n, pending)
	}
	for id, want := range map[string]bool{"alone2": false, "churn3": false, "stuck": true, "recent": true} {
		if _, err := s.GetEvent(ctx, id); (err == nil) != want {
			t.Errorf("event %s after the prune: %v, want kept %v", id, err, want)
		}
	}

	if res := mustEmit(t, s, "alone3", "t", `{}`); res.Deliveries != 1 {
		t.Fatalf("emit to {a} again: %+v", res)
	}
	if got, want := fanoutSets(t, s)[fanoutOf(t, s, "alone3")], fmt.Sprintf("[%d]", a.ordinal); got != want {
		t.Fatalf("alone3's fanout is %q, want %s", got, want)
	}
	if got, want := deliverClaimed(t, s, clk.Now()), map[string]bool{"a/recent": true, "k/recent": true, "a/alone3": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
	if c := counts(t, s, "a"); c[StatusDelivered] != 2 || len(c) != 1 {
		t.Fatalf("a: %v, want recent and alone3 delivered, the rest pruned", c)
	}
}

// TestAPruneElsewhereDropsCachedFanoutIDs: emit caches fanout ids, and another process's prune may
// delete the fanout of a cached id. The id is never given again (schema version 10: the next
// fanout, of another set of subscribers, gets a new one), and the next emit of this process reads
// the new fanouts version and writes its event's fanout again: its delivery is not lost.
func TestAPruneElsewhereDropsCachedFanoutIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "shared.db")
	a, clk := open(t, Options{Path: path})
	b, _ := open(t, Options{Path: path, Now: clk.Now})
	mustSub(t, a, SubscriberInput{ID: "x", Events: []string{"x"}})
	mustSub(t, a, SubscriberInput{ID: "y", Events: []string{"y"}})
	mustEmit(t, a, "x1", "x", `{}`)
	mustEmit(t, a, "x2", "x", `{}`) // a caches {x}'s id
	old := fanoutOf(t, a, "x2")
	deliverAll(t, a, clk.Now())
	clk.Advance(48 * time.Hour)
	if _, err := b.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	mustEmit(t, b, "y1", "y", `{}`)
	if id := fanoutOf(t, b, "y1"); id <= old {
		t.Fatalf("{y} got fanout %d, not past {x}'s pruned %d: a pruned id was given again", id, old)
	}
	mustEmit(t, a, "x3", "x", `{}`)
	if got, want := deliverClaimed(t, a, clk.Now()), map[string]bool{"x/x3": true, "y/y1": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}
}

// TestPruneDeletesFanoutsInBatches: a transaction of the prune deletes about pruneChunk rows of
// fanouts and members, at least one fanout, and the prune goes on until none is left.
func TestPruneDeletesFanoutsInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	const members, fanouts = 40, 50 // 42 rows each with the churned member: 48 make a batch
	for i := range members {
		mustSub(t, s, SubscriberInput{ID: fmt.Sprintf("m%d", i)})
	}
	for i := range fanouts {
		id := fmt.Sprintf("tmp%d", i)
		mustSub(t, s, SubscriberInput{ID: id})
		mustEmit(t, s, fmt.Sprintf("e%d", i), "t", `{}`)
		if err := s.DeleteSubscriber(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for i := range members { // nothing pending any more: every event can go
		if err := s.DeleteSubscriber(ctx, fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(48 * time.Hour)
	if _, err := s.w.Exec(`DELETE FROM events`); err != nil { // as Prune's events step would
		t.Fatal(err)
	}
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		n, err = s.pruneFanouts(ctx, tx)
		return err
	})
	const batch = (pruneChunk + members + 1) / (members + 2)
	if err != nil || n != batch*(members+2) || len(fanoutSets(t, s)) != fanouts-batch {
		t.Fatalf("one batch deleted %d rows (%v), %d fanouts left, want %d fanouts of %d rows deleted", n, err, len(fanoutSets(t, s)), batch, members+2)
	}
	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if left := fanoutSets(t, s); len(left) != 0 {
		t.Fatalf("fanouts left after the prune: %v", left)
	}
}

// TestPruneGoesPastNeededEvents: events a subscriber still needs (paused, its backlog pending)
// interleaved with events nobody needs, more than a prune transaction reads, all of one
// millisecond: the prune deletes every unneeded one and keeps the others, each transaction going
// on from the (created_at, seq) where the last stopped.
func TestPruneGoesPastNeededEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "p", Events: []string{"keep"}})
	if _, err := s.PauseSubscriber(ctx, "p", "slow"); err != nil {
		t.Fatal(err)
	}
	const events = 5 * MaxBatchEvents / 2 // of each type
	for b := range 5 {
		var batch []EmitInput
		for i := range MaxBatchEvents {
			batch = append(batch, EmitInput{ID: fmt.Sprintf("e%d-%d", b, i), Type: []string{"keep", "t"}[i%2], Body: []byte(`{}`)})
		}
		if _, err := s.EmitBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(48 * time.Hour)
	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM events WHERE type = 't'`); n != 0 {
		t.Errorf("%d unneeded events left", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM events WHERE type = 'keep'`); n != events {
		t.Errorf("%d needed events left, want %d", n, events)
	}
	if c := counts(t, s, "p"); c[StatusPending] != events {
		t.Errorf("p: %v, want %d pending", c, events)
	}
}

// TestMigrationTo10KeepsFanoutsAndNeverReusesTheirIDs: migration 0010 rebuilds fanouts with
// AUTOINCREMENT. A version-9 file keeps its fanouts (ids, sets, newest events) and its pending
// fanout deliveries, and once the newest fanout is pruned its id is not given to the next one.
func TestMigrationTo10KeepsFanoutsAndNeverReusesTheirIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, path, clk := openOld(t, 9)
	mustSub(t, old, SubscriberInput{ID: "a", Events: []string{"a.*"}})
	mustSub(t, old, SubscriberInput{ID: "b", Events: []string{"*"}})
	mustEmit(t, old, "both", "a.t", `{}`)
	mustEmit(t, old, "b-only", "b.t", `{}`) // the newest fanout, {b}
	before, top := fanoutSets(t, old), fanoutOf(t, old, "b-only")
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}

	s, _ := open(t, Options{Path: path, Now: clk.Now})
	if after := fanoutSets(t, s); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("fanouts after the migration: %v, before: %v", after, before)
	}
	if n := countRows(t, s, `SELECT count(*) FROM fanouts INDEXED BY fanouts_last WHERE last_seq > 0`); n != 2 {
		t.Fatalf("%d fanouts with their newest event through fanouts_last, want 2", n)
	}
	if got, want := deliverClaimed(t, s, clk.Now()), map[string]bool{"a/both": true, "b/both": true, "b/b-only": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed after the migration %v, want %v", got, want)
	}
	clk.Advance(48 * time.Hour)
	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n := len(fanoutSets(t, s)); n != 0 {
		t.Fatalf("%d fanouts left after their events were pruned, want 0", n)
	}
	mustEmit(t, s, "b-again", "b.t", `{}`)
	if id := fanoutOf(t, s, "b-again"); id <= top {
		t.Fatalf("the next fanout got id %d, not past the pruned %d", id, top)
	}
}

// TestABatchOfSeveralTypesFansEachOutToItsSubscribers: a group works out the subscribers of each
// event type once (typeMatch) and counts its plain events' deliveries when it writes. Each event
// still gets the deliveries of its own type, a coalescing subscriber still gets rows, and the
// counts, fanouts and the engine's wake-up match.
func TestABatchOfSeveralTypesFansEachOutToItsSubscribers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "all"})
	mustSub(t, s, SubscriberInput{ID: "video", Events: []string{"video.*"}})
	mustSub(t, s, SubscriberInput{ID: "paused", Events: []string{"user.*"}})
	mustSub(t, s, SubscriberInput{ID: "co", Events: []string{"video.rank"}, Coalesce: &wire.CoalesceRule{EventTypes: []string{"video.rank"}, Key: "video_id", WindowSeconds: 10}})
	if _, err := s.PauseSubscriber(ctx, "paused", "test"); err != nil {
		t.Fatal(err)
	}
	types := []string{"video.new", "user.new", "video.rank", "video.new", "other", "user.new", "video.rank"}
	var batch []EmitInput
	for i, typ := range types {
		batch = append(batch, EmitInput{ID: fmt.Sprintf("e%d", i), Type: typ, Body: []byte(fmt.Sprintf(`{"video_id":"v%d"}`, i))})
	}
	res, err := s.EmitBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"video.new": 2, "user.new": 2, "video.rank": 3, "other": 1}
	for i, r := range res {
		if r.Deliveries != want[types[i]] {
			t.Fatalf("event %d (%s): %d deliveries, want %d", i, types[i], r.Deliveries, want[types[i]])
		}
	}
	for sub, n := range map[string]int64{"all": 7, "video": 4, "paused": 2, "co": 2} {
		if c := counts(t, s, sub); c[StatusPending] != n {
			t.Fatalf("%s: %d pending, want %d", sub, c[StatusPending], n)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries WHERE subscriber_id = 'co'`); n != 2 {
		t.Fatalf("the coalescing subscriber has %d rows, want one per video.rank event", n)
	}
	// Fanouts by their subscribers: all+video, all+paused, all+video (rank: co's are rows), all.
	if n := countRows(t, s, `SELECT count(DISTINCT fanout) FROM events`); n != 3 {
		t.Fatalf("%d distinct fanouts, want 3 (video.*, user.*, other)", n)
	}
	select {
	case <-s.Wake():
	default:
		t.Fatal("the engine was not woken for the active subscribers' deliveries")
	}
}
