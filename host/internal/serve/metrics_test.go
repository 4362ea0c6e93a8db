package serve

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/skewgate/skewgate/host/internal/logtest"
	"github.com/skewgate/skewgate/host/internal/metricstest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

func TestMetricsEndpointExposesRuntimeProcessAndRequestDurationMetrics(t *testing.T) {
	f := newFixture(t)
	s := f.startServer(t)
	forwardOneCountedRequest(t, f, s)
	_, header, metrics := get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+s.MetricsAddr().String()+"/metrics")
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q, want the Prometheus text format", ct)
	}
	for _, want := range []string{
		"\ngo_goroutines ", "\ngo_memstats_heap_alloc_bytes ", "\nprocess_cpu_seconds_total ", "\nprocess_resident_memory_bytes ",
		`,verdict="forward",le="0.01"}`, "\nskewgate_wasm_instances_live ", "\nskewgate_controller_snapshot_generation ",
		"\nskewgate_ready 1\n",
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if n := strings.Count(metrics, "# TYPE skewgate_gateway_requests_total "); n != 1 {
		t.Errorf("skewgate_gateway_requests_total described %d times", n)
	}
}

// forwardOneCountedRequest sends one request through the gateway to an API
// server and waits until /metrics counts it. The gateway counts a request once
// its handler returns, which can be just after the client has the response;
// its duration series exist from the start, so the count is what tells it has.
func forwardOneCountedRequest(t *testing.T, f *fixture, s *Server) {
	t.Helper()
	if code, _, body := get(t, f.gatewayClient(), "https://"+s.GatewayAddr().String()+"/api/v1/namespaces/default/pods"); code != http.StatusOK {
		t.Fatalf("request through the gateway: %d: %s", code, body)
	}
	eventuallyMetric(t, s, `skewgate_gateway_requests_total{code="200",verdict="forward"} 1`)
}

func TestClientGoLogsGoIntoTheStructuredLog(t *testing.T) {
	f := newFixture(t)
	logs := &logtest.Buffer{}
	f.cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	if _, err := New(f.cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(klog.ClearLogger)
	klog.InfoS("watch closed", "resource", "leases")
	klog.Background().Error(nil, "list failed")
	var records []map[string]any
	for line := range strings.Lines(logs.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a structured record: %q", line)
		}
		if r["component"] == "client-go" {
			records = append(records, r)
		}
	}
	if len(records) != 2 || records[0]["msg"] != "watch closed" || records[0]["resource"] != "leases" || records[0]["level"] != "INFO" ||
		records[1]["msg"] != "list failed" || records[1]["level"] != "ERROR" {
		t.Errorf("client-go records %v in\n%s", records, logs)
	}
}

func TestProfilesAreServedOnlyWithProfilingOn(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run("profiling="+strconv.FormatBool(on), func(t *testing.T) {
			f := newFixture(t)
			f.cfg.Profiling = on
			s := f.startServer(t)
			client := &http.Client{Timeout: 10 * time.Second}
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/allocs?debug=1", "/debug/pprof/profile?seconds=1"} {
				if code, _, body := get(t, client, "http://"+s.MetricsAddr().String()+path); code != want {
					t.Errorf("GET %s: %d, want %d: %.200s", path, code, want, body)
				}
			}
		})
	}
}

func TestDebugRequestsServesTheShapesOfRequestsReceived(t *testing.T) {
	f := newFixture(t)
	s := f.startServer(t)
	target := "https://" + s.GatewayAddr().String() + "/api/v1/namespaces/default/pods?fieldSelector=spec.nodeName%3Dnode-7"
	if code, _, body := get(t, f.gatewayClient(), target); code != http.StatusOK {
		t.Fatalf("request through the gateway: %d: %s", code, body)
	}
	// A request is recorded once it has been answered, just after its
	// client has the answer.
	var code int
	var header http.Header
	var body string
	eventually(t, "/debug/requests to hold the request", func() bool {
		code, header, body = get(t, &http.Client{Timeout: 10 * time.Second}, "http://"+s.MetricsAddr().String()+"/debug/requests")
		return code != http.StatusOK || strings.Contains(body, `"resource":"pods"`)
	})
	if code != http.StatusOK || header.Get("Content-Type") != "application/json" {
		t.Fatalf("/debug/requests: %d %s: %s", code, header.Get("Content-Type"), body)
	}
	var shapes struct {
		Shapes []struct {
			Resource, Verb, UserAgent string
			FieldSelector             []string
			Count                     int
		}
	}
	if err := json.Unmarshal([]byte(body), &shapes); err != nil {
		t.Fatal(err)
	}
	if len(shapes.Shapes) != 1 || shapes.Shapes[0].Resource != "pods" || shapes.Shapes[0].Verb != "list" ||
		strings.Join(shapes.Shapes[0].FieldSelector, ",") != "spec.nodeName" || shapes.Shapes[0].Count != 1 {
		t.Errorf("/debug/requests: %s", body)
	}
	if strings.Contains(body, "node-7") || strings.Contains(body, "default") {
		t.Errorf("/debug/requests holds a selector value or a namespace: %s", body)
	}
}

// Every metric /metrics serves is Prometheus' own (go_, process_) or one
// metricdef defines, as it defines it, the plugin's included; and no
// definition is left that nothing serves.
func TestEveryMetricServedIsDefined(t *testing.T) {
	f := newFixture(t)
	s := f.startServer(t)
	forwardOneCountedRequest(t, f, s)
	served, err := metricstest.Endpoint("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	// And every definition of what serve runs is served: the labelled ones
	// once they have a series, the xDS server's with --xds-bind-address.
	for _, def := range metricdef.All {
		if len(def.Labels) == 0 && def.Exporter != metricdef.XDS && !served[def.Name] {
			t.Errorf("%s is defined but not served", def.Name)
		}
	}
}
