package plugintest

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// Header names and media types the suite checks, spelled out independently of
// the plugin's own constants.
const (
	RoutingHeader  = "x-skewgate-upstream"
	PeerProxied    = "x-kubernetes-peer-proxied"
	AcceptV2       = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptV2NoPeer = AcceptV2 + ";profile=nopeer"
	acceptClientGo = AcceptV2 + ",application/json"
	testSubject    = `CN=alice\2C jr,O=dev,O=system:masters`
	testDigest     = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
)

// Harness starts the plugin on one host.
type Harness interface {
	// Start configures a fresh plugin (a new VM) and returns it, or the
	// rejection: the error must contain the plugin's log line.
	Start(t *testing.T, opts StartOptions) (Plugin, error)
	// PushesConfiguration reports a host that can push a new configuration into
	// a running VM (its plugins implement Reconfigurer), as Envoy does;
	// proxytest configures a plugin once.
	PushesConfiguration() bool
}

// StartOptions is what a test gives the host.
type StartOptions struct {
	Config []byte
	// SubjectPeerCertificate, when set, is the connection.subject_peer_certificate
	// property of every request (a client certificate the gateway verified).
	SubjectPeerCertificate string
	// SHA256PeerCertificateDigest, when set, is the
	// connection.sha256_peer_certificate_digest property of every request, the
	// lower-case hex SHA-256 of that certificate; hosts leave it absent when empty.
	SHA256PeerCertificateDigest string
	// HTTPCalls answers the plugin's proxy_http_call requests, one call at a
	// time, while the stream that made the call waits. Nil answers every call
	// as failed (no response), which is what a host without upstreams gives.
	HTTPCalls func(HTTPCall) HTTPCallResponse
}

// HTTPCall is one proxy_http_call the plugin made.
type HTTPCall struct {
	// Cluster is the upstream the call names.
	Cluster string
	// Headers are the call's headers as the plugin passed them, pseudo-headers
	// (:method, :path, :authority) included, one pair per value.
	Headers [][2]string
	Body    []byte
}

// HTTPCallResponse is the answer a test gives to an HTTPCall.
type HTTPCallResponse struct {
	// Status becomes the response's :status pseudo-header.
	Status int
	// Headers are the response headers after :status, lower-case names.
	Headers [][2]string
	Body    []byte
	// Failed reports that no response arrived (connection failure, reset,
	// timeout): the host then calls back with no headers and no body, as
	// Envoy does; Status, Headers and Body are ignored.
	Failed bool
}

// Header returns the first value of a header of the call.
func (c HTTPCall) Header(name string) string {
	v, _ := first(c.Headers, name)
	return v
}

// Values returns every value of a header of the call.
func (c HTTPCall) Values(name string) []string { return values(c.Headers, name) }

// Plugin is one configured plugin.
type Plugin interface {
	// Request runs the request-headers phase of one stream.
	Request(method, path string, headers ...[2]string) Result
	// Write runs one stream with a body: its headers (with Content-Type and
	// Content-Length), then, if the plugin waits for it, its body in one
	// piece at the end of the stream.
	Write(method, path, contentType string, body []byte, headers ...[2]string) Result
	// Counter and Gauge read a metric the plugin defined.
	Counter(name string) uint64
	Gauge(name string) int64
	// RouteCacheClears counts calls of the clear_route_cache foreign function.
	RouteCacheClears() int
}

// Reconfigurer is a Plugin whose host can push a new configuration to the
// running VM, as Envoy does on a configuration update.
type Reconfigurer interface {
	Reconfigure(config []byte) error
}

// Result is what the host did with a request.
type Result struct {
	// Forwarded is true when the request continues upstream with Headers.
	Forwarded bool
	Headers   [][2]string
	// Local is the plugin's local response, nil if none.
	Local *LocalResponse
	// HTTPCalls are the calls the plugin made for this request, in order.
	HTTPCalls []HTTPCall
	// HeaderCalls counts the plugin's request-header host calls for this
	// request by ABI function name ("proxy_set_header_map_pairs",
	// "proxy_remove_header_map_value", ...); nil on hosts that cannot count.
	HeaderCalls map[string]int
}

// LocalResponse is a reply the plugin sent itself.
type LocalResponse struct {
	Status  uint32
	Headers [][2]string
	Body    []byte
}

// Header returns the first value of a request header after the plugin ran.
func (r Result) Header(name string) (string, bool) { return first(r.Headers, name) }

// Values returns every value of a request header after the plugin ran.
func (r Result) Values(name string) []string { return values(r.Headers, name) }

// Header returns a local response header.
func (l *LocalResponse) Header(name string) string {
	v, _ := first(l.Headers, name)
	return v
}

