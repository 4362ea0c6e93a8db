package serve

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestMetricsEndpointExposesRuntimeProcessAndRequestDurationMetrics(t *testing.T) {
	f := newFixture(t)
	s := f.startServer(t)
	if code, _, body := get(t, f.gatewayClient(), "https://"+s.GatewayAddr().String()+"/api/v1/namespaces/default/pods"); code != http.StatusOK {
		t.Fatalf("request through the gateway: %d: %s", code, body)
	}
	// The gateway counts a request once its handler returns, which can be just
	// after the client has the response.
	eventuallyMetric(t, s, `skewgate_gateway_request_duration_seconds_count{upstream="`)
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
