package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/metricstest"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// answerOrRouteTo answers /answer itself and forwards everything else to
// cluster.
func answerOrRouteTo(cluster string) pluginFunc {
	forward := routeTo(cluster)
	return func(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
		if slices.Contains(req.Headers, [2]string{":path", "/answer"}) {
			return wasmhost.Outcome{Verdict: wasmhost.Respond, Response: &wasmhost.LocalResponse{Status: http.StatusOK}}
		}
		return forward(ctx, req)
	}
}

func TestRequestDurationIsObservedPerVerdictAndUpstream(t *testing.T) {
	h := newHarness(t, harnessConfig{plugin: answerOrRouteTo("kube-b")})
	client := h.client(nil, true)
	for range 2 {
		if resp, body := do(t, client, "GET", h.front.URL+commonPods, nil, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("forwarded request: status %d: %s", resp.StatusCode, body)
		}
	}
	if resp, body := do(t, client, "GET", h.front.URL+"/answer", nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("answered request: status %d: %s", resp.StatusCode, body)
	}
	m := scrape(t, h)
	for _, want := range []string{
		`skewgate_gateway_request_duration_seconds_count{upstream="kube-b",verdict="forward"} 2`,
		`skewgate_gateway_request_duration_seconds_count{upstream="",verdict="respond"} 1`,
		// Every cluster of the snapshot has its series from the start.
		`skewgate_gateway_request_duration_seconds_count{upstream="kube-a",verdict="forward"} 0`,
		`skewgate_gateway_request_duration_seconds_count{upstream="",verdict="none"} 0`,
		`skewgate_gateway_requests_total{code="200",verdict="forward"} 2`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("missing %s in\n%s", want, m)
		}
	}
}

func TestRequestDurationEndsWhenTheResponseHeadersAreSent(t *testing.T) {
	m := newMetrics()
	arrived := time.Unix(1_767_225_600, 0)
	// A watch answered after 1.5 s whose stream then lasted an hour.
	w := &statusRecorder{ResponseWriter: httptest.NewRecorder(), status: http.StatusOK, answered: arrived.Add(1500 * time.Millisecond)}
	m.request(wasmhost.Respond, w, arrived)
	if got := testutil.ToFloat64(m.requests.WithLabelValues("respond", "200")); got != 1 {
		t.Errorf("requests_total = %v, want 1", got)
	}
	got := exposition(t, m.duration)
	for _, line := range []string{
		`skewgate_gateway_request_duration_seconds_bucket{upstream="",verdict="respond",le="1"} 0`,
		`skewgate_gateway_request_duration_seconds_bucket{upstream="",verdict="respond",le="2.5"} 1`,
		`skewgate_gateway_request_duration_seconds_sum{upstream="",verdict="respond"} 1.5`,
		`skewgate_gateway_request_duration_seconds_count{upstream="",verdict="respond"} 1`,
	} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("missing %s in\n%s", line, got)
		}
	}
}

func TestSeriesOfAClusterAreDroppedOnceNoRoutingNamesIt(t *testing.T) {
	h := newHarness(t, harnessConfig{plugin: routeTo("kube-a"), refusing: []string{"kube-a"}})
	// Refused by kube-a, the request is answered by another server.
	if resp, body := do(t, h.client(nil, true), "GET", h.front.URL+commonPods, nil, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("request to a refusing server: status %d: %s", resp.StatusCode, body)
	}
	if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_upstream_errors_total{backend="kube-a",kind="connect"} 1`) ||
		!strings.Contains(m, `skewgate_gateway_request_duration_seconds_count{upstream="kube-a",verdict="forward"} 0`) {
		t.Fatalf("the failed attempt is not counted:\n%s", m)
	}
	without := routing(t, discoverytest.SkewedControlPlane()[1:])
	if err := apply(h.gw, without); err != nil {
		t.Fatal(err)
	}
	// A request decided against the previous configuration may still name it.
	if m := scrape(t, h); !strings.Contains(m, `upstream="kube-a"`) {
		t.Errorf("kube-a's series went with the first snapshot without it:\n%s", m)
	}
	if err := apply(h.gw, without); err != nil {
		t.Fatal(err)
	}
	if m := scrape(t, h); strings.Contains(m, `"kube-a"`) || !strings.Contains(m, `upstream="kube-b"`) {
		t.Errorf("series left for kube-a, or none for kube-b:\n%s", m)
	}
}

func TestARefusedRoutingLeavesNoSeries(t *testing.T) {
	withZ := append([]discoverytest.Server{{ID: "apiserver-000", Cluster: "kube-z", Version: "v1.36.3", Healthy: true,
		Groups: map[string][]string{"/v1": {"pods"}}}}, discoverytest.SkewedControlPlane()...)
	for _, tc := range []struct {
		name   string
		refuse func(*testing.T, *Gateway)
	}{
		{"the plugin refuses its configuration", func(t *testing.T, g *Gateway) {
			staged, err := g.Stage(routing(t, withZ))
			if err != nil {
				t.Fatal(err)
			}
			staged.Abort()
		}},
		{"a cluster has no address", func(t *testing.T, g *Gateway) {
			rt := routing(t, withZ)
			delete(rt.Addresses, "kube-c")
			if err := apply(g, rt); err == nil {
				t.Fatal("a routing with a cluster without an address was applied")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{plugin: routeTo("")})
			tc.refuse(t, h.gw)
			if m := scrape(t, h); strings.Contains(m, "kube-z") || !strings.Contains(m, `upstream="kube-c"`) {
				t.Errorf("series for kube-z, or none for kube-c:\n%s", m)
			}
		})
	}
}

// scrape is the gateway's metrics in the text format, as /metrics serves
// them.
func scrape(t *testing.T, h *harness) string {
	t.Helper()
	return exposition(t, h.gw)
}

func exposition(t *testing.T, c prometheus.Collector) string {
	t.Helper()
	text, err := metricstest.Exposition(c)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

// routing is a Routing for servers with placeholder addresses.
func routing(t *testing.T, servers []discoverytest.Server) Routing {
	t.Helper()
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(2, servers))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	addresses := map[string]string{}
	for _, s := range servers {
		addresses[s.Cluster] = "127.0.0.1:1"
	}
	return Routing{Index: ix, Addresses: addresses}
}