func first(headers [][2]string, name string) (string, bool) {
	for _, kv := range headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func values(headers [][2]string, name string) []string {
	var out []string
	for _, kv := range headers {
		if kv[0] == name {
			out = append(out, kv[1])
		}
	}
	return out
}

// Config renders a plugin configuration for servers with extra options.
func Config(t testing.TB, generation uint64, options map[string]any, servers []discoverytest.Server) []byte {
	t.Helper()
	cfg := map[string]any{"snapshot": discoverytest.SnapshotJSON(generation, servers)}
	maps.Copy(cfg, options)
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func start(t *testing.T, h Harness, opts StartOptions) Plugin {
	t.Helper()
	p, err := h.Start(t, opts)
	if err != nil {
		t.Fatalf("configuration rejected: %v", err)
	}
	return p
}

func mergedIndex(t *testing.T, servers []discoverytest.Server) *discovery.Index {
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

// Run runs every case of the suite against the harness.
func Run(t *testing.T, h Harness) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
	if h.PushesConfiguration() {
		t.Run("ReconfigurationSwitchesSnapshotsAndRejectionKeepsThePrevious", func(t *testing.T) {
			reconfigurationSwitchesSnapshotsAndRejectionKeepsThePrevious(t, h)
		})
	}
}

var cases = []struct {
	name string
	run  func(*testing.T, Harness)
}{
	{"RequestsEveryServerServesAreLeftToTheGateway", requestsEveryServerServesAreLeftToTheGateway},
	{"ResourceOnlySomeServersServeIsReroutedUniformlyAndMarked", resourceOnlySomeServersServeIsReroutedUniformlyAndMarked},
	{"ClientNeverChoosesBackendOrDisablesRerouting", clientNeverChoosesBackendOrDisablesRerouting},
	{"TrustedPeerProxiedHeaderIsServedWhereItLands", trustedPeerProxiedHeaderIsServedWhereItLands},
	{"MergedDiscoveryIsServedWithUpstreamHeadersAndETag", mergedDiscoveryIsServedWithUpstreamHeadersAndETag},
	{"NoPeerAndLegacyDiscoveryPassThrough", noPeerAndLegacyDiscoveryPassThrough},
	{"MergedOpenAPIIndexIsServedAndItsURLsReachTheirPublishers", mergedOpenAPIIndexIsServedAndItsURLsReachTheirPublishers},
	{"LegacyGroupVersionDiscoveryGoesToAServerThatHasIt", legacyGroupVersionDiscoveryGoesToAServerThatHasIt},
	{"CapableServersDownGives503StatusWithRetryAfter", capableServersDownGives503StatusWithRetryAfter},
	{"NodeLocalSendsWhatThePreferredServerServesToItAndReroutesTheRest", nodeLocalSendsWhatThePreferredServerServesToItAndReroutesTheRest},
	{"NodeLocalSpreadsOverHealthyPeersWhileThePreferredServerIsDown", nodeLocalSpreadsOverHealthyPeersWhileThePreferredServerIsDown},
	{"ClientHeadersNeverBecomeAnIdentity", clientHeadersNeverBecomeAnIdentity},
	{"FrontProxyAssertsVerifiedClientCertificate", frontProxyAssertsVerifiedClientCertificate},
	{"FrontProxyAssertsTheCertificatesUIDAndCredentialID", frontProxyAssertsTheCertificatesUIDAndCredentialID},
	{"AssertedRequestsNameTheirServersFrontProxyCluster", assertedRequestsNameTheirServersFrontProxyCluster},
	{"UnassertableClientCertificateIsRefusedWith401", unassertableClientCertificateIsRefusedWith401},
	{"HeaderFloodIsStrippedInOneHeaderMapWrite", headerFloodIsStrippedInOneHeaderMapWrite},
	{"NoHealthyServerRoutesAsIfEveryServerWereHealthy", noHealthyServerRoutesAsIfEveryServerWereHealthy},
	{"MergedDiscoveryGoesOnlyToClientsTheAPIServersAnswer", mergedDiscoveryGoesOnlyToClientsTheAPIServersAnswer},
	{"DiscoveryAuthorizationIsRememberedPerCredential", discoveryAuthorizationIsRememberedPerCredential},
	{"DiscoveryAuthorizationCacheSecondsZeroAsksEveryTime", discoveryAuthorizationCacheSecondsZeroAsksEveryTime},
	{"DiscoveryAuthorizationWithoutAnswerGives503AndIsAskedAgain", discoveryAuthorizationWithoutAnswerGives503AndIsAskedAgain},
	{"FrontProxyDiscoveryAuthorizationCarriesTheAssertedIdentity", frontProxyDiscoveryAuthorizationCarriesTheAssertedIdentity},
	{"DiscoveryAuthorizationAsksThePreferredServer", discoveryAuthorizationAsksThePreferredServer},
	{"FieldSelectorOnlySomeServersAcceptIsReroutedToThemAndMarked", fieldSelectorOnlySomeServersAcceptIsReroutedToThemAndMarked},
	{"FieldSelectorAcceptedOnlyByDownServersGives503", fieldSelectorAcceptedOnlyByDownServersGives503},
	{"KindWhoseSchemasDifferGoesToServersLackingNothing", kindWhoseSchemasDifferGoesToServersLackingNothing},
	{"WriteGoesToServersWhoseSchemaHasEveryFieldItsBodySets", writeGoesToServersWhoseSchemaHasEveryFieldItsBodySets},
	{"WithoutBodiesFromTheHostAWriteGoesWhereAnUnreadBodyGoes", withoutBodiesFromTheHostAWriteGoesWhereAnUnreadBodyGoes},
	{"InvalidConfigurationIsRejectedWithOneClearLogLine", invalidConfigurationIsRejectedWithOneClearLogLine},
	{"ConfigurationOfANewerMinorSchemaIsAcceptedWithItsNewFieldsIgnoredAndCounted", configurationOfANewerMinorSchemaIsAcceptedWithItsNewFieldsIgnoredAndCounted},
	{"GenerationGaugeFollowsConfiguration", generationGaugeFollowsConfiguration},
}

func requestsEveryServerServesAreLeftToTheGateway(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, discoverytest.SkewedControlPlane())})
	for _, path := range []string{
		"/apis/apps/v1/namespaces/default/deployments/web",
		"/api/v1/namespaces/default/pods?watch=true",
		"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
		"/apis/example.com/v1/widgets", // served by nobody: a real server answers 404
		"/healthz",
		"/version",
	} {
		res := p.Request("GET", path)
		if !res.Forwarded || res.Local != nil {
			t.Errorf("%s: forwarded %v, local %+v; want forwarded", path, res.Forwarded, res.Local)
		}
		if v, ok := res.Header(RoutingHeader); ok {
			t.Errorf("%s: routing header set to %q; want the gateway's own load balancing", path, v)
		}
		if _, ok := res.Header(PeerProxied); ok {
			t.Errorf("%s: peer-proxied header set on a request every server serves", path)
		}
	}
}

