// Package promdef builds the host's Prometheus collectors from the metric
// definitions of plugin/metricdef, so that a name, help text or label set is
// never spelled out where a collector is made. metricdef itself cannot do it:
// the plugin links it, and the plugin links no Prometheus client.
package promdef

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/plugin/metricdef"
)

// Counter is def's counter.
func Counter(def *metricdef.Metric) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: def.Name, Help: def.Help})
}

// CounterVec is def's counter, by its labels.
func CounterVec(def *metricdef.Metric) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: def.Name, Help: def.Help}, def.Labels)
}

// Gauge is def's gauge.
func Gauge(def *metricdef.Metric) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: def.Name, Help: def.Help})
}

// GaugeVec is def's gauge, by its labels.
func GaugeVec(def *metricdef.Metric) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: def.Name, Help: def.Help}, def.Labels)
}

// CounterFunc is def's counter, read from value at each scrape.
func CounterFunc(def *metricdef.Metric, value func() float64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: def.Name, Help: def.Help}, value)
}

// GaugeFunc is def's gauge, read from value at each scrape.
func GaugeFunc(def *metricdef.Metric, value func() float64) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: def.Name, Help: def.Help}, value)
}

// Desc is def's descriptor, for a collector that makes its own metrics.
func Desc(def *metricdef.Metric) *prometheus.Desc {
	return prometheus.NewDesc(def.Name, def.Help, def.Labels, nil)
}
