package engine

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/wire"
)

// TestNoAttemptAfterTheMaxAge: --max-age is the "age after which a failing delivery is dead"
// (README, settings table; DESIGN: "after N attempts or a maximum age a delivery is dead"). A
// failed attempt whose retry would come after that age is the delivery's last: it must not stay
// pending past its max age and be sent again then. Here the max age is 1 h and the subscriber's
// first answer is 503 with Retry-After of 2 h (honoured: the cap is 3 h). The engine scheduled the
// retry at 2 h, left the delivery pending past its max age, and sent it again at 2 h (the
// subscriber answered 200 then: delivered at twice its max age).
func TestNoAttemptAfterTheMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, RetryAfterCap: 3 * time.Hour, MaxAttempts: 100})
	k, ages := ageSink(t, e, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "7200")
		w.WriteHeader(503)
	})
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	e.drain()
	for range 2 {
		e.clk.Advance(time.Hour)
		e.drain()
	}
	for i, age := range ages() {
		if age > time.Hour {
			t.Errorf("attempt %d was sent at age %s, past the max age of 1h", i+1, age)
		}
	}
	// The answer with Retry-After was an attempt: it counts, unlike a death unsent.
	if d := e.only(); d.Status != store.StatusDead || d.Reason != store.ReasonMaxAge || d.Attempts != 1 {
		t.Errorf("two hours after its emit (max age 1h), after a failed attempt: delivery %s (reason %q, %d attempts), want dead by max_age after 1 attempt",
			d.Status, d.Reason, d.Attempts)
	}
}

// TestARetryPastTheMaxAgeComesBeforeIt: a failed attempt whose backoff would land after the max
// age is retried a minute before it (lastCallLead), the delivery's last chance; the operator's
// hold (an edge fault) is bounded alike.
func TestARetryPastTheMaxAgeComesBeforeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 10})
	now := e.clk.Now()
	c := store.Claimed{AgeFrom: now.Add(-50 * time.Minute), Attempts: 1}
	last := c.AgeFrom.Add(time.Hour - time.Minute)
	if set := e.eng.retry(c, store.Settlement{}, now.Add(30*time.Minute), now); set.Result != store.ResultRetry || !set.NextAttemptAt.Equal(last) {
		t.Fatalf("backoff to 30 min after, 10 min before the max age: result %d at %s, want a retry a minute before the max age, %s", set.Result, set.NextAttemptAt, last)
	}
	for range 20 { // the hold is random, up to an hour here
		if set := e.eng.holdForOperator(c, store.Settlement{}, now); set.NextAttemptAt.After(last) {
			t.Fatalf("an edge fault 10 min before the max age is held until %s, past the last call %s", set.NextAttemptAt, last)
		}
	}
}

// TestAnEdgeCoalescedDeliveryIsNotHeldPastTheMaxAge: the edge (the real relay core here) holds a
// delivery whose coalesce key it forwarded less than the record's window ago, and answers
// coalesced with the rest of the window as its Retry-After: an hour here, past the max age of
// 30 min. Rescheduled an hour later, the delivery stayed pending past its max age, to be sent
// then; like a retry the subscriber asked to wait past its max age, it is dead now, unsent: no
// attempt counted, the edge's answer logged as an uncounted one.
func TestAnEdgeCoalescedDeliveryIsNotHeldPastTheMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: 30 * time.Minute})
	k := newSink(t, status(200))
	rule := &wire.CoalesceRule{EventTypes: []string{"video.*"}, Key: "video_id", WindowSeconds: 3600}
	sub := e.sub(store.SubscriberInput{ID: "s", URL: k.URL, Mode: store.ModeEdge, Coalesce: rule})
	secret := edgeSecret(t)
	url, _ := realEdge(t, secret, sub, 0, loopback)
	e.useEdge(url, secret)
	e.emit("e1", "video.rank_updated", `{"video_id":"v7"}`)
	e.drain() // forwarded: the key's window starts
	e.emit("e2", "video.rank_updated", `{"video_id":"v7"}`)
	emitted := e.clk.Now()
	if res := e.drain(); res.Dead != 1 {
		t.Errorf("the drain of the coalesced delivery counted %d dead, want 1", res.Dead)
	}
	page, err := e.st.ListDeliveries(context.Background(), store.DeliveryFilter{EventID: "e2"})
	if err != nil || len(page.Deliveries) != 1 {
		t.Fatalf("deliveries of e2: %d (%v)", len(page.Deliveries), err)
	}
	d, err := e.st.GetDelivery(context.Background(), page.Deliveries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != store.StatusDead || d.Reason != store.ReasonMaxAge || d.Attempts != 0 || !strings.Contains(d.LastError, "not sent") ||
		len(d.AttemptLog) != 1 || d.AttemptLog[0].Number != 0 || d.AttemptLog[0].Outcome != string(wire.OutcomeCoalesced) {
		t.Errorf("held by the edge for an hour, max age 30m: %s (%q), next attempt at age %s, %d attempts, last error %q, log %+v; "+
			"want dead unsent by max_age, no attempt counted, the coalesced answer logged uncounted",
			d.Status, d.Reason, d.NextAttemptAt.Sub(emitted), d.Attempts, d.LastError, d.AttemptLog)
	}
	if n := len(k.received()); n != 1 {
		t.Errorf("the subscriber got %d requests, want e1's", n)
	}
}

