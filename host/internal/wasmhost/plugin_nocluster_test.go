package wasmhost

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/envoyabi"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// routeMatchUpstreams is a host whose snapshot clusters are route match
// values, not upstreams (Istio, Envoy Gateway): it has no cluster to call.
type routeMatchUpstreams struct{}

func (routeMatchUpstreams) HasCluster(string) bool { return false }

func (routeMatchUpstreams) HTTPCall(context.Context, HTTPCall) (*HTTPCallResponse, error) {
	return nil, errors.New("no such cluster")
}

// When the host cannot carry the plugin's authorization question, a merged
// discovery request goes to an API server, which answers it with its own
// authorization, instead of failing with 503.
func TestDiscoveryGoesToAServerWhenTheHostCannotCallIt(t *testing.T) {
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	servers := discoverytest.SkewedControlPlane()
	h := newHost(t, wasm, Options{
		Envoy: envoyabi.Envoy133, Instances: 1, CompilationCacheDir: compilationCacheDir(),
		PluginConfiguration: plugintest.Config(t, 1, nil, servers),
		HTTPCalls:           routeMatchUpstreams{},
		Logger:              slog.New(slog.DiscardHandler),
	})
	out := h.HandleRequestHeaders(context.Background(), &Request{Headers: [][2]string{
		{":method", "GET"}, {":path", "/apis"}, {":authority", "kube"}, {"accept", plugintest.AcceptV2},
	}, EndOfStream: true})
	if out.Failed != nil || out.Verdict != Forward {
		t.Fatalf("outcome %v (failed: %v, response %+v); want the request forwarded", out.Verdict, out.Failed, out.Response)
	}
	var clusters []string
	for _, s := range servers {
		clusters = append(clusters, s.Cluster)
	}
	if cluster, _ := header(out.Headers, plugintest.RoutingHeader); !slices.Contains(clusters, cluster) {
		t.Errorf("routed to %q; want one of the servers %v", cluster, clusters)
	}
}
