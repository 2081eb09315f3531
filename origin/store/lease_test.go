package store

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// A claim leases fanout deliveries as a range of events (migration 0011): no row until each one
// settles, and then one row in its final state. checkCounts (open) compares every count, the
// leases' included, with the deliveries when each test ends.

// leaseCount returns how many leases the store holds.
func leaseCount(t *testing.T, s *Store) int64 {
	t.Helper()
	return countRows(t, s, `SELECT count(*) FROM leases`)
}

// TestALeasedRangeBecomesRowsAsItSettles: each settled delivery of a range gets its row, in the
// state its result says (delivered; retried later; released, due at once), and the lease goes
// with its last delivery.
func TestALeasedRangeBecomesRowsAsItSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 3)
	cs := claim(t, s, clk.Now(), 10).Deliveries
	if len(cs) != 3 || countRows(t, s, `SELECT count(*) FROM deliveries`) != 0 || leaseCount(t, s) != 1 {
		t.Fatalf("claimed %d; want 3, leased as one range without rows", len(cs))
	}
	page, err := s.ListDeliveries(ctx, DeliveryFilter{Status: StatusLeased})
	if err != nil || len(page.Deliveries) != 3 || !page.Deliveries[0].LeaseExpiresAt.Equal(cs[0].LeaseExpires) {
		t.Fatalf("leased listing %+v %v, want the 3 with their lease's expiry", page, err)
	}
	later := clk.Now().Add(time.Minute)
	retry := done(cs[1], ResultRetry)
	retry.NextAttemptAt, retry.Status, retry.Error = later, 500, "boom"
	retry.Attempt = &Attempt{At: clk.Now(), Status: 500, Outcome: "http_5xx", Excerpt: "oops"}
	if stale := settle(t, s, clk.Now(), done(cs[0], ResultDelivered), retry); stale != 0 {
		t.Fatalf("%d stale settlements of a live lease", stale)
	}
	if leaseCount(t, s) != 1 {
		t.Fatal("the lease went before its last delivery settled")
	}
	settle(t, s, clk.Now(), done(cs[2], ResultRelease))
	if n := leaseCount(t, s); n != 0 {
		t.Fatalf("%d leases left once every delivery settled", n)
	}
	for i, want := range []struct {
		status   Status
		attempts int
		next     time.Time
	}{{StatusDelivered, 1, time.Time{}}, {StatusPending, 1, later}, {StatusPending, 0, cs[2].Event.CreatedAt}} {
		d, err := s.GetDelivery(ctx, cs[i].DeliveryID)
		if err != nil || d.Status != want.status || d.Attempts != want.attempts || !want.next.IsZero() && !d.NextAttemptAt.Equal(want.next) {
			t.Fatalf("delivery %d after its settle: %+v %v, want %s with %d attempts, due %v", i, d, err, want.status, want.attempts, want.next)
		}
	}
	if d, _ := s.GetDelivery(ctx, cs[1].DeliveryID); len(d.AttemptLog) != 1 || d.AttemptLog[0].Excerpt != "oops" || d.LastStatus != 500 || d.LastError != "boom" {
		t.Fatalf("the retried delivery %+v, want its attempt logged", d)
	}
	// The released one is a first attempt again, due at once; the retry waits for its time.
	res := claim(t, s, clk.Now(), 10)
	if len(res.Deliveries) != 1 || res.Deliveries[0].Seq != cs[2].Seq {
		t.Fatalf("claimed %+v, want only the released delivery", res.Deliveries)
	}
	settle(t, s, clk.Now(), done(res.Deliveries[0], ResultDelivered))
	clk.Advance(time.Minute)
	res = claim(t, s, clk.Now(), 10)
	if len(res.Deliveries) != 1 || res.Deliveries[0].Seq != cs[1].Seq || res.Deliveries[0].Attempts != 1 {
		t.Fatalf("claimed %+v after a minute, want the retry", res.Deliveries)
	}
	settle(t, s, clk.Now(), done(res.Deliveries[0], ResultDelivered))
	if c := counts(t, s, "a"); c[StatusDelivered] != 3 || c[StatusPending]+c[StatusLeased] != 0 {
		t.Fatalf("counts %v, want all 3 delivered", c)
	}
}

