package store

import (
	"context"
	"database/sql"
	"encoding/json"
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

// write adds the changes to queue_counts in one statement.
func (c countDeltas) write(ctx context.Context, s *Store, tx *sql.Tx) error {
	type row struct {
		Sub    string `json:"s"`
		Status string `json:"st"`
		N      int64  `json:"n"`
	}
	list := make([]row, 0, len(c))
	for k, n := range c {
		if n != 0 {
			list = append(list, row{k[0], k[1], n})
		}
	}
	if len(list) == 0 {
		return nil
	}
	data, err := json.Marshal(list)
	if err != nil {
		return err
	}
	// WHERE true: an upsert's SELECT needs a WHERE clause, or ON CONFLICT parses as a join constraint.
	_, err = s.exec(ctx, tx, `INSERT INTO queue_counts(subscriber_id, status, n)
		SELECT value->>'s', value->>'st', value->>'n' FROM jsonb_each(?) WHERE true
		ON CONFLICT(subscriber_id, status) DO UPDATE SET n = n + excluded.n`, string(data))
	return err
}
