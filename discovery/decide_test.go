// An external test: discoverytest and fixtures build on discovery, so a
// test of the package that uses them cannot be inside it.
package discovery_test

import (
	"encoding/json"
	"slices"
	"testing"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

const (
	acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptNoPeer     = acceptAggregated + ";profile=nopeer"
)

func skewedIndex(t testing.TB, mutate func([]discoverytest.Server)) *Index {
	t.Helper()
	servers := discoverytest.SkewedControlPlane()
	if mutate != nil {
		mutate(servers)
	}
	snap, err := ParseSnapshot(discoverytest.SnapshotJSON(1, servers))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// The skewed control plane's servers, by index: 0 kube-a (v1.35), 1 kube-b, 2 kube-c.
func TestDecideRoutesOnlyWhatNotEveryHealthyServerServes(t *testing.T) {
	ix := skewedIndex(t, nil)
	cases := []struct {
		name         string
		req          Request
		want         Action
		servers      ServerSet // acceptable targets for Route
		wantRerouted bool
	}{
		{name: "common resource", req: Request{Method: "GET", Path: "/apis/apps/v1/namespaces/ns/deployments/web"}, want: Forward},
		{name: "core resource", req: Request{Method: "GET", Path: "/api/v1/pods"}, want: Forward},
		{name: "subresource of common resource", req: Request{Method: "POST", Path: "/api/v1/namespaces/ns/pods/p/exec"}, want: Forward},
		{name: "resource nobody serves", req: Request{Method: "GET", Path: "/apis/example.com/v1/widgets"}, want: Forward},
		{name: "skewed resource", req: Request{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, want: Route, servers: 0b110, wantRerouted: true},
		{name: "skewed resource by name", req: Request{Method: "DELETE", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies/p"}, want: Route, servers: 0b110, wantRerouted: true},
		{name: "skewed resource watch prefix", req: Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/watch/mutatingadmissionpolicies"}, want: Route, servers: 0b110, wantRerouted: true},
		{name: "alpha resource", req: Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/namespaces/kube-system/leasecandidates"}, want: Route, servers: 0b100, wantRerouted: true},
		{name: "legacy group version document", req: Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2"}, want: Route, servers: 0b100},
		{name: "legacy group document", req: Request{Method: "GET", Path: "/apis/coordination.k8s.io/"}, want: Route, servers: 0b100},
		{name: "openapi group version", req: Request{Method: "GET", Path: "/openapi/v3/apis/coordination.k8s.io/v1alpha2"}, want: Route, servers: 0b100},
		{name: "common group version document", req: Request{Method: "GET", Path: "/apis/apps/v1"}, want: Forward},
		{name: "openapi group alone is no document", req: Request{Method: "GET", Path: "/openapi/v3/apis/coordination.k8s.io"}, want: Forward},
		{name: "write to a discovery path", req: Request{Method: "POST", Path: "/apis/coordination.k8s.io/v1alpha2"}, want: Forward},
		{name: "malformed watch", req: Request{Method: "GET", Path: "/api/v1/watch"}, want: Forward},
		{name: "health", req: Request{Method: "GET", Path: "/readyz"}, want: Forward},
		{name: "trusted peer-proxied", req: Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates", PeerProxied: true}, want: Forward},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := ix.Decide(&c.req, 0)
			if d.Action != c.want {
				t.Fatalf("action %v; want %v (decision %+v)", d.Action, c.want, d)
			}
			if d.Action == Route && !c.servers.Has(d.Server) {
				t.Errorf("routed to server %d; want one of %b", d.Server, c.servers)
			}
			if d.Rerouted != c.wantRerouted {
				t.Errorf("rerouted %v; want %v", d.Rerouted, c.wantRerouted)
			}
		})
	}
}

func TestDecideSpreadsReroutesUniformlyOverHealthyCapableServers(t *testing.T) {
	ix := skewedIndex(t, nil)
	req := Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}
	counts := map[int]int{}
	for pick := range uint64(1000) {
		counts[ix.Decide(&req, pick).Server]++
	}
	if len(counts) != 2 || counts[1] != 500 || counts[2] != 500 {
		t.Errorf("targets %v; want 500 each on servers 1 and 2", counts)
	}
}

func TestDecideNeverRoutesToAnUnhealthyServer(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[1].Healthy = false })
	req := Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}
	for pick := range uint64(10) {
		if d := ix.Decide(&req, pick); d.Action != Route || d.Server != 2 {
			t.Fatalf("pick %d: %+v; want Route to server 2", pick, d)
		}
	}
	// Every healthy server (0 and 2) serves apps/v1: the gateway's balancing may choose.
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis/apps/v1/deployments"}, 0); d.Action != Forward {
		t.Errorf("common resource: %+v; want Forward", d)
	}
}

func TestDecideAnswersUnavailableWhenEveryCapableServerIsDown(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[1].Healthy, s[2].Healthy = false, false })
	req := Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}
	d := ix.Decide(&req, 0)
	if d.Action != Unavailable {
		t.Fatalf("%+v; want Unavailable", d)
	}
	var status struct {
		Kind, APIVersion, Status, Message, Reason string
		Code                                      int
		Details                                   struct {
			Group, Kind       string
			RetryAfterSeconds int
		}
	}
	body := UnavailableStatus(&d, 5)
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if status.Kind != "Status" || status.APIVersion != "v1" || status.Status != "Failure" || status.Reason != "ServiceUnavailable" ||
		status.Code != 503 || status.Details.Group != "admissionregistration.k8s.io" || status.Details.Kind != "mutatingadmissionpolicies" ||
		status.Details.RetryAfterSeconds != 5 {
		t.Errorf("status %+v", status)
	}
}

