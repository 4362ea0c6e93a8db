package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/plugin/metricdef"
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
	// members counts the members by source; differences where the listed
	// servers and the cluster's differ.
	members     *prometheus.GaugeVec
	differences prometheus.Gauge
	lastSuccess prometheus.Gauge
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
	m := &metrics{
		fetchErrors:       promdef.CounterVec(&metricdef.ControllerFetchErrors),
		publishErrors:     promdef.Counter(&metricdef.ControllerPublishErrors),
		invalidSnapshots:  promdef.Counter(&metricdef.ControllerInvalidSnapshots),
		generation:        promdef.Gauge(&metricdef.ControllerSnapshotGeneration),
		snapshotServers:   promdef.Gauge(&metricdef.ControllerSnapshotServers),
		serversKnown:      promdef.Gauge(&metricdef.ControllerServers),
		serversHealthy:    promdef.Gauge(&metricdef.ControllerServersHealthy),
		members:           promdef.GaugeVec(&metricdef.ControllerMembers),
		differences:       promdef.Gauge(&metricdef.ControllerMembershipDifferences),
		lastSuccess:       promdef.Gauge(&metricdef.ControllerLastSuccessfulPoll),
		frontProxyIsUser:  promdef.Gauge(&metricdef.ControllerFrontProxyCertificateAuthenticates),
		schemaFetches:     promdef.Counter(&metricdef.ControllerOpenAPIDocumentsFetched),
		schemaBytes:       promdef.Counter(&metricdef.ControllerOpenAPIDocumentBytes),
		schemaFetchErrors: promdef.CounterVec(&metricdef.ControllerOpenAPIDocumentErrors),
		schemaDocuments:   promdef.Gauge(&metricdef.ControllerOpenAPIDocuments),
		schemaFieldPaths:  promdef.Gauge(&metricdef.ControllerOpenAPIFieldPaths),
	}
	m.all = []prometheus.Collector{m.fetchErrors, m.publishErrors, m.invalidSnapshots, m.generation, m.snapshotServers,
		m.serversKnown, m.serversHealthy, m.members, m.differences, m.lastSuccess, m.frontProxyIsUser,
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

// membership sets the members by source, every source's series included,
// and the number of differences.
func (m *metrics) membership(members []member, differences int) {
	for _, b := range sourceBits {
		n := 0
		for _, mb := range members {
			if mb.sources&b.bit != 0 {
				n++
			}
		}
		m.members.WithLabelValues(string(b.source)).Set(float64(n))
	}
	m.differences.Set(float64(differences))
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
