package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/httpupstream"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// slowKV is a KV namespace whose reads take a while, as Cloudflare KV's do (a cold read is tens of
// milliseconds, more from a far location).
type slowKV struct {
	relay.KV
	delay time.Duration
}

func (k slowKV) Get(ctx context.Context, key string) (string, bool, error) {
	time.Sleep(k.delay)
	return k.KV.Get(ctx, key)
}

// realEdge serves the real relay core over loopback, as `edgehook edge local` does natively: its
// KV reads take kvDelay each, and it forwards to internal addresses only in allow, through the
// guard the local edge and direct sends dial with. It returns the edge's URL and its DEDUP
// namespace.
func realEdge(t *testing.T, secret signature.Secret, sub *store.Subscriber, kvDelay time.Duration, allow []netip.Prefix) (string, *memkv.Store) {
	t.Helper()
	subs, dedup := memkv.New(relay.SystemClock{}), memkv.New(relay.SystemClock{})
	rec, err := json.Marshal(sub.Record())
	if err != nil {
		t.Fatal(err)
	}
	if err := subs.Put(context.Background(), wire.SubscriberKey(sub.ID), string(rec), 0); err != nil {
		t.Fatal(err)
	}
	tr := newTransport(netguard.Control(allow), 1)
	t.Cleanup(tr.CloseIdleConnections)
	r, err := relay.New(relay.Config{Secrets: []signature.Secret{secret}, Tolerance: relay.DefaultTolerance,
		DedupTTL: relay.DefaultDedupTTL, MaxBody: relay.DefaultMaxBody},
		relay.Deps{Subscribers: slowKV{subs, kvDelay}, Dedup: slowKV{dedup, kvDelay}, Upstream: httpupstream.New(tr), Clock: relay.SystemClock{}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		body, err := relay.ReadBody(hr.Body, r.MaxBody())
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// As the harness and the Worker do: the request runs to its end when the origin hangs up.
		resp := r.Handle(context.Background(), &relay.Request{Method: hr.Method, Header: httpupstream.FromHTTP(hr.Header), Body: body})
		httpupstream.SetHTTP(w.Header(), resp.Header)
		w.WriteHeader(resp.Status)
		w.Write(resp.Body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, dedup
}

// TestEdgeModeHopOutlivesTheSubscribersTimeout: through the edge, a subscriber that answers 200
// within its timeout_ms is, by PROTOCOL.md §5, `forwarded` with its 200 (delivered); only a status
// that did not arrive within timeout_ms is `upstream_timeout`. The edge's own work before it calls
// the subscriber (its KV reads here, the network to Cloudflare in production) must not turn that
// 200 into a failed attempt at the origin: the origin must wait for the edge's answer longer than
// the subscriber's timeout. Here the subscriber answers after 700 ms of its 1 s, the edge's two KV
// reads take 200 ms each, and with one attempt allowed the delivery ended dead while the edge had
// forwarded it, got the 200 and written the delivery's dedup mark.
func TestEdgeModeHopOutlivesTheSubscribersTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, Config{MaxAttempts: 1})
	k := newSink(t, func(w http.ResponseWriter, r *recorded) {
		time.Sleep(700 * time.Millisecond) // within the subscriber's 1 s timeout
		w.WriteHeader(200)
	})
	sub := e.sub(store.SubscriberInput{ID: "s1", URL: k.URL, Mode: store.ModeEdge, TimeoutMS: 1000})
	secret := edgeSecret(t)
	url, dedup := realEdge(t, secret, sub, 200*time.Millisecond, loopback)
	e.useEdge(url, secret)
	e.emit("evt_1", "t", `{}`)
	e.drain()
	if n := len(k.received()); n != 1 {
		t.Fatalf("the subscriber got %d requests, want 1", n)
	}
	d := e.only()
	// The edge acknowledged it: its dedup mark says the subscriber answered 2xx.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, _, ok := dedup.Lookup(wire.DedupKey(d.ID)); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the edge never wrote the dedup mark: the subscriber did not answer 2xx in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.Status != store.StatusDelivered {
		outcome := ""
		if len(d.AttemptLog) > 0 {
			outcome = d.AttemptLog[0].Outcome + ": " + d.AttemptLog[0].Error
		}
		t.Fatalf("the subscriber answered 200 within its timeout_ms and the edge forwarded it, but the delivery is %s (%s) after %d attempt(s) (attempt: %s)",
			d.Status, d.Reason, d.Attempts, outcome)
	}
}
