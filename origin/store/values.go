package store

import (
	"context"
	"database/sql"
)

// The statements of a settle, a claim and an emit bind their rows as a VALUES list (settle and claim
// read a JSON array with ->> before, parsed again for every field read), and run once per
// transaction for up to padChunks[0] rows: a chunk is padded with rows of NULLs that match nothing, because an
// execution costs more than the few rows of NULLs (a settle of 53 deliveries ran five statements
// of 16, 16, 16, 4 and 1 rows to update them, and as many to log their attempts).

// padChunks are the row counts of the padded statements, largest first, halving down to 4 and then 1,
// so that padding costs at most about as many NULL rows as real ones.
var padChunks = [...]int{256, 128, 64, 32, 16, 8, 4, 1}

// padded calls fn for consecutive ranges [lo, hi) covering n rows, each written by one execution of
// a statement of padChunks[k] rows: the largest chunk while more rows remain than it holds, then the
// smallest that holds the rest. The caller pads the rows past hi - lo with NULLs (padNulls), which
// the statements match nothing with and skip: one execution for a dozen subscribers, not three.
func padded(n int, fn func(k, lo, hi int) error) error {
	for lo := 0; lo < n; {
		k := len(padChunks) - 1
		for k > 0 && padChunks[k] < n-lo {
			k--
		}
		hi := min(n, lo+padChunks[k])
		if err := fn(k, lo, hi); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// padNulls appends the NULL rows of k columns that fill a chunk of padChunks[chunk] rows holding
// rows real ones.
func padNulls(args []any, chunk, rows, k int) []any {
	for range (padChunks[chunk] - rows) * k {
		args = append(args, nil)
	}
	return args
}

// chunkSQL renders a statement for every padChunks size: f gets the VALUES list of that many rows
// of k parameters.
func chunkSQL(k int, f func(values string) string) (out [len(padChunks)]string) {
	for i, n := range padChunks {
		out[i] = f(valuesSQL(n, k))
	}
	return out
}

// execPadded runs stmts, one of chunkSQL's sets, over the rows of list (cols values each), one
// padded execution per chunk, each binding prefix, the chunk's rows and their NULL padding.
func (s *Store) execPadded(ctx context.Context, tx *sql.Tx, stmts *[len(padChunks)]string, prefix, list []any, cols int) error {
	var args []any // reused by every chunk
	return padded(len(list)/cols, func(k, lo, hi int) error {
		args = append(append(args[:0], prefix...), list[cols*lo:cols*hi]...)
		_, err := s.exec(ctx, tx, stmts[k], padNulls(args, k, hi-lo, cols)...)
		return err
	})
}
