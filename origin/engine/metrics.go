package engine

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/edgehook/edgehook/origin/store"
)

// metrics are the engine's Prometheus series. Per-subscriber labels are kept to counters and the
// queue gauges (subscribers number in the hundreds at most); the latency histogram is per mode only.
type metrics struct {
	delivered      *prometheus.CounterVec // subscriber
	failed         *prometheus.CounterVec // subscriber, class
	retried        *prometheus.CounterVec // subscriber
	dead           *prometheus.CounterVec // subscriber, reason
	coalesced      *prometheus.CounterVec // subscriber (edge answered coalesced)
	edgeRejections *prometheus.CounterVec // reason
	markFailures   *prometheus.CounterVec // mark (dedup, coalesce)
	latency        *prometheus.HistogramVec
	staleSettles   prometheus.Counter
	claimErrors    prometheus.Counter
}

const namespace = "edgehook"

func newMetrics(st *store.Store, now func() time.Time, bodyBytes *atomic.Int64, reg prometheus.Registerer) (*metrics, error) {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	m := &metrics{
		delivered:      counter("deliveries_delivered_total", "Deliveries acknowledged (2xx, or an edge duplicate).", "subscriber"),
		failed:         counter("delivery_failures_total", "Failed attempts by class (http_4xx, http_5xx, timeout, connection, throttled, gone, blocked_address, edge_rejected, edge_error, edge_unreachable, misconfigured).", "subscriber", "class"),
		retried:        counter("deliveries_retried_total", "Failed attempts that were scheduled again (not a 410's, held with its subscriber).", "subscriber"),
		dead:           counter("deliveries_dead_total", "Deliveries given up by the engine, by reason.", "subscriber", "reason"),
		coalesced:      counter("edge_coalesced_total", "Sends the edge answered with coalesced (rescheduled, or dead unsent if held past the max age; no attempt counted).", "subscriber"),
		edgeRejections: counter("edge_rejections_total", "Sends the edge rejected (operator problem: hop secret, KV record), by reason; \"other\" for one the protocol does not name.", "reason"),
		markFailures: counter("edge_mark_failures_total", "Acknowledged deliveries whose mark the edge could not write (its KV's writes failed, e.g. the daily quota): "+
			"meanwhile retries are forwarded again (dedup) and keys are not coalesced.", "mark"),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: "attempt_duration_seconds",
			Help: "Time from sending a delivery to its answer.", Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 10)}, []string{"mode"}),
		staleSettles: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "settles_stale_total",
			Help: "Outcomes dropped because their lease was lost: it expired and was taken over, or the subscriber was deleted."}),
		claimErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "claim_errors_total",
			Help: "Claim transactions that failed, including those that also settled outcomes (which are then written alone)."}),
	}
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{m.delivered, m.failed, m.retried, m.dead, m.coalesced, m.edgeRejections, m.markFailures, m.latency,
		m.staleSettles, m.claimErrors,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "deliveries_superseded_total",
			Help: "Deliveries replaced by a newer event with the same coalesce key (this process's emits, and its settles and claims of those that were in flight)."},
			func() float64 { return float64(st.Counters().Superseded) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: namespace, Name: "deliveries_backlog_overflow_total",
			Help: "Pending deliveries dead-lettered by the per-subscriber backlog cap (this process's emits)."},
			func() float64 { return float64(st.Counters().BacklogOverflow) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: namespace, Name: "claimed_body_bytes",
			Help: "Event body bytes of the deliveries claimed and not yet sent, each delivery counting its body (at most --body-budget, or one larger body)."},
			func() float64 { return float64(bodyBytes.Load()) }),
		&queueCollector{st: st, now: now},
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// forgetGone deletes the per-subscriber series of the subscribers exists says are gone, so that
// a daemon whose subscribers come and go keeps no series for each one it ever counted.
func (m *metrics) forgetGone(exists func(id string) bool) {
	for _, v := range []*prometheus.CounterVec{m.delivered, m.failed, m.retried, m.dead, m.coalesced} {
		for _, id := range subscribersIn(v) {
			if !exists(id) {
				v.DeletePartialMatch(prometheus.Labels{"subscriber": id})
			}
		}
	}
}

// subscribersIn lists the subscriber label values of v's series.
func subscribersIn(v *prometheus.CounterVec) []string {
	ch := make(chan prometheus.Metric)
	go func() {
		v.Collect(ch)
		close(ch)
	}()
	seen := map[string]bool{}
	for metric := range ch {
		var d dto.Metric
		if metric.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "subscriber" {
				seen[l.GetValue()] = true
			}
		}
	}
	return slices.Collect(maps.Keys(seen))
}

// queueCollector reads the queue from the database at scrape time, so the gauges are right
// whichever process changed the queue.
type queueCollector struct {
	st  *store.Store
	now func() time.Time
}

var (
	queueDepthDesc = prometheus.NewDesc(namespace+"_queue_deliveries", "Retained deliveries by subscriber and status.", []string{"subscriber", "status"}, nil)
	oldestDueDesc  = prometheus.NewDesc(namespace+"_queue_oldest_due_age_seconds", "Age of the oldest pending delivery that is due, by subscriber.", []string{"subscriber"}, nil)
	depthDesc      = prometheus.NewDesc(namespace+"_queue_depth", "Deliveries pending or in flight, all subscribers.", nil, nil)
)

// Describe implements prometheus.Collector.
func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- queueDepthDesc
	ch <- oldestDueDesc
	ch <- depthDesc
}

// Collect implements prometheus.Collector.
func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := q.st.Stats(ctx, q.now())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(st.Depth))
	for _, s := range st.Subscribers {
		for status, n := range s.Counts {
			ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(n), s.SubscriberID, string(status))
		}
		ch <- prometheus.MustNewConstMetric(oldestDueDesc, prometheus.GaugeValue, s.OldestDueAge.Seconds(), s.SubscriberID)
	}
}
