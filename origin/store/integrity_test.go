package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/shared/wire"
)

// foreignKeyViolations returns PRAGMA foreign_key_check's rows: children whose parent is missing.
// Foreign keys are not enforced (see Open), so only the store's own deletes keep this empty.
func foreignKeyViolations(t testing.TB, s *Store) []string {
	t.Helper()
	rows, err := s.r.Query(`PRAGMA foreign_key_check`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var table, parent string
		var rowid sql.NullInt64
		var fk int
		if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("%s row %v has no %s", table, rowid.Int64, parent))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fanoutViolations returns what breaks the invariants of fanouts (fanout.go) and leases (migration
// 0011) that foreign keys do not check: every event's fanout exists, a fanout whose newest event
// is past one of its subscribers' cursors (a delivery pending) still has that event, and a lease
// is of a subscriber, up to its cursor, and counts its deliveries without a row.
func fanoutViolations(t testing.TB, s *Store) []string {
	t.Helper()
	var out []string
	for _, c := range []struct{ what, q string }{
		{"events whose fanout is gone", `SELECT count(*) FROM events e WHERE fanout <> 0 AND NOT EXISTS (SELECT 1 FROM fanouts f WHERE f.id = e.fanout)`},
		{"fanouts pending for a subscriber whose newest event is gone", `SELECT count(*) FROM fanouts f
			JOIN fanout_members m ON m.fanout = f.id JOIN subscribers s ON s.ordinal = m.ordinal JOIN limiter l ON l.subscriber_id = s.id
			WHERE f.last_seq > l.cursor AND NOT EXISTS (SELECT 1 FROM events e WHERE e.seq = f.last_seq AND e.fanout = f.id)`},
		{"leases whose count is not their leased deliveries without a row", `SELECT count(*) FROM leases ls
			WHERE remaining <> (SELECT count(*) FROM leased_deliveries d WHERE d.subscriber_id = ls.subscriber_id AND d.lease_token = ls.token)
				OR remaining <= 0`},
		{"leases past their subscriber's cursor", `SELECT count(*) FROM leases ls JOIN limiter l ON l.subscriber_id = ls.subscriber_id
			WHERE ls.through_seq > l.cursor OR ls.after_seq >= ls.through_seq`},
		{"leases of no subscriber", `SELECT count(*) FROM leases ls WHERE NOT EXISTS (SELECT 1 FROM subscribers s WHERE s.id = ls.subscriber_id)`},
	} {
		var n int64
		if err := s.r.QueryRow(c.q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, c.what))
		}
	}
	return out
}

