package wasmhost

import (
	"io"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/host/internal/metricstest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// WritePrometheus writes the host's metrics in the text format, as /metrics
// serves them.
func (h *Host) WritePrometheus(w io.Writer) error {
	text, err := metricstest.Exposition(h)
	if err == nil {
		_, err = io.WriteString(w, text)
	}
	return err
}

func TestPluginMetricsThatCollideAreSentOnce(t *testing.T) {
	h := &Host{metrics: newMetricRegistry(2)}
	add := func(kind metricKind, name string, cell int, v int64) {
		h.metrics.lookup(h.metrics.define(kind, name)).cells[cell].value.Add(v)
	}
	add(metricCounter, "requests.total", 0, 2)
	add(metricCounter, "requests.total", 1, 3)
	// Sanitised to the same name as the one above, which sorts first.
	add(metricCounter, "requests_total", 0, 7)
	add(metricGauge, "requests.total", 0, 9)
	// Sanitised to a host metric's name.
	add(metricCounter, "skewgate.wasm.traps_total", 0, 4)
	h.counters.traps.Add(1)

	var b strings.Builder
	if err := h.WritePrometheus(&b); err != nil {
		t.Fatalf("the registry refused the metrics: %v", err)
	}
	out := b.String()
	for _, want := range []string{
		"# HELP requests_total Plugin metric \"requests.total\".\n# TYPE requests_total counter\nrequests_total 5\n",
		"skewgate_wasm_traps_total 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\nrequests_total "); n != 1 {
		t.Errorf("requests_total sent %d times:\n%s", n, out)
	}
}

// The host's own metrics and the plugin's, named as metricdef defines them,
// are exported as defined: a plugin metric takes its definition's help.
func TestHostAndPluginMetricsAreExportedAsDefined(t *testing.T) {
	h := &Host{metrics: newMetricRegistry(1)}
	h.metrics.lookup(h.metrics.define(metricCounter, metricdef.PluginReroutedRequests.Name)).cells[0].value.Add(1)
	h.metrics.define(metricGauge, metricdef.PluginSnapshotGeneration.Name)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(h)
	if err := metricstest.Defined(reg); err != nil {
		t.Error(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if want := len(hostMetrics) + 2; len(families) != want {
		t.Errorf("%d metrics exported; want %d", len(families), want)
	}
}
