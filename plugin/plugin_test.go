package main

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// The suite runs every case twice, natively and against the built module
// (make build writes it), so what is tested is what Envoy loads.
const builtModule = "../build/skewgate.wasm"

const (
	acceptV2       = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptV2NoPeer = acceptV2 + ";profile=nopeer"
	acceptClientGo = acceptV2 + ",application/json"
)

type runner struct {
	name string
	vm   func(t *testing.T) types.VMContext
	// proxytest appends a value added to an existing header to that header's
	// value instead of adding a second field as Envoy does; assertions on added
	// headers see what the host really holds.
	concatenatesAddedValues bool
}

// addedValues is how a host that received values through repeated
// AddHttpRequestHeader calls holds them.
func (r runner) addedValues(values ...string) []string {
	if r.concatenatesAddedValues {
		return []string{strings.Join(values, "")}
	}
	return values
}

var runners = []runner{
	{"go", func(*testing.T) types.VMContext { return &vmContext{} }, true},
	{"wasm", func(t *testing.T) types.VMContext {
		wasm, err := os.ReadFile(builtModule)
		if err != nil {
			t.Fatalf("the built plugin is missing (run `make build`): %v", err)
		}
		vm, err := proxytest.NewWasmVMContext(wasm)
		if err != nil {
			t.Fatalf("load %s: %v", builtModule, err)
		}
		t.Cleanup(func() { vm.Close() })
		return vm
	}, true},
}

func configJSON(t *testing.T, options map[string]any, servers []discoverytest.Server) []byte {
	t.Helper()
	cfg := map[string]any{"snapshot": discoverytest.SnapshotJSON(1, servers)}
	for k, v := range options {
		cfg[k] = v
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// plugin is one configured root context on one host emulator.
type plugin struct {
	t               *testing.T
	host            proxytest.HostEmulator
	clearRouteCache int
}

func startPlugin(t *testing.T, r runner, config []byte, opts ...func(*proxytest.EmulatorOption)) *plugin {
	t.Helper()
	opt := proxytest.NewEmulatorOption().WithVMContext(r.vm(t)).WithPluginConfiguration(config)
	for _, o := range opts {
		o(opt)
	}
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	p := &plugin{t: t, host: host}
	// proxytest cannot return an empty result (it indexes the first byte);
	// Envoy's clear_route_cache returns nothing and the plugin ignores it.
	host.RegisterForeignFunction("clear_route_cache", func([]byte) []byte { p.clearRouteCache++; return []byte{0} })
	if got := host.StartPlugin(); got != types.OnPluginStartStatusOK {
		t.Fatalf("StartPlugin = %v, logs: %v", got, host.GetCriticalLogs())
	}
	return p
}

type result struct {
	action  types.Action
	headers [][2]string
	local   *proxytest.LocalHttpResponse
}

func (r result) header(name string) (string, bool) {
	for _, kv := range r.headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func (r result) values(name string) []string {
	var out []string
	for _, kv := range r.headers {
		if kv[0] == name {
			out = append(out, kv[1])
		}
	}
	return out
}

func localHeader(l *proxytest.LocalHttpResponse, name string) string {
	for _, kv := range l.Headers {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

func (p *plugin) request(method, path string, extra ...[2]string) result {
	p.t.Helper()
	id := p.host.InitializeHttpContext()
	headers := append([][2]string{{":method", method}, {":path", path}, {":authority", "kube.example"}}, extra...)
	action := p.host.CallOnRequestHeaders(id, headers, true)
	res := result{action: action, headers: p.host.GetCurrentRequestHeaders(id), local: p.host.GetSentLocalResponse(id)}
	p.host.CompleteHttpContext(id)
	return res
}

func (p *plugin) counter(name string) uint64 {
	p.t.Helper()
	v, err := p.host.GetCounterMetric(name)
	if err != nil {
		p.t.Fatalf("counter %s: %v", name, err)
	}
	return v
}

func forEachRunner(t *testing.T, f func(t *testing.T, r runner)) {
	for _, r := range runners {
		t.Run(r.name, func(t *testing.T) { f(t, r) })
	}
}

func TestRequestsEveryServerServesAreLeftToTheGateway(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, nil, discoverytest.SkewedControlPlane()))
		for _, path := range []string{
			"/apis/apps/v1/namespaces/default/deployments/web",
			"/api/v1/namespaces/default/pods?watch=true",
			"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
			"/apis/example.com/v1/widgets", // served by nobody: a real server answers 404
			"/healthz",
			"/version",
		} {
			res := p.request("GET", path)
			if res.action != types.ActionContinue || res.local != nil {
				t.Errorf("%s: action %v, local %+v; want continue", path, res.action, res.local)
			}
			if v, ok := res.header("x-skewgate-upstream"); ok {
				t.Errorf("%s: routing header set to %q; want the gateway's own load balancing", path, v)
			}
			if _, ok := res.header(headerPeerProxied); ok {
				t.Errorf("%s: peer-proxied header set on a request every server serves", path)
			}
		}
	})
}

func TestResourceOnlySomeServersServeIsReroutedUniformlyAndMarked(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, nil, discoverytest.SkewedControlPlane()))
		seen := map[string]int{}
		const n = 10
		for range n {
			res := p.request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
				[2]string{headerPeerProxied, "true"}) // forged: must not stop re-routing
			if res.action != types.ActionContinue {
				t.Fatalf("action %v", res.action)
			}
			cluster, _ := res.header("x-skewgate-upstream")
			seen[cluster]++
			if got := res.values(headerPeerProxied); !slices.Equal(got, []string{"true"}) {
				t.Errorf("peer-proxied values %q; want exactly [true]", got)
			}
		}
		if seen["kube-b"] != n/2 || seen["kube-c"] != n/2 {
			t.Errorf("re-routed to %v; want an even split over kube-b and kube-c", seen)
		}
		if got := p.counter("skewgate_rerouted_requests_total"); got != n {
			t.Errorf("rerouted counter %d; want %d", got, n)
		}
		if p.clearRouteCache != n {
			t.Errorf("clear_route_cache called %d times; want %d", p.clearRouteCache, n)
		}
		res := p.request("GET", "/apis/coordination.k8s.io/v1alpha2/namespaces/kube-system/leasecandidates")
		if cluster, _ := res.header("x-skewgate-upstream"); cluster != "kube-c" {
			t.Errorf("alpha API routed to %q; want kube-c, its only server", cluster)
		}
	})
}

