package wasmhost

import (
	"cmp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/plugin/metricdef"
)

type metricKind uint32

const (
	metricCounter metricKind = iota
	metricGauge
	metricHistogram
)

// Metric ids follow Envoy: the low two bits carry the type (counter 1, gauge 2, histogram 3) and ids of a type
// advance by 4, so a plugin sees the same ids it would see in Envoy.
const (
	metricIDTypeMask  = 0x3
	metricIDIncrement = 0x4
)

// metric is a guest-defined metric with one value cell per instance slot, so that an instance updates its own
// cell without contention and the export sums or selects across cells.
type metric struct {
	name  string
	kind  metricKind
	id    uint32
	cells []metricCell
}

type metricCell struct {
	value atomic.Int64 // counter (as unsigned) or gauge
}

type metricKey struct {
	kind metricKind
	name string
}

// metricRegistry holds the guest metrics of one Host. Definitions are rare and take the mutex; updates find the
// metric through copy-on-write per-type lists without locking.
type metricRegistry struct {
	mu     sync.Mutex
	cells  int
	byName map[metricKey]*metric
	byKind [3]atomic.Pointer[[]*metric]
}

func newMetricRegistry(cells int) *metricRegistry {
	r := &metricRegistry{cells: cells, byName: make(map[metricKey]*metric)}
	for i := range r.byKind {
		r.byKind[i].Store(new([]*metric))
	}
	return r
}

// define returns the id of the metric name of kind, creating it on first use.
func (r *metricRegistry) define(kind metricKind, name string) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := metricKey{kind, name}
	if m, ok := r.byName[key]; ok {
		return m.id
	}
	list := *r.byKind[kind].Load()
	m := &metric{
		name:  name,
		kind:  kind,
		id:    uint32(len(list))*metricIDIncrement + uint32(kind) + 1,
		cells: make([]metricCell, r.cells),
	}
	r.byName[key] = m
	next := append(slices.Clip(list), m)
	r.byKind[kind].Store(&next)
	return m.id
}

func (r *metricRegistry) lookup(id uint32) *metric {
	typ := id & metricIDTypeMask
	if typ == 0 {
		return nil
	}
	list := *r.byKind[typ-1].Load()
	if n := id / metricIDIncrement; n < uint32(len(list)) {
		return list[n]
	}
	return nil
}

func (r *metricRegistry) all() []*metric {
	var out []*metric
	for i := range r.byKind {
		out = append(out, *r.byKind[i].Load()...)
	}
	return out
}

func (m *metric) counterTotal() uint64 {
	var total uint64
	for i := range m.cells {
		total += uint64(m.cells[i].value.Load())
	}
	return total
}

// sanitizeMetricName applies Envoy's Prometheus rule: every byte outside [a-zA-Z0-9_] becomes '_' and a leading
// digit gets a '_' prefix. Envoy strips the wasmcustom namespace from plugin metrics, so a plugin metric
// "skewgate.requests" is exported as "skewgate_requests", without Envoy's "envoy_" prefix.
func sanitizeMetricName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || (b[0] >= '0' && b[0] <= '9') {
		b = append([]byte{'_'}, b...)
	}
	return string(b)
}

// Describe sends nothing: the plugin defines its metrics while it runs, so a
// Host is an unchecked prometheus.Collector.
func (h *Host) Describe(chan<- *prometheus.Desc) {}

// Collect sends the plugin's metrics and the host's own.
//
// Plugin metrics are named as Envoy exports them (see sanitizeMetricName). Counters are summed over instances; a gauge is the value held by the instance whose root context was configured most recently.
// If two plugin metrics sanitise to the same name, only the first in (name, type) order is sent.
// Host metrics are prefixed "skewgate_wasm_"; a plugin metric that sanitises to a host metric's name is dropped.
func (h *Host) Collect(ch chan<- prometheus.Metric) {
	metrics := h.metrics.all()
	slices.SortFunc(metrics, func(a, b *metric) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.kind, b.kind))
	})
	written := make(map[string]bool, len(metrics)+len(hostMetrics))
	for _, hm := range hostMetrics {
		written[hm.name] = true
	}
	gaugeCell := int(h.lastConfiguredSlot.Load())
	for _, m := range metrics {
		name := sanitizeMetricName(m.name)
		if written[name] {
			continue
		}
		written[name] = true
		desc := prometheus.NewDesc(name, pluginMetricHelp(m.name), nil, nil)
		switch m.kind {
		case metricCounter:
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(m.counterTotal()))
		case metricGauge:
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, float64(m.cells[gaugeCell].value.Load()))
		case metricHistogram:
			// Recording takes proxy_record_metric, which the plugin does not
			// import and the host does not implement: a defined histogram is
			// exported as Envoy exports one that never recorded.
			ch <- prometheus.MustNewConstHistogram(desc, 0, 0, nil)
		}
	}
	for _, hm := range hostMetrics {
		ch <- prometheus.MustNewConstMetric(hm.desc, hm.kind, hm.value(&h.counters))
	}
}

