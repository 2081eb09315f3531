// Package crash kills the real edgehook binary with SIGKILL at random moments — during a large
// drain through the local edge, and in the middle of a burst of emits — and checks that nothing
// accepted is lost and that duplicates stay within what was in flight at each kill.
//
// The sizes are environment variables; their defaults are the full run:
//
//	EDGEHOOK_CRASH_DELIVERIES  deliveries in the drain test        (default 20000)
//	EDGEHOOK_CRASH_KILLS       SIGKILLs during the drain            (default 10)
//	EDGEHOOK_CRASH_RATE        deliveries/s per subscriber (4 subs) (default 100)
//	EDGEHOOK_CRASH_EMIT_KILLS  SIGKILLs during emit bursts          (default 5)
package crash

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edgehook/edgehook/reliability/internal/rig"
	"github.com/edgehook/edgehook/shared/signature"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// size reads an integer setting from the environment.
func size(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

const subscribers = 4

// engineFlags are shared by serve and the cron drains: a short lease so a killed process's
// deliveries come back quickly, quick retries, two attempts, no circuit breaker.
func engineFlags(edgeURL string) []string {
	return []string{"--edge-url", edgeURL, "--lease-duration", "2s", "--backoff-base", "50ms", "--backoff-cap", "200ms",
		"--max-attempts", "2", "--circuit-threshold", "1000000", "--poll-interval", "50ms"}
}

// TestCrashDrain emits the deliveries, then lets serve and a cron-style loop of `edgehook drain
// --for 3s` work the same database through the local edge, while SIGKILLing one of them at random
// moments. After each kill it counts the deliveries left leased (in flight). When everything has
// settled: every delivery is delivered or dead (the dead ones are exactly those a subscriber
// always fails), every delivered one reached its subscriber, and the duplicates subscribers saw
// are at most the sum of the in-flight counts.
func TestCrashDrain(t *testing.T) {
	total := size(t, "EDGEHOOK_CRASH_DELIVERIES", 20000)
	kills := size(t, "EDGEHOOK_CRASH_KILLS", 10)
	rate := size(t, "EDGEHOOK_CRASH_RATE", 100)
	events := (total + subscribers - 1) / subscribers
	total = events * subscribers

	// Subscriber s3 always fails events whose number is a multiple of 100: those die after two
	// attempts. Everything else answers 204.
	sink := rig.NewSink(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/s3" && strings.HasSuffix(r.Header.Get("webhook-id"), "00") {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	dir := t.TempDir()
	db := filepath.Join(dir, "edgehook.db")
	for i := range subscribers {
		rig.MustRun(t, "subscribers", "add", "--db", db, "--id", fmt.Sprintf("s%d", i), "--url", fmt.Sprintf("%s/s%d", sink.URL(), i),
			"--events", "*", "--mode", "edge", "--rate", strconv.Itoa(rate), "--burst", strconv.Itoa(rate), "--max-in-flight", "16")
	}
	secret, err := signature.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"EDGEHOOK_EDGE_SECRET=" + secret.String()}
	_, edgeURL := rig.Edge(t, rig.ExportKV(t, db, dir), secret.String(), "--instances", "16")
	flags := engineFlags(edgeURL)

	// startServe starts serve without waiting for it: a restart must not hold the next kill back
	// while the cron drains go on delivering, and a kill during start-up is a moment like any other.
	startServe := func() *rig.Proc {
		args := append(append([]string{"serve", "--db", db, "--listen", "127.0.0.1:0"}, rig.JSONLogs...), flags...)
		return rig.Start(t, rig.Command{Name: "serve", Args: args, Env: env})
	}
	serveProc := startServe()
	o := &rig.Origin{Proc: serveProc, URL: serveProc.Listening(t, "serving"), DB: db}
	// Emit every event in batches of 500; all are accepted before the first kill.
	wantDead := 0
	for start := 0; start < events; start += 500 {
		var b strings.Builder
		b.WriteString(`{"events":[`)
		for i := start; i < min(start+500, events); i++ {
			if i > start {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, `{"id":"evt_%06d","type":"crash.test","data":{"n":%d}}`, i, i)
			if i%100 == 0 {
				wantDead++
			}
		}
		b.WriteString("]}")
		if r := o.Do(t, http.MethodPost, "/v1/events/batch", []byte(b.String()), nil); r.Status != http.StatusAccepted {
			t.Fatalf("emit batch at %d: %d %.300s", start, r.Status, r.Body)
		}
	}

	// The cron loop: one drain after another until told to stop; the current one can be killed.
	var cronMu sync.Mutex
	var cron *rig.Proc
	stopCron := make(chan struct{})
	cronDone := make(chan struct{})
	var drains atomic.Int32
	go func() {
		defer close(cronDone)
		for {
			select {
			case <-stopCron:
				return
			default:
			}
			args := append(append([]string{"drain", "--db", db, "--for", "3s"}, rig.JSONLogs...), flags...)
			p := rig.Start(t, rig.Command{Name: "drain", Args: args, Env: env})
			drains.Add(1)
			cronMu.Lock()
			cron = p
			cronMu.Unlock()
			<-p.Done()
		}
	}()

	inspect := rig.OpenDB(t, db)
	settled := func() bool {
		st := inspect.Statuses(t)
		return st["pending"] == 0 && st["leased"] == 0
	}
	type killRecord struct {
		Victim   string `json:"victim"`
		AtMS     int64  `json:"at_ms"`
		InFlight int64  `json:"in_flight"`
		Done     int64  `json:"settled_before"`
	}
	var record []killRecord
	var inFlight int64
	began := time.Now()
	// Kills are paced by progress, not by the clock, so every one lands mid-drain however fast or
	// loaded the machine is: the k-th comes at a random point of the k-th of `kills` equal slices
	// of 5-65 % of the deliveries finished (delivered or dead). The last third is margin: reading
	// the statuses is slow under -race on a loaded machine, so each kill lands a little late.
	for k := 0; k < kills; k++ {
		slice := 0.60 / float64(kills)
		at := int64((0.05 + slice*(float64(k)+rand.Float64())) * float64(total))
		rig.Eventually(t, 3*time.Minute, fmt.Sprintf("%d deliveries finished before kill %d", at, k+1), func() bool {
			st := inspect.Statuses(t)
			return st["delivered"]+st["dead"] >= at
		})
		if settled() {
			t.Fatalf("the drain finished after %d of %d kills: raise EDGEHOOK_CRASH_DELIVERIES or lower EDGEHOOK_CRASH_RATE", k, kills)
		}
		victim := "serve"
		if k%3 == 2 {
			victim = "drain"
		}
		if victim == "serve" {
			serveProc.Kill()
		} else {
			cronMu.Lock()
			cron.Kill()
			cronMu.Unlock()
		}
		st := inspect.Statuses(t)
		inFlight += st["leased"]
		record = append(record, killRecord{Victim: victim, AtMS: time.Since(began).Milliseconds(), InFlight: st["leased"], Done: st["delivered"] + st["dead"]})
		if victim == "serve" {
			serveProc = startServe()
		}
	}
	serveProc.Listening(t, "serving") // the last restart came up
	rig.Eventually(t, 3*time.Minute, "every delivery delivered or dead", settled)
	close(stopCron)
	cronMu.Lock()
	cron.Kill()
	cronMu.Unlock()
	<-cronDone
	elapsed := time.Since(began)

	statuses := inspect.DeliveryStatuses(t)
	counts := sink.Counts()
	lost, dead, delivered, unreached := 0, 0, 0, 0
	for key, st := range statuses {
		sub, ev, _ := strings.Cut(key, " ")
		switch st {
		case "delivered":
			delivered++
			if counts["/"+sub+" "+ev] == 0 {
				unreached++
				t.Errorf("%s is delivered but its subscriber never got it", key)
			}
		case "dead":
			dead++
		default:
			lost++
			t.Errorf("%s ended %s", key, st)
		}
	}
	if len(statuses) != total {
		t.Errorf("%d deliveries in the database, want %d", len(statuses), total)
		lost += total - len(statuses)
	}
	if dead != wantDead {
		t.Errorf("%d dead deliveries, want %d (the events subscriber s3 always fails)", dead, wantDead)
	}
	duplicates := 0
	for _, n := range counts {
		if n > 1 {
			duplicates += n - 1
		}
	}
	// s3's failing events are requested twice by design (two attempts): not duplicates.
	duplicates -= wantDead
	if int64(duplicates) > inFlight {
		t.Errorf("subscribers saw %d duplicates, more than the %d deliveries in flight at the kills", duplicates, inFlight)
	}
	// Re-sends of deliveries the subscriber had already acknowledged, answered by the edge's dedup.
	absorbed := inspect.AttemptOutcomes(t)["duplicate"]
	figures := map[string]any{"kills": len(record), "edge_duplicates_absorbed": absorbed, "deliveries": total, "delivered": delivered, "dead": dead, "lost": lost,
		"unreached": unreached, "duplicates": duplicates, "in_flight_at_kills": inFlight, "drain_processes": drains.Load(),
		"seconds": elapsed.Round(time.Second).Seconds(), "kill_log": record}
	b, _ := json.Marshal(figures)
	t.Logf("%s", b)
	rig.Record(t, "crash-drain", figures)
	serveProc.Kill()
}

// TestCrashEmitBurst SIGKILLs serve in the middle of a burst of emits (single events and batches
// of ten from 16 clients) several times. Every emit that got its 202 must be in the queue
// afterwards with its delivery; a request cut by the kill is in doubt (its client would retry the
// same id, which is idempotent) and is not counted.
func TestCrashEmitBurst(t *testing.T) {
	kills := size(t, "EDGEHOOK_CRASH_EMIT_KILLS", 5)
	db := filepath.Join(t.TempDir(), "edgehook.db")
	var mu sync.Mutex
	accepted := map[string]bool{}
	inDoubt := 0
	var seq atomic.Int64
	for k := range kills {
		o := rig.Serve(t, db)
		if k == 0 {
			o.AddSubscriber(t, map[string]any{"id": "sub", "url": "http://127.0.0.1:9/", "events": []string{"*"}})
			o.JSON(t, http.MethodPost, "/v1/subscribers/sub/pause", map[string]any{}, nil)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var before atomic.Int64
		for c := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					var ids []string
					var path, body string
					if c%4 == 0 {
						var parts []string
						for range 10 {
							id := fmt.Sprintf("evt_%d", seq.Add(1))
							ids = append(ids, id)
							parts = append(parts, fmt.Sprintf(`{"id":%q,"type":"burst.test","data":{"id":%q}}`, id, id))
						}
						path, body = "/v1/events/batch", `{"events":[`+strings.Join(parts, ",")+`]}`
					} else {
						id := fmt.Sprintf("evt_%d", seq.Add(1))
						ids = []string{id}
						path, body = "/v1/events", fmt.Sprintf(`{"id":%q,"type":"burst.test","data":{"id":%q}}`, id, id)
					}
					r, err := o.Try(http.MethodPost, path, []byte(body), nil)
					mu.Lock()
					switch {
					case err != nil:
						inDoubt += len(ids)
					case r.Status == http.StatusAccepted:
						for _, id := range ids {
							accepted[id] = true
						}
						before.Add(int64(len(ids)))
					default:
						t.Errorf("emit: %d %s", r.Status, r.Body)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
		// Kill at a random moment once the burst is under way.
		rig.Eventually(t, 30*time.Second, "the burst to start", func() bool { return before.Load() > 50 })
		time.Sleep(time.Duration(rand.IntN(400)) * time.Millisecond)
		o.Kill()
		close(stop)
		wg.Wait()
	}
	inspect := rig.OpenDB(t, db)
	perEvent := inspect.DeliveriesPerEvent(t)
	lost := 0
	for id := range accepted {
		if perEvent[id] != 1 {
			lost++
			if lost < 10 {
				t.Errorf("accepted event %s: %d deliveries in the database, want 1", id, perEvent[id])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d accepted events lost", lost, len(accepted))
	}
	rig.Record(t, "crash-emit", map[string]any{"kills": kills, "accepted": len(accepted), "lost": lost, "in_doubt": inDoubt})
}
