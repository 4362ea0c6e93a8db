package plugin

import "github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

// metrics are defined through the proxy-wasm metrics ABI; Envoy exports them
// under its wasmcustom namespace, skewgate's host on its /metrics endpoint.
type metrics struct {
	rerouted               proxywasm.MetricCounter
	discoveryServed        proxywasm.MetricCounter
	notModified            proxywasm.MetricCounter
	unavailable            proxywasm.MetricCounter
	noPeerForwarded        proxywasm.MetricCounter
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
		rerouted:               proxywasm.DefineCounterMetric("skewgate_rerouted_requests_total"),
		discoveryServed:        proxywasm.DefineCounterMetric("skewgate_merged_discovery_served_total"),
		notModified:            proxywasm.DefineCounterMetric("skewgate_merged_discovery_not_modified_total"),
		unavailable:            proxywasm.DefineCounterMetric("skewgate_unavailable_responses_total"),
		noPeerForwarded:        proxywasm.DefineCounterMetric("skewgate_nopeer_discovery_forwarded_total"),
		rejectedConfigurations: proxywasm.DefineCounterMetric("skewgate_rejected_configurations_total"),
		schemaRejections:       proxywasm.DefineCounterMetric("skewgate_configuration_schema_rejections_total"),
		ignoredFields:          proxywasm.DefineCounterMetric("skewgate_configuration_ignored_fields_total"),
		refusedCertificates:    proxywasm.DefineCounterMetric("skewgate_client_certificates_refused_total"),
		authorizationsChecked:  proxywasm.DefineCounterMetric("skewgate_discovery_authorizations_checked_total"),
		authorizationCacheHits: proxywasm.DefineCounterMetric("skewgate_discovery_authorization_cache_hits_total"),
		authorizationsDenied:   proxywasm.DefineCounterMetric("skewgate_discovery_authorizations_denied_total"),
		authorizationFailures:  proxywasm.DefineCounterMetric("skewgate_discovery_authorization_failures_total"),
		generation:             proxywasm.DefineGaugeMetric("skewgate_snapshot_generation"),
	}
}

// setGeneration sets the gauge: the SDK only offers relative updates.
func (m *metrics) setGeneration(gen uint64) {
	m.generation.Add(int64(gen) - m.generation.Value())
}
