package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"testing"
	"time"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	"github.com/skewgate/skewgate/host/testcluster"
)

// Accept headers of aggregated discovery: the peer-aggregated view, and one server's own view.
const (
	acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
	acceptNoPeer     = acceptAggregated + ";profile=nopeer"
)

// peerMergeTimeout bounds the wait for upstream's peer-aggregated discovery, which is event
// driven and retried with backoff, so it lags readiness by seconds.
const peerMergeTimeout = 3 * time.Minute

// TestDiscoveryThroughSkewgateEqualsUpstreamPeerAggregation runs skewgate in front of a cluster
// where every server runs the mixed version proxy, so upstream's own peer-aggregated discovery
// is the reference: the merged /apis skewgate serves is byte for byte (and ETag for ETag) what a
// 1.36 server serves, profile=nopeer still reaches one server's own view, the per-group-version
// documents upstream never proxies are found, and client-go's discovery sees every group version
// of every server.
func TestDiscoveryThroughSkewgateEqualsUpstreamPeerAggregation(t *testing.T) {
	const (
		old       = 0 // 1.35 with the alpha proxy gate on
		upgraded  = 1 // 1.36
		withExtra = 2 // 1.36 that also serves coordination.k8s.io/v1alpha2
	)
	const extraGroupVersion = "coordination.k8s.io/v1alpha2"
	cluster := startCluster(t, testcluster.Spec{Servers: []testcluster.ServerSpec{
		old:       {Name: "mvp-1-35", Version: testcluster.KubeVersion135, MVP: true},
		upgraded:  {Name: "mvp-1-36", Version: testcluster.KubeVersion136, MVP: true},
		withExtra: {Name: "mvp-1-36-extra", Version: testcluster.KubeVersion136, MVP: true, RuntimeConfig: []string{extraGroupVersion + "=true"}},
	}})
	servers := cluster.Servers()
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()

	// Every server's own view, and what the whole cluster serves under /apis and in all.
	ownAPIs := make([]response, len(servers))
	groupsUnion, union := resourceSet{}, resourceSet{}
	for i, s := range servers {
		ownAPIs[i] = getDiscovery(t, direct, s.URL+"/apis", acceptNoPeer)
		groupsUnion.addDocument(t, ownAPIs[i].body)
		union.addDocument(t, ownAPIs[i].body)
		union.addDocument(t, getDiscovery(t, direct, s.URL+"/api", acceptNoPeer).body)
	}
	if !union.has(extraGroupVersion, "leasecandidates") {
		t.Fatalf("no server serves %s/leasecandidates: the cluster is not skewed as expected", extraGroupVersion)
	}

	// Upstream's reference: each 1.36 server's peer-aggregated /apis, once it merged its peers.
	aggregators := []int{upgraded, withExtra}
	for _, i := range aggregators {
		s := servers[i]
		eventually(t, s.Name+" advertises every member's resources in its peer-aggregated /apis", peerMergeTimeout, time.Second, func() error {
			resp, err := do(direct, http.MethodGet, s.URL+"/apis", http.Header{"Accept": {acceptAggregated}}, nil)
			if err != nil {
				return err
			}
			got := resourceSet{}
			if err := got.parse(resp.body); err != nil {
				return err
			}
			return groupsUnion.sameAs(got)
		})
	}

	// With the kubeconfig the controller reads the identity leases, so the snapshot carries the
	// real server IDs, which order upstream's merge.
	gw := startSkewgate(t, cluster, gatewayConfig{kubeconfig: cluster.AdminKubeconfig()})
	gw.waitSnapshot(t, "every server in the snapshot under its server ID", gatewayReadyTimeout, func(v snapshotView) error {
		if err := allHealthy(cluster)(v); err != nil {
			return err
		}
		for _, s := range servers {
			if got, _ := v.server(s.URL); got.ID != s.ServerID {
				return fmt.Errorf("%s has ID %q in the snapshot, want %q", s.Name, got.ID, s.ServerID)
			}
		}
		return nil
	})
	client := gw.adminClient()
	defer client.CloseIdleConnections()

	t.Run("peer-aggregated /apis", func(t *testing.T) {
		through := getDiscovery(t, client, gw.URL+"/apis", acceptAggregated)
		etag := through.header.Get("ETag")
		if etag == "" {
			t.Fatal("skewgate's /apis carries no ETag")
		}
		for _, i := range aggregators {
			s := servers[i]
			upstream := getDiscovery(t, direct, s.URL+"/apis", acceptAggregated)
			if !bytes.Equal(through.body, upstream.body) {
				t.Errorf("skewgate's /apis (%d bytes) differs from %s's peer-aggregated /apis (%d bytes)%s",
					len(through.body), s.Name, len(upstream.body), firstDifference(through.body, upstream.body))
			}
			if want := upstream.header.Get("ETag"); etag != want {
				t.Errorf("skewgate's ETag %s, %s's %s", etag, s.Name, want)
			}
		}
		revalidated := mustDo(t, client, http.MethodGet, gw.URL+"/apis", http.Header{"Accept": {acceptAggregated}, "If-None-Match": {etag}}, nil)
		if revalidated.status != http.StatusNotModified || len(revalidated.body) != 0 {
			t.Errorf("revalidating /apis with its ETag = %d with %d bytes, want 304 and no body", revalidated.status, len(revalidated.body))
		}
	})

	t.Run("profile=nopeer reaches one server's own view", func(t *testing.T) {
		served := map[int]int{}
		for range 2 * len(servers) {
			through := getDiscovery(t, client, gw.URL+"/apis", acceptNoPeer)
			member := slices.IndexFunc(ownAPIs, func(own response) bool {
				return bytes.Equal(own.body, through.body) && own.header.Get("ETag") == through.header.Get("ETag")
			})
			if member < 0 {
				t.Fatalf("nopeer /apis through skewgate (%d bytes, ETag %s) is no member's own document",
					len(through.body), through.header.Get("ETag"))
			}
			served[member]++
		}
		t.Logf("nopeer /apis answered by servers %v", served)
	})

	t.Run("group version only some servers serve", func(t *testing.T) {
		path := "/apis/" + extraGroupVersion
		for _, i := range []int{old, upgraded} {
			if resp := mustDo(t, direct, http.MethodGet, servers[i].URL+path, nil, nil); resp.status != http.StatusNotFound {
				t.Fatalf("direct GET %s on %s = %d, want 404: upstream does not proxy this document", path, servers[i].Name, resp.status)
			}
		}
		for range skewedTrafficRounds * len(servers) {
			resp := mustDo(t, client, http.MethodGet, gw.URL+path, nil, nil)
			if resp.status != http.StatusOK {
				t.Fatalf("GET %s through skewgate = %d, want 200: %s", path, resp.status, resp.body)
			}
			var list metav1.APIResourceList
			if err := json.Unmarshal(resp.body, &list); err != nil {
				t.Fatalf("decoding %s: %v", path, err)
			}
			if list.GroupVersion != extraGroupVersion || !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "leasecandidates" }) {
				t.Fatalf("GET %s through skewgate returned %+v", path, list)
			}
		}
	})

	t.Run("client-go discovery", func(t *testing.T) {
		dc, err := discovery.NewDiscoveryClientForConfig(gw.restConfig())
		if err != nil {
			t.Fatal(err)
		}
		_, lists, err := dc.ServerGroupsAndResources()
		if err != nil {
			t.Fatalf("ServerGroupsAndResources through skewgate: %v", err)
		}
		got := resourceSet{}
		for _, l := range lists {
			for _, r := range l.APIResources {
				got.add(l.GroupVersion, r.Name)
			}
		}
		if missing := union.missingFrom(got); len(missing) > 0 {
			t.Errorf("client-go discovery through skewgate lacks %d resources some server serves: %v", len(missing), missing)
		}
	})
}

