package engine

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// TestWakeSendsAResumedBacklogAtOnce: with an hour's poll interval, a paused subscriber's
// delivery goes out as soon as it is resumed and the engine woken, and only then.
func TestWakeSendsAResumedBacklogAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour})
	arrived := make(chan string, 1)
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		arrived <- r.header.Get(wire.HeaderWebhookID)
		w.WriteHeader(http.StatusNoContent)
	})
	sub := e.sub(store.SubscriberInput{URL: k.URL})
	ctx := context.Background()
	if err := e.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.eng.Stop(ctx)
	expect := func(want, after string) {
		t.Helper()
		select {
		case id := <-arrived:
			if id != want {
				t.Fatalf("after %s: got %q, want %q", after, id, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("after %s: %q did not go out within 5s", after, want)
		}
	}
	e.emit("ready", "t", `{}`)
	expect("ready", "an emit") // the daemon is past its first claim, waiting for a wake-up
	if _, err := e.st.PauseSubscriber(ctx, sub.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.emit("held", "t", `{}`) // no wake-up: nothing it wrote can be claimed
	if _, err := e.st.ResumeSubscriber(ctx, sub.ID); err != nil {
		t.Fatal(err)
	}
	e.eng.Wake()
	expect("held", "a resume and Wake")
}

// TestWakeRereadsActiveSubscribers: a run reads how many subscribers are active once a poll
// interval, and again after each Wake, so one created or resumed through the API counts at once.
func TestWakeRereadsActiveSubscribers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour})
	r := e.eng.newRun(false, nil)
	defer r.cancelSends()
	ctx := context.Background()
	count := func(want int, after string) {
		t.Helper()
		if n := len(r.activeSubscribers(ctx)); n != want {
			t.Fatalf("after %s: %d active subscribers, want %d", after, n, want)
		}
	}
	a := e.sub(store.SubscriberInput{URL: "http://127.0.0.1:1/"})
	count(1, "the first read")
	e.sub(store.SubscriberInput{URL: "http://127.0.0.1:1/"})
	count(1, "a creation without Wake (the count holds for a poll interval)")
	e.eng.Wake()
	count(2, "a creation and Wake")
	if _, err := e.st.PauseSubscriber(ctx, a.ID, "test"); err != nil {
		t.Fatal(err)
	}
	e.eng.Wake()
	count(1, "a pause and Wake")
}

// TestClaimTakesTheWakeOfWhatItClaims: a claim sees every emit committed before it, so it takes
// their pending wake-up with it; left pending, it woke the loop for an empty claim transaction.
func TestClaimTakesTheWakeOfWhatItClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour})
	k := newSink(t, func(w http.ResponseWriter, _ *recorded) { w.WriteHeader(http.StatusNoContent) })
	e.sub(store.SubscriberInput{URL: k.URL})
	r := e.eng.newRun(false, nil)
	defer func() {
		close(r.jobs)
		r.sends.Wait()
		r.cancelSends()
	}()
	e.emit("first", "t", `{}`)
	select {
	case <-e.st.Wake():
	default:
		t.Fatal("an emit for an active subscriber signalled no wake-up")
	}
	e.emit("second", "t", `{}`)
	if out := r.claim(context.Background()); out.err != nil || len(out.res.Deliveries) != 2 {
		t.Fatalf("claim: %d deliveries, err %v; want both emits' deliveries", len(out.res.Deliveries), out.err)
	}
	select {
	case <-e.st.Wake():
		t.Fatal("the claim left the wake-up of the emit it claimed pending")
	default:
	}
}