// TestADeadUnsentDeliveryCountsNoAttempt: a delivery settled dead unsent, as a range's (its row
// written dead) or as a row, keeps its count of attempts and its attempt log, has its reason and
// error, and the last status of its last attempt; a replay puts it back like any dead one.
func TestADeadUnsentDeliveryCountsNoAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 2)
	cs := claim(t, s, clk.Now(), 10).Deliveries
	unsent := func(c Claimed) Settlement {
		set := done(c, ResultDeadUnsent)
		set.Reason, set.Error = ReasonMaxAge, "not sent"
		return set
	}
	retry := done(cs[1], ResultRetry)
	retry.NextAttemptAt, retry.Status, retry.Error = clk.Now().Add(time.Minute), 500, "boom"
	retry.Attempt = &Attempt{At: clk.Now(), Status: 500, Outcome: "http_5xx", Error: "boom"}
	settle(t, s, clk.Now(), unsent(cs[0]), retry)
	clk.Advance(time.Minute)
	again := claim(t, s, clk.Now(), 10).Deliveries
	if len(again) != 1 || again[0].Seq != cs[1].Seq {
		t.Fatalf("claimed %+v, want the retry", again)
	}
	settle(t, s, clk.Now(), unsent(again[0]))
	for i, want := range []struct {
		attempts, status int
	}{{0, 0}, {1, 500}} {
		d, err := s.GetDelivery(ctx, cs[i].DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != StatusDead || d.Reason != ReasonMaxAge || d.Attempts != want.attempts || len(d.AttemptLog) != want.attempts ||
			d.LastStatus != want.status || d.LastError != "not sent" {
			t.Errorf("delivery %d dead unsent: %+v; want dead (max_age) with %d attempts counted and logged, last status %d, error \"not sent\"",
				i, d, want.attempts, want.status)
		}
	}
	if r, err := s.ReplayDead(ctx, "a", time.Time{}, time.Time{}, clk.Now()); err != nil || r != (Replayed{Pending: 2}) {
		t.Fatalf("replayed %+v (%v), want the 2 pending", r, err)
	}
	if c := counts(t, s, "a"); c[StatusPending] != 2 {
		t.Fatalf("counts %v after the replay, want 2 pending", c)
	}
}

// TestAnExpiredRangeComesBackPending: the deliveries of an expired lease that have not settled
// get their rows pending, and are claimed again; the one that settled is not sent again, and the
// late settlements of the first claim are stale.
func TestAnExpiredRangeComesBackPending(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 3)
	first := claim(t, s, clk.Now(), 10).Deliveries
	settle(t, s, clk.Now(), done(first[0], ResultDelivered))
	clk.Advance(2 * time.Minute) // past the lease: the next claim rescues
	again := claim(t, s, clk.Now(), 10).Deliveries
	if len(again) != 2 || again[0].Seq == first[0].Seq || again[1].Seq == first[0].Seq || again[0].LeaseToken == first[1].LeaseToken {
		t.Fatalf("claimed again %+v, want the 2 unsettled under a new lease", again)
	}
	if n := leaseCount(t, s); n != 0 {
		t.Fatalf("%d leases after the rescue, want the expired one gone (the rows are leased now)", n)
	}
	if stale := settle(t, s, clk.Now(), done(first[1], ResultDelivered), done(first[2], ResultDead)); stale != 2 {
		t.Fatalf("%d of the expired claim's late settlements stale, want 2", stale)
	}
	settle(t, s, clk.Now(), done(again[0], ResultDelivered), done(again[1], ResultDelivered))
	if c := counts(t, s, "a"); c[StatusDelivered] != 3 || c[StatusDead] != 0 {
		t.Fatalf("counts %v, want 3 delivered and nothing dead", c)
	}
}

