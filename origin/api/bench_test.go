package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

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
// cost per request) and with a real store and 12 subscribers.
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
	for _, c := range []struct {
		name  string
		store func(*testing.B) api.Store
	}{{"store=stub", func(*testing.B) api.Store { return stubStore{} }}, {"store=sqlite", real}} {
		b.Run(c.name, func(b *testing.B) {
			srv, err := api.New(api.Options{Store: c.store(b), Registry: prometheus.NewRegistry()})
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
		})
	}
}
