package engine

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
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

// TestANewURLIsSentToAtOnce: a subscriber's endpoint fails every delivery, until its circuit
// opens, or its Retry-After pauses the subscriber for an hour, or with neither, each delivery
// backed off an hour or more. The operator points the subscriber at a working endpoint (as
// PATCH /v1/subscribers/{id} does: the update, then the engine's Wake): its deliveries go there at
// once, with an hour's poll interval and a clock that does not move, not after the cool-down,
// the pause or the backoff the old endpoint earned.
func TestANewURLIsSentToAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		threshold int
		answer    func(w http.ResponseWriter, r *recorded)
		earned    func(st store.SubscriberStats) bool
	}{
		{"circuit open", 2, status(http.StatusInternalServerError), func(st store.SubscriberStats) bool { return st.CircuitOpen }},
		{"Retry-After", 100, status(http.StatusServiceUnavailable, "Retry-After", "3600"),
			func(st store.SubscriberStats) bool { return !st.PausedUntil.IsZero() }},
		{"backoff", 100, status(http.StatusInternalServerError), func(st store.SubscriberStats) bool { return !st.CircuitOpen && st.PausedUntil.IsZero() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The backoff is an hour to two (newEnv), and the fake clock never reaches it.
			e := newEnv(t, Config{PollInterval: time.Hour, CircuitThreshold: tc.threshold, CircuitCooldown: time.Hour,
				CircuitMaxCooldown: time.Hour})
			ctx := context.Background()
			old := newSink(t, tc.answer)
			arrived := make(chan string, 10)
			fresh := newSink(t, func(w http.ResponseWriter, r *recorded) {
				arrived <- r.header.Get(wire.HeaderWebhookID)
				w.WriteHeader(http.StatusNoContent)
			})
			e.sub(store.SubscriberInput{ID: "a", URL: old.URL})
			events := []string{"e1", "e2", "e3"}
			for _, id := range events {
				e.emit(id, "t", `{}`)
			}
			if err := e.eng.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer e.eng.Stop(ctx)
			waitUntil(t, "every delivery to fail at the old URL", func() bool {
				if len(old.received()) < len(events) {
					return false
				}
				st, err := e.st.Stats(ctx, e.clk.Now())
				if err != nil || len(st.Subscribers) != 1 {
					return false
				}
				s := st.Subscribers[0]
				return s.Counts[store.StatusPending] == 3 && s.Counts[store.StatusLeased] == 0 && tc.earned(s)
			})

			url := fresh.URL
			if _, err := e.st.UpdateSubscriber(ctx, "a", store.SubscriberPatch{URL: &url}); err != nil {
				t.Fatal(err)
			}
			e.eng.Wake()
			if got := arrivals(arrived, len(events)); len(got) != len(events) {
				t.Fatalf("after the URL changed, the new URL got %v within 5s, want %v (the old one got %d requests)",
					got, events, len(old.received()))
			}
			if n := len(old.received()); n != 3 {
				t.Errorf("the old URL got %d requests, want still 3", n)
			}
		})
	}
}