// countRows runs a count query on the store.
func countRows(t *testing.T, s *Store, q string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.r.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// TestDeletesLeaveNoOrphans runs a workload through the public API (emit with coalescing, claim,
// settle delivered, retry and dead, manual retry and replay, secret rotation), deletes two
// subscribers holding deliveries in every status, settles their deliveries that were in flight at
// the delete, and prunes: with foreign keys not enforced, the store's own deletes must leave no
// child without its parent, and the rows that should go must be gone.
func TestDeletesLeaveNoOrphans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	rule := &wire.CoalesceRule{EventTypes: []string{"rank"}, Key: "k", WindowSeconds: 10}
	fast := SubscriberInput{RatePerSec: MaxRatePerSec, Burst: MaxBurst, MaxInFlight: 6}
	for _, id := range []string{"keep", "gone", "held"} {
		in := fast
		in.ID = id
		if id != "held" {
			in.Coalesce = rule
		}
		mustSub(t, s, in)
	}
	mustEmit(t, s, "c1", "rank", `{"k":"a"}`)
	mustEmit(t, s, "c2", "rank", `{"k":"a"}`) // supersedes c1 for keep and gone
	emitN(t, s, "p", 8)

	// First round: of each subscriber's six claimed, one delivered, one retried (held's with a
	// 410 that disables it, holding its pending deliveries), two dead, two left in flight.
	first := map[string][]Claimed{}
	for _, c := range claim(t, s, clk.Now(), 100).Deliveries {
		first[c.Subscriber.ID] = append(first[c.Subscriber.ID], c)
	}
	var items []Settlement
	for id, cs := range first {
		if len(cs) != 6 {
			t.Fatalf("%s: claimed %d, want 6", id, len(cs))
		}
		for i, r := range []Result{ResultDelivered, ResultRetry, ResultDead, ResultDead} {
			it := done(cs[i], r)
			it.Attempt, it.NextAttemptAt, it.Reason = &Attempt{At: clk.Now(), Status: 500, Outcome: "http_5xx"}, clk.Now(), ReasonMaxAttempts
			if id == "held" && r == ResultRetry {
				it.Status, it.Disable, it.Sent = 410, "410 Gone", cs[i].Subscriber
			}
			items = append(items, it)
		}
	}
	if stale := settle(t, s, clk.Now(), items...); stale != 0 {
		t.Fatalf("%d stale settlements, want 0", stale)
	}
	// Manual retry and replay, then a second round that delivers what it claims.
	for _, id := range []string{"keep", "gone", "held"} {
		if _, err := s.RetryDelivery(ctx, first[id][2].DeliveryID, clk.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := s.ReplayDead(ctx, "keep", time.Time{}, time.Time{}, clk.Now()); err != nil || r != (Replayed{Pending: 1}) {
		t.Fatalf("replay: %+v %v, want 1 pending", r, err)
	}
	items = items[:0]
	for _, c := range claim(t, s, clk.Now(), 100).Deliveries {
		it := done(c, ResultDelivered)
		it.Attempt = &Attempt{At: clk.Now(), Status: 200, Outcome: "delivered"}
		items = append(items, it)
	}
	settle(t, s, clk.Now(), items...)
	for _, rot := range []struct {
		id      string
		overlap time.Duration
	}{{"gone", time.Hour}, {"keep", 0}, {"keep", 0}} {
		if _, err := s.RotateSecret(ctx, rot.id, rot.overlap); err != nil {
			t.Fatal(err)
		}
	}

	// The premise: the subscribers deleted hold deliveries in every status, with attempts.
	for id, want := range map[string][]Status{
		"gone": {StatusPending, StatusLeased, StatusDelivered, StatusDead, StatusSuperseded},
		"held": {StatusHeld, StatusLeased, StatusDelivered, StatusDead},
	} {
		c := counts(t, s, id)
		for _, st := range want {
			if c[st] == 0 {
				t.Fatalf("%s has no %s delivery before the delete: %v", id, st, c)
			}
		}
	}
	goneAttempts := countRows(t, s, `SELECT count(*) FROM all_attempts a JOIN deliveries d ON d.seq = a.delivery_seq WHERE d.subscriber_id IN ('gone', 'held')`)
	if goneAttempts == 0 || countRows(t, s, `SELECT count(*) FROM subscriber_secrets WHERE subscriber_id = 'gone'`) != 2 {
		t.Fatal("the deleted subscribers have no attempts, or gone has not two secrets")
	}
	attempts := countRows(t, s, `SELECT count(*) FROM all_attempts`)

	for _, id := range []string{"gone", "held"} {
		if err := s.DeleteSubscriber(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	// Their deliveries in flight settle as stale, logging nothing; keep's settle as usual.
	items = items[:0]
	inFlight := 0
	for id, cs := range first {
		for _, c := range cs[4:] {
			it := done(c, ResultDelivered)
			it.Attempt = &Attempt{At: clk.Now(), Status: 200, Outcome: "delivered"}
			items = append(items, it)
			if id != "keep" {
				inFlight++
			}
		}
	}
	if stale := settle(t, s, clk.Now(), items...); stale != inFlight {
		t.Fatalf("%d stale settlements after the delete, want the %d of deleted subscribers", stale, inFlight)
	}
	if got, want := countRows(t, s, `SELECT count(*) FROM all_attempts`), attempts-goneAttempts+2; got != want {
		t.Fatalf("%d attempts after the delete, want %d (%d before, %d of the deleted, keep's 2 settled)", got, want, attempts, goneAttempts)
	}
	for _, table := range []string{"deliveries", "subscriber_secrets", "limiter", "queue_counts", "delivered_by_second"} {
		if n := countRows(t, s, `SELECT count(*) FROM `+table+` WHERE subscriber_id IN ('gone', 'held')`); n != 0 {
			t.Errorf("%d %s rows of deleted subscribers", n, table)
		}
	}
	if v := foreignKeyViolations(t, s); len(v) > 0 {
		t.Fatalf("after the deletes: %v", v)
	}

	// Retention: keep's finished deliveries go with their attempts, then the events left without
	// deliveries.
	finished := countRows(t, s, `SELECT count(*) FROM deliveries WHERE status IN ('delivered', 'dead', 'superseded')`)
	clk.Advance(48 * time.Hour)
	pruned, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour))
	if err != nil || pruned != finished || finished == 0 {
		t.Fatalf("prune: %d %v, want the %d finished", pruned, err, finished)
	}
	if v := foreignKeyViolations(t, s); len(v) > 0 {
		t.Fatalf("after the prune: %v", v)
	}
	if n := countRows(t, s, `SELECT count(*) FROM deliveries WHERE status IN ('delivered', 'dead', 'superseded')`); n != 0 {
		t.Fatalf("%d finished deliveries left after the prune", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM events e WHERE NOT EXISTS (SELECT 1 FROM all_deliveries d WHERE d.event_seq = e.seq)`); n != 0 {
		t.Fatalf("%d events without deliveries left after the prune", n)
	}
	if n := countRows(t, s, `SELECT count(*) FROM all_deliveries`); n == 0 {
		t.Fatal("the prune left keep no pending delivery: the check above proves nothing")
	}
}

// maxSeqs returns the largest event and delivery seqs stored.
func maxSeqs(t *testing.T, s *Store) (events, deliveries int64) {
	t.Helper()
	return countRows(t, s, `SELECT coalesce(max(seq), 0) FROM events`), countRows(t, s, `SELECT coalesce(max(seq), 0) FROM deliveries`)
}

// emitAbove emits an event matching subscriber a and fails unless its seq and its delivery's seq
// (from the delivery's public id) are above the given ones. It returns them.
func emitAbove(t *testing.T, s *Store, id string, event, delivery int64) (int64, int64) {
	t.Helper()
	if res := mustEmit(t, s, id, "a.t", `{}`); res.Deliveries != 1 {
		t.Fatalf("%s: %d deliveries, want 1", id, res.Deliveries)
	}
	page, err := s.ListDeliveries(context.Background(), DeliveryFilter{EventID: id})
	if err != nil || len(page.Deliveries) != 1 {
		t.Fatalf("%s: deliveries %+v %v", id, page, err)
	}
	dseq, err := s.deliverySeq(page.Deliveries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	eseq := countRows(t, s, `SELECT seq FROM events WHERE id = ?`, id)
	if eseq <= event || dseq <= delivery {
		t.Fatalf("%s got event seq %d and delivery seq %d, want them above %d and %d, handed out before", id, eseq, dseq, event, delivery)
	}
	return eseq, dseq
}

// deliverAll claims and delivers everything due.
func deliverAll(t *testing.T, s *Store, now time.Time) {
	t.Helper()
	var items []Settlement
	for _, c := range claim(t, s, now, 100).Deliveries {
		items = append(items, done(c, ResultDelivered))
	}
	settle(t, s, now, items...)
}

// TestSeqsAreNeverReused: a delivery's id is public (the edge deduplicates on it), so neither a
// prune of the newest rows nor the delete of the subscriber holding them may let a later emit give
// their seqs again, across a reopen too.
func TestSeqsAreNeverReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "seqs.db")
	s, clk := open(t, Options{Path: path})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"a.*"}})
	mustSub(t, s, SubscriberInput{ID: "b", Events: []string{"b.*"}})
	prune := func(s *Store) {
		t.Helper()
		clk.Advance(48 * time.Hour)
		if _, err := s.Prune(ctx, clk.Now()); err != nil {
			t.Fatal(err)
		}
		if n := countRows(t, s, `SELECT (SELECT count(*) FROM events) + (SELECT count(*) FROM deliveries)`); n != 0 {
			t.Fatalf("%d rows left after pruning everything", n)
		}
	}

	// Everything delivered and pruned.
	emitN(t, s, "a", 5)
	deliverAll(t, s, clk.Now())
	ev, dl := maxSeqs(t, s)
	prune(s)
	ev, dl = emitAbove(t, s, "after-prune", ev, dl)

	// The newest deliveries deleted with their subscriber (their events stay).
	emitN(t, s, "b", 5)
	_, dl = maxSeqs(t, s)
	if err := s.DeleteSubscriber(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	ev, dl = emitAbove(t, s, "after-delete", ev, dl)

	// Pruned again, closed and reopened.
	deliverAll(t, s, clk.Now())
	ev, _ = maxSeqs(t, s)
	prune(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = open(t, Options{Path: path, Now: clk.Now})
	emitAbove(t, s, "after-reopen", ev, dl)
}

// TestMigrationStartsTheSeqMarks: migration 0007 starts both marks at the largest seqs of a
// database written before it, so the newest rows deleted right after the upgrade, before any
// emit, are not given again.
func TestMigrationStartsTheSeqMarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	old, err := openVersion(ctx, Options{Path: path}, 6)
	if err != nil {
		t.Fatal(err)
	}
	oldSub(t, old, "a")
	for i := range 3 {
		if _, err := old.w.Exec(`INSERT INTO events(seq, id, type, body, body_hash, created_at) VALUES (?1, 'old-' || ?1, 'a.t', '{}', x'00', 0)`, i+1); err != nil {
			t.Fatal(err)
		}
		if _, err := old.w.Exec(`INSERT INTO deliveries(event_seq, subscriber_id, status, next_attempt_at, age_from, created_at, updated_at)
			VALUES (?1, 'a', 'dead', 0, 0, 0, 0)`, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := old.w.Exec(`INSERT INTO queue_counts SELECT subscriber_id, status, count(*) FROM deliveries GROUP BY 1, 2`); err != nil {
		t.Fatal(err)
	}
	ev, dl := maxSeqs(t, old)
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ := open(t, Options{Path: path})
	if _, err := s.w.Exec(`DELETE FROM deliveries WHERE seq = ?`, dl); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`DELETE FROM events WHERE seq = ?`, ev); err != nil {
		t.Fatal(err)
	}
	emitAbove(t, s, "after-upgrade", ev, dl)
}

// TestEmitAfterAnOlderBinaryWrote: a binary from before migration 0007, still running on a file
// a newer one migrated, stores events and deliveries at the largest seq + 1 without moving the
// marks; the newer binary's next emit still succeeds, with seqs above them.
func TestEmitAfterAnOlderBinaryWrote(t *testing.T) {
	t.Parallel()
	s, _ := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"a.*"}})
	emitN(t, s, "a", 3)
	if _, err := s.w.Exec(`INSERT INTO events(seq, id, type, body, body_hash, created_at)
		SELECT max(seq) + 1, 'old-binary', 'a.t', '{}', x'00', 0 FROM events`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`INSERT INTO deliveries(event_seq, subscriber_id, status, next_attempt_at, age_from, created_at, updated_at)
		SELECT max(seq), 'a', 'delivered', 0, 0, 0, 0 FROM events`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.w.Exec(`INSERT INTO queue_counts(subscriber_id, status, n) VALUES ('a', 'delivered', 1)
		ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + 1`); err != nil {
		t.Fatal(err)
	}
	ev, dl := maxSeqs(t, s)
	ev, dl = emitAbove(t, s, "after-old-binary", ev, dl)
	emitAbove(t, s, "and-again", ev, dl)
}

// TestTwoStoresEmittingOnOneFileNeverCollide: two handles on one file, as two processes, emit
// concurrently; each takes its seqs from the marks inside its own write transaction, so no emit
// fails on a taken seq and every event and delivery is stored once.
func TestTwoStoresEmittingOnOneFileNeverCollide(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shared.db")
	a, clk := open(t, Options{Path: path})
	b, _ := open(t, Options{Path: path, Now: clk.Now})
	mustSub(t, a, SubscriberInput{ID: "s1"})
	mustSub(t, b, SubscriberInput{ID: "s2"})
	const callers, events = 4, 50 // per store
	var wg sync.WaitGroup
	errs := make(chan error, 2*callers)
	for i := range 2 * callers {
		s := []*Store{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range events {
				// Pairs, so groups of several events and single ones both occur.
				batch := []EmitInput{{ID: fmt.Sprintf("e%d-%d", i, j), Type: "t", Body: []byte(`{}`)}}
				if j%2 == 0 {
					batch = append(batch, EmitInput{ID: fmt.Sprintf("e%d-%d-b", i, j), Type: "t", Body: []byte(`{}`)})
				}
				if _, err := s.EmitBatch(context.Background(), batch); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(2 * callers * events * 3 / 2)
	if n := countRows(t, a, `SELECT count(*) FROM events`); n != want {
		t.Fatalf("%d events stored, want %d", n, want)
	}
	if n := countRows(t, a, `SELECT count(DISTINCT seq) FROM all_deliveries`); n != 2*want {
		t.Fatalf("%d distinct delivery seqs, want %d", n, 2*want)
	}
	ev, _ := maxSeqs(t, a)
	if got := countRows(t, a, `SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'events_seq'`); got != ev {
		t.Fatalf("events mark %d, want the largest seq %d", got, ev)
	}
}

// TestRenewStoreID: after a new store id (for a restored backup), every delivery id handed out
// differs from every one before, whatever its seq; the old ids are not found any more.
func TestRenewStoreID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "restored.db")
	s, clk := open(t, Options{Path: path})
	mustSub(t, s, SubscriberInput{ID: "a", Events: []string{"a.*"}})
	idOf := func(s *Store, event string) string {
		t.Helper()
		page, err := s.ListDeliveries(ctx, DeliveryFilter{EventID: event})
		if err != nil || len(page.Deliveries) != 1 {
			t.Fatalf("deliveries of %s: %+v %v", event, page, err)
		}
		return page.Deliveries[0].ID
	}
	mustEmit(t, s, "before", "a.t", `{}`)
	before := idOf(s, "before")
	storeID, err := s.RenewStoreID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = open(t, Options{Path: path, Now: clk.Now})
	mustEmit(t, s, "after", "a.t", `{}`)
	prefix := "dlv_" + storeID + "_"
	if after := idOf(s, "after"); !strings.HasPrefix(after, prefix) || strings.HasPrefix(before, prefix) {
		t.Fatalf("ids %s before and %s after the new store id %s", before, after, storeID)
	}
	if _, err := s.GetDelivery(ctx, before); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the old id %s: %v, want not found", before, err)
	}
	if now := idOf(s, "before"); !strings.HasPrefix(now, prefix) {
		t.Fatalf("the stored delivery's id is %s, want it under the new store id %s", now, storeID)
	}
}

// deliveredHistory stores delivered rows with seqs from to to directly, each with an attempt,
// counted: for sub, or alternately a's and b's if sub is "".
func deliveredHistory(t *testing.T, s *Store, from, to int64, sub string) {
	t.Helper()
	for _, q := range []string{`WITH RECURSIVE k(i) AS (SELECT ?1 UNION ALL SELECT i + 1 FROM k WHERE i < ?2)
		INSERT INTO deliveries(seq, event_seq, subscriber_id, status, next_attempt_at, age_from, created_at, updated_at, delivered_at)
		SELECT i, (SELECT min(seq) FROM events), coalesce(?3, CASE i % 2 WHEN 0 THEN 'a' ELSE 'b' END), 'delivered', 0, 0, 0, 0, 0 FROM k`,
		`INSERT INTO attempts(delivery_seq, number, at, status, latency_ms, outcome)
		SELECT seq, 1, 0, 200, 1, 'delivered' FROM deliveries WHERE seq BETWEEN ?1 AND ?2`,
		`INSERT INTO queue_counts(subscriber_id, status, n) SELECT subscriber_id, status, count(*) FROM deliveries
		WHERE seq BETWEEN ?1 AND ?2 GROUP BY 1, 2 ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + excluded.n`} {
		if _, err := s.w.Exec(q, from, to, sql.NullString{String: sub, Valid: sub != ""}); err != nil {
			t.Fatal(err)
		}
	}
}

// refuseDeletes makes every delete from table that matches when fail, as on a full disk, until
// the function it returns is called.
func refuseDeletes(t *testing.T, s *Store, table, when string) (allow func()) {
	t.Helper()
	if _, err := s.w.Exec(`CREATE TRIGGER refuse_deletes BEFORE DELETE ON ` + table + ` WHEN ` + when + `
		BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := s.w.Exec(`DROP TRIGGER refuse_deletes`); err != nil {
			t.Fatal(err)
		}
	}
}

// historyLeft counts the delivery rows of subscriber id and the record of its deleted history.
func historyLeft(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	return countRows(t, s, `SELECT count(*) FROM deliveries WHERE subscriber_id = ?`, id) +
		countRows(t, s, `SELECT count(*) FROM meta WHERE key = ?`, historyKeyPrefix+id)
}

// TestDeleteSubscriberDeletesItsHistoryWindowByWindow: a deleted subscriber's delivered history,
// which no index holds by subscriber, goes in windows of deleteWindow rows of the table, each its
// own transaction, up to the seq recorded at the delete; the other subscribers' rows stay, and so
// do the rows past that seq (a subscriber created again under the id has only such rows).
func TestDeleteSubscriberDeletesItsHistoryWindowByWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	mustEmit(t, s, "e", "t", `{}`) // pending for both, not a row: it stays b's
	const n = deleteWindow*5/2 + 1 // two and a half windows, alternately a's and b's
	deliveredHistory(t, s, 1, n, "")
	if err := s.DeleteSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	rows := func(sub string) int64 {
		return countRows(t, s, `SELECT count(*) FROM deliveries WHERE subscriber_id = ?`, sub)
	}
	if a, b, attempts := rows("a"), rows("b"), countRows(t, s, `SELECT count(*) FROM attempts`); a != 0 || b != n/2+1 || attempts != b {
		t.Fatalf("after the delete: a has %d rows, b %d, attempts %d; want 0, %d and one per b row", a, b, attempts, n/2+1)
	}
	if left := countRows(t, s, `SELECT count(*) FROM meta WHERE key LIKE 'deleted_history:%'`); left != 0 {
		t.Fatalf("%d histories still recorded as to delete", left)
	}
	if got, want := deliverClaimed(t, s, time.Now()), map[string]bool{"b/e": true}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed %v, want %v", got, want)
	}

	// A history recorded up to seq n leaves a's rows past it.
	mustSub(t, s, SubscriberInput{ID: "a"})
	deliveredHistory(t, s, n+1, n+3, "a")
	if _, err := s.w.Exec(`INSERT INTO meta(key, value) VALUES ('deleted_history:a', ?)`, n); err != nil {
		t.Fatal(err)
	}
	if err := s.finishHistory(ctx, "a"); err != nil || rows("a") != 3 {
		t.Fatalf("the new a has %d rows after its history up to seq %d was finished (%v), want its 3", rows("a"), n, err)
	}
	for _, q := range deleteQueueSQL {
		index := strings.Fields(q[strings.Index(q, "INDEXED BY"):])[2]
		if plan := queryPlan(t, s, q, "a"); !strings.Contains(plan, "INDEX "+index+" (") {
			t.Errorf("%s\nplan: %s", q, plan)
		}
	}
	if plan := queryPlan(t, s, historyWindowSQL, 0, n); !strings.Contains(plan, "INTEGER PRIMARY KEY") {
		t.Errorf("the history window reads %s", plan)
	}
}

// TestADeletedHistoryLeftIsFinishedBeforeItsIDComesBack: when the history windows fail, the
// delete still answers (the subscriber and its queue are gone) and the history stays recorded.
// Creating the id again, or the next Prune, finishes it first: the old rows' count triggers never
// land on a new subscriber of the id.
func TestADeletedHistoryLeftIsFinishedBeforeItsIDComesBack(t *testing.T) {
	t.Parallel()
	for _, finish := range []string{"create", "prune"} {
		t.Run(finish, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s, clk := open(t, Options{})
			mustSub(t, s, SubscriberInput{ID: "a"})
			mustEmit(t, s, "old", "t", `{}`)
			deliverClaimed(t, s, clk.Now())
			allow := refuseDeletes(t, s, "deliveries", "OLD.status = 'delivered'")
			if err := s.DeleteSubscriber(ctx, "a"); err != nil {
				t.Fatalf("delete with its history windows failing: %v", err)
			}
			if _, err := s.GetSubscriber(ctx, "a"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("after the delete: %v", err)
			}
			history := func() int64 { return historyLeft(t, s, "a") }
			if h := history(); h != 2 {
				t.Fatalf("history rows and records left: %d, want the delivered row and its record", h)
			}
			allow()
			if finish == "prune" {
				if _, err := s.Prune(ctx, clk.Now().Add(-time.Hour)); err != nil || history() != 0 {
					t.Fatalf("after a prune: %d history rows and records left (%v)", history(), err)
				}
			}
			mustSub(t, s, SubscriberInput{ID: "a"})
			if h := history(); h != 0 {
				t.Fatalf("a created again beside %d rows and records of the old a's history", h)
			}
			mustEmit(t, s, "new", "t", `{}`)
			if got, want := deliverClaimed(t, s, clk.Now()), map[string]bool{"a/new": true}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("claimed %v, want %v", got, want)
			}
			if c := counts(t, s, "a"); c[StatusDelivered] != 1 {
				t.Fatalf("the new a counts %v, want its one delivered", c)
			}
		})
	}
}

