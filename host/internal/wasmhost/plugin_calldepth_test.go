package wasmhost

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/envoyabi"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// pluginCallDepthBudget is the deepest nesting of guest calls the plugin may reach in any callback, and the limit
// the behaviour suite runs under. Envoy's WAMR runtime gives a VM a 32 KiB stack, which overflowed at 59 frames
// when the snapshot parser recursed. The plugin's own code now runs at most 18 deep; the Go runtime's allocator
// and collector can stack about 27 frames on its deepest allocation, depending on the heap they find.
const pluginCallDepthBudget = 44

// pluginConfigureDepthBudget is how deep the plugin's own code may run in proxy_on_configure, the Go runtime's
// frames not counted. Parsing the snapshot is the deepest chain the plugin has, and at 16 KiB of WAMR stack it
// overflowed when it ran 21 deep (parseGVKPointer < parseSubresource < ... < config.Parse < OnPluginStart, 29
// frames in all); OnPluginStart now calls config.Parse itself, servers are read in the snapshot's member reader
// and a responseKind is parsed by its resource's parser, 18 deep.
const pluginConfigureDepthBudget = 18

// depthFixtureVersions are the captured servers a depth test's snapshot is made of, in turn.
var depthFixtureVersions = []string{"v1.35.4", "v1.36.3", "v1.37.2"}

// fixtureSnapshot renders a snapshot of n servers made of the captured v1.35.4, v1.36.3 and v1.37.2 documents in
// turn, each server with its own id and cluster; the servers of version down are unhealthy. Field-level data makes
// the field-selector and schema rules run: the v1.35.4 servers accept fewer pod field-selector labels, and the
// healthy servers' schemas differ as the captured ones do (benchFieldData), with the field skew, but for
// deployments and pods, which depthRequests reads as resources every server serves alike.
func fixtureSnapshot(tb testing.TB, n int, down string) json.RawMessage {
	tb.Helper()
	members := benchPlane(tb, n, down, depthFixtureVersions...)
	fieldSkew := benchFieldData(tb, members)
	for _, alike := range []string{"apps/v1/deployments", "v1/pods"} {
		delete(fieldSkew, alike)
		for i := range members {
			delete(members[i].MissingFields, alike)
		}
	}
	for i := range members {
		if members[i].FieldSelectors == nil {
			members[i].FieldSelectors = map[string][]string{}
		}
		members[i].FieldSelectors["v1/pods"] = []string{"metadata.name", "metadata.namespace", "spec.nodeName"}
		if members[i].Version == depthFixtureVersions[0] {
			members[i].FieldSelectors["v1/pods"] = []string{"metadata.name", "metadata.namespace"}
		}
	}
	return encodeWithFieldSkew(tb, 1, members, fieldSkew)
}

