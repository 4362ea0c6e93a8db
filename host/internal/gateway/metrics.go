package gateway

import (
	"cmp"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/skewgate/skewgate/host/internal/promtext"
)

type requestKey struct {
	verdict string
	code    int
}

type upstreamErrorKey struct {
	backend, kind string
}

// metrics are the gateway's counters; the per-backend in-flight gauge is read
// from the backends themselves.
type metrics struct {
	mu             sync.Mutex
	requests       map[requestKey]uint64
	upstreamErrors map[upstreamErrorKey]uint64

	retries        atomic.Uint64
	pluginFailures atomic.Uint64
	generation     atomic.Uint64
}

func newMetrics() *metrics {
	return &metrics{requests: map[requestKey]uint64{}, upstreamErrors: map[upstreamErrorKey]uint64{}}
}

func (m *metrics) request(verdict string, code int) {
	m.mu.Lock()
	m.requests[requestKey{verdict, code}]++
	m.mu.Unlock()
}

func (m *metrics) upstreamError(backend, kind string) {
	m.mu.Lock()
	m.upstreamErrors[upstreamErrorKey{backend, kind}]++
	m.mu.Unlock()
}

// WritePrometheus writes the gateway's metrics in the Prometheus text format.
func (g *Gateway) WritePrometheus(w io.Writer) error {
	m := g.metrics
	m.mu.Lock()
	requests, upstreamErrors := maps.Clone(m.requests), maps.Clone(m.upstreamErrors)
	m.mu.Unlock()

	pw := promtext.NewWriter(w)
	header, sample := pw.Family, pw.Sample

	header("skewgate_gateway_requests_total", "counter",
		"Requests by the plugin's verdict (none: answered before the plugin ran) and the status code sent (101: protocol switched, 499: client left).")
	for _, k := range slices.SortedFunc(maps.Keys(requests), func(a, b requestKey) int {
		return cmp.Or(cmp.Compare(a.verdict, b.verdict), cmp.Compare(a.code, b.code))
	}) {
		sample("skewgate_gateway_requests_total", strconv.FormatUint(requests[k], 10), "verdict", k.verdict, "code", strconv.Itoa(k.code))
	}
	header("skewgate_gateway_upstream_errors_total", "counter",
		"Failed attempts to reach an API server, by backend cluster and kind (connect, tls, timeout, transport; shutting_down: the server refused the request while shutting down).")
	for _, k := range slices.SortedFunc(maps.Keys(upstreamErrors), func(a, b upstreamErrorKey) int {
		return cmp.Or(cmp.Compare(a.backend, b.backend), cmp.Compare(a.kind, b.kind))
	}) {
		sample("skewgate_gateway_upstream_errors_total", strconv.FormatUint(upstreamErrors[k], 10), "backend", k.backend, "kind", k.kind)
	}
	header("skewgate_gateway_retries_total", "counter", "Requests sent again to another API server because the previous one provably did not process them (unreachable, or shutting down).")
	sample("skewgate_gateway_retries_total", strconv.FormatUint(m.retries.Load(), 10))
	header("skewgate_gateway_plugin_failures_total", "counter", "Requests the plugin could not process (answered by the failure policy).")
	sample("skewgate_gateway_plugin_failures_total", strconv.FormatUint(m.pluginFailures.Load(), 10))
	header("skewgate_gateway_snapshot_generation", "gauge", "Generation of the snapshot the gateway routes with.")
	sample("skewgate_gateway_snapshot_generation", strconv.FormatUint(m.generation.Load(), 10))
	header("skewgate_gateway_backend_in_flight", "gauge", "Requests being proxied to each API server, open watches and upgraded connections included.")
	if s := g.state.Load(); s != nil {
		backends := slices.Collect(maps.Values(s.byCluster))
		backends = append(backends, slices.Collect(maps.Values(s.retired))...)
		slices.SortFunc(backends, func(a, b *backend) int { return cmp.Compare(a.cluster, b.cluster) })
		backends = slices.CompactFunc(backends, func(a, b *backend) bool { return a.cluster == b.cluster })
		for _, b := range backends {
			sample("skewgate_gateway_backend_in_flight", strconv.FormatInt(b.inFlight.Load(), 10), "backend", b.cluster)
		}
	}
	return pw.Flush()
}