func resourceOnlySomeServersServeIsReroutedUniformlyAndMarked(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, discoverytest.SkewedControlPlane())})
	seen := map[string]int{}
	const n = 10
	for range n {
		res := p.Request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
			[2]string{PeerProxied, "true"}) // forged: must not stop re-routing
		if !res.Forwarded {
			t.Fatalf("not forwarded: %+v", res.Local)
		}
		cluster, _ := res.Header(RoutingHeader)
		seen[cluster]++
		if got := res.Values(PeerProxied); !slices.Equal(got, []string{"true"}) {
			t.Errorf("peer-proxied values %q; want exactly [true]", got)
		}
	}
	if seen["kube-b"] != n/2 || seen["kube-c"] != n/2 {
		t.Errorf("re-routed to %v; want an even split over kube-b and kube-c", seen)
	}
	if got := p.Counter(metricdef.PluginReroutedRequests.Name); got != n {
		t.Errorf("rerouted counter %d; want %d", got, n)
	}
	if got := p.RouteCacheClears(); got != n {
		t.Errorf("clear_route_cache called %d times; want %d", got, n)
	}
	res := p.Request("GET", "/apis/coordination.k8s.io/v1alpha2/namespaces/kube-system/leasecandidates")
	if cluster, _ := res.Header(RoutingHeader); cluster != "kube-c" {
		t.Errorf("alpha API routed to %q; want kube-c, its only server", cluster)
	}
}

func clientNeverChoosesBackendOrDisablesRerouting(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, discoverytest.SkewedControlPlane())})
	res := p.Request("GET", "/apis/apps/v1/deployments",
		[2]string{RoutingHeader, "kube-a"}, [2]string{PeerProxied, "true"})
	for _, name := range []string{RoutingHeader, PeerProxied} {
		if v, ok := res.Header(name); ok {
			t.Errorf("inbound %s: %q survived", name, v)
		}
	}
}

// KubeletPodList is the kubelet's list of its node's pods, with the field
// selector escaped as client-go escapes it.
const KubeletPodList = "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1&limit=500&resourceVersion=0"

func fieldSelectorOnlySomeServersAcceptIsReroutedToThemAndMarked(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, discoverytest.WithFieldSkew(discoverytest.SkewedControlPlane()))})
	seen := map[string]int{}
	for _, path := range []string{
		KubeletPodList,
		"/api/v1/pods?watch=true&fieldSelector=spec.nodeName%3Dnode-1",
		"/api/v1/watch/namespaces/ns/pods?fieldSelector=metadata.namespace%3Dns,spec.nodeName%21%3Dnode-2",
		"/api/v1/namespaces/ns/pods?fieldSelector=spec%2EnodeName=node-1",
	} {
		res := p.Request("GET", path, [2]string{PeerProxied, "false"})
		cluster, _ := res.Header(RoutingHeader)
		seen[cluster]++
		if got := res.Values(PeerProxied); !slices.Equal(got, []string{"true"}) {
			t.Errorf("%s: peer-proxied values %q; want exactly [true]", path, got)
		}
	}
	if seen["kube-b"] != 2 || seen["kube-c"] != 2 {
		t.Errorf("re-routed to %v; want an even split over kube-b and kube-c, which accept spec.nodeName", seen)
	}
	for _, path := range []string{
		"/api/v1/pods?fieldSelector=metadata.name%3Dp",                 // every server accepts it
		"/api/v1/pods?fieldSelector=spec.nodeName",                     // upstream rejects it: any server says so
		"/api/v1/pods?fieldSelector=status.podIP%3D10.0.0.1",           // no server accepts it
		"/api/v1/namespaces/ns/pods/p?fieldSelector=spec.nodeName%3Dn", // a get reads no selector
		"/api/v1/pods?labelSelector=spec.nodeName%3Dn",
	} {
		res := p.Request("GET", path)
		if v, ok := res.Header(RoutingHeader); !res.Forwarded || ok {
			t.Errorf("%s: forwarded %v, routed to %q; want the gateway's own balancing", path, res.Forwarded, v)
		}
	}
	if got := p.Counter(metricdef.PluginReroutedRequests.Name); got != 4 {
		t.Errorf("rerouted counter %d; want 4", got)
	}
}

func fieldSelectorAcceptedOnlyByDownServersGives503(t *testing.T, h Harness) {
	servers := discoverytest.WithFieldSkew(discoverytest.SkewedControlPlane())
	servers[1].Healthy, servers[2].Healthy = false, false
	p := start(t, h, StartOptions{Config: Config(t, 1, map[string]any{"retryAfterSeconds": 3}, servers)})
	res := p.Request("GET", KubeletPodList)
	if res.Forwarded || res.Local == nil || res.Local.Status != 503 || res.Local.Header("retry-after") != "3" {
		t.Fatalf("forwarded %v, local %+v; want 503 with Retry-After 3", res.Forwarded, res.Local)
	}
	if !strings.Contains(string(res.Local.Body), `"reason":"ServiceUnavailable"`) || !strings.Contains(string(res.Local.Body), "pods") {
		t.Errorf("body %s; want a ServiceUnavailable Status naming pods", res.Local.Body)
	}
	// What kube-a accepts stays with it.
	if res := p.Request("GET", "/api/v1/pods?fieldSelector=metadata.name%3Dp"); !res.Forwarded {
		t.Errorf("a selector the healthy server accepts was not forwarded: %+v", res.Local)
	}
}

