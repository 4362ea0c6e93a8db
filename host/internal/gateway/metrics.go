package gateway

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// verdictNone labels a request answered before the plugin ran; the other
// verdict label values are the plugin's (wasmhost.Verdict).
const verdictNone = wasmhost.Reset + 1

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
	inFlight       *prometheus.Desc
	// rejected counts requests answered 429 by the gateway's own limits,
	// unbufferedBodies bodies streamed because the buffer budget refused them.
	rejected           *prometheus.CounterVec
	unbufferedBodies   *prometheus.CounterVec
	refusedConnections *prometheus.CounterVec
	openConnections    *prometheus.Desc
	requestsInFlight   *prometheus.Desc
	bufferedBytes      *prometheus.Desc

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
	duration := &metricdef.GatewayRequestDuration
	m := &metrics{
		requests: promdef.CounterVec(&metricdef.GatewayRequests),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: duration.Name, Help: duration.Help, Buckets: duration.Buckets},
			duration.Labels),
		upstreamErrors:     promdef.CounterVec(&metricdef.GatewayUpstreamErrors),
		retries:            promdef.Counter(&metricdef.GatewayRetries),
		pluginFailures:     promdef.Counter(&metricdef.GatewayPluginFailures),
		inFlight:           promdef.Desc(&metricdef.GatewayBackendInFlight),
		rejected:           promdef.CounterVec(&metricdef.GatewayRejectedRequests),
		unbufferedBodies:   promdef.CounterVec(&metricdef.GatewayUnbufferedRequestBodies),
		refusedConnections: promdef.CounterVec(&metricdef.GatewayRefusedConnections),
		openConnections:    promdef.Desc(&metricdef.GatewayOpenConnections),
		requestsInFlight:   promdef.Desc(&metricdef.GatewayRequestsInFlight),
		bufferedBytes:      promdef.Desc(&metricdef.GatewayBufferedRequestBytes),
		upstreams:          map[string]bool{},
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
	return []prometheus.Collector{m.requests, m.duration, m.upstreamErrors, m.retries, m.pluginFailures, m.rejected, m.unbufferedBodies, m.refusedConnections}
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
	ch <- g.metrics.openConnections
}

func (g *Gateway) Collect(ch chan<- prometheus.Metric) {
	for _, c := range g.metrics.collectors() {
		c.Collect(ch)
	}
	ch <- prometheus.MustNewConstMetric(g.metrics.requestsInFlight, prometheus.GaugeValue, float64(g.readOnly.n.Load()), "readOnly")
	ch <- prometheus.MustNewConstMetric(g.metrics.requestsInFlight, prometheus.GaugeValue, float64(g.mutating.n.Load()), "mutating")
	ch <- prometheus.MustNewConstMetric(g.metrics.requestsInFlight, prometheus.GaugeValue, float64(g.longRunning.inUse()), "longRunning")
	ch <- prometheus.MustNewConstMetric(g.metrics.bufferedBytes, prometheus.GaugeValue, float64(g.bodies.inUse()))
	ch <- prometheus.MustNewConstMetric(g.metrics.openConnections, prometheus.GaugeValue, float64(g.connections.inUse()))
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
