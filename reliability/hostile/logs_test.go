package hostile

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
	"github.com/edgehook/edgehook/shared/signature"
)

// TestLogsCarryNoSecrets runs the whole system at debug level — serve with a token, the local
// edge, an edge-mode, a direct and a legacy subscriber, successes, subscriber failures, an edge
// that rejects the hop (wrong secret), a secret rotation, a cron drain and the CLI — then greps
// every line the binary wrote for the API token, the edge secrets, the subscriber secrets (whole
// and their base64 part) and a marker carried in every payload.
func TestLogsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	const token = "tok_LOGGREP_c0ffee_0123456789"
	const marker = "PAYLOAD_MARKER_7d1c9e"
	edgeSecret, _ := signature.NewSecret()
	wrongEdgeSecret, _ := signature.NewSecret()

	failing := map[string]bool{"/fail": true}
	sink := rig.NewSink(t, func(w http.ResponseWriter, r *http.Request) {
		if failing[r.URL.Path] {
			// A failing subscriber echoing the payload back: its excerpt is kept in the attempt
			// log (the database), never in the process logs.
			http.Error(w, "failed on "+marker, http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})

	dir := t.TempDir()
	db := filepath.Join(dir, "edgehook.db")
	var procs []*rig.Proc
	var cli []string // CLI output that must not leak either
	kvDB := filepath.Join(dir, "kv.db")

	// Subscribers are created through the API (the create answer is the one place a secret is
	// shown, and it is not logged).
	o := rig.Serve(t, db, "--token", token, "--edge-url", "http://127.0.0.1:1", "--edge-secret", edgeSecret.String(),
		"--allow-network", "127.0.0.1/32", "--backoff-base", "50ms", "--backoff-cap", "200ms", "--max-attempts", "2", "--circuit-threshold", "1000")
	o.Token = token
	procs = append(procs, o.Proc)
	var secrets []string
	for _, s := range []map[string]any{
		{"id": "direct", "url": sink.URL() + "/ok", "events": []string{"*"}},
		{"id": "legacy", "url": sink.URL() + "/ok", "events": []string{"*"}, "profile": "legacy", "legacy_prefix": "VVV"},
		{"id": "failing", "url": sink.URL() + "/fail", "events": []string{"*"}, "headers": map[string]string{"Authorization": "Bearer " + marker}},
	} {
		secrets = append(secrets, o.AddSubscriber(t, s).Secret)
	}
	var rotated struct {
		Secret string `json:"secret"`
	}
	o.JSON(t, http.MethodPost, "/v1/subscribers/direct/rotate-secret", map[string]any{"overlap": "1h"}, &rotated)
	secrets = append(secrets, rotated.Secret)

	// The edge-mode subscriber lives in its own database so its KV export holds only it; the
	// serve above sends its edge deliveries nowhere, the drains below send them to the edges.
	rig.MustRun(t, "subscribers", "add", "--db", kvDB, "--id", "edge", "--url", sink.URL()+"/ok", "--events", "*", "--mode", "edge")
	kv := rig.ExportKV(t, kvDB, dir)
	goodEdge, goodURL := rig.Edge(t, kv, edgeSecret.String())
	badEdge, badURL := rig.Edge(t, kv, wrongEdgeSecret.String())
	procs = append(procs, goodEdge, badEdge)

	for i := range 20 {
		body := fmt.Sprintf(`{"marker":%q,"n":%d}`, marker, i)
		if r := o.Do(t, http.MethodPost, "/v1/events", []byte(`{"type":"video.trending","data":`+body+`}`), nil); r.Status != http.StatusAccepted {
			t.Fatalf("emit: %d %s", r.Status, r.Body)
		}
		rig.MustRun(t, "emit", "--db", kvDB, "--id", fmt.Sprintf("evt_%d", i), "--type", "video.trending", "--data", body)
	}
	// A request with the token in a query string and a bad Authorization header: refused, and
	// neither may be logged.
	o.Do(t, http.MethodGet, "/v1/subscribers?token="+token, nil, nil)
	o.Do(t, http.MethodGet, "/v1/subscribers", nil, http.Header{"Authorization": {"Bearer " + marker}})

	inspect := rig.OpenDB(t, db)
	rig.Eventually(t, 30*time.Second, "every delivery settled", func() bool {
		counts := inspect.Statuses(t)
		return counts["pending"] == 0 && counts["leased"] == 0
	})
	// Cron drains against both edges: the good one forwards, the wrong-secret one rejects loudly.
	for _, edgeURL := range []string{badURL, goodURL} {
		args := append([]string{"drain", "--db", kvDB, "--until-idle", "--for", "20s", "--edge-url", edgeURL, "--max-attempts", "1"}, rig.JSONLogs...)
		p := rig.Start(t, rig.Command{Name: "drain", Args: args, Env: []string{"EDGEHOOK_EDGE_SECRET=" + edgeSecret.String()}})
		if exited, err := p.Wait(time.Minute); !exited || err != nil {
			t.Fatalf("drain: %v %v\n%s", exited, err, p.Logs())
		}
		procs = append(procs, p)
	}
	if !strings.Contains(procs[len(procs)-2].Logs(), "EDGE REJECTED") {
		t.Errorf("the drain against the wrong-secret edge did not log the edge rejection:\n%s", procs[len(procs)-2].Logs())
	}
	for _, args := range [][]string{
		{"subscribers", "list", "--db", db}, {"subscribers", "show", "direct", "--db", db},
		{"deliveries", "list", "--db", db}, {"dead", "list", "--db", db},
	} {
		r := rig.Run(t, "", args...)
		cli = append(cli, r.Stdout, r.Stderr)
	}
	o.Signal(syscall.SIGTERM)
	o.Wait(30 * time.Second)

	needles := map[string]string{"API token": token, "payload marker": marker}
	for i, s := range append(secrets, edgeSecret.String(), wrongEdgeSecret.String()) {
		needles[fmt.Sprintf("secret %d", i)] = s
		needles[fmt.Sprintf("secret %d base64", i)] = strings.TrimPrefix(s, signature.SecretPrefix)
	}
	lines, leaks := 0, 0
	for _, p := range procs {
		logs := p.Logs()
		lines += strings.Count(logs, "\n")
		for what, needle := range needles {
			if strings.Contains(logs, needle) {
				leaks++
				t.Errorf("the %s log carries the %s", p.Name, what)
			}
		}
	}
	// The CLI shows data on purpose (payloads, custom headers) but never a secret or the token.
	for _, out := range cli {
		for what, needle := range needles {
			if strings.Contains(out, needle) && what != "payload marker" {
				leaks++
				t.Errorf("CLI output carries the %s", what)
			}
		}
	}
	if lines < 50 {
		t.Errorf("only %d log lines: the run did not exercise enough to be a meaningful grep", lines)
	}
	rig.Record(t, "log-grep", map[string]any{"processes": len(procs), "log_lines": lines, "needles": len(needles), "leaks": leaks})
}