// TestACoalescedRescheduleComesByTheMaxAge: without a Retry-After from the edge, a coalesced
// delivery waits a first backoff, brought forward to the last call before the max age as a retry's
// is; one the edge answers at or past its max age (a first attempt, claimed then) is dead unsent.
func TestACoalescedRescheduleComesByTheMaxAge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, BackoffBase: time.Hour, BackoffCap: time.Hour})
	now := e.clk.Now()
	coalesced := response{status: http.StatusTooManyRequests, outcome: string(wire.OutcomeCoalesced)}
	c := store.Claimed{AgeFrom: now.Add(-50 * time.Minute), Subscriber: &store.Subscriber{ID: "s", Mode: store.ModeEdge}}
	last := c.AgeFrom.Add(time.Hour - time.Minute)
	for range 20 { // the backoff is random, up to an hour here
		if set := e.eng.decide(c, coalesced, now); set.Result != store.ResultReschedule || set.NextAttemptAt.After(last) {
			t.Fatalf("coalesced 10 min before the max age: result %d at %s, want a reschedule by the last call %s", set.Result, set.NextAttemptAt, last)
		}
	}
	c.AgeFrom = now.Add(-time.Hour)
	if set := e.eng.decide(c, coalesced, now); set.Result != store.ResultDeadUnsent || set.Reason != store.ReasonMaxAge {
		t.Fatalf("coalesced at the max age: result %d (%q) due %s, want dead unsent by max_age", set.Result, set.Reason, set.NextAttemptAt)
	}
}

// TestNoAttemptAfterTheMaxAgeBehindAnOpenCircuit: PROTOCOL.md §5 now says "No attempt
// comes after --max-age". retry() brings the next attempt forward to the max age, but nothing
// stops a claim that comes later: here the first failure opens the circuit for 2 h (max age 1 h),
// the delivery is not claimable until the cool-down ends, and is then sent as the probe at age 2 h.
func TestNoAttemptAfterTheMaxAgeBehindAnOpenCircuit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 100, BackoffBase: time.Second, BackoffCap: time.Second,
		CircuitThreshold: 1, CircuitCooldown: 2 * time.Hour, CircuitMaxCooldown: 2 * time.Hour})
	k, ages := ageSink(t, e, func(w http.ResponseWriter) { w.WriteHeader(500) })
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	e.drain()
	for range 3 {
		e.clk.Advance(50 * time.Minute)
		e.drain()
	}
	for i, age := range ages() {
		if age >= time.Hour {
			t.Errorf("attempt %d was sent at age %s, past the max age of 1h", i+1, age)
		}
	}
}

