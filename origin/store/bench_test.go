package store

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkEmit measures emit throughput with twelve matching subscribers (issue 7's figure: an
// event and twelve deliveries each): single-event requests from one caller per CPU and from many
// (64 per CPU) sharing group commits, and batches of MaxBatchEvents from one caller per CPU, at
// both synchronous settings. deliveries/s is the "delivery rows/s".
func BenchmarkEmit(b *testing.B) {
	const benchSubscribers = 12
	for _, sync := range []string{SyncNormal, SyncFull} {
		for _, c := range []struct{ callers, batch int }{{1, 1}, {64, 1}, {1, MaxBatchEvents}} {
			b.Run(fmt.Sprintf("sync=%s/parallelism=%d/batch=%d", sync, c.callers, c.batch), func(b *testing.B) {
				s, _ := open(b, Options{Synchronous: sync, Now: time.Now, GlobalCap: 1 << 40, BacklogCap: 1 << 40})
				for i := range benchSubscribers {
					mustSub(b, s, SubscriberInput{ID: fmt.Sprintf("s%d", i)})
				}
				var n atomic.Int64
				body := []byte(`{"video_id":"v1","rank":3,"title":"a typical small payload of a webhook event"}`)
				emit := func(batch []EmitInput) bool {
					var err error
					if len(batch) == 1 {
						_, err = s.Emit(context.Background(), batch[0])
					} else if len(batch) > 1 {
						_, err = s.EmitBatch(context.Background(), batch)
					}
					if err != nil {
						b.Error(err)
					}
					return err == nil
				}
				b.SetParallelism(c.callers)
				b.ResetTimer()
				start, cpu0 := time.Now(), cpuTime()
				b.RunParallel(func(pb *testing.PB) {
					batch := make([]EmitInput, 0, c.batch)
					for pb.Next() {
						batch = append(batch, EmitInput{ID: fmt.Sprintf("e%d", n.Add(1)), Type: "video.trending", Body: body})
						if len(batch) == c.batch {
							if !emit(batch) {
								return
							}
							batch = batch[:0]
						}
					}
					emit(batch)
				})
				secs := time.Since(start).Seconds()
				b.ReportMetric(float64(n.Load())/secs, "events/s")
				b.ReportMetric(float64(n.Load()*benchSubscribers)/secs, "deliveries/s")
				b.ReportMetric(float64(n.Load())/float64(max(1, s.commits.Load())), "events/commit")
				b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/float64(n.Load()), "cpu-µs/event")
			})
		}
	}
}

// BenchmarkClaimSettle measures the queue's side of delivering: claim a batch, settle it delivered.
func BenchmarkClaimSettle(b *testing.B) {
	s, clk := open(b, Options{GlobalCap: 1 << 40, BacklogCap: 1 << 40})
	for i := range 4 {
		mustSub(b, s, SubscriberInput{ID: fmt.Sprintf("s%d", i), RatePerSec: MaxRatePerSec, Burst: MaxBurst, MaxInFlight: MaxMaxInFlight})
	}
	emitN(b, s, "x", b.N/4+64)
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	done := 0
	for done < b.N {
		res, err := s.Claim(context.Background(), ClaimParams{Now: clk.Now(), Limit: 64, LeaseDuration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Deliveries) == 0 {
			b.Fatalf("queue ran dry after %d", done)
		}
		items := make([]Settlement, len(res.Deliveries))
		for i, c := range res.Deliveries {
			items[i] = Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID, Result: ResultDelivered, Status: 200,
				Circuit: CircuitSuccess, Attempt: &Attempt{At: clk.Now(), Status: 200, Outcome: "delivered"}}
		}
		if _, err := s.Settle(context.Background(), clk.Now(), CircuitPolicy{Threshold: 5, BaseCooldown: time.Second, MaxCooldown: time.Minute}, items); err != nil {
			b.Fatal(err)
		}
		done += len(items)
	}
	b.ReportMetric(float64(done)/time.Since(start).Seconds(), "deliveries/s")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/float64(done), "cpu-µs/delivery")
}

// BenchmarkSettleAndClaim measures the queue's side of a drain as the engine runs it: 12
// subscribers at the default in-flight cap (192 leased), each transaction settling 32 delivered
// (the batch the engine writes without waiting for more, engine.settleEnough) and claiming the
// places that frees. Small transactions make the per-transaction work count (the statements, the
// WAL pages written at commit: wal-frames/txn). The deliveries in flight settle oldest first
// (order=claimed: a settle is of few subscribers), or in a random order (order=answered: of every
// subscriber, as the engine's answers come back from concurrent sends), which is what a drain
// sees and costs about twice as much.
func BenchmarkSettleAndClaim(b *testing.B) {
	for _, answered := range []bool{false, true} {
		name := map[bool]string{false: "order=claimed", true: "order=answered"}[answered]
		b.Run(name, func(b *testing.B) { benchmarkSettleAndClaim(b, answered) })
	}
}