func fixturePluginConfig(tb testing.TB, snapshot json.RawMessage, options map[string]any) []byte {
	tb.Helper()
	cfg := map[string]any{"snapshot": snapshot}
	maps.Copy(cfg, options)
	raw, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

// namedPlugin is the plugin built as builtPlugin is but with the module's name section kept, so that a depth test
// can tell the plugin's own frames from the Go runtime's.
var namedPlugin = sync.OnceValues(func() ([]byte, error) { return plugintest.BuildModule(true) })

// pluginDepth is how deep the plugin's own code (its packages and the SDK's) ran. Below and above it run the
// Go runtime's allocator and collector, as deep as the heap they find makes them, and the standard library's
// sorts, as deep as the logarithm of what they sort; the budget bounds the whole stack.
func pluginDepth(peak CallDepthPeak) int {
	depth := 0
	for name, deepest := range peak.Functions {
		if strings.HasPrefix(name, "main.") || strings.HasPrefix(name, "github.com_") {
			depth = max(depth, deepest)
		}
	}
	return depth
}

// newDepthLimitedPluginHost runs the plugin with its call depth counted and limited to the budget.
func newDepthLimitedPluginHost(tb testing.TB, config []byte, answer func(plugintest.HTTPCall) plugintest.HTTPCallResponse) (*Host, *CallDepth, *configCaller) {
	tb.Helper()
	wasm, err := namedPlugin()
	if err != nil {
		tb.Fatalf("building the plugin: %v", err)
	}
	depth := &CallDepth{Limit: pluginCallDepthBudget}
	calls := newConfigCaller(config, answer)
	h := newHost(tb, wasm, Options{
		Envoy:               envoyabi.Envoy133,
		Instances:           1,
		CompilationCacheDir: compilationCacheDir(),
		PluginName:          "skewgate", RootID: "skewgate", VMID: "skewgate",
		PluginConfiguration: config,
		HTTPCalls:           calls,
		CallDepth:           depth,
		Logger:              slog.New(slog.DiscardHandler),
	})
	return h, depth, calls
}

// configurePushes is how often each depth test configures a running VM: the allocator's path, and with it the
// depth, depends on the heap each push finds, which is why Envoy saw only every second push overflow.
const configurePushes = 4

// nestIgnored adds to the snapshot's first /apis document a member the plugin does not read, nesting levels deep.
func nestIgnored(tb testing.TB, snapshot json.RawMessage, levels int) json.RawMessage {
	tb.Helper()
	const at = `"items":`
	if !strings.Contains(string(snapshot), at) {
		tb.Fatalf("snapshot without %s", at)
	}
	nested := `"future":` + strings.Repeat("[", levels) + strings.Repeat("]", levels) + ","
	return json.RawMessage(strings.Replace(string(snapshot), at, nested+at, 1))
}

func TestPluginConfigureCallDepthStaysWithinBudgetsWhateverTheSnapshot(t *testing.T) {
	cases := []struct {
		name     string
		snapshot json.RawMessage
	}{
		{"3 servers", fixtureSnapshot(t, 3, "")},
		{"24 servers", fixtureSnapshot(t, 24, "")},
		{"64 servers", fixtureSnapshot(t, 64, "")},
		{"3 servers, an ignored member nested 4000 levels deep", nestIgnored(t, fixtureSnapshot(t, 3, ""), 4000)},
	}
	own := make(map[string]int)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			config := fixturePluginConfig(t, c.snapshot, nil)
			h, depth, _ := newDepthLimitedPluginHost(t, config, allowEveryCall)
			start := depth.TakePeak()
			var deepest CallDepthPeak
			for range configurePushes {
				if err := h.Configure(context.Background(), config); err != nil {
					t.Fatalf("configuration (%d bytes) rejected: %v", len(config), err)
				}
				peak := depth.TakePeak()
				if peak.Depth > deepest.Depth {
					deepest = peak
				}
				own[c.name] = max(own[c.name], pluginDepth(peak))
			}
			t.Logf("%s (%d KB): start-up %d frames; configure %d frames, the plugin's own code %d deep",
				c.name, len(c.snapshot)/1000, start.Depth, deepest.Depth, own[c.name])
			for _, peak := range []CallDepthPeak{start, deepest} {
				if peak.Depth > pluginCallDepthBudget {
					t.Errorf("call depth %d; budget %d:\n%s", peak.Depth, pluginCallDepthBudget, strings.Join(peak.Stack, "\n"))
				}
			}
			if own[c.name] > pluginConfigureDepthBudget {
				t.Errorf("the plugin's own code runs %d deep in proxy_on_configure; budget %d", own[c.name], pluginConfigureDepthBudget)
			}
		})
	}
	for _, c := range cases[1:] {
		if first := cases[0].name; own[c.name] != own[first] || own[c.name] == 0 {
			t.Errorf("the plugin's own call depth in proxy_on_configure is %d with %s, %d with %s; want it independent of the snapshot",
				own[first], first, own[c.name], c.name)
		}
	}
}

// depthRequest is one kind of request the plugin handles, and how to tell that it was handled as that kind.
type depthRequest struct {
	name    string
	method  string
	path    string
	headers [][2]string
	want    func(plugintest.Result) bool
}

const (
	depthAcceptV2     = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	depthDeniedToken  = "Bearer denied"
	depthAllowedToken = "Bearer allowed"
	// depthFrontProxySubject is a verified client certificate's subject as Envoy renders it.
	depthFrontProxySubject = "CN=alice,O=dev"
	depthFrontProxyDigest  = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
)

// answerDiscoveryAuthorization answers the plugin's discovery authorization as an API server does: the denied
// token gets 403, every other credential 200.
func answerDiscoveryAuthorization(c plugintest.HTTPCall) plugintest.HTTPCallResponse {
	if c.Header("authorization") == depthDeniedToken {
		return plugintest.HTTPCallResponse{Status: 403, Headers: [][2]string{{"content-type", "application/json"}},
			Body: []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)}
	}
	return allowEveryCall(c)
}