// TestASettlementOutsideItsLeaseWritesNothing: a live token does not let a settlement write the
// row of a delivery its lease does not hold: of an event past the range, of an event of the range
// not in the subscriber's fanouts, or of another subscriber (one claim's token is its every
// subscriber's, so b's delivery named a's is the case to refuse).
func TestASettlementOutsideItsLeaseWritesNothing(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"x.*"}})
	mustSub(t, s, SubscriberInput{ID: "b"})
	mustEmit(t, s, "e1", "x.t", `{}`) // a and b
	mustEmit(t, s, "e2", "y.t", `{}`) // b only, inside a's range
	mustEmit(t, s, "e3", "x.t", `{}`) // a and b
	cs := claim(t, s, clk.Now(), 10).Deliveries
	if len(cs) != 5 {
		t.Fatalf("claimed %d, want a's 2 and b's 3", len(cs))
	}
	mustEmit(t, s, "e4", "x.t", `{}`) // past both ranges
	token, e1 := cs[0].LeaseToken, cs[0].Seq>>ordinalBits
	forged := func(eventSeq int64, ordinalOfSub, sub string) Settlement {
		return Settlement{Seq: deliverySeqOf(eventSeq, ordinalOf(t, s, ordinalOfSub)), LeaseToken: token, SubscriberID: sub, Result: ResultDelivered}
	}
	for name, st := range map[string]Settlement{
		"past the range":           forged(e1+3, "a", "a"),
		"not the subscriber's":     forged(e1+1, "a", "a"),
		"another subscriber named": forged(e1, "a", "b"),
		"named another subscriber": forged(e1, "b", "a"),
	} {
		if stale := settle(t, s, clk.Now(), st); stale != 1 {
			t.Errorf("%s: %d stale, want the settlement refused", name, stale)
		}
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries`); n != 0 {
		t.Fatalf("%d rows written by settlements no lease holds", n)
	}
	for _, c := range cs {
		settle(t, s, clk.Now(), done(c, ResultDelivered))
	}
}

// ordinalOf reads a subscriber's ordinal.
func ordinalOf(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	return countRows(t, s, `SELECT ordinal FROM subscribers WHERE id = ?`, id)
}

// TestLeasedEventsOutliveRetention: Prune keeps an event past its retention while a delivery of it
// is leased without a row, so that delivery can settle.
func TestLeasedEventsOutliveRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "old", "t", `{}`)
	c := claim(t, s, clk.Now(), 1).Deliveries[0]
	clk.Advance(30 * time.Second)
	if _, err := s.Prune(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetEvent(ctx, "old"); err != nil {
		t.Fatalf("the leased delivery's event after a prune: %v", err)
	}
	if stale := settle(t, s, clk.Now(), done(c, ResultDelivered)); stale != 0 {
		t.Fatal("the leased delivery could not settle after the prune")
	}
	clk.Advance(time.Second)
	if n, err := s.Prune(ctx, clk.Now()); err != nil || n != 1 {
		t.Fatalf("pruned %d (%v), want the delivered one", n, err)
	}
	if _, err := s.GetEvent(ctx, "old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the event once delivered and pruned: %v, want gone", err)
	}
}

// TestDeletingASubscriberEndsItsLeases: a deleted subscriber's leases go with it, and the late
// settlements of its deliveries write nothing.
func TestDeletingASubscriberEndsItsLeases(t *testing.T) {
	t.Parallel()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 2)
	cs := claim(t, s, clk.Now(), 10).Deliveries
	if err := s.DeleteSubscriber(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(t, s); n != 0 {
		t.Fatalf("%d leases of the deleted subscriber", n)
	}
	if stale := settle(t, s, clk.Now(), done(cs[0], ResultDelivered), done(cs[1], ResultRetry)); stale != 2 {
		t.Fatalf("%d stale, want both settlements of the deleted subscriber", stale)
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries`); n != 0 {
		t.Fatalf("%d rows written for a deleted subscriber", n)
	}
}

// TestABatchWithAStaleSettlementWritesTheOthers: a batch of final settlements that the quick
// insert cannot write whole (one lost its lease) is written again row by row: the live ones get
// their rows, with their first attempts, and only the lost one is stale.
func TestABatchWithAStaleSettlementWritesTheOthers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	emitN(t, s, "x", 2)
	bySub := map[string][]Claimed{}
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		bySub[c.Subscriber.ID] = append(bySub[c.Subscriber.ID], c)
	}
	if err := s.DeleteSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	var batch []Settlement
	for _, c := range []Claimed{bySub["b"][0], bySub["a"][0], bySub["b"][1]} {
		it := done(c, ResultDelivered)
		it.Status, it.Attempt = 200, &Attempt{At: clk.Now(), Status: 200, LatencyMS: 1, Outcome: "delivered"}
		batch = append(batch, it)
	}
	if stale := settle(t, s, clk.Now(), batch...); stale != 1 {
		t.Fatalf("%d stale, want only the deleted subscriber's", stale)
	}
	for _, c := range bySub["b"] {
		d, err := s.GetDelivery(ctx, c.DeliveryID)
		if err != nil || d.Status != StatusDelivered || len(d.AttemptLog) != 1 || d.AttemptLog[0].Status != 200 {
			t.Fatalf("b's delivery %+v %v, want delivered with its attempt", d, err)
		}
	}
	if c := counts(t, s, "b"); c[StatusDelivered] != 2 || c[StatusLeased] != 0 {
		t.Fatalf("b's counts %v, want 2 delivered", c)
	}
	if n := leaseCount(t, s); n != 0 {
		t.Fatalf("%d leases left, want b's gone with its last delivery", n)
	}
}

