package store

import (
	"context"
	"database/sql"
)

// countDeltas are changes to queue_counts that a transaction makes itself rather than through the
// per-row triggers (migrations 0003 and 0004): emit's inserted rows and every move into or out of
// 'leased'. Keys are (subscriber, status).
type countDeltas map[[2]string]int64

// move counts n deliveries of sub going from one status to another ("" from: inserted).
func (c countDeltas) move(sub string, from, to Status, n int64) {
	if from != "" {
		c[[2]string{sub, string(from)}] -= n
	}
	c[[2]string{sub, string(to)}] += n
}

// into reports whether the changes add deliveries to a status.
func (c countDeltas) into(to Status) bool {
	for k, n := range c {
		if k[1] == string(to) && n > 0 {
			return true
		}
	}
	return false
}

// total is how many deliveries the changes add to a status.
func (c countDeltas) total(to Status) int64 {
	var n int64
	for k, d := range c {
		if k[1] == string(to) && d > 0 {
			n += d
		}
	}
	return n
}

// write adds the changes to queue_counts in one statement (per padded chunk of rows).
func (c countDeltas) write(ctx context.Context, s *Store, tx *sql.Tx) error {
	list := make([]any, 0, 3*len(c))
	for k, n := range c {
		if n != 0 {
			list = append(list, k[0], k[1], n)
		}
	}
	return s.execPadded(ctx, tx, &writeCountsSQL, nil, list, 3)
}

// writeCountsSQL adds count changes (subscriber, status, n) to queue_counts, skipping the padding.
// WHERE: an upsert's SELECT needs a WHERE clause, or ON CONFLICT parses as a join constraint.
var writeCountsSQL = chunkSQL(3, func(values string) string {
	return `INSERT INTO queue_counts(subscriber_id, status, n) SELECT column1, column2, column3 FROM (` + values + `)
		WHERE column1 IS NOT NULL ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + excluded.n`
})
