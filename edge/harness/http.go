package harness

import (
	"context"
	"log/slog"
	"net/http"
	"strings"

	"github.com/edgehook/edgehook/edge/relay"
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
		body, err := relay.ReadBody(hr.Body, maxBody)
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		header := make(relay.Header, 0, len(hr.Header))
		for name, values := range hr.Header {
			header.Set(name, strings.Join(values, ", ")) // as the Fetch API joins them
		}
		req := &relay.Request{Method: hr.Method, Header: header, Body: body}
		resp := r.Handle(context.WithoutCancel(hr.Context()), req)
		if resp.Detail != "" {
			level, outcome := slog.LevelInfo, wire.Outcome(resp.Header.Get(wire.HeaderOutcome))
			if _, rejected := outcome.IsRejected(); rejected || outcome == "" {
				level = slog.LevelWarn // the edge's own refusal or failure: loud, like a misconfiguration
			}
			log.Log(hr.Context(), level, "edge", "status", resp.Status, "outcome", outcome, "detail", resp.Detail)
		}
		h := w.Header()
		h["Content-Type"] = nil // no sniffed type: like the Worker, send only what the relay set
		for _, f := range resp.Header {
			h.Set(f.Name, f.Value)
		}
		w.WriteHeader(resp.Status)
		_, _ = w.Write(resp.Body)
	})
}
