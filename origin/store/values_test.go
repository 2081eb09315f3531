package store

import "testing"

// TestPaddedCoversEveryRowOnce: the ranges cover [0, n) in order, each fits its chunk, and only a
// range that ends the rows leaves a chunk part empty (one statement for the rest, not several).
func TestPaddedCoversEveryRowOnce(t *testing.T) {
	for n := 0; n <= 3*padChunks[0]+5; n++ {
		next := 0
		err := padded(n, func(k, lo, hi int) error {
			if lo != next || hi <= lo || hi-lo > padChunks[k] {
				t.Fatalf("n=%d: range [%d, %d) in a chunk of %d after row %d", n, lo, hi, padChunks[k], next)
			}
			if hi-lo < padChunks[k] && (hi != n || k+1 < len(padChunks) && padChunks[k+1] >= hi-lo) {
				t.Fatalf("n=%d: range [%d, %d) in a chunk of %d: a smaller chunk holds it, or rows follow", n, lo, hi, padChunks[k])
			}
			if got := len(padNulls(nil, k, hi-lo, 3)); got != 3*(padChunks[k]-(hi-lo)) {
				t.Fatalf("n=%d: %d padding values for %d rows in a chunk of %d", n, got, hi-lo, padChunks[k])
			}
			next = hi
			return nil
		})
		if err != nil || next != n {
			t.Fatalf("n=%d: covered [0, %d), err %v", n, next, err)
		}
	}
}