func kindWhoseSchemasDifferGoesToServersLackingNothing(t *testing.T, h Harness) {
	servers := discoverytest.WithFieldSkew(discoverytest.SkewedControlPlane())
	const deployments = "/apis/apps/v1/namespaces/ns/deployments"
	requests := []struct {
		method, path string
		write        bool
	}{
		{"POST", deployments, true},
		{"PUT", deployments + "/web", true},
		{"PATCH", deployments + "/web?fieldManager=kubectl&force=true", true},
		{"PUT", deployments + "/web/status", true},
		{"DELETE", deployments + "/web", true},
		{"GET", deployments + "/web", false},
		{"GET", deployments + "?watch=true", false},
	}
	for _, routing := range []string{"reads-and-writes", "writes"} {
		t.Run(routing, func(t *testing.T) {
			p := start(t, h, StartOptions{Config: Config(t, 1, map[string]any{"schemaSkewRouting": routing}, servers)})
			for _, r := range requests {
				res := p.Request(r.method, r.path)
				cluster, _ := res.Header(RoutingHeader)
				narrowed := r.write || routing == "reads-and-writes"
				switch {
				case narrowed && cluster != "kube-b" && cluster != "kube-c":
					t.Errorf("%s %s: routed to %q; want kube-b or kube-c, whose deployments lack no field", r.method, r.path, cluster)
				case narrowed && !slices.Equal(res.Values(PeerProxied), []string{"true"}):
					t.Errorf("%s %s: not marked peer-proxied", r.method, r.path)
				case !narrowed && cluster != "":
					t.Errorf("%s %s: routed to %q; want reads left to the gateway", r.method, r.path, cluster)
				}
			}
		})
	}
}

func writeGoesToServersWhoseSchemaHasEveryFieldItsBodySets(t *testing.T, h Harness) {
	servers, skew := discoverytest.WithBothWayFieldSkew(discoverytest.SkewedControlPlane())
	config, err := json.Marshal(map[string]any{"snapshot": discoverytest.SnapshotJSONWithFieldSkew(1, servers, skew), "routeWritesByBody": true})
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, h, StartOptions{Config: config})
	const deployments = "/apis/apps/v1/namespaces/ns/deployments"
	older, newer := []string{"kube-a"}, []string{"kube-b", "kube-c"}
	writes := []struct {
		name, method, path, contentType, body string
		want                                  []string
		read                                  bool
	}{
		{"create setting a field only v1.35 knows", "POST", deployments, "application/json",
			`{"kind":"Deployment","spec":{"template":{"spec":{"workloadRef":{"name":"w"}}}}}`, older, true},
		{"create setting a field only v1.36 knows", "POST", deployments, "application/json",
			`{"kind":"Deployment","spec":{"template":{"spec":{"schedulingGroup":{}}}}}`, newer, true},
		{"JSON patch adding the v1.35 field", "PATCH", deployments + "/web", "application/json-patch+json",
			`[{"op":"add","path":"/spec/template/spec/workloadRef","value":{"name":"w"}}]`, older, true},
		{"server-side apply of the v1.35 field", "PATCH", deployments + "/web?fieldManager=kubectl&force=true", "application/apply-patch+yaml",
			`{"apiVersion":"apps/v1","kind":"Deployment","spec":{"template":{"spec":{"workloadRef":{"name":"w"}}}}}`, older, true},
		{"protobuf: the newest minor", "POST", deployments, "application/vnd.kubernetes.protobuf", "k8s\x00\n\x0b", newer, false},
	}
	for _, w := range writes {
		before := [2]uint64{p.Counter(metricdef.PluginWritesRoutedByBody.Name), p.Counter(metricdef.PluginWriteBodiesUnreadable.Name)}
		res := p.Write(w.method, w.path, w.contentType, []byte(w.body))
		cluster, _ := res.Header(RoutingHeader)
		if !res.Forwarded || !slices.Contains(w.want, cluster) {
			t.Errorf("%s: forwarded %v to %q; want one of %q", w.name, res.Forwarded, cluster, w.want)
		}
		if !slices.Equal(res.Values(PeerProxied), []string{"true"}) {
			t.Errorf("%s: not marked peer-proxied", w.name)
		}
		after := [2]uint64{p.Counter(metricdef.PluginWritesRoutedByBody.Name), p.Counter(metricdef.PluginWriteBodiesUnreadable.Name)}
		if want := map[bool][2]uint64{true: {1, 0}, false: {0, 1}}[w.read]; after[0]-before[0] != want[0] || after[1]-before[1] != want[1] {
			t.Errorf("%s: counted %d routed by body and %d unreadable; want %d and %d", w.name,
				after[0]-before[0], after[1]-before[1], want[0], want[1])
		}
	}

}

