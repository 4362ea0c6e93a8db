// An external test: discoverytest and fixtures build on discovery, so a
// test of the package that uses them cannot be inside it.
package discovery_test

import (
	"testing"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// nodeLocalIndex is the skewed control plane seen from the node of its v1.35
// server (kube-a, index 0), which is the preferred server.
func nodeLocalIndex(t testing.TB, mutate func([]discoverytest.Server)) *Index {
	t.Helper()
	return preferringIndex(t, 0, mutate)
}

// preferringIndex is the skewed control plane seen from the node of server
// preferred.
func preferringIndex(t testing.TB, preferred int, mutate func([]discoverytest.Server)) *Index {
	t.Helper()
	servers := discoverytest.SkewedControlPlane()
	if mutate != nil {
		mutate(servers)
	}
	snap, err := ParseSnapshot(discoverytest.Prefer(discoverytest.SnapshotJSON(1, servers), servers[preferred].ID))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	if ix.Preferred() != preferred {
		t.Fatalf("preferred server %d; want %d", ix.Preferred(), preferred)
	}
	return ix
}

var nodeLocalCases = []struct {
	name string
	req  Request
}{
	{"common resource", Request{Method: "GET", Path: "/apis/apps/v1/namespaces/ns/deployments/web"}},
	{"core resource", Request{Method: "DELETE", Path: "/api/v1/namespaces/ns/configmaps/c"}},
	{"health", Request{Method: "GET", Path: "/readyz"}},
	{"nopeer discovery", Request{Method: "GET", Path: "/apis", Accept: acceptNoPeer}},
	{"legacy discovery root", Request{Method: "GET", Path: "/apis", Accept: "application/json"}},
	{"common group version document", Request{Method: "GET", Path: "/apis/apps/v1"}},
	{"trusted peer-proxied", Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates", PeerProxied: true}},
}

func TestNodeLocalSendsEverythingThePreferredServerServesToIt(t *testing.T) {
	ix := nodeLocalIndex(t, nil)
	for _, c := range nodeLocalCases {
		t.Run(c.name, func(t *testing.T) {
			for pick := range uint64(4) {
				d := ix.Decide(&c.req, pick)
				if d.Action != Route || d.Server != 0 || d.Rerouted {
					t.Fatalf("pick %d: %+v; want Route to the preferred server 0, not re-routed", pick, d)
				}
			}
		})
	}
	// Merged discovery is still answered by the gateway itself.
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis", Accept: acceptAggregated}, 0); d.Action != ServeDocument {
		t.Errorf("aggregated /apis: %+v; want ServeDocument", d)
	}
}

func TestNodeLocalReroutesOnlyWhatThePreferredServerCannotServe(t *testing.T) {
	ix := nodeLocalIndex(t, nil)
	cases := []struct {
		name         string
		req          Request
		servers      ServerSet
		wantRerouted bool
	}{
		{"skewed resource", Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, 0b110, true},
		{"alpha resource", Request{Method: "DELETE", Path: "/apis/coordination.k8s.io/v1alpha2/namespaces/ns/leasecandidates/x"}, 0b100, true},
		{"legacy group version document", Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2"}, 0b100, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for pick := range uint64(4) {
				d := ix.Decide(&c.req, pick)
				if d.Action != Route || !c.servers.Has(d.Server) || d.Rerouted != c.wantRerouted {
					t.Fatalf("pick %d: %+v; want Route to one of %b, rerouted %v", pick, d, c.servers, c.wantRerouted)
				}
			}
		})
	}
}

func TestNodeLocalPrefersTheLocalServerAmongCapableOnes(t *testing.T) {
	// From the node of kube-c, which serves everything, nothing is re-routed.
	ix := preferringIndex(t, 2, nil)
	for _, path := range []string{"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "/apis/coordination.k8s.io/v1alpha2/leasecandidates", "/api/v1/pods"} {
		if d := ix.Decide(&Request{Method: "GET", Path: path}, 1); d.Action != Route || d.Server != 2 || d.Rerouted {
			t.Errorf("%s: %+v; want Route to the preferred server 2, not re-routed", path, d)
		}
	}
}

func TestNodeLocalFallsBackToHealthyPeersWhileThePreferredServerIsDown(t *testing.T) {
	ix := nodeLocalIndex(t, func(s []discoverytest.Server) { s[0].Healthy = false })
	for _, c := range nodeLocalCases {
		t.Run(c.name, func(t *testing.T) {
			seen := ServerSet(0)
			for pick := range uint64(4) {
				d := ix.Decide(&c.req, pick)
				if d.Action != Route || d.Server == 0 || d.Rerouted {
					t.Fatalf("pick %d: %+v; want Route to a healthy peer, not re-routed", pick, d)
				}
				seen |= 1 << uint(d.Server)
			}
			if seen != 0b110 {
				t.Errorf("targets %b; want both healthy peers", seen)
			}
		})
	}
	// A resource only some peers serve still goes to one of those.
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates"}, 0); d.Action != Route || d.Server != 2 || !d.Rerouted {
		t.Errorf("alpha resource: %+v; want Route to server 2, re-routed", d)
	}
}

// With no healthy server every server counts as healthy: what the preferred
// server serves goes to it, the rest to a peer that serves it, and requests
// tied to no API to the gateway's load balancing.
func TestNodeLocalRoutesAsIfEveryServerWereHealthyWhenNoneIs(t *testing.T) {
	ix := nodeLocalIndex(t, func(s []discoverytest.Server) { s[0].Healthy, s[1].Healthy, s[2].Healthy = false, false, false })
	if d := ix.Decide(&Request{Method: "GET", Path: "/readyz"}, 0); d.Action != Forward {
		t.Errorf("health with every server down: %+v; want Forward", d)
	}
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis/apps/v1/deployments"}, 0); d.Action != Route || d.Server != 0 || d.Rerouted {
		t.Errorf("common resource with every server down: %+v; want Route to the preferred server 0", d)
	}
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates"}, 0); d.Action != Route || d.Server != 2 || !d.Rerouted {
		t.Errorf("alpha resource with every server down: %+v; want Route to server 2, re-routed", d)
	}
}

func TestNodeLocalDecideDoesNotAllocate(t *testing.T) {
	ix := nodeLocalIndex(t, nil)
	for _, req := range decideBenchRequests {
		if n := testing.AllocsPerRun(100, func() { ix.Decide(&req, 1) }); n != 0 {
			t.Errorf("%s %s: %v allocations per Decide; want 0", req.Method, req.Path, n)
		}
	}
}

func TestParseSnapshotRejectsAPreferredServerItDoesNotHold(t *testing.T) {
	valid := discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane())
	for _, c := range []struct {
		name, preferred, want string
	}{
		{"unknown id", "apiserver-zzz", `snapshot: preferred: "apiserver-zzz" is the id of no server`},
		{"cluster name instead of id", "kube-a", `snapshot: preferred: "kube-a" is the id of no server`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseSnapshot(discoverytest.Prefer(valid, c.preferred))
			if err == nil || err.Error() != c.want+" in the snapshot" {
				t.Errorf("error %v; want %q", err, c.want+" in the snapshot")
			}
		})
	}
	if _, err := ParseSnapshot([]byte(`{"generation":1,"preferred":7,"servers":[]}`)); err == nil || err.Error() != "snapshot: preferred: must be a server id, got 7" {
		t.Errorf("numeric preferred: %v", err)
	}
}
