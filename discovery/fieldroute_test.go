package discovery_test

import (
	"testing"

	. "github.com/skewgate/skewgate/discovery"
)

// fieldIndex indexes the servers of withFieldData (kube-a accepts only
// metadata.name and metadata.namespace for pods, kube-b and kube-c also
// spec.nodeName; kube-a's deployments lack fields) after edit, with options.
func fieldIndex(t *testing.T, options IndexOptions, edit func([]Server), snapEdits ...func(*Snapshot)) *Index {
	t.Helper()
	servers := withFieldData(t)
	if edit != nil {
		edit(servers)
	}
	snap, err := NewSnapshot(1, "", servers)
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range snapEdits {
		edit(snap)
	}
	ix, err := NewIndexWith(snap, options)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// kubeletPods is what a kubelet lists to learn its node's pods.
const kubeletPods = "fieldSelector=spec.nodeName%3Dnode-1&limit=500&resourceVersion=0"

type fieldCase struct {
	name, method, path, query string
	want                      Action
	servers                   ServerSet // acceptable targets of Route
}

func checkFieldCases(t *testing.T, ix *Index, cases []fieldCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := Request{Method: c.method, Path: c.path, Query: c.query}
			for pick := range uint64(4) {
				d := ix.Decide(&req, pick)
				if d.Action != c.want {
					t.Fatalf("%s %s?%s: action %v; want %v (decision %+v)", c.method, c.path, c.query, d.Action, c.want, d)
				}
				if d.Action == Route && (!c.servers.Has(d.Server) || !d.Rerouted) {
					t.Errorf("routed to server %d (rerouted %v); want one of %b, re-routed", d.Server, d.Rerouted, c.servers)
				}
			}
			if d := ix.Decide(&req, 0); d.Action == Route {
				if got := ix.Capable(&req, 0); got != c.servers {
					t.Errorf("Capable %b; want %b, where Decide picks from", got, c.servers)
				}
			}
		})
	}
}