// TestRowsLeasedBeforeVersion11SettleAndExpire: deliveries a version-10 binary leased as rows
// settle after the upgrade as they did before, and those whose lease expires come back pending.
func TestRowsLeasedBeforeVersion11SettleAndExpire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, path, clk := openOld(t, 10)
	mustSub(t, old, SubscriberInput{ID: "a"})
	emitN(t, old, "x", 3)
	// What a version-10 claim wrote: each delivery a leased row, the cursor past them.
	for _, q := range []string{
		`INSERT INTO deliveries(seq, event_seq, subscriber_id, status, next_attempt_at, age_from, lease_token, lease_expires_at, created_at, updated_at)
			SELECT (e.seq << 20) | s.ordinal, e.seq, s.id, 'leased', e.created_at, e.created_at, 'old-token', ?1 + 60000, e.created_at, ?1
			FROM events e JOIN subscribers s ON s.id = 'a'`,
		`UPDATE limiter SET cursor = (SELECT max(seq) FROM events) WHERE subscriber_id = 'a'`,
		`UPDATE queue_counts SET status = 'leased' WHERE subscriber_id = 'a' AND status = 'pending'`,
	} {
		if _, err := old.w.Exec(q, ms(clk.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, Options{Path: path, Now: clk.Now})
	page, err := s.ListDeliveries(ctx, DeliveryFilter{Status: StatusLeased})
	if err != nil || len(page.Deliveries) != 3 {
		t.Fatalf("leased after the upgrade: %+v %v, want the 3 rows", page, err)
	}
	seq, err := s.deliverySeq(page.Deliveries[2].ID) // the oldest
	if err != nil {
		t.Fatal(err)
	}
	if stale := settle(t, s, clk.Now(), Settlement{Seq: seq, LeaseToken: "old-token", SubscriberID: "a", Result: ResultDelivered}); stale != 0 {
		t.Fatal("a row leased by version 10 could not settle")
	}
	clk.Advance(2 * time.Minute)
	res := claim(t, s, clk.Now(), 10)
	if len(res.Deliveries) != 2 {
		t.Fatalf("claimed %d after the old lease expired, want its 2 unsettled", len(res.Deliveries))
	}
	for _, c := range res.Deliveries {
		settle(t, s, clk.Now(), done(c, ResultDelivered))
	}
	if c := counts(t, s, "a"); c[StatusDelivered] != 3 {
		t.Fatalf("counts %v, want 3 delivered", c)
	}
}

// TestPruneKeepsTheSettledRowsOfALiveRange: a delivery of a range that settled is a row, and
// without it the lease would hold that delivery again (leased_deliveries). Prune, with a
// retention shorter than the lease (a drain's --retention 1ms beside a serve), or once the lease
// expired unrescued (nothing claimed for longer than the retention), must not delete that row
// while its lease stands: its delivery would be sent again when the lease is rescued.
func TestPruneKeepsTheSettledRowsOfALiveRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 2)
	cs := claim(t, s, clk.Now(), 10).Deliveries
	settle(t, s, clk.Now(), done(cs[0], ResultDelivered))
	clk.Advance(time.Second)
	if _, err := s.Prune(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, s) // the lease still counts one delivery
	clk.Advance(2 * time.Minute)
	if _, err := s.Prune(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	again := claim(t, s, clk.Now(), 10).Deliveries
	if len(again) != 1 || again[0].Seq != cs[1].Seq {
		t.Fatalf("claimed %d after the lease expired, want only the unsettled delivery", len(again))
	}
	settle(t, s, clk.Now(), done(again[0], ResultDelivered))
}

