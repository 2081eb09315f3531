package store

// Statements that write or read a row per subscriber (or per event) bind their values rather than
// read a JSON array with ->>: the JSON was parsed again for every field read, and such small
// statements cost a drain's transaction more than its big ones per delivery.

// padded calls fn for consecutive ranges [lo, hi) covering n rows, each written by one execution of
// a statement of rowChunks[k] rows: the largest chunk while more rows remain than it holds, then the
// smallest that holds the rest. The caller pads the rows past hi - lo with NULLs (padNulls), which
// the statements match nothing with and skip: one execution for a dozen subscribers, not three.
func padded(n int, fn func(k, lo, hi int) error) error {
	for lo := 0; lo < n; {
		k := len(rowChunks) - 1
		for k > 0 && rowChunks[k] < n-lo {
			k--
		}
		hi := min(n, lo+rowChunks[k])
		if err := fn(k, lo, hi); err != nil {
			return err
		}
		lo = hi
	}
	return nil
}

// padNulls appends the NULL rows of k columns that fill a chunk of rowChunks[chunk] rows holding
// rows real ones.
func padNulls(args []any, chunk, rows, k int) []any {
	for range (rowChunks[chunk] - rows) * k {
		args = append(args, nil)
	}
	return args
}

// chunkSQL renders a statement for every rowChunks size: f gets the VALUES list of that many rows
// of k parameters.
func chunkSQL(k int, f func(values string) string) (out [len(rowChunks)]string) {
	for i, n := range rowChunks {
		out[i] = f(valuesSQL(n, k))
	}
	return out
}
