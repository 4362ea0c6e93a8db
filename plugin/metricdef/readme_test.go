package metricdef

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the metrics reference in host/deploy/monitoring/README.md from the definitions")

const (
	// readme holds the metrics reference, beside the alerting rules and the
	// dashboard that use the metrics.
	readme         = "../../host/deploy/monitoring/README.md"
	referenceStart = "<!-- metrics reference: generated from metricdef by `go test ./plugin/metricdef -update`; do not edit -->\n"
	referenceEnd   = "<!-- end of the metrics reference -->\n"
)

// exporterTitles introduce each exporter's table, in the order of All.
var exporterTitles = map[Exporter]string{
	Plugin: "The plugin module, in Envoy (its Prometheus output strips the `wasmcustom` namespace, so under these names) " +
		"and in `skewgate serve`",
	Serve:        "`skewgate serve` itself (`skewgate_ready` also `skewgate-xds`)",
	Gateway:      "The gateway of `skewgate serve`",
	WasmHost:     "The Wasm host of `skewgate serve`, which runs the plugin's VMs",
	Controller:   "The controller of `skewgate serve` and `skewgate-xds`, which watches the API servers and publishes snapshots",
	XDS:          "The xDS management server of `skewgate-xds`, which sends the plugin configuration to Envoys",
	Certificates: "The certificate, key and CA files watched for rotation",
}

// reference renders the monitoring README's metrics reference: one table per exporter.
func reference() string {
	var b strings.Builder
	b.WriteString(referenceStart)
	var last Exporter
	for _, m := range All {
		if m.Exporter != last {
			last = m.Exporter
			fmt.Fprintf(&b, "\n%s:\n\n| Metric | Type | Labels | Meaning |\n|---|---|---|---|\n", exporterTitles[m.Exporter])
		}
		var labels []string
		for _, l := range m.Labels {
			labels = append(labels, "`"+l+"`")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, strings.Join(labels, ", "), strings.ReplaceAll(m.Help, "|", `\|`))
	}
	b.WriteString("\n" + referenceEnd)
	return b.String()
}

func TestEveryExporterHasATitle(t *testing.T) {
	for _, m := range All {
		if exporterTitles[m.Exporter] == "" {
			t.Errorf("%s: exporter %q has no title in the metrics reference", m.Name, m.Exporter)
		}
	}
}

// The monitoring README's metrics reference is generated from the definitions;
// go test ./plugin/metricdef -update rewrites it.
func TestREADMEMetricsReferenceMatchesTheDefinitions(t *testing.T) {
	doc, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	start, end := bytes.Index(doc, []byte(referenceStart)), bytes.Index(doc, []byte(referenceEnd))
	if start < 0 || end < start {
		t.Fatalf("%s has no metrics reference between %q and %q", readme, referenceStart, referenceEnd)
	}
	want := reference()
	got := string(doc[start : end+len(referenceEnd)])
	if got == want {
		return
	}
	if *update {
		updated := append(append(doc[:start:start], want...), doc[end+len(referenceEnd):]...)
		if err := os.WriteFile(readme, updated, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the metrics reference differs from the definitions; run go test ./plugin/metricdef -update", readme)
}