// A host that does not hand the plugin bodies never has a write held for
// one: it goes where an unread body goes.
func withoutBodiesFromTheHostAWriteGoesWhereAnUnreadBodyGoes(t *testing.T, h Harness) {
	servers, skew := discoverytest.WithBothWayFieldSkew(discoverytest.SkewedControlPlane())
	config, err := json.Marshal(map[string]any{"snapshot": discoverytest.SnapshotJSONWithFieldSkew(1, servers, skew)})
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, h, StartOptions{Config: config})
	res := p.Write("POST", "/apis/apps/v1/namespaces/ns/deployments", "application/json",
		[]byte(`{"kind":"Deployment","spec":{"template":{"spec":{"workloadRef":{"name":"w"}}}}}`))
	if cluster, _ := res.Header(RoutingHeader); !res.Forwarded || (cluster != "kube-b" && cluster != "kube-c") {
		t.Errorf("forwarded %v to %q; want the newest minor's servers without waiting for the body", res.Forwarded, cluster)
	}
	if n := p.Counter(metricdef.PluginWriteBodiesUnreadable.Name); n != 1 {
		t.Errorf("counted %d unread bodies; want 1", n)
	}
}

// nodeLocalConfig is the skewed control plane seen from the node of kube-a
// (v1.35), its preferred server.
func nodeLocalConfig(t *testing.T, servers []discoverytest.Server) []byte {
	t.Helper()
	out, err := json.Marshal(map[string]any{"snapshot": discoverytest.Prefer(discoverytest.SnapshotJSON(1, servers), servers[0].ID)})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func nodeLocalSendsWhatThePreferredServerServesToItAndReroutesTheRest(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: nodeLocalConfig(t, discoverytest.SkewedControlPlane())})
	for _, path := range []string{"/api/v1/namespaces/default/configmaps", "/apis/example.com/v1/widgets", "/healthz"} {
		res := p.Request("GET", path)
		if cluster, _ := res.Header(RoutingHeader); !res.Forwarded || cluster != "kube-a" {
			t.Errorf("%s: forwarded %v to %q; want the preferred server kube-a", path, res.Forwarded, cluster)
		}
		if _, ok := res.Header(PeerProxied); ok {
			t.Errorf("%s: marked peer-proxied although the preferred server serves it", path)
		}
	}
	// The local view of discovery is the local server's.
	res := p.Request("GET", "/apis", [2]string{"accept", acceptV2NoPeer})
	if cluster, _ := res.Header(RoutingHeader); cluster != "kube-a" || p.Counter(metricdef.PluginNoPeerDiscoveryForwarded.Name) != 1 {
		t.Errorf("nopeer /apis routed to %q, counted %d times; want kube-a, once", cluster, p.Counter(metricdef.PluginNoPeerDiscoveryForwarded.Name))
	}
	res = p.Request("DELETE", "/apis/coordination.k8s.io/v1alpha2/namespaces/ns/leasecandidates/x")
	if cluster, _ := res.Header(RoutingHeader); cluster != "kube-c" {
		t.Errorf("alpha API routed to %q; want kube-c, its only server", cluster)
	}
	if got := res.Values(PeerProxied); !slices.Equal(got, []string{"true"}) {
		t.Errorf("re-routed request: peer-proxied values %q; want exactly [true]", got)
	}
}

func nodeLocalSpreadsOverHealthyPeersWhileThePreferredServerIsDown(t *testing.T, h Harness) {
	down := discoverytest.SkewedControlPlane()
	down[0].Healthy = false
	p := start(t, h, StartOptions{Config: nodeLocalConfig(t, down)})
	seen := map[string]int{}
	for range 4 {
		cluster, _ := p.Request("GET", "/api/v1/namespaces/default/configmaps").Header(RoutingHeader)
		seen[cluster]++
	}
	if seen["kube-b"] != 2 || seen["kube-c"] != 2 {
		t.Errorf("with the preferred server down, routed to %v; want an even split over the healthy peers", seen)
	}
}

func trustedPeerProxiedHeaderIsServedWhereItLands(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, map[string]any{"trustPeerProxiedHeader": true}, discoverytest.SkewedControlPlane())})
	res := p.Request("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		[2]string{PeerProxied, "true"})
	if v, ok := res.Header(RoutingHeader); ok {
		t.Errorf("routed to %q; a trusted peer-proxied request is served where it lands", v)
	}
	if v, _ := res.Header(PeerProxied); v != "true" {
		t.Errorf("trusted header removed")
	}
	// A request that is not marked is re-routed and marked, with one value,
	// also when other headers must be stripped.
	res = p.Request("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
		[2]string{PeerProxied, "false"}, [2]string{"x-remote-user", "system:admin"})
	if got := res.Values(PeerProxied); !slices.Equal(got, []string{"true"}) {
		t.Errorf("re-routed request: peer-proxied values %q; want exactly [true]", got)
	}
}

