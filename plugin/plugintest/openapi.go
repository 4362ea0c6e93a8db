package plugintest

import (
	"crypto/sha512"
	"fmt"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// withOpenAPI gives each server the /openapi/v3 index a real server of its
// version lists: one document per group version it serves plus the
// non-resource paths, each hash following from the path and the version.
func withOpenAPI(servers []discoverytest.Server) []discoverytest.Server {
	for i := range servers {
		servers[i].OpenAPI = map[string]string{}
		for _, path := range discoverytest.OpenAPIPaths(servers[i].Groups) {
			servers[i].OpenAPI[path] = fmt.Sprintf("%X", sha512.Sum512([]byte(path+"@"+servers[i].Version)))
		}
	}
	return servers
}

func mergedOpenAPIIndexIsServedAndItsURLsReachTheirPublishers(t *testing.T, h Harness) {
	servers := withOpenAPI(discoverytest.SkewedControlPlane())
	var calls []HTTPCall
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, servers), HTTPCalls: func(c HTTPCall) HTTPCallResponse {
		calls = append(calls, c)
		return allow(c)
	}})
	want := mergedIndex(t, servers).Decide(&discovery.Request{Method: "GET", Path: "/openapi/v3"}, 0).Document

	res := p.Request("GET", "/openapi/v3", [2]string{"accept", "application/json"})
	if res.Local == nil || res.Local.Status != 200 || string(res.Local.Body) != string(want.Body) {
		t.Fatalf("GET /openapi/v3: %+v; want 200 with the merged index", res.Local)
	}
	for name, v := range map[string]string{"content-type": "application/json", "etag": want.ETag, "vary": "Accept", "cache-control": ""} {
		if got := res.Local.Header(name); got != v {
			t.Errorf("%s = %q; want %q", name, got, v)
		}
	}
	if len(calls) != 1 || calls[0].Header(":path") != "/openapi/v3" {
		t.Errorf("authorization calls %+v; want one GET /openapi/v3 with the client's credentials", calls)
	}
	res = p.Request("GET", "/openapi/v3", [2]string{"if-none-match", want.ETag})
	if res.Local == nil || res.Local.Status != 304 || res.Local.Header("etag") != want.ETag {
		t.Errorf("If-None-Match with the current ETag: %+v; want 304", res.Local)
	}

	paths, err := discovery.ParseOpenAPIIndex(res0Body(t, want))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want.Body), `"apis/coordination.k8s.io/v1alpha2"`) {
		t.Fatalf("merged index lacks the path only kube-c lists")
	}
	for _, entry := range paths {
		res := p.Request("GET", entry.URL())
		cluster, _ := res.Header(RoutingHeader)
		published := false
		for _, s := range servers {
			published = published || s.Cluster == cluster && s.OpenAPI[entry.Path] == entry.Hash
		}
		if !res.Forwarded || !published {
			t.Errorf("GET %s routed to %q, which did not publish that hash", entry.URL(), cluster)
		}
		if _, marked := res.Header(PeerProxied); marked {
			t.Errorf("GET %s carries the peer-proxied mark; only resource requests do", entry.URL())
		}
	}
	for path, want := range map[string]string{
		// Only kube-c lists it; without a hash the chosen server answers.
		"/openapi/v3/apis/coordination.k8s.io/v1alpha2": "kube-c",
		// The newest version's document, from the lower ID of the two.
		"/openapi/v3/apis/apps/v1?hash=" + strings.Repeat("0", 128): "kube-b",
		// kube-c serves every group version some server serves.
		"/openapi/v2": "kube-c",
	} {
		if got, _ := p.Request("GET", path).Header(RoutingHeader); got != want {
			t.Errorf("GET %s routed to %q; want %q", path, got, want)
		}
	}
}

func res0Body(t *testing.T, d *discovery.Document) []byte {
	t.Helper()
	if d == nil {
		t.Fatal("no merged index")
	}
	return d.Body
}
