package hostile

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
)

// blockedOutcome is the failure class the engine records when its dialer's Control hook refused
// the destination. Control runs after the socket is created and before connect(2), so this
// outcome means no connection was attempted and no packet was sent.
const blockedOutcome = "blocked_address"

// ssrfTarget is a subscriber URL aimed at an internal address.
type ssrfTarget struct{ id, url string }

// addDirect creates direct-mode subscribers for every target on the database file with the CLI,
// emits one event (with a marker payload) and returns its id.
func addDirect(t *testing.T, db string, targets []ssrfTarget) string {
	t.Helper()
	for _, tg := range targets {
		rig.MustRun(t, "subscribers", "add", "--db", db, "--id", tg.id, "--url", tg.url, "--events", "*", "--mode", "direct")
	}
	rig.MustRun(t, "emit", "--db", db, "--id", "evt_ssrf", "--type", "probe.sent", "--data", `{"probe":"ssrf"}`)
	return "evt_ssrf"
}

// drainOnce runs one `edgehook drain` until nothing is due, with one attempt per delivery.
func drainOnce(t *testing.T, db string, wrap []string, extra ...string) *rig.Proc {
	t.Helper()
	args := append([]string{"drain", "--db", db, "--until-idle", "--for", "30s", "--max-attempts", "1"}, rig.JSONLogs...)
	p := rig.Start(t, rig.Command{Name: "drain", Args: append(args, extra...), Wrap: wrap})
	exited, err := p.Wait(time.Minute)
	if !exited || err != nil {
		t.Fatalf("drain: exited %v, err %v; output:\n%s", exited, err, p.Logs())
	}
	return p
}

// expectBlocked checks that each target's only attempt was refused by the address guard and
// returns how many were.
func expectBlocked(t *testing.T, inspect *rig.DB, eventID string, targets []ssrfTarget) (refused int) {
	t.Helper()
	for _, tg := range targets {
		atts := inspect.Attempts(t, eventID, tg.id)
		if len(atts) != 1 {
			t.Errorf("%s (%s): %d attempts, want 1: %+v", tg.id, tg.url, len(atts), atts)
			continue
		}
		if a := atts[0]; a.Outcome != blockedOutcome || a.Status != 0 || !strings.Contains(a.Error, "internal") {
			t.Errorf("%s (%s): attempt %+v, want outcome %s with no status", tg.id, tg.url, a, blockedOutcome)
			continue
		}
		refused++
	}
	return refused
}

// TestSSRFLoopback aims direct-mode subscribers at loopback listeners that count their
// connections: 127.0.0.1, 127.0.0.2, [::1], localhost, 0.0.0.0 and an IPv4-mapped IPv6 address.
// (Numeric forms such as "2130706433" are names to Go's resolver and would make a DNS query, so
// they are tried only in TestSSRFPrivateNetworks's isolated network namespace.)
// Without an allow-list every one is refused before connecting and no listener sees a
// connection. With 127.0.0.1/32 allowed, that address is delivered to, while redirects from it to
// other loopback addresses (and to the metadata address) are not followed.
func TestSSRFLoopback(t *testing.T) {
	t.Parallel()
	lo4 := rig.NewSink(t, nil)
	lo4b := rig.NewSinkOn(t, "127.0.0.2:0", nil)
	lo6 := rig.NewSinkOn(t, "[::1]:0", nil)
	port := func(s *rig.Sink) string { return s.Addr()[strings.LastIndexByte(s.Addr(), ':')+1:] }

	dir := t.TempDir()
	db := filepath.Join(dir, "blocked.db")
	blocked := []ssrfTarget{
		{"lo4", lo4.URL() + "/hook"},
		{"lo4b", lo4b.URL() + "/hook"},
		{"lo6", lo6.URL() + "/hook"},
		{"localhost", "http://localhost:" + port(lo4) + "/hook"},
		{"unspecified", "http://0.0.0.0:" + port(lo4) + "/hook"},
		{"mapped", "http://[::ffff:127.0.0.1]:" + port(lo4) + "/hook"},
	}
	ev := addDirect(t, db, blocked)
	drainOnce(t, db, nil)
	refused := expectBlocked(t, rig.OpenDB(t, db), ev, blocked)
	for name, s := range map[string]*rig.Sink{"127.0.0.1": lo4, "127.0.0.2": lo4b, "[::1]": lo6} {
		if n := s.Conns(); n != 0 {
			t.Errorf("the listener on %s accepted %d connections; the guard must refuse before connecting", name, n)
		}
	}

	// Allowed: 127.0.0.1/32 only. The redirecting sink answers 307 to other loopback listeners.
	redirect := rig.NewSink(t, func(w http.ResponseWriter, r *http.Request) {
		target := map[string]string{
			"/to-lo4b":     lo4b.URL() + "/redirected",
			"/to-lo6":      lo6.URL() + "/redirected",
			"/to-metadata": "http://169.254.169.254/latest/meta-data/",
		}[r.URL.Path]
		if target == "" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		http.Redirect(w, r, target, http.StatusTemporaryRedirect)
	})
	db2 := filepath.Join(dir, "allowed.db")
	allowed := []ssrfTarget{
		{"ok", redirect.URL() + "/ok"},
		{"to-lo4b", redirect.URL() + "/to-lo4b"},
		{"to-lo6", redirect.URL() + "/to-lo6"},
		{"to-metadata", redirect.URL() + "/to-metadata"},
	}
	stillBlocked := []ssrfTarget{{"lo6-direct", lo6.URL() + "/hook"}, {"lo4b-direct", lo4b.URL() + "/hook"}}
	ev2 := addDirect(t, db2, append(allowed, stillBlocked...))
	drainOnce(t, db2, nil, "--allow-network", "127.0.0.1/32")
	inspect := rig.OpenDB(t, db2)
	if st, _ := inspect.Delivery(t, ev2, "ok"); st.Status != "delivered" {
		t.Errorf("the allowed 127.0.0.1 subscriber: %+v, want delivered", st)
	}
	for _, tg := range allowed[1:] {
		st, _ := inspect.Delivery(t, ev2, tg.id)
		atts := inspect.Attempts(t, ev2, tg.id)
		if st.Status != "dead" || st.LastStatus != http.StatusTemporaryRedirect || len(atts) != 1 || atts[0].Outcome != "http_3xx" {
			t.Errorf("%s: %+v %+v, want one attempt answered 307 (not followed) and dead after one attempt", tg.id, st, atts)
		}
	}
	refused += expectBlocked(t, inspect, ev2, stillBlocked)
	conns := lo4.Conns() + lo4b.Conns() + lo6.Conns()
	if conns != 0 {
		t.Errorf("redirect targets or non-allowed loopback listeners accepted %d connections", conns)
	}
	if got := redirect.Total(); got != len(allowed) {
		t.Errorf("the allowed sink got %d requests, want %d", got, len(allowed))
	}
	rig.Record(t, "ssrf-loopback", map[string]any{"blocked_targets": len(blocked) + len(stillBlocked), "refused_before_connect": refused,
		"redirects_not_followed": len(allowed) - 1, "connections_to_refused_listeners": conns})
}

