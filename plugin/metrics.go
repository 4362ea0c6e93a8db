package plugin

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/skewgate/skewgate/plugin/metricdef"
)

// metrics are defined through the proxy-wasm metrics ABI, by the names
// metricdef defines; Envoy exports them under its wasmcustom namespace, which
// its Prometheus output strips, skewgate's host on its /metrics endpoint.
type metrics struct {
	rerouted        proxywasm.MetricCounter
	discoveryServed proxywasm.MetricCounter
	notModified     proxywasm.MetricCounter
	unavailable     proxywasm.MetricCounter
	noPeerForwarded proxywasm.MetricCounter
	// Writes of a resource whose schemas differ, routed by the fields their
	// body sets, and those whose body could not be read.
	routedByBody           proxywasm.MetricCounter
	unreadableBodies       proxywasm.MetricCounter
	rejectedConfigurations proxywasm.MetricCounter
	// Configurations of a schema version this module cannot honour (also
	// counted as rejected), and the fields of a newer minor version it
	// ignored in those it accepted.
	schemaRejections    proxywasm.MetricCounter
	ignoredFields       proxywasm.MetricCounter
	refusedCertificates proxywasm.MetricCounter
	// Discovery authorization: calls made, answers taken from the cache,
	// 401/403 answers (from either), and calls without a usable answer.
	authorizationsChecked  proxywasm.MetricCounter
	authorizationCacheHits proxywasm.MetricCounter
	authorizationsDenied   proxywasm.MetricCounter
	authorizationFailures  proxywasm.MetricCounter
	generation             proxywasm.MetricGauge
}

// defineMetrics runs in OnPluginStart, never in init(): hosts forbid metric
// calls while the module initialises. Defining an existing name returns the
// existing metric, so every root context shares the same series.
func defineMetrics() *metrics {
	return &metrics{
		rerouted:               proxywasm.DefineCounterMetric(metricdef.PluginReroutedRequests.Name),
		discoveryServed:        proxywasm.DefineCounterMetric(metricdef.PluginMergedDiscoveryServed.Name),
		notModified:            proxywasm.DefineCounterMetric(metricdef.PluginMergedDiscoveryNotModified.Name),
		unavailable:            proxywasm.DefineCounterMetric(metricdef.PluginUnavailableResponses.Name),
		noPeerForwarded:        proxywasm.DefineCounterMetric(metricdef.PluginNoPeerDiscoveryForwarded.Name),
		routedByBody:           proxywasm.DefineCounterMetric(metricdef.PluginWritesRoutedByBody.Name),
		unreadableBodies:       proxywasm.DefineCounterMetric(metricdef.PluginWriteBodiesUnreadable.Name),
		rejectedConfigurations: proxywasm.DefineCounterMetric(metricdef.PluginConfigurationRejections.Name),
		schemaRejections:       proxywasm.DefineCounterMetric(metricdef.PluginConfigurationSchemaRejections.Name),
		ignoredFields:          proxywasm.DefineCounterMetric(metricdef.PluginConfigurationIgnoredFields.Name),
		refusedCertificates:    proxywasm.DefineCounterMetric(metricdef.PluginClientCertificatesRefused.Name),
		authorizationsChecked:  proxywasm.DefineCounterMetric(metricdef.PluginDiscoveryAuthorizationsChecked.Name),
		authorizationCacheHits: proxywasm.DefineCounterMetric(metricdef.PluginDiscoveryAuthorizationCacheHits.Name),
		authorizationsDenied:   proxywasm.DefineCounterMetric(metricdef.PluginDiscoveryAuthorizationsDenied.Name),
		authorizationFailures:  proxywasm.DefineCounterMetric(metricdef.PluginDiscoveryAuthorizationFailures.Name),
		generation:             proxywasm.DefineGaugeMetric(metricdef.PluginSnapshotGeneration.Name),
	}
}

// setGeneration sets the gauge: the SDK only offers relative updates.
func (m *metrics) setGeneration(gen uint64) {
	m.generation.Add(int64(gen) - m.generation.Value())
}