// A list, watch or deletecollection whose field selector uses a label not
// every server accepts goes to the servers that accept all its labels, as
// fields.ParseSelector reads the first fieldSelector of the query.
func TestFieldSelectorsNarrowListsWatchesAndDeleteCollections(t *testing.T) {
	ix := fieldIndex(t, IndexOptions{}, nil)
	const newer = 0b110
	checkFieldCases(t, ix, []fieldCase{
		{"kubelet list", "GET", "/api/v1/pods", kubeletPods, Route, newer},
		{"namespaced list", "GET", "/api/v1/namespaces/ns/pods", "fieldSelector=spec.nodeName=node-1", Route, newer},
		{"watch parameter", "GET", "/api/v1/pods", "watch=true&fieldSelector=spec.nodeName%3Dnode-1", Route, newer},
		{"watch path", "GET", "/api/v1/watch/namespaces/ns/pods", "fieldSelector=spec.nodeName%3Dnode-1", Route, newer},
		{"watch path of one object", "GET", "/api/v1/watch/namespaces/ns/pods/p", "fieldSelector=spec.nodeName%3Dnode-1", Route, newer},
		{"deletecollection", "DELETE", "/api/v1/namespaces/ns/pods", "fieldSelector=spec.nodeName%3Dnode-1", Route, newer},
		{"HEAD list", "HEAD", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dnode-1", Route, newer},
		{"among other terms", "GET", "/api/v1/pods", "fieldSelector=metadata.namespace%3Dns,spec.nodeName!=node-1", Route, newer},
		{"double equals", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3D%3Dnode-1", Route, newer},
		{"not equals", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%21%3D", Route, newer},
		{"escaped label", "GET", "/api/v1/pods", "fieldSelector=spec%2EnodeName%3Dn", Route, newer},
		{"escaped key", "GET", "/api/v1/pods", "field%53elector=spec.nodeName%3Dn", Route, newer},
		{"escaped comma separates", "GET", "/api/v1/pods", "fieldSelector=metadata.name%3Da%2Cspec.nodeName%3Dn", Route, newer},
		{"backslash-escaped value", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Da%5C%2Cb%5C%3Dc", Route, newer},
		{"empty terms", "GET", "/api/v1/pods", "fieldSelector=,,spec.nodeName%3Dn,", Route, newer},
		{"labels every server accepts", "GET", "/api/v1/pods", "fieldSelector=metadata.name%3Dp,metadata.namespace!%3Dx", Forward, 0},
		{"no selector", "GET", "/api/v1/pods", "limit=500", Forward, 0},
		{"empty selector", "GET", "/api/v1/pods", "fieldSelector=", Forward, 0},
		{"a label no server accepts", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn,status.podIP%3Dx", Forward, 0},
		{"a label with a space ('+')", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName+%3Dn", Forward, 0},
		{"only the first selector counts", "GET", "/api/v1/pods", "fieldSelector=metadata.name%3Dp&fieldSelector=spec.nodeName%3Dn", Forward, 0},
		{"a malformed first selector pair is dropped", "GET", "/api/v1/pods", "fieldSelector=%zz&fieldSelector=spec.nodeName%3Dn", Route, newer},
		{"upstream rejects: no operator", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName", Forward, 0},
		{"upstream rejects: a trailing backslash", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Da%5C", Forward, 0},
		{"upstream rejects: one bad term among good", "GET", "/api/v1/pods", "fieldSelector=spec.nodeName%3Dn,x", Forward, 0},
		{"a get ignores the selector", "GET", "/api/v1/namespaces/ns/pods/p", "fieldSelector=spec.nodeName%3Dn", Forward, 0},
		{"a create ignores the selector", "POST", "/api/v1/namespaces/ns/pods", "fieldSelector=spec.nodeName%3Dn", Forward, 0},
		{"a subresource ignores the selector", "GET", "/api/v1/namespaces/ns/pods/p/log", "fieldSelector=spec.nodeName%3Dn", Forward, 0},
		{"a resource without field data", "GET", "/api/v1/configmaps", "fieldSelector=spec.nodeName%3Dn", Forward, 0},
		// Only kube-c accepts spec.paramKind; kube-a does not serve the resource.
		{"narrower than the resource's servers", "GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "fieldSelector=spec.paramKind%3Dx", Route, 0b100},
		{"the resource's servers", "GET", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "fieldSelector=metadata.name%3Dx", Route, 0b110},
	})
}

// A selector label no server is known to accept gets the servers' 400 while
// every server is healthy, and 503 with Retry-After while one is down: back
// from a restart as a newer version, it may accept the label (as a 1.31
// server accepts the 1.31 kubelet's spec.clusterIP on Services).
func TestFieldSelectorNoServerIsKnownToAcceptIsUnavailableWhileAServerIsDown(t *testing.T) {
	req := Request{Method: "GET", Path: "/api/v1/pods", Query: "fieldSelector=spec.nodeName%3Dn,status.podIP%3Dx"}
	if d := fieldIndex(t, IndexOptions{}, nil).Decide(&req, 0); d.Action != Forward {
		t.Errorf("every server healthy: %+v; want Forward", d)
	}
	down := fieldIndex(t, IndexOptions{}, func(s []Server) { s[0].Healthy = false })
	if d := down.Decide(&req, 0); d.Action != Unavailable || d.Resource != "pods" {
		t.Errorf("kube-a down: %+v; want Unavailable for pods", d)
	}
}

// When the servers that accept a selector are down while others are up, the
// client gets 503 with Retry-After, as for a resource only down servers
// serve; a server that rejects the label would answer 400.
func TestFieldSelectorAcceptedOnlyByDownServersIsUnavailable(t *testing.T) {
	ix := fieldIndex(t, IndexOptions{}, func(s []Server) { s[1].Healthy, s[2].Healthy = false, false })
	req := Request{Method: "GET", Path: "/api/v1/pods", Query: kubeletPods}
	if d := ix.Decide(&req, 0); d.Action != Unavailable || d.Resource != "pods" {
		t.Errorf("decision %+v; want Unavailable for pods", d)
	}
	// One of them up takes them all.
	ix = fieldIndex(t, IndexOptions{}, func(s []Server) { s[1].Healthy = false })
	if d := ix.Decide(&req, 0); d.Action != Route || d.Server != 2 || !d.Rerouted {
		t.Errorf("decision %+v; want kube-c, re-routed", d)
	}
	// A retry that tried kube-c has nowhere else to go.
	if got := ix.Capable(&req, 0b100); got != 0 {
		t.Errorf("Capable without kube-c %b; want none", got)
	}
	// With no server healthy, requests go where they would if all were.
	ix = fieldIndex(t, IndexOptions{}, func(s []Server) { s[0].Healthy, s[1].Healthy, s[2].Healthy = false, false, false })
	if d := ix.Decide(&req, 0); d.Action != Route || d.Server == 0 {
		t.Errorf("decision %+v; want a server that accepts the selector", d)
	}
}

func TestFieldSelectorInNodeLocalMode(t *testing.T) {
	servers := withFieldData(t)
	for _, c := range []struct {
		preferred int
		want      ServerSet
	}{{0, 0b110}, {1, 0b010}} {
		snap, err := NewSnapshot(1, servers[c.preferred].ID, servers)
		if err != nil {
			t.Fatal(err)
		}
		ix, err := NewIndex(snap)
		if err != nil {
			t.Fatal(err)
		}
		d := ix.Decide(&Request{Method: "GET", Path: "/api/v1/pods", Query: kubeletPods}, 0)
		if d.Action != Route || !c.want.Has(d.Server) || d.Rerouted != (c.preferred == 0) {
			t.Errorf("preferring %d: decision %+v; want one of %b, re-routed only away from the preferred server", c.preferred, d, c.want)
		}
	}
}

// Requests for a resource whose schema some servers lack fields of go to
// the others: writes always, reads unless the options say writes only.
func TestResourceWhoseSchemasDifferGoesToServersLackingNothing(t *testing.T) {
	const complete = 0b110
	writes := []fieldCase{
		{"create", "POST", "/apis/apps/v1/namespaces/ns/deployments", "", Route, complete},
		{"update", "PUT", "/apis/apps/v1/namespaces/ns/deployments/d", "", Route, complete},
		{"apply", "PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", "fieldManager=kubectl&force=true", Route, complete},
		{"status update", "PUT", "/apis/apps/v1/namespaces/ns/deployments/d/status", "", Route, complete},
		{"scale", "PATCH", "/apis/apps/v1/namespaces/ns/deployments/d/scale", "", Route, complete},
		{"delete", "DELETE", "/apis/apps/v1/namespaces/ns/deployments/d", "", Route, complete},
		{"deletecollection", "DELETE", "/apis/apps/v1/namespaces/ns/deployments", "", Route, complete},
	}
	reads := []fieldCase{
		{"get", "GET", "/apis/apps/v1/namespaces/ns/deployments/d", "", Route, complete},
		{"list", "GET", "/apis/apps/v1/deployments", "limit=500", Route, complete},
		{"watch", "GET", "/apis/apps/v1/watch/deployments", "", Route, complete},
	}
	t.Run("reads and writes", func(t *testing.T) {
		checkFieldCases(t, fieldIndex(t, IndexOptions{}, nil), append(writes, reads...))
	})
	t.Run("writes only", func(t *testing.T) {
		ix := fieldIndex(t, IndexOptions{SchemaSkewWritesOnly: true}, nil)
		checkFieldCases(t, ix, writes)
		for _, r := range reads {
			if d := ix.Decide(&Request{Method: r.method, Path: r.path, Query: r.query}, 0); d.Action != Forward {
				t.Errorf("%s: decision %+v; want reads left to the gateway", r.name, d)
			}
		}
	})
	t.Run("every server lacks something: the newest minor takes it", func(t *testing.T) {
		// Each server writes back only the stored fields its schema has;
		// the newest release has those newer clients set.
		ix := fieldIndex(t, IndexOptions{}, func(s []Server) {
			s[1].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.a"}}
			s[2].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.b"}}
		})
		checkFieldCases(t, ix, []fieldCase{
			{"create", "POST", "/apis/apps/v1/namespaces/ns/deployments", "", Route, 0b110},
			{"get", "GET", "/apis/apps/v1/namespaces/ns/deployments/d", "", Route, 0b110},
		})
	})
	t.Run("a server that is down is not complete", func(t *testing.T) {
		// The controller compares only the servers that answer, so a server
		// that is down lists no missing fields: what it lacks is unknown,
		// not nothing. Here kube-a (1.35) and kube-b (1.36) each lack a
		// field and kube-c is down: the newest of those that answer serves
		// the kind.
		ix := fieldIndex(t, IndexOptions{}, func(s []Server) {
			s[1].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.a"}}
			s[2].Healthy = false
		})
		for _, method := range []string{"GET", "PATCH"} {
			if d := ix.Decide(&Request{Method: method, Path: "/apis/apps/v1/namespaces/ns/deployments/d"}, 0); d.Action != Route || d.Server != 1 {
				t.Errorf("%s: decision %+v; want kube-b, the newest that answers, not the down one", method, d)
			}
		}
		// A complete server that answers still takes the writes.
		ix = fieldIndex(t, IndexOptions{}, func(s []Server) { s[2].Healthy = false })
		if d := ix.Decide(&Request{Method: "PATCH", Path: "/apis/apps/v1/namespaces/ns/deployments/d"}, 0); d.Action != Route || d.Server != 1 {
			t.Errorf("decision %+v; want kube-b, the complete server that answers", d)
		}
	})
	t.Run("a selector's servers beat the complete ones", func(t *testing.T) {
		// kube-b and kube-c accept spec.nodeName for pods, only kube-a has
		// every pod field: the selector wins, a server that rejects it
		// would answer 400.
		ix := fieldIndex(t, IndexOptions{}, func(s []Server) {
			s[1].MissingFields = map[string][]string{"v1/pods": {"spec.a"}}
			s[2].MissingFields = map[string][]string{"v1/pods": {"spec.a"}}
		})
		checkFieldCases(t, ix, []fieldCase{
			{"kubelet list", "GET", "/api/v1/pods", kubeletPods, Route, 0b110},
			{"plain list", "GET", "/api/v1/pods", "", Route, 0b001},
		})
	})
}

var fieldBenchRequests = []Request{
	{Method: "GET", Path: "/api/v1/pods", Query: kubeletPods},
	{Method: "GET", Path: "/api/v1/watch/namespaces/ns/pods", Query: "fieldSelector=metadata.namespace%3Dns%2Cspec.nodeName%21%3Dn%5C%2C1&resourceVersion=7"},
	{Method: "GET", Path: "/api/v1/pods", Query: "fieldSelector=metadata.name%3Dp&limit=500"},
	{Method: "PATCH", Path: "/apis/apps/v1/namespaces/ns/deployments/web", Query: "fieldManager=kubectl&force=true"},
}

func TestDecideWithFieldDataDoesNotAllocate(t *testing.T) {
	ix := fieldIndex(t, IndexOptions{}, nil)
	for _, req := range fieldBenchRequests {
		if n := testing.AllocsPerRun(100, func() { ix.Decide(&req, 1) }); n != 0 {
			t.Errorf("%s %s?%s: %v allocations per Decide; want 0", req.Method, req.Path, req.Query, n)
		}
	}
}
