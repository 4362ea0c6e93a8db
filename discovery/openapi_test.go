// An external test: discoverytest and fixtures build on discovery, so a
// test of the package that uses them cannot be inside it.
package discovery_test

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"k8s.io/kube-openapi/pkg/handler3"
	"k8s.io/kube-openapi/pkg/spec3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// upstreamOpenAPI is kube-openapi's handler3 service, which kube-apiserver
// serves /openapi/v3 with, holding one small document per path; a document's
// content is its title, so equal titles give equal hashes.
func upstreamOpenAPI(titles map[string]string) *handler3.OpenAPIService {
	svc := handler3.NewOpenAPIService()
	for path, title := range titles {
		svc.UpdateGroupVersion(path, &spec3.OpenAPI{Version: "3.0.0", Info: &spec.Info{InfoProps: spec.InfoProps{Title: title}}})
	}
	return svc
}

func serveUpstream(t testing.TB, h http.HandlerFunc, target string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("GET", target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h(rec, req)
	return rec
}

// upstreamIndex is what the service answers GET /openapi/v3 with.
func upstreamIndex(t testing.TB, svc *handler3.OpenAPIService) (body []byte, etag string) {
	t.Helper()
	rec := serveUpstream(t, svc.HandleDiscovery, "/openapi/v3", nil)
	if rec.Code != 200 {
		t.Fatalf("upstream /openapi/v3: %d", rec.Code)
	}
	return rec.Body.Bytes(), rec.Header().Get("Etag")
}

func TestParseOpenAPIIndexReadsWhatKubeOpenAPIServes(t *testing.T) {
	titles := map[string]string{"apis/apps/v1": "apps", "api/v1": "core", "version": "version", ".well-known/openid-configuration": "oidc"}
	body, _ := upstreamIndex(t, upstreamOpenAPI(titles))
	paths, err := ParseOpenAPIIndex(body)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range paths {
		if len(p.Hash) != 128 {
			t.Errorf("%s: hash %q; want kube-openapi's 128 hex digits", p.Path, p.Hash)
		}
		if p.URL() != "/openapi/v3/"+p.Path+"?hash="+p.Hash {
			t.Errorf("%s: URL %q", p.Path, p.URL())
		}
		got = append(got, p.Path)
	}
	if want := []string{".well-known/openid-configuration", "api/v1", "apis/apps/v1", "version"}; !slices.Equal(got, want) {
		t.Errorf("paths %q; want %q (sorted)", got, want)
	}
}

func TestParseOpenAPIIndexRejectsWhatItCannotRouteBy(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"not JSON", `{"paths":`, "not valid JSON"},
		{"no paths", `{}`, "paths: must be an object, got nothing"},
		{"paths an array", `{"paths":[]}`, "paths: must be an object, got []"},
		{"URL not a string", `{"paths":{"api/v1":{"serverRelativeURL":1}}}`, `paths["api/v1"]: serverRelativeURL: must be a string, got 1`},
		{"URL of another path", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=AB"}}}`, `is not /openapi/v3/api/v1?hash=<hash>`},
		{"no hash", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash="}}}`, `is not /openapi/v3/api/v1?hash=<hash>`},
		{"hash with a separator", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=AB&x=1"}}}`, `"api/v1": hash "AB&x=1": letters and digits only`},
		{"absolute path", `{"paths":{"/api/v1":{"serverRelativeURL":"/openapi/v3//api/v1?hash=AB"}}}`, `not a path below /openapi/v3/`},
		{"path with a query", `{"paths":{"api?v1":{"serverRelativeURL":"/openapi/v3/api?v1?hash=AB"}}}`, `not a path below /openapi/v3/`},
		{"path with a quote", `{"paths":{"api\"v1":{"serverRelativeURL":"/openapi/v3/api\"v1?hash=AB"}}}`, `not a path below /openapi/v3/`},
		{"path with a space", `{"paths":{"api v1":{"serverRelativeURL":"/openapi/v3/api v1?hash=AB"}}}`, `character ' ' is not allowed`},
		{"path listed twice", `{"paths":{"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=AB"},"api/v1":{"serverRelativeURL":"/openapi/v3/api/v1?hash=CD"}}}`, `"api/v1": listed twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseOpenAPIIndex([]byte(c.doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v; want one containing %q", err, c.want)
			}
		})
	}
}

func TestSnapshotRejectsABadOpenAPIIndexNamingTheServer(t *testing.T) {
	snap, err := ParseSnapshot(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane()))
	if err != nil {
		t.Fatal(err)
	}
	snap.Servers[1].OpenAPI = []OpenAPIPath{{Path: "api/v1", Hash: "AB&CD"}}
	const want = `snapshot: servers[1] (apiserver-bbb): openapiV3: "api/v1": hash "AB&CD": letters and digits only`
	if _, err := ParseSnapshot(snap.AppendJSON(nil)); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("parsing: error %v; want one containing %q", err, want)
	}
	if _, err := NewSnapshot(1, "", snap.Servers); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("building: error %v; want one containing %q", err, want)
	}
}

// openAPIServer is one server of a random control plane: its discovery and
// the titles of its OpenAPI documents (the hashes follow from them).
type openAPIServer struct {
	discoverytest.Server
	titles map[string]string
}

var openAPIVersions = []string{"v1.35.4", "v1.36.3", "v1.36.3", "v1.37.2", "v1.9.0"}

// randomOpenAPIControlPlane builds 1 to 6 servers publishing random subsets of
// the paths a real server lists. Servers of one version mostly publish the
// same documents; some publish their own (another feature set).
func randomOpenAPIControlPlane(t testing.TB, rng *rand.Rand) ([]openAPIServer, string) {
	groups := map[string][]string{"/v1": {"pods"}, "apps/v1": {"deployments"}, "batch/v1": {"jobs"},
		"coordination.k8s.io/v1alpha2": {"leasecandidates"}, "storage.k8s.io/v1beta1": {"volumeattributesclasses"},
		"admissionregistration.k8s.io/v1": {"mutatingadmissionpolicies"}}
	universe := discoverytest.OpenAPIPaths(groups)
	n := 1 + rng.IntN(6)
	servers := make([]openAPIServer, n)
	for i := range servers {
		version := openAPIVersions[rng.IntN(len(openAPIVersions))]
		s := openAPIServer{Server: discoverytest.Server{
			ID: fmt.Sprintf("apiserver-%02d", rng.IntN(100)*10+i), Cluster: fmt.Sprintf("kube-%d", i),
			Version: version, Healthy: rng.IntN(4) > 0, Groups: map[string][]string{"/v1": {"pods"}},
		}, titles: map[string]string{}}
		own := rng.IntN(5) == 0
		for _, path := range universe {
			if rng.IntN(3) == 0 {
				continue
			}
			s.titles[path] = path + "@" + version
			if own {
				s.titles[path] += "@" + s.ID
			}
		}
		servers[i] = s
	}
	preferred := ""
	if rng.IntN(3) == 0 {
		preferred = servers[rng.IntN(n)].ID
	}
	return servers, preferred
}

// openAPIIndexOf builds the index of servers in the order given, each
// carrying the index kube-openapi serves for its documents.
func openAPIIndexOf(t testing.TB, servers []openAPIServer, preferred string) *Index {
	t.Helper()
	plain := make([]discoverytest.Server, len(servers))
	for i, s := range servers {
		plain[i] = s.Server
		body, _ := upstreamIndex(t, upstreamOpenAPI(s.titles))
		paths, err := ParseOpenAPIIndex(body)
		if err != nil {
			t.Fatal(err)
		}
		plain[i].OpenAPI = map[string]string{}
		for _, p := range paths {
			plain[i].OpenAPI[p.Path] = p.Hash
		}
	}
	raw := discoverytest.SnapshotJSON(1, plain)
	if preferred != "" {
		raw = discoverytest.Prefer(raw, preferred)
	}
	snap, err := ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// expectedChoice is the documented rule, computed independently: among the
// healthy servers publishing the path (all of them while none is healthy),
// the preferred server, else the newest version, else the lowest ID.
func expectedChoice(ix *Index, path string) string {
	var publishing, healthy []*Server
	for i := range ix.Servers() {
		s := &ix.Servers()[i]
		if slices.ContainsFunc(s.OpenAPI, func(p OpenAPIPath) bool { return p.Path == path }) {
			publishing = append(publishing, s)
			if s.Healthy {
				healthy = append(healthy, s)
			}
		}
	}
	if len(healthy) > 0 {
		publishing = healthy
	}
	slices.SortFunc(publishing, func(a, b *Server) int {
		if (a.ID == ix.Snapshot().Preferred) != (b.ID == ix.Snapshot().Preferred) {
			if a.ID == ix.Snapshot().Preferred {
				return -1
			}
			return 1
		}
		var va, vb [3]int
		fmt.Sscanf(a.Version, "v%d.%d.%d", &va[0], &va[1], &va[2])
		fmt.Sscanf(b.Version, "v%d.%d.%d", &vb[0], &vb[1], &vb[2])
		if c := slices.Compare(vb[:], va[:]); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return publishing[0].ID
}

func hashOf(s *Server, path string) string {
	for i := range s.OpenAPI {
		if s.OpenAPI[i].Path == path {
			return s.OpenAPI[i].Hash
		}
	}
	return ""
}

// The merged index, as seeded random control planes show: every path any
// server lists is in it, each pointing at the document of the server the
// documented rule chooses, encoded byte for byte (and tagged) as kube-openapi
// serves an index of exactly those documents; a request for the URL goes to a
// server that published that hash, a request without a hash to the chosen
// server; and none of it depends on the order the servers come in.
func TestMergedOpenAPIIndexIsKubeOpenAPIsIndexOfTheChosenDocuments(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261201, 11))
	for iteration := range 150 {
		servers, preferred := randomOpenAPIControlPlane(t, rng)
		ix := openAPIIndexOf(t, servers, preferred)
		doc := ix.Decide(&Request{Method: "GET", Path: "/openapi/v3"}, 0).Document
		union := map[string]bool{}
		for i := range ix.Servers() {
			for _, p := range ix.Servers()[i].OpenAPI {
				union[p.Path] = true
			}
		}
		if doc == nil {
			t.Fatalf("iteration %d: no merged index", iteration)
		}
		paths, err := ParseOpenAPIIndex(doc.Body)
		if err != nil {
			t.Fatalf("iteration %d: merged index does not parse: %v", iteration, err)
		}
		oracle := map[string]string{}
		for _, p := range paths {
			delete(union, p.Path)
			chosenID := expectedChoice(ix, p.Path)
			chosen := slices.IndexFunc(ix.Servers(), func(s Server) bool { return s.ID == chosenID })
			if got := p.Hash; got != hashOf(&ix.Servers()[chosen], p.Path) {
				t.Fatalf("iteration %d: %s points at hash %.12s…, not %s's", iteration, p.Path, got, chosenID)
			}
			oracle[p.Path] = servers[slices.IndexFunc(servers, func(s openAPIServer) bool { return s.ID == chosenID })].titles[p.Path]

			hashless := ix.Decide(&Request{Method: "GET", Path: "/openapi/v3/" + p.Path}, uint64(iteration))
			if ix.Healthy() != 0 && !ix.Servers()[chosen].Healthy {
				// Only servers that are down publish it.
				if hashless.Action != Unavailable {
					t.Fatalf("iteration %d: GET %s without hash, published only by servers that are down: %v; want Unavailable", iteration, p.Path, hashless.Action)
				}
			} else if hashless.Action != Route || hashless.Server != chosen {
				t.Fatalf("iteration %d: GET %s without hash: %v to %d; want Route to %s", iteration, p.Path, hashless.Action, hashless.Server, chosenID)
			}
			hashed := ix.Decide(&Request{Method: "GET", Path: "/openapi/v3/" + p.Path, Query: "hash=" + p.Hash}, uint64(iteration))
			if ix.Healthy() != 0 && !ix.Servers()[chosen].Healthy {
				if hashed.Action != Unavailable {
					t.Fatalf("iteration %d: GET %s, published only by servers that are down: %v; want Unavailable", iteration, p.URL(), hashed.Action)
				}
			} else if hashed.Action != Route || hashOf(&ix.Servers()[hashed.Server], p.Path) != p.Hash {
				t.Fatalf("iteration %d: GET %s: %v to %d, which did not publish the hash", iteration, p.URL(), hashed.Action, hashed.Server)
			}
		}
		if len(union) > 0 {
			t.Fatalf("iteration %d: merged index lacks %v", iteration, union)
		}
		wantBody, wantETag := upstreamIndex(t, upstreamOpenAPI(oracle))
		if string(doc.Body) != string(wantBody) || doc.ETag != wantETag {
			t.Fatalf("iteration %d: merged index\n%s %s\nkube-openapi's index of the chosen documents\n%s %s", iteration, doc.Body, doc.ETag, wantBody, wantETag)
		}

		shuffled := slices.Clone(servers)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		other := openAPIIndexOf(t, shuffled, preferred).Decide(&Request{Method: "GET", Path: "/openapi/v3"}, 0).Document
		if string(other.Body) != string(doc.Body) || other.ETag != doc.ETag {
			t.Fatalf("iteration %d: the servers' order changed the merged index", iteration)
		}
	}
}

// Every document a server published is reachable at its URL on a server that
// publishes exactly it, and only healthy ones are used while any server is.
func TestOpenAPIDocumentGoesToAHealthyServerThatPublishedItsHash(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261201, 12))
	for iteration := range 150 {
		servers, preferred := randomOpenAPIControlPlane(t, rng)
		ix := openAPIIndexOf(t, servers, preferred)
		anyHealthy := ix.Healthy() != 0
		for i := range ix.Servers() {
			for _, p := range ix.Servers()[i].OpenAPI {
				d := ix.Decide(&Request{Method: "GET", Path: "/openapi/v3/" + p.Path, Query: "hash=" + p.Hash}, rng.Uint64())
				healthyPublisher := false
				for j := range ix.Servers() {
					healthyPublisher = healthyPublisher || ix.Servers()[j].Healthy && hashOf(&ix.Servers()[j], p.Path) == p.Hash
				}
				switch {
				case d.Action == Route && hashOf(&ix.Servers()[d.Server], p.Path) == p.Hash:
					if anyHealthy && !ix.Servers()[d.Server].Healthy {
						t.Fatalf("iteration %d: %s sent to unhealthy %s", iteration, p.URL(), ix.Servers()[d.Server].ID)
					}
				case healthyPublisher || !anyHealthy:
					t.Fatalf("iteration %d: %s: %v to %d; a server that published it can answer", iteration, p.URL(), d.Action, d.Server)
				}
			}
		}
	}
}

// A client holding a hash no server publishes any more (the snapshot
// changed) is sent to the chosen server, which redirects it, as kube-apiserver
// does for any stale hash, to the URL of the document it has now; that URL
// then goes to a server that published it.
func TestStaleOpenAPIHashIsRedirectedByTheChosenServer(t *testing.T) {
	titles := map[string]string{"apis/apps/v1": "apps@v1.36.3"}
	servers := []openAPIServer{
		{discoverytest.Server{ID: "apiserver-a", Cluster: "kube-a", Version: "v1.36.3", Healthy: true, Groups: map[string][]string{"/v1": {"pods"}}}, titles},
		{discoverytest.Server{ID: "apiserver-b", Cluster: "kube-b", Version: "v1.35.4", Healthy: true, Groups: map[string][]string{"/v1": {"pods"}}}, map[string]string{"apis/apps/v1": "apps@v1.35.4"}},
	}
	ix := openAPIIndexOf(t, servers, "")
	stale := strings.Repeat("0", 128)
	d := ix.Decide(&Request{Method: "GET", Path: "/openapi/v3/apis/apps/v1", Query: "hash=" + stale}, 1)
	if d.Action != Route || ix.Servers()[d.Server].ID != "apiserver-a" {
		t.Fatalf("stale hash: %v to %d; want the chosen server apiserver-a", d.Action, d.Server)
	}
	rec := serveUpstream(t, upstreamOpenAPI(titles).HandleGroupVersion, "/openapi/v3/apis/apps/v1?hash="+stale, http.Header{"Accept": {"application/json"}})
	location, err := url.Parse(rec.Header().Get("Location"))
	if rec.Code != http.StatusMovedPermanently || err != nil {
		t.Fatalf("upstream answers a stale hash with %d %q", rec.Code, rec.Header().Get("Location"))
	}
	again := ix.Decide(&Request{Method: "GET", Path: location.Path, Query: location.RawQuery}, 2)
	if again.Action != Route || ix.Servers()[again.Server].ID != "apiserver-a" || location.Query().Get("hash") != hashOf(&ix.Servers()[0], "apis/apps/v1") {
		t.Fatalf("redirect target %s: %v to %d", location, again.Action, again.Server)
	}
}

func TestOpenAPIRequestsOutsideTheIndexAreAnsweredAsBefore(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	servers[2].OpenAPI = map[string]string{"apis/coordination.k8s.io/v1alpha2": "AAAA", "version": "BBBB"}
	servers[2].Healthy = false
	snap, err := ParseSnapshot(discoverytest.SnapshotJSON(1, servers))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  Request
		want Action
	}{
		// Only kube-c publishes it, and kube-c is down while others are up.
		{"listed path whose publishers are all down", Request{Method: "GET", Path: "/openapi/v3/apis/coordination.k8s.io/v1alpha2"}, Unavailable},
		{"unlisted group version falls back to discovery", Request{Method: "GET", Path: "/openapi/v3/apis/apps/v1"}, Forward},
		{"write", Request{Method: "POST", Path: "/openapi/v3"}, Forward},
		{"index", Request{Method: "GET", Path: "/openapi/v3"}, ServeDocument},
		{"index revalidated", Request{Method: "HEAD", Path: "/openapi/v3", IfNoneMatch: ix.Decide(&Request{Method: "GET", Path: "/openapi/v3"}, 0).Document.ETag}, NotModified},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d := ix.Decide(&c.req, 0); d.Action != c.want {
				t.Fatalf("%v; want %v", d.Action, c.want)
			}
		})
	}
	plain, err := NewIndex(mustSnapshot(t, discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane())))
	if err != nil {
		t.Fatal(err)
	}
	if d := plain.Decide(&Request{Method: "GET", Path: "/openapi/v3"}, 0); d.Action != Forward {
		t.Errorf("index with no server's index in the snapshot: %v; want Forward (the server answers)", d.Action)
	}
}

func mustSnapshot(t testing.TB, raw []byte) *Snapshot {
	t.Helper()
	snap, err := ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// /openapi/v2 is one document of every group version a server serves, so it
// goes to the server that serves the most of them, and always the same one:
// clients revalidate it by ETag, which differs per server.
func TestOpenAPIV2GoesToTheServerServingTheMostGroupVersions(t *testing.T) {
	for _, c := range []struct {
		name    string
		mutate  func([]discoverytest.Server)
		prefer  string
		wantIDs []string
	}{
		{"the server with the alpha API", nil, "", []string{"apiserver-ccc"}},
		{"the next best while it is down", func(s []discoverytest.Server) { s[2].Healthy = false }, "", []string{"apiserver-bbb"}},
		{"the preferred among equals", func(s []discoverytest.Server) { s[2].Groups = s[1].Groups }, "apiserver-ccc", []string{"apiserver-ccc"}},
		{"the lowest ID among equals", func(s []discoverytest.Server) { s[2].Groups = s[1].Groups }, "", []string{"apiserver-bbb"}},
		{"the newest among equals", func(s []discoverytest.Server) { s[1].Groups = s[0].Groups; s[2].Groups = s[0].Groups }, "", []string{"apiserver-bbb"}},
		{"any while none is healthy", func(s []discoverytest.Server) {
			for i := range s {
				s[i].Healthy = false
			}
		}, "", []string{"apiserver-ccc"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			servers := discoverytest.SkewedControlPlane()
			if c.mutate != nil {
				c.mutate(servers)
			}
			raw := discoverytest.SnapshotJSON(1, servers)
			if c.prefer != "" {
				raw = discoverytest.Prefer(raw, c.prefer)
			}
			ix, err := NewIndex(mustSnapshot(t, raw))
			if err != nil {
				t.Fatal(err)
			}
			for pick := range uint64(4) {
				d := ix.Decide(&Request{Method: "GET", Path: "/openapi/v2", Accept: "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}, pick)
				if d.Action != Route || !slices.Contains(c.wantIDs, ix.Servers()[d.Server].ID) {
					t.Fatalf("pick %d: %v to %d; want Route to %v", pick, d.Action, d.Server, c.wantIDs)
				}
			}
		})
	}
}

func TestOpenAPIDecisionsDoNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261201, 14))
	servers, _ := randomOpenAPIControlPlane(t, rng)
	for len(servers) < 2 {
		servers, _ = randomOpenAPIControlPlane(t, rng)
	}
	ix := openAPIIndexOf(t, servers, "")
	p := ix.Servers()[0].OpenAPI[0]
	for _, req := range []Request{
		{Method: "GET", Path: "/openapi/v3"},
		{Method: "GET", Path: "/openapi/v3/" + p.Path, Query: "hash=" + p.Hash},
		{Method: "GET", Path: "/openapi/v3/" + p.Path},
		{Method: "GET", Path: "/openapi/v2"},
	} {
		if n := testing.AllocsPerRun(100, func() { ix.Decide(&req, 1) }); n != 0 {
			t.Errorf("%s?%s: %v allocations per Decide; want 0", req.Path, req.Query, n)
		}
	}
}