func mergedDiscoveryIsServedWithUpstreamHeadersAndETag(t *testing.T, h Harness) {
	servers := discoverytest.SkewedControlPlane()
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, servers), HTTPCalls: allow})
	ix := mergedIndex(t, servers)
	want := ix.MergedAPIs()

	res := p.Request("GET", "/apis", [2]string{"accept", acceptClientGo})
	if res.Forwarded || res.Local == nil {
		t.Fatalf("forwarded %v, local %v; want a local response", res.Forwarded, res.Local)
	}
	l := res.Local
	if l.Status != 200 || string(l.Body) != string(want.Body) {
		t.Fatalf("status %d, body %d bytes; want 200 and the merged document (%d bytes)", l.Status, len(l.Body), len(want.Body))
	}
	for name, v := range map[string]string{
		"content-type": AcceptV2, "etag": want.ETag, "vary": "Accept", "cache-control": "public",
	} {
		if got := l.Header(name); got != v {
			t.Errorf("%s = %q; want %q", name, got, v)
		}
	}
	if !strings.Contains(string(l.Body), `"mutatingadmissionpolicies"`) || !strings.Contains(string(l.Body), `"v1alpha2"`) {
		t.Errorf("merged document lacks APIs that only some servers serve")
	}

	res = p.Request("GET", "/apis", [2]string{"accept", AcceptV2}, [2]string{"if-none-match", want.ETag})
	if res.Local == nil || res.Local.Status != 304 || len(res.Local.Body) != 0 || res.Local.Header("etag") != want.ETag {
		t.Errorf("If-None-Match with the current ETag: got %+v; want 304, no body, ETag", res.Local)
	}
	res = p.Request("GET", "/apis", [2]string{"accept", AcceptV2}, [2]string{"if-none-match", "W/" + want.ETag})
	if res.Local == nil || res.Local.Status != 200 {
		t.Errorf("weak If-None-Match must not match (upstream compares bytes): got %+v", res.Local)
	}
	// Hosts take Content-Length from the body; Envoy drops a HEAD reply's body itself.
	res = p.Request("HEAD", "/apis", [2]string{"accept", AcceptV2})
	if res.Local == nil || res.Local.Status != 200 || string(res.Local.Body) != string(want.Body) {
		t.Errorf("HEAD: got %+v; want 200 with the document's body", res.Local)
	}
	res = p.Request("GET", "/api", [2]string{"accept", AcceptV2})
	if res.Local == nil || string(res.Local.Body) != string(ix.MergedCoreAPI().Body) {
		t.Errorf("/api: got %+v; want the merged core document", res.Local)
	}
	if got := p.Counter(metricdef.PluginMergedDiscoveryServed.Name); got != 4 {
		t.Errorf("served counter %d; want 4", got)
	}
	if got := p.Counter(metricdef.PluginMergedDiscoveryNotModified.Name); got != 1 {
		t.Errorf("304 counter %d; want 1", got)
	}
}

func noPeerAndLegacyDiscoveryPassThrough(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, discoverytest.SkewedControlPlane())})
	for _, accept := range []string{acceptV2NoPeer + "," + acceptClientGo, "application/json", ""} {
		res := p.Request("GET", "/apis", [2]string{"accept", accept})
		if !res.Forwarded || res.Local != nil {
			t.Errorf("Accept %q: forwarded %v local %+v; want pass-through", accept, res.Forwarded, res.Local)
		}
	}
	if got := p.Counter(metricdef.PluginNoPeerDiscoveryForwarded.Name); got != 1 {
		t.Errorf("nopeer counter %d; want 1", got)
	}
}

func legacyGroupVersionDiscoveryGoesToAServerThatHasIt(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, discoverytest.SkewedControlPlane())})
	for path, want := range map[string]string{
		"/apis/coordination.k8s.io/v1alpha2":            "kube-c",
		"/openapi/v3/apis/coordination.k8s.io/v1alpha2": "kube-c",
		"/apis/coordination.k8s.io":                     "kube-c",
	} {
		res := p.Request("GET", path)
		if got, _ := res.Header(RoutingHeader); got != want {
			t.Errorf("%s routed to %q; want %q", path, got, want)
		}
		if _, ok := res.Header(PeerProxied); ok {
			t.Errorf("%s: discovery documents are not resource requests and carry no peer-proxied mark", path)
		}
	}
}

func capableServersDownGives503StatusWithRetryAfter(t *testing.T, h Harness) {
	servers := discoverytest.SkewedControlPlane()
	servers[1].Healthy, servers[2].Healthy = false, false
	p := start(t, h, StartOptions{Config: Config(t, 1, map[string]any{"retryAfterSeconds": 7}, servers), HTTPCalls: allow})
	res := p.Request("GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
	if res.Forwarded || res.Local == nil || res.Local.Status != 503 {
		t.Fatalf("got forwarded %v local %+v; want 503", res.Forwarded, res.Local)
	}
	if got := res.Local.Header("retry-after"); got != "7" {
		t.Errorf("Retry-After %q; want 7", got)
	}
	var status struct {
		Kind, Status, Reason string
		Code                 int
		Details              struct{ RetryAfterSeconds int }
	}
	if err := json.Unmarshal(res.Local.Body, &status); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, res.Local.Body)
	}
	if status.Kind != "Status" || status.Reason != "ServiceUnavailable" || status.Code != 503 || status.Details.RetryAfterSeconds != 7 {
		t.Errorf("status body %+v", status)
	}
	if got := p.Counter(metricdef.PluginUnavailableResponses.Name); got != 1 {
		t.Errorf("unavailable counter %d; want 1", got)
	}
	// Discovery keeps listing the APIs of servers that are down for a moment.
	res = p.Request("GET", "/apis", [2]string{"accept", AcceptV2})
	if res.Local == nil || !strings.Contains(string(res.Local.Body), "mutatingadmissionpolicies") {
		t.Errorf("merged discovery dropped the APIs of unhealthy servers")
	}
}

func clientHeadersNeverBecomeAnIdentity(t *testing.T, h Harness) {
	forged := [][2]string{
		{"x-remote-user", "system:admin"}, {"x-remote-group", "system:masters"},
		{"x-remote-uid", "0"}, {"x-remote-extra-scopes", "all"}, {"x-remote-extra-acme.com%2fteam", "x"},
	}
	for _, mode := range []string{"passthrough", "front-proxy"} {
		t.Run(mode, func(t *testing.T) {
			p := start(t, h, StartOptions{Config: Config(t, 1, map[string]any{"identityMode": mode}, discoverytest.SkewedControlPlane())})
			res := p.Request("GET", "/api/v1/pods", append(forged, [2]string{"authorization", "Bearer abc"})...)
			for _, kv := range res.Headers {
				if strings.HasPrefix(kv[0], "x-remote-") {
					t.Errorf("forged %s: %s reached the backend", kv[0], kv[1])
				}
			}
			if v, _ := res.Header("authorization"); v != "Bearer abc" {
				t.Errorf("bearer token altered: %q", v)
			}
		})
	}
}

