package gateway

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// verdictNone labels a request answered before the plugin ran; the other
// verdict label values are the plugin's (wasmhost.Verdict).
const verdictNone = wasmhost.Reset + 1

// requestBuckets span a local answer of the plugin (about a millisecond) to
// the default request timeout.
var requestBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Status codes a request can be counted with from its verdict's table; others
// (none are sent in practice) take the slower labelled lookup.
const minCode, maxCode = 100, 599

// metrics are the gateway's counters, gauges and histograms. A request finds
// its series through per-verdict tables resolved once, so the request path
// neither locks nor allocates for them; the per-backend in-flight gauge is
// read from the backends themselves.
type metrics struct {
	requests       *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	upstreamErrors *prometheus.CounterVec
	retries        prometheus.Counter
	pluginFailures prometheus.Counter
	generation     prometheus.Gauge
	inFlight       *prometheus.Desc
	// rejected counts requests answered 429 by the gateway's own limits,
	// unbufferedBodies bodies streamed because the buffer budget refused them.
	rejected         *prometheus.CounterVec
	unbufferedBodies *prometheus.CounterVec
	requestsInFlight *prometheus.Desc
	bufferedBytes    *prometheus.Desc

	byVerdict [verdictNone + 1]verdictSeries

	// upstreams are the clusters with series of their own; guarded by
	// Gateway.applyMu.
	upstreams map[string]bool
}

// verdictSeries are one verdict's series: the request count of each status
// code, resolved on first use, and the duration of requests that no API
// server answered.
type verdictSeries struct {
	label string
	codes [maxCode - minCode + 1]atomic.Pointer[prometheus.Counter]
	local prometheus.Observer
}

func newMetrics() *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_gateway_requests_total",
			Help: "Requests by the plugin's verdict (none: answered before the plugin ran) and the status code sent (101: protocol switched, 499: client left).",
		}, []string{"verdict", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "skewgate_gateway_request_duration_seconds",
			Help: "Time from a request's arrival to its response headers (a watch or an upgraded connection counts until it started), " +
				"by the plugin's verdict and the cluster of the API server that answered (upstream; empty when the gateway or the plugin answered).",
			Buckets: requestBuckets,
		}, []string{"verdict", "upstream"}),
		upstreamErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_gateway_upstream_errors_total",
			Help: "Failed attempts to reach an API server, by backend cluster and kind (connect, tls, timeout, transport; shutting_down: the server refused the request while shutting down).",
		}, []string{"backend", "kind"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_gateway_retries_total",
			Help: "Requests sent again to another API server because the previous one provably did not process them (unreachable, or shutting down).",
		}),
		pluginFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_gateway_plugin_failures_total",
			Help: "Requests the plugin could not process (answered by the failure policy).",
		}),
		generation: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "skewgate_gateway_snapshot_generation",
			Help: "Generation of the snapshot the gateway routes with.",
		}),
		inFlight: prometheus.NewDesc("skewgate_gateway_backend_in_flight",
			"Requests being proxied to each API server, open watches and upgraded connections included.", []string{"backend"}, nil),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_gateway_rejected_requests_total",
			Help: "Requests answered 429 by the gateway's own limits: max_requests_inflight, max_mutating_requests_inflight, " +
				"or plugin_busy (no plugin VM became free while the request could queue).",
		}, []string{"reason"}),
		unbufferedBodies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_gateway_unbuffered_request_bodies_total",
			Help: "Request bodies small enough to buffer for a retry that streamed instead, because the buffer budget " +
				"(budget) or the client's share of it (client_share) was taken; their requests are not retried.",
		}, []string{"reason"}),
		requestsInFlight: prometheus.NewDesc("skewgate_gateway_requests_in_flight",
			"Requests that are not long-running being served, by kind (readOnly, mutating), as --max-requests-inflight and --max-mutating-requests-inflight count them.",
			[]string{"request_kind"}, nil),
		bufferedBytes: prometheus.NewDesc("skewgate_gateway_buffered_request_bytes",
			"Bytes of request bodies held for retries, as --max-buffered-request-bytes counts them.", nil, nil),
		upstreams: map[string]bool{},
	}
	for v := range m.byVerdict {
		s := &m.byVerdict[v]
		s.label = wasmhost.Verdict(v).String()
		if wasmhost.Verdict(v) == verdictNone {
			s.label = "none"
		}
		s.local = m.duration.WithLabelValues(s.label, "")
	}
	return m
}

