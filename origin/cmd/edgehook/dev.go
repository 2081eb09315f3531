package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/internal/httpserve"
	"github.com/edgehook/edgehook/internal/netguard"
	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/engine"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
	"github.com/edgehook/edgehook/shared/wire"
)

// loopbackNetworks are what dev's edge may forward to: its sample receivers.
var loopbackNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Defaults of dev.
const (
	DefaultDevListen     = "127.0.0.1:8080"
	DefaultDevEdgeListen = "127.0.0.1:8787"
)

// sample is one sample subscriber of `edgehook dev`, served by a local receiver.
type sample struct {
	id, legacyPrefix string
	events           []string
}

var samples = []sample{
	{id: "sample-standard", events: []string{"video.*"}},
	{id: "sample-legacy", legacyPrefix: "VVV", events: []string{"video.trending"}},
}

// sampleEvents are emitted once everything runs.
var sampleEvents = []struct{ typ, data string }{
	{"video.trending", `{"video_id":"v42","title":"Cats in space","rank":1}`},
	{"video.rank_updated", `{"video_id":"v42","rank":2}`},
	{"video.rank_updated", `{"video_id":"v7","rank":9}`},
}

func init() {
	var listen, edgeListen, wasm string
	cmd := &cobra.Command{
		Use:         "dev",
		Annotations: map[string]string{allCores: "yes"},
		Short:       "Run the whole path on this machine: API, engine, local edge and sample receivers",
		Long: `Dev runs, in one process and with no Cloudflare account: the HTTP API and the delivery engine on
the database file (--db), the edge relay as a WASI module in wazero (what ` + "`edge local`" + ` runs), and
local receivers for two sample subscribers in edge mode — one verifying Standard Webhooks
signatures, one the legacy X-VVV-Signature profile. Its edge takes bodies of up to --body-limit,
or 1MiB if that is larger, as the Worker's MAX_BODY_BYTES is to be kept at --body-limit or more.
Like serve, it deletes the delivered, dead and superseded deliveries of --db older than
` + engine.DefaultRetention.String() + ` (serve's default --retention). It emits a few sample events, prints each delivery as
it arrives (of a body over ` + strconv.Itoa(maxPrintedBody) + ` bytes, its start and its size), and runs until Ctrl-C; emit more
with curl against --listen. Stopping, it lets sends in flight finish for up to ` + engine.DefaultStopGrace.String() + ` and exits 0,
or 1 if it could not write the outcomes of some sends (they are sent again once their leases
expire).`,
		Example: `  make run
  edgehook dev --db build/dev.db
  ` + emitCurl("http://"+DefaultDevListen),
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// dev's API has no token, so it stays on loopback as serve's does without one.
			host, err := checkHostPort("--listen", listen)
			if err != nil {
				return err
			}
			if !netguard.Loopback(host) {
				return usagef("--listen: %q is not a loopback host:port; dev serves the API without a token", listen)
			}
			if _, err := checkHostPort("--edge-listen", edgeListen); err != nil {
				return err
			}
			log, err := newLogger(os.Stderr)
			if err != nil {
				return err
			}
			return runDev(cmd.Context(), cmd.OutOrStdout(), log, listen, edgeListen, wasm)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", DefaultDevListen, "address of the HTTP API (host:port)")
	f.StringVar(&edgeListen, "edge-listen", DefaultDevEdgeListen, "address of the local edge (host:port)")
	f.StringVar(&wasm, "wasm", harness.DefaultWASMPath, "the relay module `FILE` ('make edge-wasm' builds it)")
	rootCmd.AddCommand(cmd)
}

func runDev(ctx context.Context, out io.Writer, log *slog.Logger, listen, edgeListen, wasm string) (err error) {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	// Both ports first: a taken one fails the start before anything has said it runs.
	apiLn, err := listenOn("--listen", listen)
	if err != nil {
		return err
	}
	defer apiLn.Close()
	edgeLn, err := listenOn("--edge-listen", edgeListen)
	if err != nil {
		return err
	}
	defer edgeLn.Close()
	st, err := openStore(ctx)
	if err != nil {
		return err
	}
	defer st.Close()
	var servers sync.WaitGroup
	defer servers.Wait()
	srvCtx, stopServers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServers()

	// The edge takes every event the API and the store take, as the Worker's MAX_BODY_BYTES is to
	// be kept at --body-limit or more (a delivery's body is the event's data, nothing added); the
	// sample receivers read whatever it forwards.
	maxBody := devMaxBody(int64(global.bodyLimit))
	// Receivers first: the subscribers' URLs name their ports.
	for _, s := range samples {
		rcv := &receiver{sample: s, say: say, maxBody: maxBody}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		url := serveOn(srvCtx, &servers, ln, rcv, maxBody)
		sub, err := upsertSample(ctx, st, s, url+"/webhooks")
		if err != nil {
			return err
		}
		rcv.sub.Store(sub)
	}

	edgeSecret, err := signature.NewSecret()
	if err != nil {
		return err
	}
	edgeCfg := relay.Config{
		Secrets: []signature.Secret{edgeSecret}, Tolerance: relay.DefaultTolerance, DedupTTL: relay.DefaultDedupTTL, MaxBody: maxBody,
	}
	edge, err := harness.New(ctx, harness.Config{WASMPath: wasm, Relay: edgeCfg, AllowNetworks: loopbackNetworks}, log) // the sample receivers are on loopback
	if err != nil {
		return err
	}
	defer edge.Close(context.WithoutCancel(ctx))
	n, err := syncEdgeKV(ctx, st, edge)
	if err != nil {
		return err
	}
	// Subscribers added or changed while dev runs reach the edge too, as re-running `edge
	// export-kv` and `wrangler kv bulk put` would: at once when the write came through the API
	// (before the woken engine sends through the edge), every devKVSync when another process
	// made it. One copy at a time, so that an older one never lands after a newer one.
	var kvMu sync.Mutex
	syncKV := func() {
		kvMu.Lock()
		defer kvMu.Unlock()
		if _, err := syncEdgeKV(srvCtx, st, edge); err != nil && srvCtx.Err() == nil {
			log.Warn("dev: copying the subscribers to the edge", "err", err)
		}
	}
	servers.Go(func() {
		tick := time.NewTicker(devKVSync)
		defer tick.Stop()
		for {
			select {
			case <-srvCtx.Done():
				return
			case <-tick.C:
				syncKV()
			}
		}
	})
	edgeURL := serveOn(srvCtx, &servers, edgeLn, edge.Handler(), edgeCfg.MaxBody)
	say("edge      %s  (the relay core as a WASI module in wazero; %d subscriber records)", edgeURL, n)

	reg := newRegistry() // one /metrics for the engine and the API, as serve has
	eng, err := engine.New(st, engine.Config{EdgeURL: edgeURL + "/", EdgeSecrets: []signature.Secret{edgeSecret},
		PollInterval: 100 * time.Millisecond, Version: Version()}, log, reg)
	if err != nil {
		return err
	}
	if err := eng.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	// As serve: outcomes the stop could not write make dev fail, naming what failed.
	defer func() { err = errors.Join(err, eng.Stop(context.WithoutCancel(ctx))) }()
	// Batches as large as serve's default, or one event of the largest data (the API's default).
	apiSrv, err := api.New(api.Options{Store: st, BodyLimit: int64(global.bodyLimit), Logger: log, Registry: reg,
		Wake: func() { syncKV(); eng.Wake() }})
	if err != nil {
		return err
	}
	apiURL := serveOn(srvCtx, &servers, apiLn, apiSrv, apiSrv.MaxBody())
	say("api       %s  (database %s: the CLI reads it with --db %s)", apiURL, global.db, global.db)

	say("Deliveries appear below. Emit more with:\n  %s\nCtrl-C stops.", emitCurl(apiURL))
	for _, e := range sampleEvents {
		// Said before the request: a delivery may arrive, and be printed, before the emit's answer.
		say("emit      %s %s", e.typ, e.data)
		if err := emitSample(ctx, apiURL, e.typ, e.data); err != nil {
			return err
		}
	}
	<-ctx.Done()
	say("stopping")
	return nil
}

// devKVSync is how often dev copies the subscribers' records to the local edge.
const devKVSync = 2 * time.Second

// syncEdgeKV writes the edge records of the subscribers into the local edge's SUBSCRIBERS
// namespace and returns how many there are.
func syncEdgeKV(ctx context.Context, st *store.Store, edge *harness.Server) (int, error) {
	kv, err := exportKV(ctx, st, false)
	if err != nil {
		return 0, err
	}
	entries, err := wire.DecodeBulk(kv)
	if err != nil {
		return 0, err
	}
	edge.Subscribers().LoadBulk(entries)
	return len(entries), nil
}

// serveOn serves h, whose request bodies may be up to bodyLimit bytes, on ln until ctx ends and
// returns its base URL. Its clients are bounded as serve's and edge local's are.
func serveOn(ctx context.Context, wg *sync.WaitGroup, ln net.Listener, h http.Handler, bodyLimit int64) string {
	srv := httpserve.New(h, bodyLimit)
	wg.Go(func() { _ = srv.Serve(ln) })
	wg.Go(func() {
		<-ctx.Done()
		_ = srv.Close()
	})
	return "http://" + ln.Addr().String()
}

// upsertSample creates the sample subscriber, or points the existing one at this run's receiver.
func upsertSample(ctx context.Context, st *store.Store, s sample, url string) (*store.Subscriber, error) {
	mode := store.ModeEdge
	sub, err := st.UpdateSubscriber(ctx, s.id, store.SubscriberPatch{URL: &url, Mode: &mode})
	if !errors.Is(err, store.ErrNotFound) {
		return sub, err
	}
	in := store.SubscriberInput{ID: s.id, URL: url, Events: s.events, Mode: mode, Profile: store.ProfileStandard}
	if s.legacyPrefix != "" {
		in.Profile, in.LegacyPrefix = store.ProfileLegacy, s.legacyPrefix
	}
	return st.CreateSubscriber(ctx, in)
}

// emitCurl is the command dev suggests for emitting an event to the API at apiURL. The API
// refuses curl -d's default form content type (415), so it sets the JSON one.
func emitCurl(apiURL string) string {
	return `curl -X POST ` + apiURL + `/v1/events -H 'Content-Type: application/json' -d '{"type":"video.trending","data":{"video_id":"v1"}}'`
}

func emitSample(ctx context.Context, apiURL, typ, data string) error {
	body := fmt.Sprintf(`{"type":%q,"data":%s}`, typ, data)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/v1/events", bytes.NewBufferString(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("emit %s: %s: %s", typ, resp.Status, msg)
	}
	return nil
}