// While a server is down its documents are those it had before: back as a
// newer version it may serve what no other server does, so a request no
// server is known to serve is answered 503, not forwarded for a 404, in both
// modes; with every server healthy, or none, the servers answer it.
func TestRequestNobodyIsKnownToServeIsUnavailableWhileAServerIsDown(t *testing.T) {
	nobodyServes := []Request{
		{Method: "GET", Path: "/apis/example.com/v1/widgets"},
		{Method: "POST", Path: "/apis/example.com/v1/namespaces/ns/widgets"},
		{Method: "GET", Path: "/apis/example.com/v1"},
	}
	for _, mode := range []struct {
		name  string
		index func(t *testing.T, mutate func([]discoverytest.Server)) *Index
	}{
		{"load balancer", func(t *testing.T, m func([]discoverytest.Server)) *Index { return skewedIndex(t, m) }},
		{"node-local", func(t *testing.T, m func([]discoverytest.Server)) *Index { return preferringIndex(t, 0, m) }},
	} {
		down := mode.index(t, func(s []discoverytest.Server) { s[1].Healthy = false })
		healthy := mode.index(t, nil)
		for _, req := range nobodyServes {
			if d := down.Decide(&req, 0); d.Action != Unavailable {
				t.Errorf("%s, server 1 down: %s %s?%s: %+v; want Unavailable", mode.name, req.Method, req.Path, req.Query, d)
			}
			if d := healthy.Decide(&req, 0); d.Action == Unavailable {
				t.Errorf("%s, every server healthy: %s %s?%s: %+v; want it sent to a server", mode.name, req.Method, req.Path, req.Query, d)
			}
		}
		// What the index has no opinion on still reaches a server.
		for _, req := range []Request{{Method: "GET", Path: "/readyz"}, {Method: "GET", Path: "/api/v1/watch"}} {
			if d := down.Decide(&req, 0); d.Action == Unavailable {
				t.Errorf("%s, server 1 down: %s %s: %+v; want it sent to a server", mode.name, req.Method, req.Path, d)
			}
		}
	}
}