// TestADeliveryDeadUnsentCountsNoAttempt: a delivery claimed past its max age (here behind a
// circuit's 2 h cool-down, max age 1 h) dies unsent, so nothing of it is an attempt: its count
// stays at the one attempt made, no attempt is logged or counted in the metrics, and its last
// status is still that attempt's. Each was also the circuit's probe, which told nothing of the
// subscriber: the next claim probes again at once, not a lease later, so both die in one drain.
func TestADeliveryDeadUnsentCountsNoAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 100, BackoffBase: time.Second, BackoffCap: time.Second,
		CircuitThreshold: 1, CircuitCooldown: 2 * time.Hour, CircuitMaxCooldown: 2 * time.Hour})
	k := newSink(t, status(500))
	e.sub(store.SubscriberInput{ID: "s", URL: k.URL})
	e.emit("e1", "t", `{}`)
	e.emit("e2", "t", `{}`)
	e.drain()
	e.clk.Advance(150 * time.Minute)
	if res := e.drain(); res.Dead != 2 {
		t.Errorf("the drain past the cool-down counted %d dead, want 2", res.Dead)
	}
	if n := len(k.received()); n != 2 {
		t.Errorf("the subscriber got %d requests, want the 2 first attempts", n)
	}
	ctx := context.Background()
	for _, id := range []string{"e1", "e2"} {
		page, err := e.st.ListDeliveries(ctx, store.DeliveryFilter{EventID: id})
		if err != nil || len(page.Deliveries) != 1 {
			t.Fatalf("deliveries of %s: %d (%v)", id, len(page.Deliveries), err)
		}
		d, err := e.st.GetDelivery(ctx, page.Deliveries[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != store.StatusDead || d.Reason != store.ReasonMaxAge || d.Attempts != 1 || len(d.AttemptLog) != 1 ||
			d.LastStatus != 500 || !strings.Contains(d.LastError, "not sent") {
			t.Errorf("%s: %s (%q), %d attempts, log %+v, last %d %q; want dead unsent by max_age: 1 attempt in its count and its log, last 500, an error saying it was not sent",
				id, d.Status, d.Reason, d.Attempts, d.AttemptLog, d.LastStatus, d.LastError)
		}
	}
	if page, err := e.st.ListDeliveries(ctx, store.DeliveryFilter{Status: store.StatusDead}); err != nil || len(page.Deliveries) != 2 {
		t.Errorf("%d dead deliveries listed (%v), want 2", len(page.Deliveries), err)
	}
	m := e.eng.m
	var latency dto.Metric
	if err := m.latency.WithLabelValues(string(store.ModeDirect)).(prometheus.Metric).Write(&latency); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]float64{
		"failed":  testutil.ToFloat64(m.failed.WithLabelValues("s", classHTTP5xx)),
		"retried": testutil.ToFloat64(m.retried.WithLabelValues("s")),
		"latency": float64(latency.GetHistogram().GetSampleCount()),
	} {
		if got != 2 {
			t.Errorf("attempts in %s: %v, want the 2 sent", name, got)
		}
	}
	if got := testutil.ToFloat64(m.dead.WithLabelValues("s", store.ReasonMaxAge)); got != 2 {
		t.Errorf("dead by max_age: %v, want 2", got)
	}
	st, err := e.st.Stats(ctx, e.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Subscribers[0].Counts; c[store.StatusDead] != 2 || c[store.StatusPending] != 0 {
		t.Errorf("counts %v, want 2 dead", c)
	}
}

// ageSink answers a delivery's first request with first, and 200 after; ages returns the age of
// each request at the sink, from now (the emit's time).
func ageSink(t *testing.T, e *env, first func(w http.ResponseWriter)) (k *sink, ages func() []time.Duration) {
	var mu sync.Mutex
	var seen []time.Duration
	emitted := e.clk.Now()
	k = newSink(t, func(w http.ResponseWriter, r *recorded) {
		mu.Lock()
		seen = append(seen, e.clk.Now().Sub(emitted))
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			first(w)
			return
		}
		w.WriteHeader(200)
	})
	return k, func() []time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// TestTheLastAttemptBeforeTheMaxAgeIsSent: a retry whose backoff lands past the max age is brought
// forward to be the delivery's last attempt (PROTOCOL.md §5). It was brought forward to the max
// age itself, so the claim, which comes at or after its due time, always found the delivery at its
// max age and killed it unsent: the last attempt never went out. It is due a little before.
func TestTheLastAttemptBeforeTheMaxAgeIsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 10, BackoffBase: 2 * time.Hour, BackoffCap: 2 * time.Hour})
	k, ages := ageSink(t, e, func(w http.ResponseWriter) { w.WriteHeader(500) })
	e.sub(store.SubscriberInput{URL: k.URL})
	e.emit("e1", "t", `{}`)
	e.drain()
	d := e.only()
	if d.Status != store.StatusPending || !d.NextAttemptAt.Before(d.CreatedAt.Add(time.Hour)) {
		t.Errorf("after a failure with a backoff past the max age: %s, due at age %s, want pending, due before the max age of 1h",
			d.Status, d.NextAttemptAt.Sub(d.CreatedAt))
	}
	e.clk.Advance(d.NextAttemptAt.Sub(e.clk.Now()))
	e.drain()
	if got := ages(); len(got) != 2 || got[1] >= time.Hour {
		t.Errorf("requests at ages %v, want a second, before the max age of 1h", got)
	}
	if d := e.only(); d.Status != store.StatusDelivered || d.Attempts != 2 {
		t.Errorf("after its last attempt, answered 200: %s (%q), %d attempts, want delivered at attempt 2", d.Status, d.Reason, d.Attempts)
	}
}

