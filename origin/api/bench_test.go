package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/api"
	"github.com/edgehook/edgehook/origin/store"
	"github.com/prometheus/client_golang/prometheus"
)

// stubStore answers Emit at once, so a benchmark over it measures the HTTP and API layers alone.
type stubStore struct{ api.Store }

func (stubStore) Emit(_ context.Context, in store.EmitInput) (store.EmitResult, error) {
	return store.EmitResult{EventID: in.ID, Deliveries: 12}, nil
}

// BenchmarkEmit posts single events (a 1 KB body) to POST /v1/events over loopback keep-alive
// connections, 32 at a time as make bench's emit does: with the store stubbed out (the API's own
// cost per request), the same with serve's default access log (text, info) written to io.Discard,
// and with a real store and 12 subscribers. cpu-µs/op is the process's CPU time (server and
// client) per request, steadier than the wall clock on a shared machine.
func BenchmarkEmit(b *testing.B) {
	real := func(b *testing.B) api.Store {
		st, err := store.Open(context.Background(), store.Options{Path: filepath.Join(b.TempDir(), "bench.db"), GlobalCap: 1 << 40, BacklogCap: 1 << 40})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		for i := range 12 {
			if _, err := st.CreateSubscriber(context.Background(), store.SubscriberInput{ID: fmt.Sprintf("s%d", i), URL: "https://example.com/hook", Events: []string{"*"}}); err != nil {
				b.Fatal(err)
			}
			if _, err := st.PauseSubscriber(context.Background(), fmt.Sprintf("s%d", i), "bench"); err != nil {
				b.Fatal(err)
			}
		}
		return st
	}
	stub := func(*testing.B) api.Store { return stubStore{} }
	textLog := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name  string
		store func(*testing.B) api.Store
		log   *slog.Logger
	}{{"store=stub", stub, nil}, {"store=stub,log=text", stub, textLog}, {"store=sqlite", real, nil}} {
		b.Run(c.name, func(b *testing.B) {
			srv, err := api.New(api.Options{Store: c.store(b), Registry: prometheus.NewRegistry(), Logger: c.log})
			if err != nil {
				b.Fatal(err)
			}
			hs := httptest.NewServer(srv)
			defer hs.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			defer client.CloseIdleConnections()
			data := `{"video_id":"v1","title":"` + strings.Repeat("x", 1000) + `"}`
			var n atomic.Int64
			b.SetParallelism(16)
			cpu0 := cpuTime()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					body := fmt.Sprintf(`{"id":"evt-%d","type":"video.trending","data":%s}`, n.Add(1), data)
					resp, err := client.Post(hs.URL+"/v1/events", "application/json", bytes.NewReader([]byte(body)))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusAccepted {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// cpuTime is the CPU time (user and system) this process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDecodeEvent decodes make bench's single-event body (1 KB of data) on the fast path.
func BenchmarkDecodeEvent(b *testing.B) {
	body := []byte(`{"id":"evt-1","type":"video.trending","data":{"video_id":"v1","title":"` + strings.Repeat("x", 1000) + `"}}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, ok := api.DecodeEventFast(body); !ok {
			b.Fatal("the fast path declined the body")
		}
	}
}

// BenchmarkDecodeBatch decodes make bench's batch body: 100 events of 1 KB data.
func BenchmarkDecodeBatch(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"events":[`)
	for i := range 100 {
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"id":"evt-%d","type":"video.trending","data":{"video_id":"v1","title":"%s"}}`, i, strings.Repeat("x", 1000))
	}
	body.WriteString(`]}`)
	b.SetBytes(int64(body.Len()))
	for b.Loop() {
		if r, err := api.DecodeBatch(body.Bytes()); err != nil || len(r.Events) != 100 {
			b.Fatal(err)
		}
	}
}