// A burst that times out every health probe at once must not turn every
// request into a 503: with no healthy server, Decide acts as if all were
// healthy (Envoy's panic threshold).
func TestDecideRoutesAsIfEveryServerWereHealthyWhenNoneIs(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[0].Healthy, s[1].Healthy, s[2].Healthy = false, false, false })
	cases := []struct {
		name         string
		req          Request
		want         Action
		servers      ServerSet
		wantRerouted bool
	}{
		{name: "common resource", req: Request{Method: "GET", Path: "/apis/apps/v1/deployments"}, want: Forward},
		{name: "resource nobody serves", req: Request{Method: "GET", Path: "/apis/example.com/v1/widgets"}, want: Forward},
		{name: "skewed resource", req: Request{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, want: Route, servers: 0b110, wantRerouted: true},
		{name: "alpha resource", req: Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates"}, want: Route, servers: 0b100, wantRerouted: true},
		{name: "legacy group version document", req: Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2"}, want: Route, servers: 0b100},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			seen := ServerSet(0)
			for pick := range uint64(4) {
				d := ix.Decide(&c.req, pick)
				if d.Action != c.want || d.Rerouted != c.wantRerouted || (d.Action == Route && !c.servers.Has(d.Server)) {
					t.Fatalf("pick %d: %+v; want %v to one of %b, rerouted %v", pick, d, c.want, c.servers, c.wantRerouted)
				}
				if d.Action == Route {
					seen |= 1 << uint(d.Server)
				}
			}
			if c.want == Route && seen != c.servers {
				t.Errorf("targets %b; want every capable server %b", seen, c.servers)
			}
		})
	}
}

func TestDecideServesMergedDiscoveryOnlyForThePeerView(t *testing.T) {
	ix := skewedIndex(t, nil)
	apis, api := ix.MergedAPIs(), ix.MergedCoreAPI()
	cases := []struct {
		name       string
		req        Request
		want       Action
		doc        *Document
		wantNoPeer bool
	}{
		{"client-go default", Request{Method: "GET", Path: "/apis", Accept: acceptAggregated + ",application/json"}, ServeDocument, apis, false},
		{"core", Request{Method: "GET", Path: "/api", Accept: acceptAggregated}, ServeDocument, api, false},
		{"head", Request{Method: "HEAD", Path: "/apis", Accept: acceptAggregated}, ServeDocument, apis, false},
		{"protobuf first, json accepted", Request{Method: "GET", Path: "/apis", Accept: "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList," + acceptAggregated}, ServeDocument, apis, false},
		{"current etag", Request{Method: "GET", Path: "/apis", Accept: acceptAggregated, IfNoneMatch: apis.ETag}, NotModified, apis, false},
		{"other etag", Request{Method: "GET", Path: "/apis", Accept: acceptAggregated, IfNoneMatch: api.ETag}, ServeDocument, apis, false},
		{"nopeer", Request{Method: "GET", Path: "/apis", Accept: acceptNoPeer + "," + acceptAggregated}, Forward, nil, true},
		{"legacy json", Request{Method: "GET", Path: "/apis", Accept: "application/json"}, Forward, nil, false},
		{"no accept", Request{Method: "GET", Path: "/apis"}, Forward, nil, false},
		{"protobuf only", Request{Method: "GET", Path: "/apis", Accept: "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"}, Forward, nil, false},
		{"post", Request{Method: "POST", Path: "/apis", Accept: acceptAggregated}, Forward, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := ix.Decide(&c.req, 0)
			if d.Action != c.want || d.Document != c.doc || d.NoPeer != c.wantNoPeer {
				t.Errorf("decision %+v; want action %v, document %p, nopeer %v", d, c.want, c.doc, c.wantNoPeer)
			}
		})
	}
}

func TestMergedDiscoveryKeepsAPIsOfUnhealthyServers(t *testing.T) {
	healthy := skewedIndex(t, nil)
	degraded := skewedIndex(t, func(s []discoverytest.Server) { s[2].Healthy = false })
	if healthy.MergedAPIs().ETag != degraded.MergedAPIs().ETag {
		t.Error("a failed health probe changed the merged discovery document")
	}
}

var decideBenchRequests = []Request{
	{Method: "GET", Path: "/apis/apps/v1/namespaces/default/deployments/web"},
	{Method: "GET", Path: "/api/v1/namespaces/default/pods"},
	{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
	{Method: "GET", Path: "/apis", Accept: acceptAggregated + ",application/json", IfNoneMatch: `"x"`},
}

func TestDecideDoesNotAllocate(t *testing.T) {
	ix := skewedIndex(t, nil)
	for _, req := range decideBenchRequests {
		if n := testing.AllocsPerRun(100, func() { ix.Decide(&req, 1) }); n != 0 {
			t.Errorf("%s %s: %v allocations per Decide; want 0", req.Method, req.Path, n)
		}
	}
}

func BenchmarkDecide(b *testing.B) {
	ix := skewedIndex(b, nil)
	for _, req := range decideBenchRequests {
		b.Run(req.Method+req.Path, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				ix.Decide(&req, uint64(i))
			}
		})
	}
}