func benchmarkSettleAndClaim(b *testing.B, answered bool) {
	const subscribers, batch = 12, 32
	order := rand.New(rand.NewSource(1))
	// No checkpoint after the first: the WAL then holds exactly the frames written since.
	s, clk := open(b, Options{GlobalCap: 1 << 40, BacklogCap: 1 << 40, checkpointEvery: time.Hour})
	for i := range subscribers {
		mustSub(b, s, SubscriberInput{ID: fmt.Sprintf("s%d", i), RatePerSec: MaxRatePerSec, Burst: MaxBurst, MaxInFlight: DefaultMaxInFlight})
	}
	emitN(b, s, "x", b.N/subscribers+DefaultMaxInFlight+2*batch)
	policy := CircuitPolicy{Threshold: 5, BaseCooldown: time.Second, MaxCooldown: time.Minute}
	params := func(n int) ClaimParams { return ClaimParams{Now: clk.Now(), Limit: n, LeaseDuration: time.Minute} }
	res, err := s.Claim(context.Background(), params(subscribers*DefaultMaxInFlight))
	if err != nil {
		b.Fatal(err)
	}
	out := res.Deliveries
	if _, err := s.w.Exec(`PRAGMA wal_checkpoint(PASSIVE)`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	done, txns := 0, 0
	for done < b.N {
		k := min(batch, len(out))
		if k == 0 {
			b.Fatalf("queue ran dry after %d", done)
		}
		items := make([]Settlement, k)
		for i, c := range out[:k] {
			items[i] = Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID, Result: ResultDelivered, Status: 200,
				Circuit: CircuitSuccess, Attempt: &Attempt{At: clk.Now(), Status: 200, Outcome: "delivered", LatencyMS: 3}}
		}
		_, res, err := s.SettleAndClaim(context.Background(), clk.Now(), policy, items, params(k))
		if err != nil {
			b.Fatal(err)
		}
		out = append(out[k:], res.Deliveries...)
		if answered {
			order.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		}
		done, txns = done+k, txns+1
	}
	b.ReportMetric(float64(done)/time.Since(start).Seconds(), "deliveries/s")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/float64(done), "cpu-µs/delivery")
	var busy, frames, copied int
	if err := s.w.QueryRow(`PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(frames)/float64(txns), "wal-frames/txn")
}

// cpuTime is the CPU time this process has used (user and system): on a shared machine it varies
// less than the wall clock with the neighbours' load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClaimBacklog measures claiming the engine's batch of 128 over a backlog of 200,000
// pending deliveries (12 subscribers), as the backlog section of `make bench` does over 1,000,000
// (each run fills a new database first, in a few seconds). Between claims, off the clock, the
// claimed deliveries are released back to the queue, so any b.N fits under the in-flight caps.
func BenchmarkClaimBacklog(b *testing.B) {
	const subscribers, backlog, batch = 12, 200_000, 128
	s, _ := open(b, Options{Now: time.Now, GlobalCap: 1 << 40, BacklogCap: 1 << 40})
	for i := range subscribers {
		mustSub(b, s, SubscriberInput{ID: fmt.Sprintf("s%d", i), RatePerSec: MaxRatePerSec, Burst: MaxBurst, MaxInFlight: MaxMaxInFlight})
	}
	body := []byte(`{"video_id":"v1","rank":3,"title":"a typical small payload of a webhook event"}`)
	for i := 0; i < backlog/subscribers; i += MaxBatchEvents {
		ins := make([]EmitInput, 0, MaxBatchEvents)
		for j := i; j < min(i+MaxBatchEvents, backlog/subscribers); j++ {
			ins = append(ins, EmitInput{ID: fmt.Sprintf("e%d", j), Type: "video.trending", Body: body})
		}
		if _, err := s.EmitBatch(context.Background(), ins); err != nil {
			b.Fatal(err)
		}
	}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		res, err := s.Claim(context.Background(), ClaimParams{Now: time.Now(), Limit: batch, LeaseDuration: time.Minute})
		took = append(took, time.Since(start))
		if err != nil || len(res.Deliveries) != batch {
			b.Fatalf("claimed %d, want %d: %v", len(res.Deliveries), batch, err)
		}
		b.StopTimer()
		items := make([]Settlement, len(res.Deliveries))
		for i, c := range res.Deliveries {
			items[i] = Settlement{Seq: c.Seq, LeaseToken: c.LeaseToken, SubscriberID: c.Subscriber.ID, Result: ResultRelease}
		}
		if _, err := s.Settle(context.Background(), time.Now(), CircuitPolicy{}, items); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*95/100].Microseconds())/1000, "p95-ms")
}
