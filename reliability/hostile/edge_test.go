package hostile

import (
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// edgeRequest is one request to the edge: the hop fields, the secret it is signed with, the body
// signed and the body sent, and tampering applied after signing.
type edgeRequest struct {
	name       string
	hop        signature.Hop
	signWith   []signature.Secret // nil: not signed by us
	signedBody string
	sentBody   string
	after      func(h http.Header) // tampering after signing
	method     string
	path       string
	// want
	status  int
	outcome string
	hitsA   int // requests sink A gets from this one
}

// TestHostileEdge sends forged, tampered and replayed hops to `edgehook edge local` (the relay as
// WASI in wazero) and checks the status, the outcome header, and which sink was reached: the edge
// never forwards a request it cannot verify, and forwards only to the URL in the subscriber's KV
// record whatever the request says.
func TestHostileEdge(t *testing.T) {
	t.Parallel()
	sinkA := rig.NewSink(t, nil)
	sinkB := rig.NewSink(t, nil)
	dir := t.TempDir()
	db := filepath.Join(dir, "edgehook.db")
	rig.MustRun(t, "subscribers", "add", "--db", db, "--id", "sub_a", "--url", sinkA.URL()+"/a", "--events", "*", "--mode", "edge")
	rig.MustRun(t, "subscribers", "add", "--db", db, "--id", "sub_b", "--url", sinkB.URL()+"/b", "--events", "*", "--mode", "edge")
	secret, err := signature.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	other, err := signature.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	_, edgeURL := rig.Edge(t, rig.ExportKV(t, db, dir), secret.String(), "--tolerance", "60s")

	good := []signature.Secret{secret}
	now := time.Now().Unix()
	hop := func(delivery string, ts int64) signature.Hop {
		return signature.Hop{DeliveryID: delivery, SubscriberID: "sub_a", EventType: "video.trending", Attempt: 1, Timestamp: ts}
	}
	body := `{"video_id":"v1","rank":1}`
	cases := []edgeRequest{
		{name: "valid", hop: hop("dlv_ok", now), signWith: good, signedBody: body, sentBody: body, status: 200, outcome: "forwarded", hitsA: 1},
		{name: "exact replay of a delivered hop", hop: hop("dlv_ok", now), signWith: good, signedBody: body, sentBody: body, status: 200, outcome: "duplicate"},
		{name: "replay inside the tolerance with a different body", hop: hop("dlv_ok", now), signWith: good, signedBody: body,
			sentBody: `{"video_id":"v1","rank":999}`, status: 401, outcome: "rejected:bad_signature"},
		{name: "new delivery id, body swapped", hop: hop("dlv_swap", now), signWith: good, signedBody: body,
			sentBody: `{"video_id":"evil"}`, status: 401, outcome: "rejected:bad_signature"},
		{name: "replay outside the tolerance", hop: hop("dlv_old", now-10*60), signWith: good, signedBody: body, sentBody: body,
			status: 401, outcome: "rejected:stale_timestamp"},
		{name: "timestamp from the future", hop: hop("dlv_future", now+10*60), signWith: good, signedBody: body, sentBody: body,
			status: 401, outcome: "rejected:stale_timestamp"},
		{name: "signed with another secret", hop: hop("dlv_other", now), signWith: []signature.Secret{other}, signedBody: body, sentBody: body,
			status: 401, outcome: "rejected:bad_signature"},
		{name: "forged signature", hop: hop("dlv_forged", now), signedBody: body, sentBody: body,
			after: func(h http.Header) {
				fillHop(h, hop("dlv_forged", now))
				h.Set(wire.HeaderHopSignature, "v1,"+strings.Repeat("A", 43)+"=")
			}, status: 401, outcome: "rejected:bad_signature"},
		{name: "empty signature", hop: hop("dlv_empty", now), signedBody: body, sentBody: body,
			after: func(h http.Header) {
				fillHop(h, hop("dlv_empty", now))
				h.Set(wire.HeaderHopSignature, "v1,")
			}, status: 400, outcome: "rejected:malformed_header"},
		{name: "no signature", hop: hop("dlv_nosig", now), signedBody: body, sentBody: body,
			after: func(h http.Header) { fillHop(h, hop("dlv_nosig", now)) }, status: 400, outcome: "rejected:missing_header"},
		{name: "subscriber swapped after signing", hop: hop("dlv_swapsub", now), signWith: good, signedBody: body, sentBody: body,
			after: func(h http.Header) { h.Set(wire.HeaderSubscriberID, "sub_b") }, status: 401, outcome: "rejected:bad_signature"},
		{name: "attempt changed after signing", hop: hop("dlv_attempt", now), signWith: good, signedBody: body, sentBody: body,
			after: func(h http.Header) { h.Set(wire.HeaderAttempt, "2") }, status: 401, outcome: "rejected:bad_signature"},
		{name: "event type changed after signing", hop: hop("dlv_type", now), signWith: good, signedBody: body, sentBody: body,
			after: func(h http.Header) { h.Set(wire.HeaderEventType, "video.other") }, status: 401, outcome: "rejected:bad_signature"},
		{name: "timestamp refreshed after signing", hop: hop("dlv_ts", now-10*60), signWith: good, signedBody: body, sentBody: body,
			after: func(h http.Header) { h.Set(wire.HeaderHopTimestamp, itoa(now)) }, status: 401, outcome: "rejected:bad_signature"},
		{name: "non-canonical attempt", hop: hop("dlv_plus", now), signWith: good, signedBody: body, sentBody: body,
			after: func(h http.Header) { h.Set(wire.HeaderAttempt, "+1") }, status: 400, outcome: "rejected:malformed_header"},
		{name: "subscriber not in KV, validly signed", hop: signature.Hop{DeliveryID: "dlv_nokv", SubscriberID: "sub_evil", EventType: "x.y", Attempt: 1, Timestamp: now},
			signWith: good, signedBody: body, sentBody: body, status: 404, outcome: "rejected:unknown_subscriber"},
		{name: "subscriber id with a path", hop: signature.Hop{DeliveryID: "dlv_path", SubscriberID: "sub_a/../sub_b", EventType: "x.y", Attempt: 1, Timestamp: now},
			signWith: good, signedBody: body, sentBody: body, status: 400, outcome: "rejected:malformed_header"},
		{name: "destination in the path, query and headers", hop: hop("dlv_redirect", now), signWith: good, signedBody: body, sentBody: body,
			path: "/" + sinkB.URL() + "/b?url=" + sinkB.URL() + "/b&to=" + sinkB.URL(),
			after: func(h http.Header) {
				for _, name := range []string{"X-Forwarded-Host", "X-Original-URL", "X-Rewrite-URL", "Forwarded", "Destination", "Location"} {
					h.Set(name, sinkB.URL()+"/b")
				}
			}, status: 200, outcome: "forwarded", hitsA: 1},
		{name: "GET", hop: hop("dlv_get", now), signWith: good, signedBody: "", sentBody: "", method: http.MethodGet,
			status: 405, outcome: "rejected:method_not_allowed"},
	}
	for _, tc := range cases {
		before := sinkA.Total()
		resp := sendHop(t, edgeURL, tc)
		if resp.Status != tc.status || resp.Header.Get(wire.HeaderOutcome) != tc.outcome {
			t.Errorf("%s: %d %q, want %d %q (body %.200s)", tc.name, resp.Status, resp.Header.Get(wire.HeaderOutcome), tc.status, tc.outcome, resp.Body)
		}
		if got := sinkA.Total() - before; got != tc.hitsA {
			t.Errorf("%s: sink A got %d requests, want %d", tc.name, got, tc.hitsA)
		}
	}
	if n := sinkB.Total(); n != 0 {
		t.Errorf("sink B (only reachable by a forged or redirected hop) got %d requests", n)
	}
	if got := string(sinkA.Body("dlv_ok")); got != body {
		t.Errorf("sink A got body %q, want the signed one %q", got, body)
	}
	rig.Record(t, "hostile-edge", map[string]any{"requests": len(cases), "forwarded": sinkA.Total(), "forwarded_elsewhere": sinkB.Total()})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// fillHop sets the hop headers without a signature.
func fillHop(h http.Header, hop signature.Hop) {
	h.Set(wire.HeaderDeliveryID, hop.DeliveryID)
	h.Set(wire.HeaderSubscriberID, hop.SubscriberID)
	h.Set(wire.HeaderEventType, hop.EventType)
	h.Set(wire.HeaderAttempt, "1")
	h.Set(wire.HeaderHopTimestamp, itoa(hop.Timestamp))
}

// sendHop builds and sends one edge request.
func sendHop(t *testing.T, edgeURL string, tc edgeRequest) rig.Response {
	t.Helper()
	method := tc.method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequest(method, edgeURL+tc.path, strings.NewReader(tc.sentBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderWebhookID, tc.hop.DeliveryID)
	if tc.signWith != nil {
		signature.SetHopHeaders(req.Header, tc.signWith, &tc.hop, []byte(tc.signedBody))
	}
	if tc.after != nil {
		tc.after(req.Header)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", tc.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return rig.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}