func TestClientNeverChoosesBackendOrDisablesRerouting(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, nil, discoverytest.SkewedControlPlane()))
		res := p.request("GET", "/apis/apps/v1/deployments",
			[2]string{"x-skewgate-upstream", "kube-a"}, [2]string{headerPeerProxied, "true"})
		for _, name := range []string{"x-skewgate-upstream", headerPeerProxied} {
			if v, ok := res.header(name); ok {
				t.Errorf("inbound %s: %q survived", name, v)
			}
		}
	})
}

func TestTrustedPeerProxiedHeaderIsServedWhereItLands(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, map[string]any{"trustPeerProxiedHeader": true}, discoverytest.SkewedControlPlane()))
		res := p.request("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
			[2]string{headerPeerProxied, "true"})
		if v, ok := res.header("x-skewgate-upstream"); ok {
			t.Errorf("routed to %q; a trusted peer-proxied request is served where it lands", v)
		}
		if v, _ := res.header(headerPeerProxied); v != "true" {
			t.Errorf("trusted header removed")
		}
	})
}

func TestMergedDiscoveryIsServedWithUpstreamHeadersAndETag(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, nil, servers))
		want := mustIndex(t, servers).MergedAPIs()

		res := p.request("GET", "/apis", [2]string{"accept", acceptClientGo})
		if res.action != types.ActionPause || res.local == nil {
			t.Fatalf("action %v local %v; want a local response", res.action, res.local)
		}
		l := res.local
		if l.StatusCode != 200 || string(l.Data) != string(want.Body) {
			t.Fatalf("status %d, body %d bytes; want 200 and the merged document (%d bytes)", l.StatusCode, len(l.Data), len(want.Body))
		}
		for name, v := range map[string]string{
			"content-type": acceptV2, "etag": want.ETag, "vary": "Accept", "cache-control": "public",
		} {
			if got := localHeader(l, name); got != v {
				t.Errorf("%s = %q; want %q", name, got, v)
			}
		}
		if !strings.Contains(string(l.Data), `"mutatingadmissionpolicies"`) || !strings.Contains(string(l.Data), `"coordination.k8s.io"`) {
			t.Errorf("merged document lacks APIs that only some servers serve")
		}

		res = p.request("GET", "/apis", [2]string{"accept", acceptV2}, [2]string{"if-none-match", want.ETag})
		if res.local == nil || res.local.StatusCode != 304 || len(res.local.Data) != 0 || localHeader(res.local, "etag") != want.ETag {
			t.Errorf("If-None-Match with the current ETag: got %+v; want 304, no body, ETag", res.local)
		}
		res = p.request("GET", "/apis", [2]string{"accept", acceptV2}, [2]string{"if-none-match", "W/" + want.ETag})
		if res.local == nil || res.local.StatusCode != 200 {
			t.Errorf("weak If-None-Match must not match (upstream compares bytes): got %+v", res.local)
		}
		res = p.request("HEAD", "/apis", [2]string{"accept", acceptV2})
		if res.local == nil || res.local.StatusCode != 200 || len(res.local.Data) != 0 {
			t.Errorf("HEAD: got %+v; want 200 without body", res.local)
		}
		res = p.request("GET", "/api", [2]string{"accept", acceptV2})
		if res.local == nil || string(res.local.Data) != string(mustIndex(t, servers).MergedCoreAPI().Body) {
			t.Errorf("/api: got %+v; want the merged core document", res.local)
		}
		if got := p.counter("skewgate_merged_discovery_served_total"); got != 4 {
			t.Errorf("served counter %d; want 4", got)
		}
		if got := p.counter("skewgate_merged_discovery_not_modified_total"); got != 1 {
			t.Errorf("304 counter %d; want 1", got)
		}
	})
}