// pluginMetricHelp is the help of the plugin's metric name: its definition's,
// or, for a metric skewgate does not define, its name.
func pluginMetricHelp(name string) string {
	if def, ok := metricdef.Lookup(name); ok && def.Exporter == metricdef.Plugin {
		return def.Help
	}
	return "Plugin metric " + strconv.Quote(name) + "."
}

// hostCounters are the host's own metrics.
type hostCounters struct {
	traps                atomic.Uint64
	recreations          atomic.Uint64
	recreationFailures   atomic.Uint64
	crashLoopBackoffs    atomic.Uint64
	failedRequests       atomic.Uint64
	poolWaits            atomic.Uint64
	poolWaitNanos        atomic.Uint64
	poolTimeouts         atomic.Uint64
	liveInstances        atomic.Int64
	configurationApplied atomic.Uint64
	httpCalls            atomic.Uint64 // dispatched with proxy_http_call
	httpCallFailures     atomic.Uint64 // delivered without a response (error or timeout)
	httpCallsCancelled   atomic.Uint64 // abandoned because their stream ended first
}

// hostMetric is one of the host's own metrics, read from hostCounters.
type hostMetric struct {
	name  string
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(*hostCounters) float64
}

func newHostMetric(def *metricdef.Metric, value func(*hostCounters) float64) hostMetric {
	kind := prometheus.CounterValue
	if def.Type == metricdef.Gauge {
		kind = prometheus.GaugeValue
	}
	return hostMetric{def.Name, prometheus.NewDesc(def.Name, def.Help, nil, nil), kind, value}
}

func hostCounter(def *metricdef.Metric, counter func(*hostCounters) *atomic.Uint64) hostMetric {
	return newHostMetric(def, func(c *hostCounters) float64 { return float64(counter(c).Load()) })
}

var hostMetrics = []hostMetric{
	hostCounter(&metricdef.WasmTraps, func(c *hostCounters) *atomic.Uint64 { return &c.traps }),
	hostCounter(&metricdef.WasmInstanceRecreations, func(c *hostCounters) *atomic.Uint64 { return &c.recreations }),
	hostCounter(&metricdef.WasmInstanceRecreationFailures, func(c *hostCounters) *atomic.Uint64 { return &c.recreationFailures }),
	hostCounter(&metricdef.WasmCrashLoopBackoffs, func(c *hostCounters) *atomic.Uint64 { return &c.crashLoopBackoffs }),
	hostCounter(&metricdef.WasmConfigurationsApplied, func(c *hostCounters) *atomic.Uint64 { return &c.configurationApplied }),
	hostCounter(&metricdef.WasmFailedRequests, func(c *hostCounters) *atomic.Uint64 { return &c.failedRequests }),
	hostCounter(&metricdef.WasmPoolWaits, func(c *hostCounters) *atomic.Uint64 { return &c.poolWaits }),
	newHostMetric(&metricdef.WasmPoolWaitSeconds, func(c *hostCounters) float64 { return float64(c.poolWaitNanos.Load()) / 1e9 }),
	hostCounter(&metricdef.WasmPoolTimeouts, func(c *hostCounters) *atomic.Uint64 { return &c.poolTimeouts }),
	hostCounter(&metricdef.WasmHTTPCalls, func(c *hostCounters) *atomic.Uint64 { return &c.httpCalls }),
	hostCounter(&metricdef.WasmHTTPCallFailures, func(c *hostCounters) *atomic.Uint64 { return &c.httpCallFailures }),
	hostCounter(&metricdef.WasmHTTPCallsCancelled, func(c *hostCounters) *atomic.Uint64 { return &c.httpCallsCancelled }),
	newHostMetric(&metricdef.WasmInstancesLive, func(c *hostCounters) float64 { return float64(c.liveInstances.Load()) }),
}
