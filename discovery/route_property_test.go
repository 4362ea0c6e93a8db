package discovery

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// routingPlane is an index to decide against, under one health state and
// preference.
type routingPlane struct {
	name string
	ix   *Index
}

// withHealthAndPreference is snap's servers under random health (none
// healthy now and then) and draining and, in turn, no preferred server or a
// random one.
func withHealthAndPreference(t testing.TB, rng *rand.Rand, snap *Snapshot) *Index {
	t.Helper()
	servers := slices.Clone(snap.Servers)
	allDown := rng.IntN(8) == 0
	for i := range servers {
		servers[i].Healthy = !allDown && rng.IntN(3) > 0
		servers[i].Draining = rng.IntN(4) == 0
	}
	preferred := ""
	if rng.IntN(2) == 0 {
		preferred = servers[rng.IntN(len(servers))].ID
	}
	s, err := NewSnapshot(snap.Generation, preferred, servers)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndexWith(s, IndexOptions{SchemaSkewWritesOnly: rng.IntN(2) == 0})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// withOpenAPI gives each captured server an OpenAPI index of its group
// versions; servers of one version publish the same hashes, as real servers
// serving the same documents do.
func withOpenAPI(snap *Snapshot) *Snapshot {
	c := *snap
	c.Servers = slices.Clone(snap.Servers)
	for i := range c.Servers {
		s := &c.Servers[i]
		s.OpenAPI = []OpenAPIPath{}
		for _, list := range []*GroupList{&s.Core, &s.APIs} {
			for _, g := range list.Items {
				for _, v := range g.Versions {
					path := "apis/" + g.Name() + "/" + v.Version
					if g.Name() == "" {
						path = "api/" + v.Version
					}
					s.OpenAPI = append(s.OpenAPI, OpenAPIPath{Path: path, Hash: fmt.Sprintf("%X", len(path)*31+len(s.Version))})
				}
			}
		}
		slices.SortFunc(s.OpenAPI, func(a, b OpenAPIPath) int { return cmpString(a.Path, b.Path) })
		s.OpenAPI = slices.CompactFunc(s.OpenAPI, func(a, b OpenAPIPath) bool { return a.Path == b.Path })
	}
	return &c
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// routingPlanes are the captured servers and seeded random control planes,
// each under several health states and preferences.
func routingPlanes(t testing.TB, rng *rand.Rand) []routingPlane {
	captured := withOpenAPI(capturedSnapshot(t, 1, "v1.35.4", "v1.36.3", "v1.37.2"))
	var planes []routingPlane
	for i := range 12 {
		planes = append(planes, routingPlane{fmt.Sprintf("captured %d", i), withHealthAndPreference(t, rng, captured)})
	}
	for i := range 40 {
		planes = append(planes, routingPlane{fmt.Sprintf("random %d", i), withHealthAndPreference(t, rng, randomSnapshot(t, rng))})
	}
	return planes
}

// randomRequest is a request for what the index's servers serve, or for
// something near it: resources with and without namespace, name and
// subresource, the watch and proxy prefixes, the legacy and aggregated
// discovery documents, OpenAPI documents with and without a published hash,
// and paths no API server routes.
func randomRequest(rng *rand.Rand, ix *Index) Request {
	type gvr struct{ group, version, resource string }
	var known []gvr
	var hashes []OpenAPIPath
	for _, s := range ix.Servers() {
		for _, list := range []*GroupList{&s.Core, &s.APIs} {
			for _, g := range list.Items {
				for _, v := range g.Versions {
					known = append(known, gvr{g.Name(), v.Version, ""})
					for _, r := range v.Resources {
						known = append(known, gvr{g.Name(), v.Version, r.Resource})
					}
				}
			}
		}
		hashes = append(hashes, s.OpenAPI...)
	}
	known = append(known, gvr{"example.com", "v1", "widgets"}, gvr{"", "v1", "nothings"})
	pickOf := func(options ...string) string { return options[rng.IntN(len(options))] }
	k := known[rng.IntN(len(known))]
	prefix := "/apis/" + k.group + "/" + k.version
	if k.group == "" {
		prefix = "/api/" + k.version
	}
	req := Request{Method: pickOf("GET", "GET", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}
	switch rng.IntN(8) {
	case 0, 1, 2:
		req.Path = prefix + pickOf("", "/namespaces/ns") + "/" + k.resource + pickOf("", "/name", "/name/status", "/name/exec", "/name/log/x")
	case 3:
		req.Path = prefix + pickOf("/watch", "/proxy") + pickOf("", "/namespaces/ns") + "/" + k.resource + pickOf("", "/name")
	case 4:
		req.Path = pickOf(prefix, prefix+"/", "/apis/"+k.group, "/apis", "/api", "/api/", "/apis/")
	case 5:
		req.Path = pickOf("/openapi/v2", "/openapi/v3", "/openapi/v3/"+prefix[1:], "/openapi/v3/apis/"+k.group)
		if len(hashes) > 0 && rng.IntN(2) == 0 {
			h := hashes[rng.IntN(len(hashes))]
			req.Path = "/openapi/v3/" + h.Path
			req.Query = "hash=" + pickOf(h.Hash, "0", "")
		}
	case 6:
		req.Path = pickOf("/healthz", "/readyz", "/version", "/", "", "/api/v1/watch", "/apis/"+k.group+"/"+k.version+"/watch")
	default:
		req.Path = "/apis/" + pickOf("example.com", k.group, "") + "/" + pickOf("v1", k.version, "v9") + "/" + pickOf(k.resource, "widgets", "")
	}
	if req.Query == "" && rng.IntN(2) == 0 {
		req.Query = randomFieldSelectorQuery(rng, ix)
	}
	req.Accept = pickOf("", "application/json", acceptAggregatedForTest, acceptAggregatedForTest+";profile=nopeer", "application/vnd.kubernetes.protobuf")
	req.IfNoneMatch = pickOf("", ix.MergedAPIs().ETag, `"x"`)
	req.PeerProxied = rng.IntN(10) == 0
	return req
}

// randomFieldSelectorQuery is a query whose field selector uses labels the
// index's servers list, labels none lists, or is malformed.
func randomFieldSelectorQuery(rng *rand.Rand, ix *Index) string {
	labels := []string{"metadata.name", "spec.unknown", "", "a%2Cb"}
	for _, f := range ix.fields {
		for _, l := range f.labels {
			labels = append(labels, l.label)
		}
	}
	var q string
	for i := range rng.IntN(4) {
		if i > 0 {
			q += []string{",", "%2C", "%5C,"}[rng.IntN(3)]
		}
		q += labels[rng.IntN(len(labels))] + []string{"%3D", "!=", "%3D%3D", ""}[rng.IntN(4)] + "x"
	}
	return []string{"fieldSelector=", "limit=5&fieldSelector=", "watch=1&fieldSelector="}[rng.IntN(3)] + q
}

const acceptAggregatedForTest = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// reachable is where decision d sends the request: its server, every
// routable server but the excluded ones when it leaves the choice to the
// gateway's balancing, nowhere when it answers itself.
func reachable(ix *Index, d Decision, excluded ServerSet) ServerSet {
	switch d.Action {
	case Route:
		return 1 << uint(d.Server)
	case Forward:
		return ix.Routable() &^ excluded
	}
	return 0
}

// decideExcluding is Decide with the servers in excluded left out, as
// Capable leaves them out for a retry.
func decideExcluding(ix *Index, req *Request, pick uint64, excluded ServerSet) Decision {
	if excluded == 0 {
		return ix.Decide(req, pick)
	}
	d, _ := ix.decide(req, ix.choiceWithout(excluded, pick))
	return d
}

// The routing rule has one owner: over the captured servers and seeded
// random control planes, health states, preferences, requests and sets of
// servers a retry already tried, every server Decide may send a request to
// (for any pick) is in Capable, Capable holds no server Decide would never
// pick, none it excludes, none outside Routable, and, for a request some
// servers serve, none that does not serve it.
func TestCapableIsExactlyWhereDecideMaySendARequest(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261207, 3))
	checked := 0
	for _, plane := range routingPlanes(t, rng) {
		ix := plane.ix
		for range 150 {
			req := randomRequest(rng, ix)
			exclusions := []ServerSet{0, ServerSet(rng.Uint64()) & ix.All(), 1 << uint(rng.IntN(len(ix.Servers())))}
			for _, excluded := range exclusions {
				capable := ix.Capable(&req, excluded)
				var union ServerSet
				for pick := range uint64(MaxServers) {
					to := reachable(ix, decideExcluding(ix, &req, pick, excluded), excluded)
					if to&^capable != 0 {
						t.Fatalf("%s, %+v, excluded %b: pick %d sends to %b, outside Capable %b", plane.name, req, excluded, pick, to, capable)
					}
					union |= to
				}
				if union != capable {
					t.Fatalf("%s, %+v, excluded %b: Capable %b, but Decide sends only to %b", plane.name, req, excluded, capable, union)
				}
				if capable&excluded != 0 || capable&^ix.Routable() != 0 {
					t.Fatalf("%s, %+v: Capable %b holds an excluded (%b) or unroutable (routable %b) server", plane.name, req, capable, excluded, ix.Routable())
				}
				_, _, byOpenAPIIndex := ix.decideOpenAPI(&req, choice{routable: ix.routable, preferred: -1})
				if _, serving, _ := ix.lookup(&req); serving != 0 && !isDiscoveryRoot(&req) && !req.PeerProxied && !byOpenAPIIndex && capable&^serving != 0 {
					t.Fatalf("%s, %+v: Capable %b holds a server that does not serve it (%b do)", plane.name, req, capable, serving)
				}
				checked++
			}
		}
	}
	t.Logf("%d requests, health states and exclusions checked", checked)
}