// TestPruneLooksAtLeasesThroughTheEventsFanout pins the plan of prune's events: an event past the
// oldest range is checked against each lease with one seek of its own fanout's members, not
// through leased_deliveries, which walks every fanout of every lease's subscriber (with a range
// of a subscriber lagging more than the retention, seconds of the write lock per chunk), and the
// walk stays on its covering index.
func TestPruneLooksAtLeasesThroughTheEventsFanout(t *testing.T) {
	t.Parallel()
	s, _ := open(t, Options{})
	p := queryPlan(t, s, prunableEventsSQL, 1, 0, 0)
	if strings.Contains(p, "fanout_members_ordinal") || !strings.Contains(p, "SEARCH e USING COVERING INDEX events_created") ||
		!strings.Contains(p, "SEARCH m EXISTS USING PRIMARY KEY (fanout=? AND ordinal=?)") {
		t.Errorf("prune's events plan %q, want the walk on events_created and one seek of fanout_members per lease", p)
	}
}

// TestARangeDeliveryKeepsItsFirstAttemptOnItsRow: the settle that writes a range delivery's row
// keeps its first attempt on that row, not in attempts (migration 0012), whatever its result;
// later attempts go to attempts, and the attempt log lists them all in order.
func TestARangeDeliveryKeepsItsFirstAttemptOnItsRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 3)
	cs := claim(t, s, clk.Now(), 10).Deliveries
	sent := clk.Now()
	ok := done(cs[0], ResultDelivered)
	ok.Status, ok.Attempt = 200, &Attempt{At: sent, Status: 200, LatencyMS: 7, Outcome: "delivered", Excerpt: "thanks"}
	retry := done(cs[1], ResultRetry)
	retry.NextAttemptAt, retry.Status, retry.Error = sent.Add(time.Minute), 500, "HTTP 500"
	retry.Attempt = &Attempt{At: sent, Status: 500, LatencyMS: 3, Outcome: "http_5xx", Error: "HTTP 500", Excerpt: "oops"}
	coalesced := done(cs[2], ResultReschedule) // counts no attempt: its record is not a first one
	coalesced.NextAttemptAt, coalesced.Attempt = sent.Add(time.Minute), &Attempt{At: sent, Outcome: "coalesced"}
	settle(t, s, sent, ok, retry, coalesced)
	if n := countRows(t, s, `SELECT count(*) FROM attempts`); n != 1 {
		t.Fatalf("%d attempts rows, want only the rescheduled delivery's: the others are on their rows", n)
	}
	log := func(c Claimed) []Attempt {
		t.Helper()
		d, err := s.GetDelivery(ctx, c.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		return d.AttemptLog
	}
	first := Attempt{At: sent, Number: 1, Status: 200, LatencyMS: 7, Outcome: "delivered", Excerpt: "thanks"}
	if got := log(cs[0]); len(got) != 1 || !got[0].At.Equal(sent) || got[0] != (Attempt{At: got[0].At, Number: 1, Status: 200, LatencyMS: 7, Outcome: "delivered", Excerpt: "thanks"}) {
		t.Fatalf("the delivered one's attempts %+v, want %+v", got, first)
	}
	if got := log(cs[2]); len(got) != 1 || got[0].Number != 0 || got[0].Outcome != "coalesced" {
		t.Fatalf("the rescheduled one's attempts %+v, want its uncounted one", got)
	}

	// The retry is a row now: its second attempt goes to attempts, after the first on its row.
	clk.Advance(time.Minute)
	var second *Claimed
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		if c.Seq == cs[1].Seq {
			second = &c
		}
	}
	if second == nil {
		t.Fatal("the retry was not claimed once due")
	}
	again := done(*second, ResultDelivered)
	again.Status, again.Attempt = 204, &Attempt{At: clk.Now(), Status: 204, LatencyMS: 2, Outcome: "delivered"}
	settle(t, s, clk.Now(), again)
	got := log(cs[1])
	if len(got) != 2 || got[0].Number != 1 || got[0].Status != 500 || got[0].Error != "HTTP 500" || got[0].Excerpt != "oops" ||
		got[1].Number != 2 || got[1].Status != 204 || !got[1].At.Equal(clk.Now()) {
		t.Fatalf("the retried one's attempts %+v, want its first (500, on its row) then its second (204)", got)
	}
	if n := countRows(t, s, `SELECT count(*) FROM all_attempts`); n != 4 {
		t.Fatalf("%d attempts in all, want 4", n)
	}
}