func TestNoPeerAndLegacyDiscoveryPassThrough(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, nil, discoverytest.SkewedControlPlane()))
		for _, accept := range []string{acceptV2NoPeer + "," + acceptClientGo, "application/json", ""} {
			res := p.request("GET", "/apis", [2]string{"accept", accept})
			if res.action != types.ActionContinue || res.local != nil {
				t.Errorf("Accept %q: action %v local %+v; want pass-through", accept, res.action, res.local)
			}
		}
		if got := p.counter("skewgate_nopeer_discovery_forwarded_total"); got != 1 {
			t.Errorf("nopeer counter %d; want 1", got)
		}
	})
}

func TestLegacyGroupVersionDiscoveryGoesToAServerThatHasIt(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, nil, discoverytest.SkewedControlPlane()))
		for path, want := range map[string]string{
			"/apis/coordination.k8s.io/v1alpha2":            "kube-c",
			"/openapi/v3/apis/coordination.k8s.io/v1alpha2": "kube-c",
			"/apis/coordination.k8s.io":                     "kube-c",
		} {
			res := p.request("GET", path)
			if got, _ := res.header("x-skewgate-upstream"); got != want {
				t.Errorf("%s routed to %q; want %q", path, got, want)
			}
			if _, ok := res.header(headerPeerProxied); ok {
				t.Errorf("%s: discovery documents are not resource requests and carry no peer-proxied mark", path)
			}
		}
	})
}

func TestCapableServersDownGives503StatusWithRetryAfter(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	servers[1].Healthy, servers[2].Healthy = false, false
	forEachRunner(t, func(t *testing.T, r runner) {
		p := startPlugin(t, r, configJSON(t, map[string]any{"retryAfterSeconds": 7}, servers))
		res := p.request("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
		if res.action != types.ActionPause || res.local == nil || res.local.StatusCode != 503 {
			t.Fatalf("got action %v local %+v; want 503", res.action, res.local)
		}
		if got := localHeader(res.local, "retry-after"); got != "7" {
			t.Errorf("Retry-After %q; want 7", got)
		}
		var status struct {
			Kind, Status, Reason string
			Code                 int
			Details              struct{ RetryAfterSeconds int }
		}
		if err := json.Unmarshal(res.local.Data, &status); err != nil {
			t.Fatalf("body is not JSON: %v: %s", err, res.local.Data)
		}
		if status.Kind != "Status" || status.Reason != "ServiceUnavailable" || status.Code != 503 || status.Details.RetryAfterSeconds != 7 {
			t.Errorf("status body %+v", status)
		}
		if got := p.counter("skewgate_unavailable_responses_total"); got != 1 {
			t.Errorf("unavailable counter %d; want 1", got)
		}
		// Discovery keeps listing the APIs of servers that are down for a moment.
		res = p.request("GET", "/apis", [2]string{"accept", acceptV2})
		if res.local == nil || !strings.Contains(string(res.local.Data), "mutatingadmissionpolicies") {
			t.Errorf("merged discovery dropped the APIs of unhealthy servers")
		}
	})
}

func TestClientHeadersNeverBecomeAnIdentity(t *testing.T) {
	forged := [][2]string{
		{"x-remote-user", "system:admin"}, {"x-remote-group", "system:masters"},
		{"x-remote-uid", "0"}, {"x-remote-extra-scopes", "all"}, {"x-remote-extra-acme.com%2fteam", "x"},
	}
	for _, mode := range []string{"passthrough", "front-proxy"} {
		t.Run(mode, func(t *testing.T) {
			forEachRunner(t, func(t *testing.T, r runner) {
				p := startPlugin(t, r, configJSON(t, map[string]any{"identityMode": mode}, discoverytest.SkewedControlPlane()))
				res := p.request("GET", "/api/v1/pods", append(forged, [2]string{"authorization", "Bearer abc"})...)
				for _, kv := range res.headers {
					if strings.HasPrefix(kv[0], "x-remote-") {
						t.Errorf("forged %s: %s reached the backend", kv[0], kv[1])
					}
				}
				if v, _ := res.header("authorization"); v != "Bearer abc" {
					t.Errorf("bearer token altered: %q", v)
				}
			})
		})
	}
}

func TestFrontProxyAssertsVerifiedClientCertificate(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		subject := []byte(`CN=alice\2C jr,O=dev,O=system:masters`)
		p := startPlugin(t, r, configJSON(t, map[string]any{"identityMode": "front-proxy"}, discoverytest.SkewedControlPlane()),
			func(o *proxytest.EmulatorOption) { o.WithProperty(propertySubjectPeerCertificate, subject) })
		res := p.request("GET", "/api/v1/pods", [2]string{"x-remote-user", "system:admin"}, [2]string{"x-remote-group", "evil"})
		if got := res.values("x-remote-user"); !slices.Equal(got, []string{"alice, jr"}) {
			t.Errorf("x-remote-user %q; want [alice, jr]", got)
		}
		if got, want := res.values("x-remote-group"), r.addedValues("system:masters", "dev"); !slices.Equal(got, want) {
			t.Errorf("x-remote-group %q; want the certificate's organizations in certificate order", got)
		}
	})
}

