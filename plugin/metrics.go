package main

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
		generation:             proxywasm.DefineGaugeMetric("skewgate_snapshot_generation"),
	}
}

// setGeneration sets the gauge: the SDK only offers relative updates.
func (m *metrics) setGeneration(gen uint64) {
	m.generation.Add(int64(gen) - m.generation.Value())
}
