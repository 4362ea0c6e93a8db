package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's counters and gauges.
type metrics struct {
	fetchErrors      *prometheus.CounterVec
	publishErrors    prometheus.Counter
	invalidSnapshots prometheus.Counter
	generation       prometheus.Gauge
	snapshotServers  prometheus.Gauge
	serversKnown     prometheus.Gauge
	serversHealthy   prometheus.Gauge
	lastSuccess      prometheus.Gauge
	// frontProxyIsUser is the outcome of the front-proxy certificate check.
	frontProxyIsUser prometheus.Gauge
	// The OpenAPI v3 documents fetched for the field comparison.
	schemaFetches     prometheus.Counter
	schemaBytes       prometheus.Counter
	schemaFetchErrors *prometheus.CounterVec
	schemaDocuments   prometheus.Gauge
	schemaFieldPaths  prometheus.Gauge

	all []prometheus.Collector
}

func newMetrics() *metrics {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	m := &metrics{
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_controller_fetch_errors_total",
			Help: "Failed requests to API servers, by server address, path and reason.",
		}, []string{"server", "path", "reason"}),
		publishErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_controller_publish_errors_total",
			Help: "Snapshots the OnSnapshot callback refused.",
		}),
		invalidSnapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_controller_invalid_snapshots_total",
			Help: "Built snapshots that failed validation and were not published.",
		}),
		generation:      gauge("skewgate_controller_snapshot_generation", "Generation of the last published snapshot."),
		snapshotServers: gauge("skewgate_controller_snapshot_servers", "API servers in the last published snapshot."),
		serversKnown:    gauge("skewgate_controller_servers", "API servers known and probed."),
		serversHealthy: gauge("skewgate_controller_servers_healthy",
			"API servers considered healthy: /readyz last answered 200, and fewer consecutive probes than the failure threshold went unanswered since."),
		lastSuccess: gauge("skewgate_controller_last_successful_poll_timestamp_seconds",
			"End of the last poll after which at least one server was healthy and the published snapshot was up to date."),
		frontProxyIsUser: gauge("skewgate_controller_front_proxy_certificate_authenticates",
			"1 when an API server authenticated the front-proxy client certificate alone, without X-Remote-User, as a user: its --client-ca-file trusts it."),
		schemaFetches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_controller_openapi_documents_fetched_total",
			Help: "OpenAPI v3 group-version documents fetched and reduced to field paths: those of a group version whose hash differs between servers, once per hash.",
		}),
		schemaBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "skewgate_controller_openapi_document_bytes_total",
			Help: "Bytes of the OpenAPI v3 documents fetched; each is dropped once reduced.",
		}),
		schemaFetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "skewgate_controller_openapi_document_errors_total",
			Help: "OpenAPI v3 group-version documents that could not be fetched or read, by reason; retried on later polls.",
		}, []string{"reason"}),
		schemaDocuments: gauge("skewgate_controller_openapi_documents",
			"Reduced OpenAPI v3 documents held: one per hash of a group version whose hash differs between servers."),
		schemaFieldPaths: gauge("skewgate_controller_openapi_field_paths",
			"Field paths held by the reduced OpenAPI v3 documents, over all their kinds."),
	}
	m.all = []prometheus.Collector{m.fetchErrors, m.publishErrors, m.invalidSnapshots, m.generation, m.snapshotServers,
		m.serversKnown, m.serversHealthy, m.lastSuccess, m.frontProxyIsUser,
		m.schemaFetches, m.schemaBytes, m.schemaFetchErrors, m.schemaDocuments, m.schemaFieldPaths}
	return m
}

func (m *metrics) fetchError(server string, err *fetchError) {
	m.fetchErrors.WithLabelValues(server, err.path, err.reason).Inc()
}

// forgetServer drops the series of a server the controller no longer tracks,
// so that address churn does not grow the exposition forever.
func (m *metrics) forgetServer(address string) {
	m.fetchErrors.DeletePartialMatch(prometheus.Labels{"server": address})
}

func (m *metrics) publishError() { m.publishErrors.Inc() }

func (m *metrics) schemaFetched(bytes int) {
	m.schemaFetches.Inc()
	m.schemaBytes.Add(float64(bytes))
}

func (m *metrics) schemaFetchError(err *fetchError) {
	m.schemaFetchErrors.WithLabelValues(err.reason).Inc()
}

func (m *metrics) schemasCached(documents, fieldPaths int) {
	m.schemaDocuments.Set(float64(documents))
	m.schemaFieldPaths.Set(float64(fieldPaths))
}

func (m *metrics) invalidSnapshot() { m.invalidSnapshots.Inc() }

func (m *metrics) published(generation uint64, servers int) {
	m.generation.Set(float64(generation))
	m.snapshotServers.Set(float64(servers))
}

func (m *metrics) servers(known, healthy int) {
	m.serversKnown.Set(float64(known))
	m.serversHealthy.Set(float64(healthy))
}

func (m *metrics) frontProxyCertificateIsUser(isUser bool) {
	v := 0.0
	if isUser {
		v = 1
	}
	m.frontProxyIsUser.Set(v)
}

func (m *metrics) pollSucceeded(at time.Time) {
	m.lastSuccess.Set(float64(at.UnixMilli()) / 1e3)
}

// Describe and Collect make the Controller the prometheus.Collector of its
// metrics.
func (c *Controller) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.metrics.all {
		m.Describe(ch)
	}
}

func (c *Controller) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.metrics.all {
		m.Collect(ch)
	}
}