func forwarded(r plugintest.Result) bool { return r.Forwarded && r.Local == nil }

func routed(r plugintest.Result) bool {
	_, ok := r.Header(plugintest.RoutingHeader)
	return forwarded(r) && ok
}

func answered(status uint32, calls int) func(plugintest.Result) bool {
	return func(r plugintest.Result) bool {
		return !r.Forwarded && r.Local != nil && r.Local.Status == status && (calls < 0 || len(r.HTTPCalls) == calls)
	}
}

// depthRequests are the kinds of request the plugin handles with the passthrough identity mode, in an order
// in which each does what its name says (the first merged discovery request asks for authorization, the second
// finds it remembered). etag is the merged /apis document's.
func depthRequests(etag string) []depthRequest {
	accept := [2]string{"accept", depthAcceptV2}
	allowed := [2]string{"authorization", depthAllowedToken}
	forged := [][2]string{{headerPeerProxiedName, "true"}}
	for i := range 40 {
		forged = append(forged, [2]string{fmt.Sprintf("x-remote-extra-forged-%d", i), "x"})
	}
	forged = append(forged, [2]string{"x-remote-user", "system:admin"}, [2]string{"x-remote-group", "system:masters"})
	return []depthRequest{
		{"served by every server", "GET", "/apis/apps/v1/namespaces/default/deployments", nil,
			func(r plugintest.Result) bool {
				_, ok := r.Header(plugintest.RoutingHeader)
				return forwarded(r) && !ok
			}},
		{"rerouted to the servers serving it", "GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", nil, routed},
		{"legacy discovery of a group-version only down servers serve", "GET", "/apis/storagemigration.k8s.io/v1", nil, answered(503, 0)},
		{"merged /apis, authorization asked", "GET", "/apis", [][2]string{accept, allowed}, answered(200, 1)},
		{"merged /apis, authorization remembered", "GET", "/apis", [][2]string{accept, allowed}, answered(200, 0)},
		{"merged /api", "GET", "/api", [][2]string{accept, allowed}, answered(200, -1)},
		{"merged /apis not modified", "GET", "/apis", [][2]string{accept, allowed, {"if-none-match", etag}}, answered(304, 0)},
		{"merged /apis refused by the API server", "GET", "/apis", [][2]string{accept, {"authorization", depthDeniedToken}}, answered(403, 1)},
		{"nopeer discovery passed through", "GET", "/apis", [][2]string{{"accept", depthAcceptV2 + ";profile=nopeer"}}, forwarded},
		{"every capable server down", "GET", "/apis/certificates.k8s.io/v1/clustertrustbundles", nil, answered(503, 0)},
		{"field selector only some servers accept", "GET", plugintest.KubeletPodList, nil, routed},
		{longSelectorRequest, "GET", "/api/v1/pods?fieldSelector=" + strings.Repeat("metadata.name%21%3Dp%5C%2C1%2C", 2000) + "spec.nodeName%3Dn", nil, routed},
		{"write of a kind whose schemas differ", "POST", "/apis/batch/v1/namespaces/default/jobs", nil, routed},
		{shallowBodyRequest, "POST", "/apis/batch/v1/namespaces/default/jobs", nil, routed},
		{deepBodyRequest, "POST", "/apis/batch/v1/namespaces/default/jobs", nil, routed},
		{"forged identity headers stripped", "GET", "/api/v1/namespaces/default/pods", forged, func(r plugintest.Result) bool {
			return forwarded(r) && !strings.Contains(fmt.Sprint(r.Headers), "x-remote-") && !strings.Contains(fmt.Sprint(r.Headers), headerPeerProxiedName)
		}},
	}
}

const headerPeerProxiedName = "x-kubernetes-peer-proxied"

// shallowBodyRequest and deepBodyRequest create a Job routed by its body, the second nesting 20,000 arrays and
// 20,000 objects inside fields the walk enters: reading it must take no deeper a stack than reading the first.
const (
	shallowBodyRequest = "write routed by its body"
	deepBodyRequest    = "write routed by a body nested 20,000 deep"
)

