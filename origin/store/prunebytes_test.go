package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAPruneTransactionFreesABoundedAmountOfEventBodies: deleting an event frees its body, and
// SQLite reads every page of it to do so (about 1 ms per MiB, measured on a warm cache), all under
// the write lock. A prune transaction took pruneChunk events whatever their size: 2,000 bodies of
// 1 MiB held every emit and settle back for about 2 s, and at a --body-limit of tens of MiB for
// longer than the --busy-timeout, failing them.
func TestAPruneTransactionFreesABoundedAmountOfEventBodies(t *testing.T) {
	t.Parallel()
	const size, events = 4 << 20, 12 // 48 MiB: above pruneBodyBytes
	s, clk := open(t, Options{MaxBodyBytes: size + 16})
	body := `{"x":"` + strings.Repeat("a", size-8) + `"}`
	for i := range events {
		mustEmit(t, s, fmt.Sprintf("e%d", i), "t", body) // no subscriber: nothing needs them once old
	}
	clk.Advance(time.Hour)
	cutoff := ms(clk.Now())
	after := [2]int64{-1, 0}
	err := s.inTx(context.Background(), func(tx *sql.Tx) error {
		_, err := s.pruneEvents(context.Background(), tx, cutoff, &after)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	freed := (events - countRows(t, s, `SELECT count(*) FROM events`)) * size
	if freed > pruneBodyBytes+size {
		t.Fatalf("one prune transaction freed %d MiB of event bodies, want at most about %d MiB", freed>>20, pruneBodyBytes>>20)
	}
	if _, err := s.Prune(context.Background(), clk.Now()); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, s, `SELECT count(*) FROM events`); n != 0 {
		t.Fatalf("%d old events left after a whole prune, want none", n)
	}
}
