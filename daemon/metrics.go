package daemon

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/syncd/syncd/queue"
)

// metrics are the daemon's Prometheus metrics, named after the article:
//
//	offline_queue_depth{state}             operations per state (read from the queue at scrape time)
//	offline_queue_oldest_age_seconds       age of the oldest unfinished operation
//	offline_attempts_total{result}         sends by result: done, replayed, or the outcome code
//	offline_permanent_failures_total{code} operations that failed permanently, by code
//	offline_attempt_duration_seconds       a send attempt, from its request to its answer (histogram)
//	offline_batch_operations               operations per batch request sent (histogram)
//	offline_pull_lag_seconds               time since the feed was last read without an error
//
// Every label value comes from a closed set (queue states, transport
// codes, the daemon's codes), so the series stay bounded.
type metrics struct {
	reg            *prometheus.Registry
	attempts       *prometheus.CounterVec
	failures       *prometheus.CounterVec
	attemptSeconds prometheus.Histogram
	batchOps       prometheus.Histogram
}

func newMetrics(reg *prometheus.Registry, d *Daemon) (*metrics, error) {
	m := &metrics{
		reg: reg,
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offline_attempts_total",
			Help: "Send attempts of queued operations, by result: done, replayed, or the outcome code (network, timeout, rate_limited, validation, ...).",
		}, []string{"result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "offline_permanent_failures_total",
			Help: "Operations that failed permanently, by code.",
		}, []string{"code"}),
		attemptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "offline_attempt_duration_seconds",
			Help: "Send attempts of queued operations, from the request to its answer (a batch member's: its batch's).",
			// 5 ms to about 80 s.
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 15),
		}),
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "offline_batch_operations",
			Help:    "Operations per batch request sent to the remote.",
			Buckets: []float64{2, 4, 8, 16, 32, 64, 100, 200, 500, 1000},
		}),
	}
	for _, c := range []prometheus.Collector{m.attempts, m.failures, m.attemptSeconds, m.batchOps, &queueCollector{d: d}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) attempt(result string) {
	if result == "" {
		result = "unknown"
	}
	m.attempts.WithLabelValues(result).Inc()
}

func (m *metrics) permanent(code string) {
	if code == "" {
		code = "unknown"
	}
	m.failures.WithLabelValues(code).Inc()
}

var (
	depthDesc = prometheus.NewDesc("offline_queue_depth",
		"Operations in the local queue, by state.", []string{"state"}, nil)
	oldestDesc = prometheus.NewDesc("offline_queue_oldest_age_seconds",
		"Age of the oldest operation that has not reached the server (0 when none).", nil, nil)
	pullLagDesc = prometheus.NewDesc("offline_pull_lag_seconds",
		"Time since the changes feed was last read without an error (absent before the first read).", nil, nil)
)

// queueCollector reads the queue's counts when scraped: one short read
// transaction, no polling in between.
type queueCollector struct{ d *Daemon }

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- depthDesc
	ch <- oldestDesc
	ch <- pullLagDesc
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.d.store.Stats()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(depthDesc, err)
		return
	}
	for _, s := range queue.States {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(st.Counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, ageSeconds(c.d.now(), st.OldestPending))
	c.d.pull.mu.Lock()
	lastRead := c.d.pull.lastRead
	c.d.pull.mu.Unlock()
	if !lastRead.IsZero() {
		ch <- prometheus.MustNewConstMetric(pullLagDesc, prometheus.GaugeValue, ageSeconds(c.d.now(), lastRead))
	}
}

// Registry returns the registry holding the daemon's metrics.
func (d *Daemon) Registry() *prometheus.Registry { return d.metrics.reg }

// MetricsHandler serves the daemon's metrics in the Prometheus text
// format (the local API mounts it at GET /metrics).
func (d *Daemon) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(d.metrics.reg, promhttp.HandlerOpts{})
}