// depthBodies are the JSON bodies of the requests that send one (plugintest's Write).
var depthBodies = map[string]string{
	shallowBodyRequest: `{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"i"}]}}}}`,
	deepBodyRequest: `{"spec":{"template":{"spec":{"containers":[{"name":"c","args":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) +
		`}],"volumes":[` + strings.Repeat(`{"a":`, 20000) + "0" + strings.Repeat("}", 20000) + `]}}}}`,
}

// longSelectorRequest lists with a field selector of 2001 terms: reading it must take no deeper a stack than
// reading one term.
const longSelectorRequest = "field selector of 2001 terms"

// frontProxyDepthRequests are the requests whose identity the plugin asserts from the client certificate.
var frontProxyDepthRequests = []depthRequest{
	{"front-proxy identity asserted", "GET", "/api/v1/namespaces/default/pods", [][2]string{{"x-remote-user", "system:admin"}},
		func(r plugintest.Result) bool {
			return forwarded(r) && fmt.Sprint(r.Values("x-remote-user")) == "[alice]"
		}},
	{"front-proxy merged /apis, authorization asked", "GET", "/apis", [][2]string{{"accept", depthAcceptV2}}, answered(200, 1)},
}

func TestPluginRequestCallDepthStaysWithinBudgetWhateverTheSnapshotSize(t *testing.T) {
	sizes := []int{3, 64}
	own := make(map[string]map[int]int)
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%d servers", n), func(t *testing.T) {
			// The v1.37.2 servers are down: what only they serve answers 503.
			snapshot := fixtureSnapshot(t, n, "v1.37.2")
			snap, err := discovery.ParseSnapshot(snapshot)
			if err != nil {
				t.Fatal(err)
			}
			ix, err := discovery.NewIndex(snap)
			if err != nil {
				t.Fatal(err)
			}
			modes := []struct {
				options         map[string]any
				subject, digest string
				requests        []depthRequest
			}{
				{map[string]any{"routeWritesByBody": true}, "", "", depthRequests(ix.MergedAPIs().ETag)},
				{map[string]any{"identityMode": "front-proxy"}, depthFrontProxySubject, depthFrontProxyDigest, frontProxyDepthRequests},
			}
			for _, mode := range modes {
				config := fixturePluginConfig(t, snapshot, mode.options)
				h, depth, calls := newDepthLimitedPluginHost(t, config, answerDiscoveryAuthorization)
				p := &hostedPlugin{t: t, host: h, subject: mode.subject, digest: mode.digest, calls: calls}
				depth.TakePeak() // start-up
				for _, req := range mode.requests {
					var res plugintest.Result
					if body, ok := depthBodies[req.name]; ok {
						res = p.Write(req.method, req.path, "application/json", []byte(body), req.headers...)
					} else {
						res = p.Request(req.method, req.path, req.headers...)
					}
					peak := depth.TakePeak()
					if !req.want(res) {
						status := uint32(0)
						if res.Local != nil {
							status = res.Local.Status
						}
						t.Errorf("%s: %s %s handled otherwise: forwarded %v, local status %d, %d calls", req.name, req.method, req.path, res.Forwarded, status, len(res.HTTPCalls))
					}
					t.Logf("%-46s %d frames, the plugin's own code %d deep", req.name, peak.Depth, pluginDepth(peak))
					if peak.Depth > pluginCallDepthBudget {
						t.Errorf("%s: call depth %d; budget %d:\n%s", req.name, peak.Depth, pluginCallDepthBudget, strings.Join(peak.Stack, "\n"))
					}
					if own[req.name] == nil {
						own[req.name] = make(map[int]int)
					}
					own[req.name][n] = pluginDepth(peak)
				}
			}
		})
	}
	if long, short := own[longSelectorRequest][sizes[0]], own["field selector only some servers accept"][sizes[0]]; long != short {
		t.Errorf("the plugin's own call depth is %d for a field selector of 2001 terms, %d for one term; want it independent of the selector", long, short)
	}
	if deep, shallow := own[deepBodyRequest][sizes[0]], own[shallowBodyRequest][sizes[0]]; deep != shallow {
		t.Errorf("the plugin's own call depth is %d for a body nested 20,000 deep, %d for a shallow one; want it independent of the body", deep, shallow)
	}
	for name, byServers := range own {
		if first, last := byServers[sizes[0]], byServers[sizes[len(sizes)-1]]; last != first || first == 0 {
			t.Errorf("%s: the plugin's own call depth is %d with %d servers, %d with %d; want it independent of the snapshot",
				name, first, sizes[0], last, sizes[len(sizes)-1])
		}
	}
}