// TestMigrationTo12KeepsTheAttemptLog: attempts written before migration 0012, in attempts only,
// are still a delivery's attempt log after it.
func TestMigrationTo12KeepsTheAttemptLog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	old, path, clk := openOld(t, 11)
	oldSub(t, old, "a")
	now := ms(clk.Now())
	for _, q := range []string{
		`INSERT INTO events(seq, id, type, body, body_hash, created_at) VALUES (1, 'old', 't', '{}', x'00', ?1)`,
		`INSERT INTO deliveries(seq, event_seq, subscriber_id, status, attempts, next_attempt_at, age_from, created_at, updated_at, delivered_at)
			VALUES (1048576, 1, 'a', 'delivered', 2, ?1, ?1, ?1, ?1, ?1)`,
		`INSERT INTO queue_counts VALUES ('a', 'delivered', 1)`,
		`INSERT INTO attempts(delivery_seq, number, at, status, latency_ms, outcome, error) VALUES
			(1048576, 1, ?1, 503, 4, 'http_5xx', 'HTTP 503'), (1048576, 2, ?1, 200, 5, 'delivered', '')`,
	} {
		if _, err := old.w.Exec(q, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, Options{Path: path, Now: clk.Now})
	d, err := s.GetDelivery(ctx, s.DeliveryID(1048576))
	if err != nil {
		t.Fatal(err)
	}
	if got := d.AttemptLog; len(got) != 2 || got[0].Number != 1 || got[0].Status != 503 || got[1].Number != 2 || got[1].Status != 200 {
		t.Fatalf("attempt log after the upgrade %+v, want the two attempts in order", got)
	}
}