// TestAnOperatorHoldIsAtMostAnHour: a delivery held up by the edge's fault waits full jitter over
// as long as it has waited, but at most an hour (operatorHoldCap), even under the default backoff
// cap of 6 h: nothing else brings it forward once the edge is fixed.
func TestAnOperatorHoldIsAtMostAnHour(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{BackoffCap: DefaultBackoffCap, MaxAge: DefaultMaxAge})
	now := e.clk.Now()
	c := store.Claimed{AgeFrom: now.Add(-5 * time.Hour)}
	for range 50 { // held up to 5 h before the bound: each draw past the hour had 80 % odds
		if set := e.eng.holdForOperator(c, store.Settlement{}, now); set.NextAttemptAt.Sub(now) > operatorHoldCap {
			t.Fatalf("an edge fault after 5 h of waiting is held for %s, want at most %s", set.NextAttemptAt.Sub(now), operatorHoldCap)
		}
	}
}

// TestADeliveryDeadUnsentSpendsNoToken: a retry claimed past its max age (here its last call came
// while no drain ran) dies unsent; its claim had spent a token of the subscriber's bucket, and the
// pacer one more, for a request never made. At one token an hour (burst 1), the next event then
// waited an hour for nothing (and a second of the pacer's): under a backlog, each such death took
// a live delivery's place.
func TestADeliveryDeadUnsentSpendsNoToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAge: time.Hour, MaxAttempts: 100})
	var fail atomic.Bool
	fail.Store(true)
	k := newSink(t, func(w http.ResponseWriter, _ *recorded) {
		if fail.Load() {
			w.WriteHeader(500)
		}
	})
	e.sub(store.SubscriberInput{ID: "s", URL: k.URL, RatePerSec: 1.0 / 3600, Burst: 1})
	e.emit("e1", "t", `{}`)
	e.drain() // a 500: retried at the last call, a minute before the max age
	fail.Store(false)
	e.clk.Advance(2 * time.Hour) // the bucket is full again, and the last call past
	if res := e.drain(); res.Dead != 1 {
		t.Fatalf("the drain past the max age counted %d dead, want e1", res.Dead)
	}
	e.emit("e2", "t", `{}`)
	// Bounded: without a token, e2 waits for the next one an hour away (of the test's clock).
	start := time.Now()
	if _, err := e.eng.Drain(context.Background(), DrainOptions{For: 2 * time.Second, UntilIdle: true}); err != nil {
		t.Fatal(err)
	}
	if n := len(k.received()); n != 2 {
		t.Errorf("the subscriber got %d requests, want e1's first attempt and e2: the token e1's death spent went to no request", n)
	} else if d := time.Since(start); d >= maxPace {
		t.Errorf("e2 was sent %s after its drain began: the pacer held it back for e1, which was never sent", d)
	}
}
