package rig

import (
	"database/sql"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// DB reads an edgehook database file read-only (query_only), independently of the store package,
// so the suite checks what is really on disk. It knows only the few columns it counts.
type DB struct {
	db *sql.DB
}

// OpenDB opens path read-only; it is closed at the end of the test.
func OpenDB(t testing.TB, path string) *DB {
	t.Helper()
	q := url.Values{}
	q.Add("_pragma", "query_only(1)")
	q.Add("_pragma", "busy_timeout(10000)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return &DB{db: db}
}

// TableCounts returns the row count of every table: equal counts before and after a refused
// request mean it wrote nothing.
func (d *DB) TableCounts(t testing.TB) map[string]int64 {
	t.Helper()
	rows, err := d.db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	out := map[string]int64{}
	for _, n := range names {
		var c int64
		if err := d.db.QueryRow(`SELECT count(*) FROM "` + n + `"`).Scan(&c); err != nil {
			t.Fatal(err)
		}
		out[n] = c
	}
	var ver string
	if err := d.db.QueryRow(`SELECT value FROM meta WHERE key = 'subscribers_version'`).Scan(&ver); err == nil {
		out["meta.subscribers_version="+ver] = 1
	}
	return out
}

// Statuses returns the number of deliveries per status.
func (d *DB) Statuses(t testing.TB) map[string]int64 {
	t.Helper()
	return d.countBy(t, `SELECT status, count(*) FROM all_deliveries GROUP BY status`)
}

// AttemptOutcomes returns the number of attempts per outcome.
func (d *DB) AttemptOutcomes(t testing.TB) map[string]int64 {
	t.Helper()
	return d.countBy(t, `SELECT outcome, count(*) FROM all_attempts GROUP BY outcome`)
}

func (d *DB) countBy(t testing.TB, query string, args ...any) map[string]int64 {
	t.Helper()
	rows, err := d.db.Query(query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		out[k] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// DeliveryStatuses returns the status of every delivery, keyed "<subscriber id> <event id>".
func (d *DB) DeliveryStatuses(t testing.TB) map[string]string {
	t.Helper()
	rows, err := d.db.Query(`SELECT d.subscriber_id, e.id, d.status FROM all_deliveries d JOIN events e ON e.seq = d.event_seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var sub, ev, st string
		if err := rows.Scan(&sub, &ev, &st); err != nil {
			t.Fatal(err)
		}
		out[sub+" "+ev] = st
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// EventIDs returns the set of stored event ids.
func (d *DB) EventIDs(t testing.TB) map[string]bool {
	t.Helper()
	rows, err := d.db.Query(`SELECT id FROM events`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out[id] = true
	}
	return out
}

// DeliveriesPerEvent returns the number of deliveries of each event id.
func (d *DB) DeliveriesPerEvent(t testing.TB) map[string]int64 {
	t.Helper()
	return d.countBy(t, `SELECT e.id, count(d.seq) FROM events e LEFT JOIN all_deliveries d ON d.event_seq = e.seq GROUP BY e.id`)
}

// Attempt is one row of the attempt log.
type Attempt struct {
	Status  int
	Outcome string
	Error   string
	Excerpt string
}

// Attempts returns the attempts of the deliveries of an event to a subscriber, oldest first.
func (d *DB) Attempts(t testing.TB, eventID, subscriberID string) []Attempt {
	t.Helper()
	rows, err := d.db.Query(`SELECT a.status, a.outcome, a.error, a.excerpt FROM all_attempts a
		JOIN deliveries d ON d.seq = a.delivery_seq JOIN events e ON e.seq = d.event_seq
		WHERE e.id = ? AND d.subscriber_id = ? ORDER BY a.ord`, eventID, subscriberID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []Attempt
	for rows.Next() {
		var a Attempt
		if err := rows.Scan(&a.Status, &a.Outcome, &a.Error, &a.Excerpt); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// DeliveryState is a delivery's status, reason and attempt count.
type DeliveryState struct {
	Status, Reason string
	Attempts       int
	LastStatus     int
}

// Delivery returns the state of the delivery of an event to a subscriber.
func (d *DB) Delivery(t testing.TB, eventID, subscriberID string) (DeliveryState, bool) {
	t.Helper()
	var s DeliveryState
	err := d.db.QueryRow(`SELECT d.status, d.reason, d.attempts, d.last_status FROM all_deliveries d JOIN events e ON e.seq = d.event_seq
		WHERE e.id = ? AND d.subscriber_id = ?`, eventID, subscriberID).Scan(&s.Status, &s.Reason, &s.Attempts, &s.LastStatus)
	if err == sql.ErrNoRows {
		return s, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

// SubscriberState returns a subscriber's state column.
func (d *DB) SubscriberState(t testing.TB, id string) string {
	t.Helper()
	var s string
	if err := d.db.QueryRow(`SELECT state FROM subscribers WHERE id = ?`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// Circuit returns a subscriber's circuit breaker state (closed, open or probing).
func (d *DB) Circuit(t testing.TB, id string) string {
	t.Helper()
	var s string
	if err := d.db.QueryRow(`SELECT circuit FROM limiter WHERE subscriber_id = ?`, id).Scan(&s); err != nil && err != sql.ErrNoRows {
		t.Fatal(err)
	}
	return s
}

// Record writes a test's figures to build/reliability/<name>.json (RELIABILITY.md is filled from
// these files) and logs them.
func Record(t testing.TB, name string, figures any) {
	t.Helper()
	data, err := json.MarshalIndent(figures, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(Root(t), "build", "reliability")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("figures %s: %s", name, data)
}