// TestAnEventsRowsAreFoundByTheirKeyRange: deliveries indexes event_seq only for rows whose seq
// does not hold their event (migration 0013). Listing an event's deliveries, counting a re-emitted
// event's and pruning read the range of the table's key that holds an event's rows and that
// index, and still find each kind of delivery: a row, a delivery leased as part of a range, and
// one still only in its fanout. (TestMigrateKeepsTheQueue lists the rows of older seqs.)
func TestAnEventsRowsAreFoundByTheirKeyRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	for _, id := range []string{"row", "leased", "fanned"} {
		mustSub(t, s, SubscriberInput{ID: id, Events: []string{"t"}})
	}
	if _, err := s.PauseSubscriber(ctx, "fanned", "test"); err != nil {
		t.Fatal(err)
	}
	mustEmit(t, s, "before", "t", `{}`)
	mustEmit(t, s, "e", "t", `{}`)
	mustEmit(t, s, "after", "t", `{}`)
	var row Claimed
	for _, c := range claim(t, s, clk.Now(), 10).Deliveries {
		if c.Subscriber.ID == "row" && c.Event.ID == "e" {
			row = c
		}
	}
	settle(t, s, clk.Now(), done(row, ResultDelivered))

	page, err := s.ListDeliveries(ctx, DeliveryFilter{EventID: "e"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Status{}
	for _, d := range page.Deliveries {
		got[d.SubscriberID] = d.Status
	}
	want := map[string]Status{"row": StatusDelivered, "leased": StatusLeased, "fanned": StatusPending}
	if !maps.Equal(got, want) {
		t.Fatalf("event e's deliveries %v, want %v", got, want)
	}
	if again := mustEmit(t, s, "e", "t", `{}`); !again.Duplicate || again.Deliveries != 3 {
		t.Fatalf("re-emit: %+v, want a duplicate with 3 deliveries", again)
	}

	keyRange := "SEARCH d USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)"
	for _, q := range []struct {
		name, sql string
		args      []any
	}{
		{"a page of an event's rows", rowsPageSQL + ` AND e.id = ? AND ` + eventRowsSQL("d", "e.seq") + ` ORDER BY d.seq DESC LIMIT ?`, []any{"e", 10}},
		{"a re-emit's count", countDeliveriesSQL, []any{"[1]"}},
		{"prune's events", prunableEventsSQL, []any{1, 0, 0}},
	} {
		if p := queryPlan(t, s, q.sql, q.args...); !strings.Contains(p, keyRange) || strings.Contains(p, "SCAN deliveries") ||
			!strings.Contains(p, "INDEX deliveries_event_legacy (event_seq=?)") || strings.Contains(p, "AUTOMATIC") {
			t.Errorf("plan of %s: %q, want the rows read by their key range and the legacy index", q.name, p)
		}
	}
}

// TestADeliveredRangeRowIsCompact: a range delivery delivered at its first attempt is written
// without the columns its event and its settle's time hold (migration 0014), and every reader
// puts them back: the delivery, its attempt log, a listing by creation time and the two views.
// Other rows keep every column.
func TestADeliveredRangeRowIsCompact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	emitN(t, s, "x", 3)
	created := clk.Now()
	cs := claim(t, s, clk.Now(), 10).Deliveries
	clk.Advance(3 * time.Second)
	sent, settled := clk.Now(), clk.Now().Add(40*time.Millisecond)
	attempt := func(c Claimed, r Result, status int, outcome string) Settlement {
		set := done(c, r)
		set.Status, set.Attempt = status, &Attempt{At: sent, Status: status, LatencyMS: 9, Outcome: outcome, Excerpt: "ok"}
		return set
	}
	dead := attempt(cs[2], ResultDead, 500, "http_5xx")
	dead.Reason, dead.Error = ReasonMaxAttempts, "HTTP 500"
	settle(t, s, settled, attempt(cs[0], ResultDelivered, 200, "delivered"), attempt(cs[1], ResultDelivered, 200, "duplicate"), dead)

	raw := func(c Claimed) (at [4]int64, outcome string) {
		t.Helper()
		err := s.w.QueryRow(`SELECT created_at, age_from, next_attempt_at, delivered_at, first_outcome FROM deliveries WHERE seq = ?`, c.Seq).
			Scan(&at[0], &at[1], &at[2], &at[3], &outcome)
		if err != nil {
			t.Fatal(err)
		}
		return at, outcome
	}
	if at, outcome := raw(cs[0]); at != [4]int64{} || outcome != "" {
		t.Fatalf("the delivered row stores %v and outcome %q, want all 0 and ''", at, outcome)
	}
	if _, outcome := raw(cs[1]); outcome != "duplicate" {
		t.Fatalf("the edge's duplicate stored its outcome as %q", outcome)
	}
	if at, _ := raw(cs[2]); at != [4]int64{ms(created), ms(created), ms(created), 0} {
		t.Fatalf("the dead row stores %v, want its times in full", at)
	}

	for i, outcome := range []string{"delivered", "duplicate"} {
		d, err := s.GetDelivery(ctx, cs[i].DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		if !d.CreatedAt.Equal(created) || !d.NextAttemptAt.Equal(created) || !d.UpdatedAt.Equal(settled) || !d.DeliveredAt.Equal(settled) {
			t.Fatalf("delivery %d reads created %v, due %v, updated %v, delivered %v; want created and due %v, the rest %v",
				i, d.CreatedAt, d.NextAttemptAt, d.UpdatedAt, d.DeliveredAt, created, settled)
		}
		want := Attempt{At: d.AttemptLog[0].At, Number: 1, Status: 200, LatencyMS: 9, Outcome: outcome, Excerpt: "ok"}
		if len(d.AttemptLog) != 1 || d.AttemptLog[0] != want || !d.AttemptLog[0].At.Equal(sent) {
			t.Fatalf("delivery %d's attempts %+v, want %+v at %v", i, d.AttemptLog, want, sent)
		}
	}
	for _, c := range []struct {
		from, to time.Time
		want     int
	}{{created, created.Add(time.Millisecond), 3}, {created.Add(time.Millisecond), time.Time{}, 0}, {time.Time{}, created, 0}} {
		page, err := s.ListDeliveries(ctx, DeliveryFilter{From: c.from, To: c.to})
		if err != nil || len(page.Deliveries) != c.want {
			t.Fatalf("listing created in [%v, %v): %d %v, want %d", c.from, c.to, len(page.Deliveries), err, c.want)
		}
		for _, d := range page.Deliveries {
			if !d.CreatedAt.Equal(created) {
				t.Fatalf("listed %+v, want it created at %v", d, created)
			}
		}
	}
	var views [5]int64
	err := s.w.QueryRow(`SELECT d.created_at, d.age_from, d.next_attempt_at, d.delivered_at, d.updated_at FROM all_deliveries d WHERE d.seq = ?`, cs[0].Seq).
		Scan(&views[0], &views[1], &views[2], &views[3], &views[4])
	if err != nil || views != [5]int64{ms(created), ms(created), ms(created), ms(settled), ms(settled)} {
		t.Fatalf("all_deliveries reads %v %v, want created, age and due %d, delivered and updated %d", views, err, ms(created), ms(settled))
	}
	if n := countRows(t, s, `SELECT count(*) FROM all_attempts WHERE outcome = 'delivered'`); n != 1 {
		t.Fatalf("all_attempts holds %d delivered attempts, want 1", n)
	}
}