func TestInvalidConfigurationIsRejectedWithOneClearLogLine(t *testing.T) {
	valid := configJSON(t, nil, discoverytest.SkewedControlPlane())
	cases := map[string]struct {
		config []byte
		want   string
	}{
		"not json":          {[]byte(`{"snapshot":`), "not valid JSON"},
		"unknown field":     {[]byte(`{"snapshot":{},"routingheader":"x"}`), `unknown field "routingheader"`},
		"bad header name":   {[]byte(strings.Replace(string(valid), `{"snapshot"`, `{"routingHeader":"X-Upper","snapshot"`, 1)), "routingHeader"},
		"stripped header":   {[]byte(strings.Replace(string(valid), `{"snapshot"`, `{"routingHeader":"x-remote-user","snapshot"`, 1)), "routingHeader"},
		"bad identity mode": {[]byte(strings.Replace(string(valid), `{"snapshot"`, `{"identityMode":"trust-me","snapshot"`, 1)), "identityMode"},
		"retry after zero":  {[]byte(strings.Replace(string(valid), `{"snapshot"`, `{"retryAfterSeconds":0,"snapshot"`, 1)), "retryAfterSeconds"},
		"no snapshot":       {[]byte(`{}`), "snapshot: must be an object"},
		"zero generation":   {[]byte(`{"snapshot":{"generation":0,"servers":[]}}`), "generation"},
		"broken server": {[]byte(strings.Replace(string(valid), `"cluster":"kube-b"`, `"cluster":"kube b"`, 1)),
			"servers[1] (apiserver-bbb): cluster"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			forEachRunner(t, func(t *testing.T, r runner) {
				opt := proxytest.NewEmulatorOption().WithVMContext(r.vm(t)).WithPluginConfiguration(c.config)
				host, reset := proxytest.NewHostEmulator(opt)
				defer reset()
				if got := host.StartPlugin(); got != types.OnPluginStartStatusFailed {
					t.Fatalf("StartPlugin = %v; want failed", got)
				}
				logs := host.GetCriticalLogs()
				if len(logs) != 1 || !strings.Contains(logs[0], c.want) {
					t.Errorf("critical logs %q; want one line containing %q", logs, c.want)
				}
				if v, _ := host.GetCounterMetric("skewgate_rejected_configurations_total"); v != 1 {
					t.Errorf("rejected counter %d; want 1", v)
				}
			})
		})
	}
}

func TestGenerationGaugeFollowsConfiguration(t *testing.T) {
	forEachRunner(t, func(t *testing.T, r runner) {
		cfg := map[string]any{"snapshot": discoverytest.SnapshotJSON(42, discoverytest.SkewedControlPlane())}
		raw, _ := json.Marshal(cfg)
		p := startPlugin(t, r, raw)
		if v, err := p.host.GetGaugeMetric("skewgate_snapshot_generation"); err != nil || v != 42 {
			t.Errorf("generation gauge %d (%v); want 42", v, err)
		}
	})
}

func mustIndex(t *testing.T, servers []discoverytest.Server) *discovery.Index {
	t.Helper()
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(1, servers))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}
