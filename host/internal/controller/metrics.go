package controller

import (
	"cmp"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/skewgate/skewgate/host/internal/promtext"
)

// metrics are the controller's counters and gauges, safe for concurrent use.
type metrics struct {
	mu               sync.Mutex
	fetchErrors      map[fetchErrorKey]uint64
	publishErrors    uint64
	invalidSnapshots uint64
	generation       uint64
	serversKnown     int
	serversHealthy   int
	snapshotServers  int
	lastSuccess      time.Time
	// frontProxyIsUser is the outcome of the front-proxy certificate check.
	frontProxyIsUser bool
}

type fetchErrorKey struct {
	server, path, reason string
}

func newMetrics() *metrics {
	return &metrics{fetchErrors: map[fetchErrorKey]uint64{}}
}

func (m *metrics) fetchError(server string, err *fetchError) {
	m.mu.Lock()
	m.fetchErrors[fetchErrorKey{server, err.path, err.reason}]++
	m.mu.Unlock()
}

// forgetServer drops the series of a server the controller no longer tracks,
// so that address churn does not grow the exposition forever.
func (m *metrics) forgetServer(address string) {
	m.mu.Lock()
	maps.DeleteFunc(m.fetchErrors, func(k fetchErrorKey, _ uint64) bool { return k.server == address })
	m.mu.Unlock()
}

func (m *metrics) publishError() {
	m.mu.Lock()
	m.publishErrors++
	m.mu.Unlock()
}

func (m *metrics) invalidSnapshot() {
	m.mu.Lock()
	m.invalidSnapshots++
	m.mu.Unlock()
}

func (m *metrics) published(generation uint64, servers int) {
	m.mu.Lock()
	m.generation, m.snapshotServers = generation, servers
	m.mu.Unlock()
}

func (m *metrics) servers(known, healthy int) {
	m.mu.Lock()
	m.serversKnown, m.serversHealthy = known, healthy
	m.mu.Unlock()
}

func (m *metrics) frontProxyCertificateIsUser(isUser bool) {
	m.mu.Lock()
	m.frontProxyIsUser = isUser
	m.mu.Unlock()
}

func (m *metrics) pollSucceeded(at time.Time) {
	m.mu.Lock()
	m.lastSuccess = at
	m.mu.Unlock()
}

// WritePrometheus writes the controller's metrics in the Prometheus text
// exposition format.
func (c *Controller) WritePrometheus(w io.Writer) error {
	m := c.metrics
	m.mu.Lock()
	errs := maps.Clone(m.fetchErrors)
	publishErrors, invalid, generation := m.publishErrors, m.invalidSnapshots, m.generation
	known, healthy, inSnapshot, lastSuccess := m.serversKnown, m.serversHealthy, m.snapshotServers, m.lastSuccess
	frontProxyIsUser := m.frontProxyIsUser
	m.mu.Unlock()

	pw := promtext.NewWriter(w)
	header, sample := pw.Family, pw.Sample

	header("skewgate_controller_fetch_errors_total", "counter",
		"Failed requests to API servers, by server address, path and reason.")
	keys := slices.SortedFunc(maps.Keys(errs), func(a, b fetchErrorKey) int {
		return cmp.Or(cmp.Compare(a.server, b.server), cmp.Compare(a.path, b.path), cmp.Compare(a.reason, b.reason))
	})
	for _, k := range keys {
		sample("skewgate_controller_fetch_errors_total", strconv.FormatUint(errs[k], 10),
			"server", k.server, "path", k.path, "reason", k.reason)
	}
	header("skewgate_controller_publish_errors_total", "counter", "Snapshots the OnSnapshot callback refused.")
	sample("skewgate_controller_publish_errors_total", strconv.FormatUint(publishErrors, 10))
	header("skewgate_controller_invalid_snapshots_total", "counter", "Built snapshots that failed validation and were not published.")
	sample("skewgate_controller_invalid_snapshots_total", strconv.FormatUint(invalid, 10))
	header("skewgate_controller_snapshot_generation", "gauge", "Generation of the last published snapshot.")
	sample("skewgate_controller_snapshot_generation", strconv.FormatUint(generation, 10))
	header("skewgate_controller_snapshot_servers", "gauge", "API servers in the last published snapshot.")
	sample("skewgate_controller_snapshot_servers", strconv.Itoa(inSnapshot))
	header("skewgate_controller_servers", "gauge", "API servers known and probed.")
	sample("skewgate_controller_servers", strconv.Itoa(known))
	header("skewgate_controller_servers_healthy", "gauge", "API servers considered healthy: /readyz last answered 200, and fewer consecutive probes than the failure threshold went unanswered since.")
	sample("skewgate_controller_servers_healthy", strconv.Itoa(healthy))
	header("skewgate_controller_last_successful_poll_timestamp_seconds", "gauge",
		"End of the last poll after which at least one server was healthy and the published snapshot was up to date.")
	var ts string
	if lastSuccess.IsZero() {
		ts = "0"
	} else {
		ts = strconv.FormatFloat(float64(lastSuccess.UnixMilli())/1e3, 'f', 3, 64)
	}
	sample("skewgate_controller_last_successful_poll_timestamp_seconds", ts)
	header("skewgate_controller_front_proxy_certificate_authenticates", "gauge",
		"1 when an API server authenticated the front-proxy client certificate alone, without X-Remote-User, as a user: its --client-ca-file trusts it.")
	isUser := "0"
	if frontProxyIsUser {
		isUser = "1"
	}
	sample("skewgate_controller_front_proxy_certificate_authenticates", isUser)
	return pw.Flush()
}
