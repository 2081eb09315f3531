package harness_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/edgehook/edgehook/edge/harness"
	"github.com/edgehook/edgehook/edge/relay"
	"github.com/edgehook/edgehook/edge/relay/memkv"
	"github.com/edgehook/edgehook/shared/wire"
)

// stageResults holds BenchmarkStages' median ns per stage and runtime, for writeBenchReport.
var stageResults sync.Map

// stamps records when the relay reached each of its dependencies during one request. The
// dependencies are the same for every runtime (the WASI module reaches them through host
// functions), so the times between them split a request into the same stages everywhere.
type stamps struct {
	names []string
	times []time.Time
}

func (s *stamps) mark(name string) {
	s.names = append(s.names, name)
	s.times = append(s.times, time.Now())
}

type stampClock struct{ s *stamps }

func (c stampClock) Now() time.Time {
	c.s.mark("clock")
	return time.Now()
}

type stampKV struct {
	s    *stamps
	name string
	kv   relay.KV
}

func (k stampKV) Get(ctx context.Context, key string) (string, bool, error) {
	k.s.mark(k.name + ".get")
	return k.kv.Get(ctx, key)
}

func (k stampKV) Put(ctx context.Context, key, value string, ttl time.Duration) error {
	k.s.mark(k.name + ".put")
	return k.kv.Put(ctx, key, value, ttl)
}

type stampUpstream struct{ s *stamps }

func (u stampUpstream) Do(ctx context.Context, req *relay.UpstreamRequest) (*relay.UpstreamResponse, error) {
	u.s.mark("upstream")
	return stubUpstream{}.Do(ctx, req)
}

// BenchmarkStages splits the 1 KB delivery of BenchmarkRelay1KB (stub upstream) at the relay's
// calls of its dependencies and reports each stage's median on every runtime, the runtimes in
// turn in batches as in stub-warm there: "start → clock" is decoding the request and reading the hop headers (the host's
// encoding and copying in as well, in the harness), "clock → subscribers.get" verifying the hop,
// "dedup.get → upstream" the record and the upstream request, "upstream → dedup.put" the
// subscriber's answer, "dedup.put → end" the response (and its way back to the host).
func BenchmarkStages(b *testing.B) {
	clk := relay.SystemClock{}
	modes := []string{"native", "wasi", "wasi-uninterruptible"}
	relays := make([]harness.Relay, len(modes))
	marks := make([]*stamps, len(modes))
	for i, rt := range modes {
		s := &stamps{}
		marks[i] = s
		subs := memkv.New(clk)
		entry, err := wire.SubscriberEntry("sub_b", &wire.SubscriberRecord{URL: "http://127.0.0.1:9", TimeoutMS: 5000, Active: true})
		if err != nil {
			b.Fatal(err)
		}
		_ = subs.Put(context.Background(), entry.Key, entry.Value, 0)
		relays[i] = benchRelay(b, rt, relay.Deps{
			Subscribers: stampKV{s, "subscribers", subs}, Dedup: stampKV{s, "dedup", memkv.New(clk)},
			Upstream: stampUpstream{s}, Clock: stampClock{s},
		})
	}
	now := time.Now()
	reqs := make([]*relay.Request, b.N)
	for n := range reqs {
		reqs[n] = signedRequest(fmt.Sprintf("del_%d", n), "sub_b", benchBody, now)
	}
	stages := make([]map[string][]time.Duration, len(modes))
	for i := range stages {
		stages[i] = map[string][]time.Duration{}
	}
	ctx := context.Background()
	b.ResetTimer()
	for first := 0; first < b.N; first += warmBatch {
		for i, r := range relays {
			s := marks[i]
			for n := first; n < min(first+warmBatch, b.N); n++ {
				s.names, s.times = s.names[:0], s.times[:0]
				s.mark("start")
				resp := r.Handle(ctx, reqs[n])
				s.mark("end")
				if resp.Status != 200 {
					b.Fatalf("%s: status %d: %s", modes[i], resp.Status, resp.Detail)
				}
				for j := 1; j < len(s.names); j++ {
					label := s.names[j-1] + " → " + s.names[j]
					stages[i][label] = append(stages[i][label], s.times[j].Sub(s.times[j-1]))
				}
			}
		}
	}
	b.StopTimer()
	labels := make([]string, 0, len(stages[0]))
	for label := range stages[0] {
		labels = append(labels, label)
	}
	sort.Strings(labels)
	for i, rt := range modes {
		for _, label := range labels {
			d := stages[i][label]
			if len(d) != b.N {
				b.Fatalf("%s: stage %q in %d of %d requests: the runtimes reach their dependencies differently", rt, label, len(d), b.N)
			}
			stageResults.Store(label+" /"+rt, float64(median(d).Nanoseconds()))
		}
	}
}
