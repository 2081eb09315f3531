package harness

import (
	"context"
	"io"
	"log/slog"
	"net/http"

	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/httpupstream"
	"github.com/edgehook/edgehook/shared/wire"
)

// Relay is what serves the edge's requests: *relay.Relay natively, *Host through the WASI module.
type Relay interface {
	Handle(ctx context.Context, req *relay.Request) *relay.Response
}

// NewHandler serves r over HTTP the way the Worker does: every method and path reaches the relay,
// which answers with its status, headers and body. The relay's Detail goes to the log.
//
// A request runs to its end even when the origin hangs up: a subscriber that answered 2xx must get
// its dedup mark, or the origin's retry would deliver again.
func NewHandler(r Relay, maxBody int64, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		body, err := readBody(hr, maxBody)
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		req := &relay.Request{Method: hr.Method, Header: httpupstream.FromHTTP(hr.Header), Body: body}
		// Not the request's context, which ends when the origin hangs up (nor a WithoutCancel of
		// it, whose every Value lookup, made by wazero on each call, allocates).
		resp := r.Handle(context.Background(), req)
		if resp.Detail != "" {
			level, outcome := slog.LevelInfo, wire.Outcome(resp.Header.Get(wire.HeaderOutcome))
			if _, rejected := outcome.IsRejected(); rejected || outcome == "" {
				level = slog.LevelWarn // the edge's own refusal or failure: loud, like a misconfiguration
			}
			log.Log(hr.Context(), level, "edge", "status", resp.Status, "outcome", outcome, "detail", resp.Detail)
		}
		h := w.Header()
		h["Content-Type"] = nil // no sniffed type: like the Worker, send only what the relay set
		httpupstream.SetHTTP(h, resp.Header)
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	})
}

// readBody reads the request's body, or up to max+1 bytes of it for the relay to refuse; a body of
// known length within max is read into a buffer of its size, not grown to it.
func readBody(hr *http.Request, max int64) ([]byte, error) {
	if n := hr.ContentLength; n >= 0 && n <= max {
		body := make([]byte, n)
		_, err := io.ReadFull(hr.Body, body)
		return body, err
	}
	return relay.ReadBody(hr.Body, max)
}
