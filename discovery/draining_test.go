package discovery_test

import (
	"bytes"
	"testing"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// The skewed control plane's servers, by index: 0 kube-a (v1.35), 1 kube-b,
// 2 kube-c (kube-c alone serves coordination.k8s.io/v1alpha2).

// targets is every server Decide picks for req over a run of pick counters,
// failing unless each decision is a Route with the re-routed mark wanted.
func targets(t *testing.T, ix *Index, req Request, rerouted bool) ServerSet {
	t.Helper()
	seen := ServerSet(0)
	for pick := range uint64(6) {
		d := ix.Decide(&req, pick)
		if d.Action != Route || d.Rerouted != rerouted {
			t.Fatalf("%s %s, pick %d: %+v; want Route, re-routed %v", req.Method, req.Path, pick, d, rerouted)
		}
		seen |= 1 << uint(d.Server)
	}
	return seen
}

func TestADrainingServerTakesNothingAnotherRoutableServerCanServe(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[0].Draining = true })
	// What every server serves is no longer left to the gateway's balancing,
	// which knows nothing of draining: it is spread over the others.
	for _, req := range []Request{
		{Method: "POST", Path: "/api/v1/namespaces/ns/configmaps"},
		{Method: "GET", Path: "/apis/apps/v1/deployments"},
		{Method: "GET", Path: "/readyz"},
		{Method: "GET", Path: "/apis", Accept: acceptNoPeer},
	} {
		if got := targets(t, ix, req, false); got != 0b110 {
			t.Errorf("%s %s: sent to %b; want both servers that do not drain", req.Method, req.Path, got)
		}
	}
	if got := targets(t, ix, Request{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, true); got != 0b110 {
		t.Errorf("skewed resource: sent to %b; want its two capable servers", got)
	}
	// Merged discovery is still the gateway's own answer.
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis", Accept: acceptAggregated}, 0); d.Action != ServeDocument {
		t.Errorf("aggregated /apis: %+v; want ServeDocument", d)
	}
}

func TestADrainingServerStillTakesWhatOnlyItCanServe(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[2].Draining = true })
	if got := targets(t, ix, Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates"}, true); got != 0b100 {
		t.Errorf("a resource only the draining server serves: sent to %b; want it there, not refused", got)
	}
	if got := targets(t, ix, Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, true); got != 0b010 {
		t.Errorf("skewed resource: sent to %b; want the capable server that does not drain", got)
	}
}

func TestEveryServerDrainingIsAsIfNoneWere(t *testing.T) {
	plain := skewedIndex(t, nil)
	drained := skewedIndex(t, func(s []discoverytest.Server) {
		for i := range s {
			s[i].Draining = true
		}
	})
	for _, req := range []Request{
		{Method: "GET", Path: "/api/v1/pods"},
		{Method: "POST", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"},
		{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates"},
	} {
		for pick := range uint64(3) {
			if got, want := drained.Decide(&req, pick), plain.Decide(&req, pick); got != want {
				t.Errorf("%s %s, pick %d: %+v; want %+v as without draining", req.Method, req.Path, pick, got, want)
			}
		}
	}
}

// A draining server that is down is simply down.
func TestAnUnhealthyDrainingServerChangesNothing(t *testing.T) {
	plain := skewedIndex(t, func(s []discoverytest.Server) { s[0].Healthy = false })
	drained := skewedIndex(t, func(s []discoverytest.Server) { s[0].Healthy, s[0].Draining = false, true })
	for _, req := range []Request{{Method: "GET", Path: "/api/v1/pods"}, {Method: "DELETE", Path: "/apis/apps/v1/namespaces/ns/deployments/d"}} {
		if got, want := drained.Decide(&req, 1), plain.Decide(&req, 1); got != want {
			t.Errorf("%s %s: %+v; want %+v", req.Method, req.Path, got, want)
		}
	}
}

// Once a retry has tried the servers that do not drain, the draining one is
// where it may go: draining is a preference, never a refusal.
func TestARetryReachesADrainingServerOnceTheOthersWereTried(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) { s[0].Draining = true })
	req := Request{Method: "GET", Path: "/api/v1/pods"}
	if got := ix.Capable(&req, 0); got != 0b110 {
		t.Errorf("first try may go to %b; want the servers that do not drain", got)
	}
	if got := ix.Capable(&req, 0b010); got != 0b100 {
		t.Errorf("after kube-b: %b; want kube-c", got)
	}
	if got := ix.Capable(&req, 0b110); got != 0b001 {
		t.Errorf("after kube-b and kube-c: %b; want the draining kube-a", got)
	}
}

func TestNodeLocalSendsNothingToItsDrainingServerThatAPeerCanServe(t *testing.T) {
	ix := nodeLocalIndex(t, func(s []discoverytest.Server) { s[0].Draining = true })
	for _, c := range nodeLocalCases {
		t.Run(c.name, func(t *testing.T) {
			if got := targets(t, ix, c.req, false); got != 0b110 {
				t.Errorf("sent to %b; want the two peers that do not drain", got)
			}
		})
	}
	// From kube-c's node, what only kube-c serves stays with it.
	ix = preferringIndex(t, 2, func(s []discoverytest.Server) { s[2].Draining = true })
	if d := ix.Decide(&Request{Method: "GET", Path: "/apis/coordination.k8s.io/v1alpha2/leasecandidates"}, 0); d.Action != Route || d.Server != 2 {
		t.Errorf("what only the draining preferred server serves: %+v; want Route to it", d)
	}
	if got := targets(t, ix, Request{Method: "GET", Path: "/api/v1/pods"}, false); got != 0b011 {
		t.Errorf("common resource: sent to %b; want the two peers", got)
	}
}

func TestOpenAPIAvoidsADrainingServer(t *testing.T) {
	ix := skewedIndex(t, func(s []discoverytest.Server) {
		for i := range s {
			s[i].OpenAPI = map[string]string{"apis/apps/v1": "H"}
		}
		s[0].Draining = true
	})
	for _, path := range []string{"/openapi/v2", "/openapi/v3/apis/apps/v1"} {
		for pick := range uint64(4) {
			if d := ix.Decide(&Request{Method: "GET", Path: path, Query: "hash=H"}, pick); d.Action != Route || d.Server == 0 {
				t.Errorf("%s, pick %d: %+v; want Route to a server that does not drain", path, pick, d)
			}
		}
	}
}

func TestDrainingIsWrittenOnlyWhenSet(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	if raw := discoverytest.SnapshotJSON(1, servers); bytes.Contains(raw, []byte(`"draining"`)) {
		t.Errorf("a snapshot without a draining server mentions draining: %.200s", raw)
	}
	servers[1].Draining = true
	snap, err := ParseSnapshot(discoverytest.SnapshotJSON(1, servers))
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Servers[1].Draining || snap.Servers[0].Draining || snap.Servers[2].Draining {
		t.Errorf("draining read back as %v %v %v; want only server 1", snap.Servers[0].Draining, snap.Servers[1].Draining, snap.Servers[2].Draining)
	}
	raw := snap.AppendJSON(nil)
	raw = bytes.Replace(raw, []byte(`"draining":true`), []byte(`"draining":"yes"`), 1)
	if _, err := ParseSnapshot(raw); err == nil || !bytes.Contains([]byte(err.Error()), []byte("draining: must be true or false")) {
		t.Errorf("a draining that is not a boolean: %v; want an error naming the field", err)
	}
}