// TestAStaleFailureGoesToTheNewURLAtOnce: a send still out to the old URL when the operator
// points the subscriber at a new one (and the engine is woken, as PATCH does) fails after the
// change: a 500, or the subscriber's timeout. That failure is the old endpoint's: it costs the
// delivery neither a backoff (an hour or more here, with an hour's poll interval and a clock
// that does not move) nor an attempt (with --max-attempts 1, the old URL's failure came at the
// last one), nor its life (a 503 whose Retry-After, an hour, would end past the last call 20
// minutes before its max age). The delivery goes to the new URL at once and is delivered at its
// first counted attempt, the old URL's failure logged before it, uncounted (numbered 0).
func TestAStaleFailureGoesToTheNewURLAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		maxAttempts int
		maxAge      time.Duration // if set, the send comes 20 minutes before it
		timeoutMS   int64
		answer      func(w http.ResponseWriter, r *recorded)
		status      int // the old URL's, as logged
	}{
		{"500", 0, 0, 30000, status(http.StatusInternalServerError), 500},
		{"timeout", 0, 0, 2500, func(_ http.ResponseWriter, r *recorded) { <-r.req.Context().Done() }, 0},
		{"500 at the last attempt", 1, 0, 30000, status(http.StatusInternalServerError), 500},
		{"503 with a Retry-After past the last call", 0, 2 * time.Hour, 30000,
			status(http.StatusServiceUnavailable, "Retry-After", "3600"), 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, Config{PollInterval: time.Hour, MaxAttempts: tc.maxAttempts, MaxAge: tc.maxAge})
			ctx := context.Background()
			sent, changed := newGate(t), newGate(t)
			old := newSink(t, func(w http.ResponseWriter, r *recorded) {
				sent.open()
				<-changed.ch
				tc.answer(w, r)
			})
			arrived := make(chan string, 10)
			fresh := newSink(t, func(w http.ResponseWriter, r *recorded) {
				arrived <- r.header.Get(wire.HeaderWebhookID)
				w.WriteHeader(http.StatusNoContent)
			})
			e.sub(store.SubscriberInput{ID: "a", URL: old.URL, TimeoutMS: tc.timeoutMS})
			e.emit("e1", "t", `{}`)
			if tc.maxAge > 0 {
				e.clk.Advance(tc.maxAge - 20*time.Minute)
			}
			if err := e.eng.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer e.eng.Stop(ctx)
			waitGate(t, sent, "e1 to reach the old URL")
			url := fresh.URL
			if _, err := e.st.UpdateSubscriber(ctx, "a", store.SubscriberPatch{URL: &url}); err != nil {
				t.Fatal(err)
			}
			e.eng.Wake()
			changed.open()
			if got := arrivals(arrived, 1); len(got) != 1 {
				d := e.only()
				t.Fatalf("the new URL got %v within 5s, want e1; e1 is %s (reason %q) after %d attempts, due in %s",
					got, d.Status, d.Reason, d.Attempts, d.NextAttemptAt.Sub(e.clk.Now()))
			}

			var d *store.Delivery
			waitUntil(t, "e1 to be settled delivered", func() bool {
				d = e.only()
				return d.Status == store.StatusDelivered
			})
			var log []string
			for _, a := range d.AttemptLog {
				log = append(log, fmt.Sprintf("#%d %d", a.Number, a.Status))
			}
			if want := []string{fmt.Sprintf("#0 %d", tc.status), "#1 204"}; d.Attempts != 1 || !slices.Equal(log, want) {
				t.Errorf("e1: %d attempts, logged %q; want 1, %q", d.Attempts, log, want)
			}
			dead, retried := testutil.ToFloat64(e.eng.m.dead.WithLabelValues("a", store.ReasonMaxAttempts)), testutil.ToFloat64(e.eng.m.retried.WithLabelValues("a"))
			if dead != 0 || retried != 1 {
				t.Errorf("deliveries_dead_total{reason=max_attempts} %v, deliveries_retried_total %v; want 0 and 1: the old URL's failure was retried", dead, retried)
			}
		})
	}
}

// arrivals collects what arrives (arrived gets the webhook-id of each send that got through) for
// up to 5 s, until n different ids have: with an hour's poll interval, only what was made due at
// once (and the engine told) gets there.
func arrivals(arrived <-chan string, n int) []string {
	var got []string
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case id := <-arrived:
			if !slices.Contains(got, id) {
				got = append(got, id)
			}
		case <-timeout:
			return got
		}
	}
	return got
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

// TestLateAnswersFromAReplacedURLEarnNothing: sends still out to the old URL when the operator
// changes it (a hanging endpoint, the usual reason to change it) answer after the change: a 503
// with an hour's Retry-After and a 500. Those answers are about the old endpoint: they neither
// pause the subscriber nor open its circuit again (a threshold of 1 here), nor hold the two
// deliveries back: both go to the new URL at once.
func TestLateAnswersFromAReplacedURLEarnNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour, CircuitThreshold: 1, CircuitCooldown: time.Hour, CircuitMaxCooldown: time.Hour})
	ctx := context.Background()
	release := make(chan struct{})
	old := newSink(t, func(w http.ResponseWriter, r *recorded) {
		<-release
		if r.header.Get(wire.HeaderWebhookID) == "e1" {
			status(http.StatusServiceUnavailable, "Retry-After", "3600")(w, r)
			return
		}
		status(http.StatusInternalServerError)(w, r)
	})
	arrived := make(chan string, 10)
	fresh := newSink(t, func(w http.ResponseWriter, r *recorded) {
		arrived <- r.header.Get(wire.HeaderWebhookID)
		w.WriteHeader(http.StatusNoContent)
	})
	e.sub(store.SubscriberInput{ID: "a", URL: old.URL, TimeoutMS: 30000})
	e.emit("e1", "t", `{}`)
	e.emit("e2", "t", `{}`)
	if err := e.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.eng.Stop(ctx)
	waitUntil(t, "both sends to hang at the old URL", func() bool { return len(old.received()) == 2 })

	url := fresh.URL
	if _, err := e.st.UpdateSubscriber(ctx, "a", store.SubscriberPatch{URL: &url}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if got := arrivals(arrived, 2); len(got) != 2 {
		t.Fatalf("after late answers from the replaced URL, the new URL got %v within 5s, want e1 and e2", got)
	}
	if s := e.onlySubscriber(); s.CircuitOpen || !s.PausedUntil.IsZero() {
		t.Errorf("after late answers from the replaced URL: circuit open %v, paused until %v; want closed and not paused", s.CircuitOpen, s.PausedUntil)
	}
}