// Capable is where Decide may send a request: the gateway retries only
// there. With kube-c down, kube-b alone takes what only the v1.36 servers
// serve, nothing takes what only kube-c serves, and what every routable
// server answers alike may go to any of them.
func TestCapableIsWhereDecideMaySendTheRequest(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[2].Healthy = false })
	for _, c := range []struct {
		req  Request
		want ServerSet
	}{
		{Request{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, 0b010},
		{Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2"}, 0},
		{Request{Method: "GET", Path: "/apis/coordination.k8s.io"}, 0},
		{Request{Method: "GET", Path: "/apis/apps/v1/deployments"}, 0b011},
		{Request{Method: "GET", Path: "/apis/example.com/v1/widgets"}, 0},
		{Request{Method: "GET", Path: "/apis", Accept: acceptAggregated}, 0},
		{Request{Method: "GET", Path: "/healthz"}, 0b011},
	} {
		if got := ix.Capable(&c.req, 0); got != c.want {
			t.Errorf("%s %s: %b; want %b", c.req.Method, c.req.Path, got, c.want)
		}
	}
}

// A retry leaves out the servers it tried and goes where the decision would
// have gone had they been down: in node-local mode, after the preferred
// server, to the peers that serve the request.
func TestARetryGoesWhereDecideWouldHadTheTriedServersBeenDown(t *testing.T) {
	const a, b, c = ServerSet(0b001), ServerSet(0b010), ServerSet(0b100)
	pods := Request{Method: "GET", Path: "/api/v1/namespaces/default/pods"}
	mutating := Request{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}
	balanced, local := skewedIndex(t, nil), nodeLocalIndex(t, nil)
	for _, tc := range []struct {
		name     string
		ix       *Index
		req      Request
		excluded ServerSet
		want     ServerSet
	}{
		{"what every server serves, balanced: any", balanced, pods, 0, a | b | c},
		{"what every server serves, balanced, after kube-a: any other", balanced, pods, a, b | c},
		{"what only the v1.36 servers serve: those", balanced, mutating, 0, b | c},
		{"what only the v1.36 servers serve, after kube-b: kube-c", balanced, mutating, b, c},
		{"what only the v1.36 servers serve, after both: nowhere", balanced, mutating, b | c, 0},
		{"node-local, what the local server serves: the local server", local, pods, 0, a},
		{"node-local, after the local server: its peers", local, pods, a, b | c},
		{"node-local, what only peers serve: those peers", local, mutating, 0, b | c},
		{"node-local, what only peers serve, after kube-c: kube-b", local, mutating, c, b},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ix.Capable(&tc.req, tc.excluded); got != tc.want {
				t.Errorf("Capable = %03b; want %03b", got, tc.want)
			}
		})
	}
}

// /openapi/v2 has one right server, the one serving the most group versions
// (kube-c, with its alpha API); a retry goes to the next best (kube-b, the
// newer of two alike), never to any server at all.
func TestOpenAPIV2IsOnlyEverSentToTheBestServerLeft(t *testing.T) {
	ix := skewedIndex(t, nil)
	v2 := Request{Method: "GET", Path: "/openapi/v2"}
	for _, tc := range []struct {
		excluded, want ServerSet
	}{{0, 0b100}, {0b100, 0b010}, {0b110, 0b001}, {0b111, 0}} {
		if got := ix.Capable(&v2, tc.excluded); got != tc.want {
			t.Errorf("after %03b: Capable = %03b; want %03b", tc.excluded, got, tc.want)
		}
	}
	if d := ix.Decide(&v2, 7); d.Action != Route || d.Server != 2 {
		t.Errorf("Decide = %v to %d; want Route to kube-c", d.Action, d.Server)
	}
}

func TestPickSpreadsOverMembers(t *testing.T) {
	set := ServerSet(0b10110)
	var got []int
	for pick := range uint64(6) {
		got = append(got, set.Pick(pick))
	}
	if want := []int{1, 2, 4, 1, 2, 4}; !slices.Equal(got, want) {
		t.Errorf("picks %v; want %v", got, want)
	}
}
