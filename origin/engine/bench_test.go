package engine

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/edgehook/edgehook/origin/store"
	"github.com/edgehook/edgehook/shared/signature"
)

// BenchmarkDeliver measures the whole claim → send → settle cycle of one engine against an
// in-process sink on loopback answering 200 at once: deliveries per second, to compare with the
// loopback ceiling of the machine (DESIGN.md: ~8–25 k requests/s here). The 12-subscriber case
// keeps the default in-flight cap, as `make bench`'s drain does, so the leases of a claim → send →
// settle cycle are bounded by the cap (12 × 8) rather than by the workers.
func BenchmarkDeliver(b *testing.B) {
	for _, c := range []struct{ subs, inFlight int }{{1, 64}, {8, 64}, {12, store.DefaultMaxInFlight}} {
		subs := c.subs
		b.Run(fmt.Sprintf("subscribers=%d,in-flight=%d", subs, c.inFlight), func(b *testing.B) {
			ctx := context.Background()
			st, err := store.Open(ctx, store.Options{Path: filepath.Join(b.TempDir(), "bench.db"), GlobalCap: 1 << 40, BacklogCap: 1 << 40})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			sink := newSink(b, func(w http.ResponseWriter, _ *recorded) { w.WriteHeader(200) })
			for i := range subs {
				if _, err := st.CreateSubscriber(ctx, store.SubscriberInput{ID: fmt.Sprintf("s%d", i), URL: sink.URL, Events: []string{"*"},
					RatePerSec: store.MaxRatePerSec, Burst: store.MaxBurst, MaxInFlight: c.inFlight}); err != nil {
					b.Fatal(err)
				}
			}
			events := (b.N + subs - 1) / subs
			for i := 0; i < events; i += 256 {
				var batch []store.EmitInput
				for j := i; j < min(events, i+256); j++ {
					batch = append(batch, store.EmitInput{ID: fmt.Sprintf("e%d", j), Type: "t", Body: []byte(`{"video_id":"v1","rank":3}`)})
				}
				if _, err := st.EmitBatch(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			eng, err := New(st, Config{AllowNetworks: loopback}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime()
			res, err := eng.Drain(ctx, DrainOptions{For: 5 * time.Minute, UntilIdle: true})
			if err != nil || res.Delivered != events*subs {
				b.Fatalf("%+v %v", res, err)
			}
			b.ReportMetric(float64(res.Delivered)/time.Since(start).Seconds(), "deliveries/s")
			b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/float64(res.Delivered), "cpu-µs/delivery")
		})
	}
}

// BenchmarkSend measures one delivery's send path on its own: the signed request, the round trip
// to an in-process sink on loopback answering 200, and the decision. Its allocations (and its
// instructions, under `valgrind --tool=cachegrind`) are steadier than BenchmarkDeliver's figures on
// a shared machine; the sink's own work is included.
func BenchmarkSend(b *testing.B) {
	sink := newSink(b, func(w http.ResponseWriter, _ *recorded) { w.WriteHeader(200) })
	sec, err := signature.NewSecret()
	if err != nil {
		b.Fatal(err)
	}
	eng, err := New(nil, Config{AllowNetworks: loopback}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	sub := &store.Subscriber{ID: "s0", URL: sink.URL, Mode: store.ModeDirect, RatePerSec: store.MaxRatePerSec, Burst: store.MaxBurst, MaxInFlight: store.DefaultMaxInFlight,
		TimeoutMS: 10_000, Secrets: []store.Secret{{Secret: sec}}}
	c := store.Claimed{Seq: 1, DeliveryID: "d1", LeaseToken: "t", Event: store.Event{ID: "e1", Type: "t", Body: []byte(`{"video_id":"v1","rank":3}`)}, Subscriber: sub}
	b.ReportAllocs()
	for b.Loop() {
		if set := eng.deliver(context.Background(), c); set.Result != store.ResultDelivered {
			b.Fatalf("%+v", set)
		}
	}
}

// cpuTime is the CPU time this process (engine, store and sink) has used: on a shared machine it
// varies less than the wall clock with the neighbours' load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