func frontProxyAssertsVerifiedClientCertificate(t *testing.T, h Harness) {
	t.Run("front-proxy", func(t *testing.T) {
		config := Config(t, 1, map[string]any{"identityMode": "front-proxy"}, discoverytest.SkewedControlPlane())
		p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: testSubject, SHA256PeerCertificateDigest: testDigest})
		res := p.Request("GET", "/api/v1/pods", [2]string{"x-remote-user", "system:admin"}, [2]string{"x-remote-group", "evil"})
		if got := res.Values("x-remote-user"); !slices.Equal(got, []string{"alice, jr"}) {
			t.Errorf("x-remote-user %q; want [alice, jr]", got)
		}
		if got, want := res.Values("x-remote-group"), []string{"system:masters", "dev"}; !slices.Equal(got, want) {
			t.Errorf("x-remote-group %q; want %q: the certificate's organizations in certificate order, one field each", got, want)
		}
		if got := res.Values(credentialIDHeader); !slices.Equal(got, []string{"X509SHA256=" + testDigest}) {
			t.Errorf("%s %q; want the certificate's X509SHA256= digest", credentialIDHeader, got)
		}
		if got := res.Values("x-remote-uid"); got != nil {
			t.Errorf("x-remote-uid %q for a certificate without a UID attribute", got)
		}
	})
	t.Run("passthrough asserts nothing", func(t *testing.T) {
		config := Config(t, 1, map[string]any{"identityMode": "passthrough"}, discoverytest.SkewedControlPlane())
		p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: testSubject, SHA256PeerCertificateDigest: testDigest})
		if got := p.Request("GET", "/api/v1/pods").Values("x-remote-user"); got != nil {
			t.Errorf("passthrough mode asserted %q", got)
		}
	})
}

// invalidConfigurations is every way the suite breaks a configuration, with the
// text the rejection must name.
func invalidConfigurations(t *testing.T) []struct{ name, config, want string } {
	valid := string(Config(t, 1, nil, discoverytest.SkewedControlPlane()))
	with := func(prefix string) string { return strings.Replace(valid, `{"snapshot"`, `{`+prefix+`"snapshot"`, 1) }
	// withSnapshot is the valid configuration with its snapshot spoilt by
	// edit, as discovery's writer encodes it.
	withSnapshot := func(edit func(*discovery.Snapshot)) string {
		snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane()))
		if err != nil {
			t.Fatal(err)
		}
		edit(snap)
		out, err := json.Marshal(map[string]json.RawMessage{"snapshot": snap.AppendJSON(nil)})
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	return []struct{ name, config, want string }{
		{"not json", `{"snapshot":`, "not valid JSON"},
		{"unknown field", `{"snapshot":{},"routingheader":"x"}`, "routingheader"},
		{"bad header name", with(`"routingHeader":"X-Upper",`), "routingHeader"},
		{"stripped header", with(`"routingHeader":"x-remote-user",`), "routingHeader"},
		{"bad identity mode", with(`"identityMode":"trust-me",`), "identityMode"},
		{"retry after zero", with(`"retryAfterSeconds":0,`), "retryAfterSeconds"},
		{"negative authorization cache", with(`"discoveryAuthorizationCacheSeconds":-1,`), "discoveryAuthorizationCacheSeconds: must be an integer from 0 to 300"},
		{"authorization cache too long", with(`"discoveryAuthorizationCacheSeconds":301,`), "discoveryAuthorizationCacheSeconds"},
		{"fractional authorization cache", with(`"discoveryAuthorizationCacheSeconds":1.5,`), "discoveryAuthorizationCacheSeconds"},
		{"front-proxy suffix in a cluster", withSnapshot(func(s *discovery.Snapshot) { s.Servers[1].Cluster = "kube-a+front-proxy" }), "servers[1] (apiserver-bbb): cluster"},
		{"no snapshot", `{}`, "snapshot: must be an object"},
		{"zero generation", withSnapshot(func(s *discovery.Snapshot) { s.Generation = 0 }), "generation"},
		{"broken server", withSnapshot(func(s *discovery.Snapshot) { s.Servers[1].Cluster = "kube b" }), "servers[1] (apiserver-bbb): cluster"},
		{"unknown field of this schema", with(`"schemaVersion":"` + discovery.CurrentSchema().String() + `","readPolicy":"all",`), "readPolicy"},
	}
}

// schemaRefusals are configurations of a schema the plugin cannot honour,
// with the text the rejection must name.
func schemaRefusals(t *testing.T) []struct{ name, config, want string } {
	valid := string(Config(t, 1, nil, discoverytest.SkewedControlPlane()))
	with := func(prefix string) string { return strings.Replace(valid, `{"snapshot"`, `{`+prefix+`"snapshot"`, 1) }
	next := nextMinorSchema().String()
	return []struct{ name, config, want string }{
		{"another major", with(`"schemaVersion":"2.0",`), "schemaVersion: 2.0: this reader implements schema"},
		{"needs a newer minor", with(`"schemaVersion":"` + next + `","requiresSchemaVersion":"` + next + `",`),
			"requiresSchemaVersion: " + next + ": the document needs a reader of schema " + next + " or later"},
	}
}