// devMaxBody is the largest body dev's edge takes, and its sample receivers read: the edge's
// default, or the largest event data bodyLimit lets in. --body-limit's bound,
// store.MaxMaxBodyBytes, is the edge's relay.MaxMaxBody.
func devMaxBody(bodyLimit int64) int64 {
	return max(relay.DefaultMaxBody, bodyLimit)
}

// receiver is a sample subscriber's endpoint: it verifies the signature of its profile and prints
// what arrived.
type receiver struct {
	sample
	maxBody int64 // the most of a request's body it reads: what the edge forwards at most
	sub     atomic.Pointer[store.Subscriber]
	say     func(format string, args ...any)
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, r.maxBody))
	sub := r.sub.Load()
	if err == nil && sub == nil {
		err = errors.New("subscriber not set up yet")
	}
	if err == nil {
		err = r.verify(sub, req.Header, body)
	}
	if err != nil {
		r.say("received  %-16s REJECTED: %v", r.id, err)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	id := req.Header.Get(wire.HeaderWebhookID) // the legacy profile carries it too, unsigned
	r.say("received  %-16s %s  signature verified  %s", r.id, id, bodyExcerpt(body))
	w.WriteHeader(http.StatusNoContent)
}

// maxPrintedBody is the most of a delivery's body dev prints: an event may be up to
// --body-limit, 100 MiB at most, and the whole body made a line that long.
const maxPrintedBody = 256

