package engine

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/internal/testclock"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// crashChildEnv tells the test binary to run as the crash test's child: an engine draining the
// database named by the variable, until it is killed.
const crashChildEnv = "EDGEHOOK_CRASH_CHILD_DB"

// crashLease is the child's lease duration; the restarted engine's clock runs this far ahead so
// the leases the child held have expired.
const crashLease = 30 * time.Second

func runCrashChild() int {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: os.Getenv(crashChildEnv)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	eng, err := New(st, Config{Workers: 8, BatchSize: 8, LeaseDuration: crashLease, AllowNetworks: loopback, PollInterval: 10 * time.Millisecond}, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err = eng.Drain(ctx, DrainOptions{For: time.Minute, UntilIdle: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestCrashMidDrain kills an engine (a child process running this test binary) with SIGKILL while
// it has deliveries in flight, restarts on the same file, and checks that every delivery ends
// delivered and that the subscriber saw at most as many duplicates as were in flight at the kill.
func TestCrashMidDrain(t *testing.T) {
	t.Parallel()
	const total, killAfter = 120, 40
	path := filepath.Join(t.TempDir(), "crash.db")
	var (
		mu       sync.Mutex
		seen     = map[string]int{}
		arrivals int
	)
	reached := make(chan struct{})
	release := make(chan struct{})
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		mu.Lock()
		seen[r.header.Get(wire.HeaderWebhookID)]++
		arrivals++
		n := arrivals
		mu.Unlock()
		if n == killAfter {
			close(reached)
		}
		if n >= killAfter { // hold the rest open: they are in flight when the child dies
			select {
			case <-release:
			case <-r.req.Context().Done():
			}
		}
		w.WriteHeader(200)
	})

	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSubscriber(ctx, store.SubscriberInput{ID: "s", URL: k.URL, Events: []string{"*"}, RatePerSec: 10000, Burst: 10000, MaxInFlight: 8}); err != nil {
		t.Fatal(err)
	}
	for i := range total {
		if _, err := st.Emit(ctx, store.EmitInput{ID: fmt.Sprintf("e%03d", i), Type: "t", Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child did not deliver in time")
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no chance to release anything
		t.Fatal(err)
	}
	cmd.Wait()
	close(release)

	clk := testclock.New(time.Now().Add(crashLease + time.Second))
	st, err = store.Open(ctx, store.Options{Path: path, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	stats, err := st.Stats(ctx, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	inFlight := stats.Subscribers[0].Counts[store.StatusLeased]
	if inFlight == 0 {
		t.Fatal("nothing was in flight at the kill: the test did not test a crash")
	}
	eng, err := New(st, Config{AllowNetworks: loopback, Now: clk.Now, PollInterval: 10 * time.Millisecond}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := eng.Drain(ctx, DrainOptions{For: 60 * time.Second, UntilIdle: true}); err != nil || !res.Idle {
		t.Fatalf("restart drain: %+v %v", res, err)
	}
	stats, _ = st.Stats(ctx, clk.Now())
	if c := stats.Subscribers[0].Counts; c[store.StatusDelivered] != total {
		t.Fatalf("after restart: %v, want all %d delivered", c, total)
	}
	mu.Lock()
	defer mu.Unlock()
	duplicates := 0
	for i := range total {
		n := seen[fmt.Sprintf("e%03d", i)]
		if n == 0 {
			t.Fatalf("e%03d never reached the subscriber", i)
		}
		duplicates += n - 1
	}
	if int64(duplicates) > inFlight {
		t.Fatalf("%d duplicates, more than the %d in flight at the kill", duplicates, inFlight)
	}
	t.Logf("in flight at the kill: %d, duplicates: %d", inFlight, duplicates)
}