func nextMinorSchema() discovery.SchemaVersion {
	return discovery.SchemaVersion{Major: discovery.SchemaMajor, Minor: discovery.SchemaMinor + 1}
}

// NewerMinorConfig is the configuration of Config from a controller one minor
// schema version ahead: both documents declare that version and carry a
// member the plugin does not know, and the second server another.
func NewerMinorConfig(t testing.TB, generation uint64, servers []discoverytest.Server) []byte {
	t.Helper()
	next := nextMinorSchema().String()
	current := `"schemaVersion":"` + discovery.CurrentSchema().String() + `"`
	snap := string(discoverytest.SnapshotJSON(generation, servers))
	if !strings.HasPrefix(snap, "{"+current+",") {
		t.Fatalf("the snapshot does not lead with its version: %.60s", snap)
	}
	snap = `{"schemaVersion":"` + next + `","shards":2,` + snap[len(current)+2:]
	second := `{"id":"` + servers[1].ID + `",`
	snap = strings.Replace(snap, second, second+`"weight":3,`, 1)
	return []byte(`{"schemaVersion":"` + next + `","futureOption":true,"snapshot":` + snap + `}`)
}

func configurationOfANewerMinorSchemaIsAcceptedWithItsNewFieldsIgnoredAndCounted(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: NewerMinorConfig(t, 1, discoverytest.SkewedControlPlane())})
	if got := p.Counter(metricdef.PluginConfigurationIgnoredFields.Name); got != 3 {
		t.Errorf("ignored-fields counter %d; want 3 (futureOption, snapshot.shards, snapshot.servers[].weight)", got)
	}
	// It routes as the configuration without them does.
	res := p.Request("GET", "/apis/coordination.k8s.io/v1alpha2/namespaces/kube-system/leasecandidates")
	if cluster, _ := res.Header(RoutingHeader); cluster != "kube-c" {
		t.Errorf("alpha API routed to %q; want kube-c, its only server", cluster)
	}
	if got := p.Request("GET", "/api/v1/pods").Forwarded; !got {
		t.Error("a request every server serves was not forwarded")
	}
}

func invalidConfigurationIsRejectedWithOneClearLogLine(t *testing.T, h Harness) {
	for _, c := range append(invalidConfigurations(t), schemaRefusals(t)...) {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.Start(t, StartOptions{Config: []byte(c.config)})
			if err == nil || !strings.Contains(err.Error(), "configuration rejected") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("rejection %v; want the plugin's line containing %q", err, c.want)
			}
		})
	}
}

func generationGaugeFollowsConfiguration(t *testing.T, h Harness) {
	p := start(t, h, StartOptions{Config: Config(t, 42, nil, discoverytest.SkewedControlPlane())})
	if v := p.Gauge(metricdef.PluginSnapshotGeneration.Name); v != 42 {
		t.Errorf("generation gauge %d; want 42", v)
	}
}

func reconfigurationSwitchesSnapshotsAndRejectionKeepsThePrevious(t *testing.T, h Harness) {
	servers := discoverytest.SkewedControlPlane()
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, servers)})
	r, ok := p.(Reconfigurer)
	if !ok {
		t.Fatalf("%T pushes configuration but does not implement Reconfigurer", p)
	}
	path := "/apis/coordination.k8s.io/v1alpha2/leasecandidates"
	if got, _ := p.Request("GET", path).Header(RoutingHeader); got != "kube-c" {
		t.Fatalf("before: routed to %q; want kube-c", got)
	}
	// Generation 2: the alpha API moved to kube-b.
	servers[1].Groups["coordination.k8s.io/v1alpha2"] = servers[2].Groups["coordination.k8s.io/v1alpha2"]
	delete(servers[2].Groups, "coordination.k8s.io/v1alpha2")
	if err := r.Reconfigure(Config(t, 2, nil, servers)); err != nil {
		t.Fatalf("valid reconfiguration rejected: %v", err)
	}
	if got, _ := p.Request("GET", path).Header(RoutingHeader); got != "kube-b" {
		t.Errorf("after generation 2: routed to %q; want kube-b", got)
	}
	if v := p.Gauge(metricdef.PluginSnapshotGeneration.Name); v != 2 {
		t.Errorf("generation gauge %d; want 2", v)
	}
	refused := append(invalidConfigurations(t), schemaRefusals(t)...)
	for _, c := range refused {
		if err := r.Reconfigure([]byte(c.config)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: reconfiguration error %v; want one naming %q", c.name, err, c.want)
		}
	}
	if got, _ := p.Request("GET", path).Header(RoutingHeader); got != "kube-b" {
		t.Errorf("after rejected updates: routed to %q; want kube-b from the kept generation 2", got)
	}
	if v := p.Gauge(metricdef.PluginSnapshotGeneration.Name); v != 2 {
		t.Errorf("generation gauge %d after rejected updates; want 2", v)
	}
	if got := p.Counter(metricdef.PluginConfigurationRejections.Name); got != uint64(len(refused)) {
		t.Errorf("rejected counter %d; want %d", got, len(refused))
	}
	if got := p.Counter(metricdef.PluginConfigurationSchemaRejections.Name); got != uint64(len(schemaRefusals(t))) {
		t.Errorf("schema rejections counter %d; want %d", got, len(schemaRefusals(t)))
	}
	if got := p.Counter(metricdef.PluginConfigurationIgnoredFields.Name); got != 0 {
		t.Errorf("ignored-fields counter %d; want 0: no configuration had fields of a newer schema", got)
	}
}