// TestALateRefusalOfARotatedOutSecretEarnsNothing: a send still out when the operator rotates the
// subscriber's secret with an overlap of 0, and updates the receiver at once, is refused (401)
// for its old signature after the rotation. The refusal is about a secret the subscriber no
// longer has: it does not open the circuit (a threshold of 1 here) nor back the delivery off, so
// it goes out again at once with the new secret. The rotation moves updated_at on, as every
// change does, which is how the settle knows the send is older than it.
func TestALateRefusalOfARotatedOutSecretEarnsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{PollInterval: time.Hour, CircuitThreshold: 1, CircuitCooldown: time.Hour, CircuitMaxCooldown: time.Hour})
	ctx := context.Background()
	release := make(chan struct{})
	var accepted atomic.Pointer[signature.Secret]
	arrived := make(chan string, 10)
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		id := r.header.Get(wire.HeaderWebhookID)
		if id == "e1" {
			<-release
		}
		if err := signature.Verify([]signature.Secret{*accepted.Load()}, id, r.header.Get(wire.HeaderWebhookTimestamp),
			r.header.Get(wire.HeaderWebhookSignature), r.body, e.clk.Now(), signature.DefaultTolerance); err != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		arrived <- id
		w.WriteHeader(http.StatusNoContent)
	})
	sub := e.sub(store.SubscriberInput{ID: "a", URL: k.URL, TimeoutMS: 30000})
	accepted.Store(&sub.Secrets[0].Secret)
	e.emit("e1", "t", `{}`)
	if err := e.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.eng.Stop(ctx)
	waitUntil(t, "the send to hang at the receiver", func() bool { return len(k.received()) == 1 })

	rotated, err := e.st.RotateSecret(ctx, "a", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !rotated.UpdatedAt.After(sub.UpdatedAt) {
		t.Errorf("rotating the secret left updated_at at %s", rotated.UpdatedAt)
	}
	accepted.Store(&rotated.Secrets[0].Secret)
	close(release)
	if got := arrivals(arrived, 1); len(got) != 1 {
		t.Fatalf("after a late refusal of the rotated-out secret, e1 did not arrive again within 5s")
	}
	if e.onlySubscriber().CircuitOpen {
		t.Errorf("after a late refusal of the rotated-out secret: circuit open, want closed")
	}
}

// onlySubscriber returns the stats of the one subscriber.
func (e *env) onlySubscriber() store.SubscriberStats {
	e.t.Helper()
	st, err := e.st.Stats(context.Background(), e.clk.Now())
	if err != nil || len(st.Subscribers) != 1 {
		e.t.Fatalf("stats %+v (%v), want one subscriber's", st, err)
	}
	return st.Subscribers[0]
}

// TestAChangeThatSendsNothingDifferentlyLeavesTheFailureCounted: an operator's script (or config
// tooling) re-applies the subscriber's rate while each send to its failing endpoint is out.
// Every such PATCH moves updated_at on, yet the send went to the same URL with the same secrets
// and headers: its 500 is news of the subscriber, and costs the delivery its attempt and an
// hour's backoff (the clock does not move). Taken as a stale failure, each was due again at once
// and uncounted: the endpoint was sent to in a loop with no backoff, no attempt spent and no
// circuit, for as long as the script ran (until --max-age).
func TestAChangeThatSendsNothingDifferentlyLeavesTheFailureCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{})
	rate := 1000.0
	k := newSink(t, func(w http.ResponseWriter, _ *recorded) {
		if _, err := e.st.UpdateSubscriber(context.Background(), "a", store.SubscriberPatch{RatePerSec: &rate}); err != nil {
			t.Error(err)
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	e.sub(store.SubscriberInput{ID: "a", URL: k.URL})
	e.emit("e1", "t", `{}`)
	res, err := e.eng.Drain(context.Background(), DrainOptions{For: 2 * time.Second, UntilIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	if d, n := e.only(), len(k.received()); n != 1 || d.Attempts != 1 || !res.Idle {
		t.Fatalf("a PATCH of the rate during each send: %d requests in 2 s (idle: %v), e1 %s after %d attempts; want 1 request, 1 attempt, then an hour's backoff",
			n, res.Idle, d.Status, d.Attempts)
	}
}