// TestSSRFPrivateNetworks aims direct-mode subscribers at private, link-local, metadata and
// carrier-grade NAT addresses, and at names that resolve to them. The drain runs in its own
// network namespace (only a down loopback: nothing it does can reach any network) and mount
// namespace, where /etc/hosts maps test names to internal addresses. Each attempt must be
// refused by the address guard — a broken guard would show up as a connection error instead.
func TestSSRFPrivateNetworks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n169.254.169.254 metadata.reliability.test\n"+
		"10.1.2.3 intranet.reliability.test\n172.20.0.5 docker.reliability.test\n192.168.7.7 router.reliability.test\n"+
		"fd00::7 ula.reliability.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	targets := []ssrfTarget{
		{"ten-low", "http://10.0.0.1/hook"},
		{"ten-high", "http://10.255.255.254:8080/hook"},
		{"oneseventwo-low", "http://172.16.0.1/hook"},
		{"oneseventwo-high", "https://172.31.255.255/hook"},
		{"oneninetwo", "http://192.168.1.1/hook"},
		{"metadata", "http://169.254.169.254/latest/meta-data/"},
		{"cgnat", "http://100.64.0.1/hook"},
		{"ula", "http://[fd00::1]/hook"},
		{"mapped-ten", "http://[::ffff:10.0.0.1]/hook"},
		{"octal", "http://0251.0376.0251.0376/hook"}, // 169.254.169.254 in octal, if a resolver reads it so
		{"decimal", "http://2130706433/hook"},        // 127.0.0.1 as one number
		{"name-metadata", "http://metadata.reliability.test/latest/meta-data/"},
		{"name-ten", "http://intranet.reliability.test/hook"},
		{"name-172", "http://docker.reliability.test:8443/hook"},
		{"name-192", "http://router.reliability.test/hook"},
		{"name-ula", "http://ula.reliability.test/hook"},
	}
	db := filepath.Join(dir, "edgehook.db")
	ev := addDirect(t, db, targets)
	// unshare: a new user (root inside, so mount is allowed without privileges), mount and network
	// namespace; sh bind-mounts the hosts file and execs the binary.
	wrap := []string{"unshare", "--user", "--map-root-user", "--mount", "--net", "sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, hosts}
	drainOnce(t, db, wrap)
	inspect := rig.OpenDB(t, db)
	// "octal" and "decimal" are not addresses to Go's resolver: they are names that do not resolve
	// (no DNS in the namespace), so they fail as lookup errors, before any dial. Everything else
	// must be refused by the guard.
	var guarded []ssrfTarget
	for _, tg := range targets {
		if tg.id == "octal" || tg.id == "decimal" {
			atts := inspect.Attempts(t, ev, tg.id)
			if len(atts) != 1 || atts[0].Status != 0 || atts[0].Outcome == "delivered" {
				t.Errorf("octal: %+v, want one failed attempt", atts)
			}
			continue
		}
		guarded = append(guarded, tg)
	}
	refused := expectBlocked(t, inspect, ev, guarded)
	rig.Record(t, "ssrf-private", map[string]any{"internal_targets": len(targets), "refused_before_connect": refused,
		"unresolvable": len(targets) - len(guarded)})
}