// getDiscovery GETs an aggregated discovery document and requires a 200 of the right type.
func getDiscovery(t *testing.T, client *http.Client, url, accept string) response {
	t.Helper()
	resp := mustDo(t, client, http.MethodGet, url, http.Header{"Accept": {accept}}, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("GET %s (Accept %s) = %d: %s", url, accept, resp.status, resp.body)
	}
	if ct := resp.header.Get("Content-Type"); ct != acceptAggregated {
		t.Fatalf("GET %s (Accept %s) answered Content-Type %q", url, accept, ct)
	}
	return resp
}

// resourceSet holds group versions ("v1", "apps/v1") and the top-level resources of each.
type resourceSet map[string]map[string]bool

func (s resourceSet) add(groupVersion, resource string) {
	if s[groupVersion] == nil {
		s[groupVersion] = map[string]bool{}
	}
	s[groupVersion][resource] = true
}

func (s resourceSet) has(groupVersion, resource string) bool { return s[groupVersion][resource] }

// parse adds every resource of an aggregated discovery document.
func (s resourceSet) parse(doc []byte) error {
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(doc, &list); err != nil {
		return fmt.Errorf("decoding an aggregated discovery document: %w", err)
	}
	for _, g := range list.Items {
		for _, v := range g.Versions {
			gv := v.Version
			if g.Name != "" {
				gv = g.Name + "/" + v.Version
			}
			for _, r := range v.Resources {
				s.add(gv, r.Resource)
			}
		}
	}
	return nil
}

func (s resourceSet) addDocument(t *testing.T, doc []byte) {
	t.Helper()
	if err := s.parse(doc); err != nil {
		t.Fatal(err)
	}
}

// missingFrom lists the resources of s that other lacks, sorted.
func (s resourceSet) missingFrom(other resourceSet) []string {
	var missing []string
	for gv, resources := range s {
		for r := range resources {
			if !other.has(gv, r) {
				missing = append(missing, gv+"/"+r)
			}
		}
	}
	slices.Sort(missing)
	return missing
}

func (s resourceSet) sameAs(other resourceSet) error {
	missing, extra := s.missingFrom(other), other.missingFrom(s)
	if len(missing) == 0 && len(extra) == 0 {
		return nil
	}
	return fmt.Errorf("lacks %v, has extra %v (group versions: %v)", missing, extra, slices.Sorted(maps.Keys(other)))
}

// firstDifference describes where two documents first differ.
func firstDifference(a, b []byte) string {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			from := max(0, i-60)
			return fmt.Sprintf("; first difference at byte %d: %q versus %q", i, a[from:min(len(a), i+60)], b[from:min(len(b), i+60)])
		}
	}
	return fmt.Sprintf("; one is a prefix of the other (%d and %d bytes)", len(a), len(b))
}