// request counts a finished request and observes its duration: upstream is
// the backend that answered it, if any.
func (m *metrics) request(verdict wasmhost.Verdict, w *statusRecorder, arrived time.Time) {
	s := &m.byVerdict[verdict]
	code := w.code()
	if code >= minCode && code <= maxCode {
		cell := &s.codes[code-minCode]
		c := cell.Load()
		if c == nil {
			counter := m.requests.WithLabelValues(s.label, strconv.Itoa(code))
			cell.Store(&counter)
			c = &counter
		}
		(*c).Inc()
	} else {
		m.requests.WithLabelValues(s.label, strconv.Itoa(code)).Inc()
	}
	answered := w.answered
	if answered.IsZero() {
		answered = time.Now()
	}
	observer := s.local
	if w.upstream != nil && verdict == wasmhost.Forward {
		observer = w.upstream.duration
	}
	observer.Observe(answered.Sub(arrived).Seconds())
}

func (m *metrics) upstreamError(backend, kind string) {
	m.upstreamErrors.WithLabelValues(backend, kind).Inc()
}

// upstream returns the duration series of requests cluster answers; called
// under Gateway.applyMu.
func (m *metrics) upstream(cluster string) prometheus.Observer {
	m.upstreams[cluster] = true
	return m.duration.WithLabelValues(wasmhost.Forward.String(), cluster)
}

// forgetUpstreams drops the series of clusters s no longer routes to, so that
// API servers coming and going do not grow the exposition forever; called
// under Gateway.applyMu.
func (m *metrics) forgetUpstreams(s *state) {
	for cluster := range m.upstreams {
		if s != nil && s.lookup(cluster) != nil {
			continue
		}
		delete(m.upstreams, cluster)
		m.duration.DeleteLabelValues(wasmhost.Forward.String(), cluster)
		m.upstreamErrors.DeletePartialMatch(prometheus.Labels{"backend": cluster})
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.requests, m.duration, m.upstreamErrors, m.retries, m.pluginFailures, m.generation, m.rejected, m.unbufferedBodies}
}

// Describe and Collect make the Gateway the prometheus.Collector of its
// metrics.
func (g *Gateway) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range g.metrics.collectors() {
		c.Describe(ch)
	}
	ch <- g.metrics.inFlight
	ch <- g.metrics.requestsInFlight
	ch <- g.metrics.bufferedBytes
}

func (g *Gateway) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g.metrics.collectors() {
		c.Collect(ch)
	}
	ch <- prometheus.MustNewConstMetric(g.metrics.requestsInFlight, prometheus.GaugeValue, float64(g.readOnly.n.Load()), "readOnly")
	ch <- prometheus.MustNewConstMetric(g.metrics.requestsInFlight, prometheus.GaugeValue, float64(g.mutating.n.Load()), "mutating")
	ch <- prometheus.MustNewConstMetric(g.metrics.bufferedBytes, prometheus.GaugeValue, float64(g.bodies.bytesHeld()))
	s := g.state.Load()
	if s == nil {
		return
	}
	// A cluster that moved has a backend in both sets while requests to its
	// old address finish; while the plugin switches, one backend can be in
	// both.
	inFlight := make(map[string]int64, len(s.byCluster)+len(s.retired))
	seen := make(map[*backend]bool, len(s.byCluster)+len(s.retired))
	for _, set := range []map[string]*backend{s.byCluster, s.retired} {
		for _, b := range set {
			if !seen[b] {
				seen[b] = true
				inFlight[b.cluster] += b.inFlight.Load()
			}
		}
	}
	for cluster, n := range inFlight {
		ch <- prometheus.MustNewConstMetric(g.metrics.inFlight, prometheus.GaugeValue, float64(n), cluster)
	}
}