// TestAStaleHistoryFinishLeavesALaterDeleteRecorded: a finisher that read the record of an
// earlier delete of the id (another process's Prune, say) ends after that history was finished,
// the id created again and deleted again with its windows failing. It must remove the record it
// read only: the later one's rows are past its bound, and without their record the id is created
// again beside them, their count triggers landing on the new subscriber's counts.
func TestAStaleHistoryFinishLeavesALaterDeleteRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	// deleteKept creates a with a delivered delivery of event, deletes it with its history
	// windows failing, and returns the bound recorded.
	deleteKept := func(event string) int64 {
		t.Helper()
		mustSub(t, s, SubscriberInput{ID: "a"})
		mustEmit(t, s, event, "t", `{}`)
		deliverClaimed(t, s, clk.Now())
		allow := refuseDeletes(t, s, "deliveries", "OLD.status = 'delivered'")
		if err := s.DeleteSubscriber(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		allow()
		return countRows(t, s, `SELECT value FROM meta WHERE key = 'deleted_history:a'`)
	}
	first := deleteKept("e1")
	if err := s.finishHistory(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if second := deleteKept("e2"); second <= first {
		t.Fatalf("the second delete's bound %d is not past the first's %d", second, first)
	}
	if err := s.deleteHistory(ctx, "a", first); err != nil { // the stale finisher's end
		t.Fatal(err)
	}
	mustSub(t, s, SubscriberInput{ID: "a"})
	if n := countRows(t, s, `SELECT count(*) FROM deliveries WHERE subscriber_id = 'a'`); n != 0 {
		t.Fatalf("a created again beside %d delivered rows of the a before", n)
	}
}

// TestADeletedSubscribersVersion8RowsGoWithIt: a delivered row a version-8 binary wrote for a
// subscriber after migration 0009 (its seq past 2^62, above the history's bound) goes with the
// subscriber. Left to the retention prune, its count trigger took the delivered count of a
// subscriber created again under the id down.
func TestADeletedSubscribersVersion8RowsGoWithIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "old", "t", `{}`)
	deliverClaimed(t, s, clk.Now())
	deliveredHistory(t, s, 1<<62+1, 1<<62+1, "a") // last changed at 0: the prune's
	if err := s.DeleteSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "new", "t", `{}`)
	deliverClaimed(t, s, clk.Now())
	if _, err := s.Prune(ctx, clk.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	rows := countRows(t, s, `SELECT count(*) FROM deliveries WHERE subscriber_id = 'a' AND status = 'delivered'`)
	if c := counts(t, s, "a"); rows != 1 || c[StatusDelivered] != 1 {
		t.Fatalf("the new a has %d delivered rows, counted %d; want its 1", rows, c[StatusDelivered])
	}
}