// bodyExcerpt is how dev prints a delivery's body: whole if short, else its first maxPrintedBody
// bytes at most, cut between characters and marked with the body's size. Controls come out
// escaped (escapeControls): the data is what any API client sent.
func bodyExcerpt(b []byte) string {
	if len(b) <= maxPrintedBody {
		return escapeControls(string(b))
	}
	cut := maxPrintedBody
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… [cut: %d bytes in all]", escapeControls(string(b[:cut])), len(b))
}

func (r *receiver) verify(sub *store.Subscriber, h http.Header, body []byte) error {
	now := time.Now()
	if r.legacyPrefix == "" {
		return signature.Verify(sub.ActiveSecrets(now), h.Get(wire.HeaderWebhookID), h.Get(wire.HeaderWebhookTimestamp),
			h.Get(wire.HeaderWebhookSignature), body, now, signature.DefaultTolerance)
	}
	secret, ok := sub.LegacySecret(now)
	if !ok {
		return errors.New("no legacy secret")
	}
	tsHeader, sigHeader := signature.LegacyHeaders(r.legacyPrefix)
	ts, err := strconv.ParseInt(h.Get(tsHeader), 10, 64)
	if err != nil {
		return fmt.Errorf("%s: %v", tsHeader, err)
	}
	if !hmac.Equal([]byte(h.Get(sigHeader)), []byte(signature.SignLegacy(secret, ts, body))) {
		return fmt.Errorf("%s does not match", sigHeader)
	}
	return nil
}
