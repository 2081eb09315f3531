package main

import (
	"os"
	"runtime"
	"testing"
)

// TestOneShotCommandsRunOnTwoProcs: a shared host's NPROC counts threads, and the Go runtime
// starts about one per core of the host (plus 5 or 6), whatever CPU the account may use: a drain
// ran 36 threads at GOMAXPROCS 32 where it runs 8 at 2, and one it cannot make is a fatal crash,
// the drain's leased deliveries left until their leases expire. Drain and the data commands run
// on two; the servers (serve, dev, edge local) keep every core, and GOMAXPROCS, when set, wins.
func TestOneShotCommandsRunOnTwoProcs(t *testing.T) {
	if os.Getenv("GOMAXPROCS") != "" {
		t.Skip("GOMAXPROCS is set, and wins")
	}
	saved := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(saved) })
	for _, c := range []struct {
		path []string
		want int
	}{
		{[]string{"drain"}, 2}, {[]string{"emit"}, 2}, {[]string{"stats"}, 2}, {[]string{"deliveries", "list"}, 2},
		{[]string{"serve"}, 8}, {[]string{"dev"}, 8}, {[]string{"edge", "local"}, 8},
	} {
		cmd, _, err := rootCmd.Find(c.path)
		if err != nil {
			t.Fatal(err)
		}
		runtime.GOMAXPROCS(8) // a host of 8 cores
		limitProcs(cmd)
		if got := runtime.GOMAXPROCS(0); got != c.want {
			t.Errorf("%v: GOMAXPROCS %d on a host of 8 cores, want %d", c.path, got, c.want)
		}
	}
}
