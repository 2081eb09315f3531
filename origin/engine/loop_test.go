package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgehook/edgehook/origin/store"
)

// stuckSink answers nothing until release is closed or the request is cut; arrived is signalled
// (coalesced) when a request comes in.
func stuckSink(t *testing.T, release chan struct{}) (s *sink, arrived chan struct{}) {
	arrived = make(chan struct{}, 1)
	return newSink(t, func(w http.ResponseWriter, r *recorded) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.req.Context().Done():
		}
	}), arrived
}

// TestASubscriberStuckAtItsCapDoesNotStallAnothersBacklog: one subscriber is stuck at its
// in-flight cap; another has a backlog whose answers come back one by one. Its settles must keep
// claiming its backlog; they must not wait for the poll (an hour here).
func TestASubscriberStuckAtItsCapDoesNotStallAnothersBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour})
	release := make(chan struct{})
	stuck, _ := stuckSink(t, release)
	var n atomic.Int64
	var mu sync.Mutex
	got := map[string]bool{}
	x := newSink(t, func(w http.ResponseWriter, r *recorded) {
		k := n.Add(1)
		time.Sleep(time.Duration(k%4+1) * 40 * time.Millisecond) // answers trickle back
		mu.Lock()
		got[r.header.Get("webhook-id")] = true
		mu.Unlock()
		w.WriteHeader(200)
	})
	e.sub(store.SubscriberInput{ID: "stuck", URL: stuck.URL, Events: []string{"y"}, MaxInFlight: 1, TimeoutMS: 30000})
	e.sub(store.SubscriberInput{ID: "x", URL: x.URL, Events: []string{"x"}, MaxInFlight: 4})
	e.emit("y0", "y", `{}`)
	const total = 20
	for i := range total {
		e.emit(fmt.Sprintf("x%d", i), "x", `{}`)
	}
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		e.eng.Stop(context.Background())
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k == total {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("after 5s only %d of %d deliveries reached subscriber x while subscriber stuck held its cap", len(got), total)
}

// TestAPausedStuckSubscriberDoesNotSilenceWakeUps: a stuck subscriber at its cap is
// paused by the operator (the API calls Wake). New emits for another, idle, subscriber must still
// wake the daemon at once.
func TestAPausedStuckSubscriberDoesNotSilenceWakeUps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour})
	release := make(chan struct{})
	stuck, arrived := stuckSink(t, release)
	fastDone := make(chan struct{}, 1)
	fast := newSink(t, func(w http.ResponseWriter, _ *recorded) {
		w.WriteHeader(200)
		fastDone <- struct{}{}
	})
	e.sub(store.SubscriberInput{ID: "stuck", URL: stuck.URL, Events: []string{"y"}, MaxInFlight: 1, TimeoutMS: 30000})
	e.sub(store.SubscriberInput{ID: "fast", URL: fast.URL, Events: []string{"f"}})
	if err := e.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		close(release)
		e.eng.Stop(context.Background())
	}()
	e.emit("y0", "y", `{}`)
	<-arrived
	if _, err := e.st.PauseSubscriber(context.Background(), "stuck", "operator"); err != nil {
		t.Fatal(err)
	}
	e.eng.Wake() // as the API does after a pause
	time.Sleep(100 * time.Millisecond)
	e.emit("f0", "f", `{}`)
	select {
	case <-fastDone:
	case <-time.After(5 * time.Second):
		t.Fatal("an emit for an idle active subscriber was not sent within 5s: the paused, stuck subscriber counted as an active one held at its cap")
	}
}

// TestAClaimWithNoFreeSlotAsksForNothing: the loop looks for a free slot without the writer, and a
// settle's claim may fill it before the loop's claim gets its turn. That claim asks the store for
// nothing (a limit of 0 is an error there, which the loop would log as a failed claim).
func TestAClaimWithNoFreeSlotAsksForNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Workers: 2})
	e.sub(store.SubscriberInput{URL: "http://127.0.0.1:1/"})
	e.emit("e1", "t", `{}`)
	r := e.eng.newRun(false, nil)
	defer r.cancelSends()
	r.slots <- struct{}{}
	r.slots <- struct{}{}
	if out := r.claim(context.Background()); out.err != nil || out.limit != 0 || len(out.res.Deliveries) != 0 {
		t.Fatalf("claim with every slot taken: %+v, want nothing asked and no error", out)
	}
}

// TestAFailedSettleAndClaimIsAClaimError: a settle that claims in the same transaction, and fails,
// is written again alone; its claim is lost as a failed claim of the loop's is, and
// edgehook_claim_errors_total counts it, once (the settle's own retries claim nothing).
func TestAFailedSettleAndClaimIsAClaimError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	r := e.eng.newRun(false, nil)
	defer r.cancelSends()
	r.slots <- struct{}{} // the slot of the delivery settled below
	e.st.Close()          // every transaction fails from here on
	r.writer.Lock()
	claimed := r.settleAndClaim([]store.Settlement{{Seq: 1, LeaseToken: "t", SubscriberID: "s", Result: store.ResultDelivered}})
	r.writer.Unlock()
	if claimed {
		t.Fatal("a settle and claim on a closed store reported its claim")
	}
	if v := testutil.ToFloat64(e.eng.m.claimErrors); v != 1 {
		t.Fatalf("edgehook_claim_errors_total = %v after one failed settle and claim, want 1", v)
	}
}

// TestAStoppedDrainDoesNotPrune: a drain prunes at its start, within its own time: a drain whose
// time is already up (its --for, or a signal) leaves the retention to the next one. The prune ran
// on a context of its own, and a long one held a cron drain past its --for and its SIGTERM.
func TestAStoppedDrainDoesNotPrune(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{Retention: time.Hour})
	k := newSink(t, func(w http.ResponseWriter, _ *recorded) { w.WriteHeader(200) })
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("old", "t", `{}`)
	if res := e.drain(); res.Delivered != 1 {
		t.Fatalf("%+v, want the event delivered", res)
	}
	e.clk.Advance(2 * time.Hour) // past the retention
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := e.eng.Drain(ctx, DrainOptions{For: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetEvent(context.Background(), "old"); err != nil {
		t.Fatalf("a drain stopped before it started pruned the event: %v", err)
	}
	e.drain() // one with time to run prunes it
	if _, err := e.st.GetEvent(context.Background(), "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a whole drain: %v, want the event pruned", err)
	}
}