// TestADeleteOverALeftRecordKeepsTheLargerBound: a binary older than the history records creates
// an id again beside a record left by a newer delete; the next delete of the id records the larger
// bound over it (not a failure on the key) and deletes both histories.
func TestADeleteOverALeftRecordKeepsTheLargerBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustEmit(t, s, "e", "t", `{}`)
	deliverClaimed(t, s, clk.Now())
	if _, err := s.w.Exec(`INSERT INTO meta(key, value) VALUES ('deleted_history:a', 1)`); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSubscriber(ctx, "a"); err != nil {
		t.Fatalf("delete beside a left record: %v", err)
	}
	if n := historyLeft(t, s, "a"); n != 0 {
		t.Fatalf("%d rows and records of a's histories left", n)
	}
}

// TestPruneGoesOnPastAHistoryItCannotFinish: a deleted subscriber's history that cannot be
// finished (here a trigger refuses the removal of its record) does not hold up retention for the
// others: Prune reports it and prunes the rest, and the next Prune finishes it.
func TestPruneGoesOnPastAHistoryItCannotFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, clk := open(t, Options{})
	mustSub(t, s, SubscriberInput{ID: "a"})
	mustSub(t, s, SubscriberInput{ID: "b"})
	mustEmit(t, s, "old", "t", `{}`)
	deliverClaimed(t, s, clk.Now())
	allow := refuseDeletes(t, s, "meta", "OLD.key = 'deleted_history:a'")
	if err := s.DeleteSubscriber(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	record := func() int64 { return countRows(t, s, `SELECT count(*) FROM meta WHERE key = 'deleted_history:a'`) }
	clk.Advance(48 * time.Hour)
	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err == nil || !strings.Contains(err.Error(), `"a"`) || record() != 1 {
		t.Fatalf("prune beside a history it cannot finish: %v (record left: %d), want an error naming a", err, record())
	}
	if b := countRows(t, s, `SELECT count(*) FROM deliveries`); b != 0 {
		t.Fatalf("%d deliveries left after that prune, want b's pruned too", b)
	}
	allow()
	if _, err := s.Prune(ctx, clk.Now().Add(-24*time.Hour)); err != nil || record() != 0 {
		t.Fatalf("the next prune (%v) left the record", err)
	}
}
