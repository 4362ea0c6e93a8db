package discovery

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/fixtures"
)

// randomGroupList is a list of random groups with every optional part of
// the schema present or not, in the form a reader produces (parsed from its
// encoding), without a document of its own.
func randomGroupList(t testing.TB, rng *rand.Rand, core bool) GroupList {
	read, err := ParseGroupList(randomGroupItems(rng, core).AppendJSON(nil, true))
	if err != nil {
		t.Fatal(err)
	}
	read.source = ""
	return read
}

func randomGroupItems(rng *rand.Rand, core bool) GroupList {
	var l GroupList
	groups := rng.IntN(4)
	if core {
		groups = rng.IntN(2)
	}
	if rng.IntN(8) > 0 || groups > 0 {
		l.Items = []Group{}
	}
	words := func(n int, prefix string) []string {
		if n < 0 {
			return nil
		}
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, rng.IntN(50))
		}
		return out
	}
	gvk := func() *GVK {
		if rng.IntN(3) == 0 {
			return nil
		}
		return &GVK{Group: words(1, "g")[0], Version: "v1", Kind: words(1, "Kind")[0]}
	}
	for g := range groups {
		grp := Group{}
		if !core {
			grp.Meta.Name = fmt.Sprintf("group%d.example.io", g)
		}
		if rng.IntN(4) == 0 {
			grp.Meta.Labels = map[string]string{"a": words(1, "x")[0]}
			grp.Meta.Annotations = map[string]string{"note": "<&>"}
		}
		if rng.IntN(6) == 0 {
			grp.Type = TypeMeta{Kind: "APIGroupDiscovery", APIVersion: "apidiscovery.k8s.io/v2"}
		}
		for v := range rng.IntN(3) {
			ver := Version{Version: fmt.Sprintf("v%d", v+1), Freshness: []string{"", "Current", "Stale"}[rng.IntN(3)]}
			if rng.IntN(5) > 0 {
				ver.Resources = []Resource{}
			}
			for r := range rng.IntN(4) {
				res := Resource{
					Resource:         fmt.Sprintf("things%d", r),
					ResponseKind:     gvk(),
					Scope:            []string{"Namespaced", "Cluster"}[rng.IntN(2)],
					SingularResource: fmt.Sprintf("thing%d", r),
					Verbs:            words(rng.IntN(4)-1, "verb"),
					ShortNames:       words(rng.IntN(3)-1, "t"),
					Categories:       words(rng.IntN(3)-1, "all"),
				}
				for s := range rng.IntN(3) {
					res.Subresources = append(res.Subresources, Subresource{
						Subresource: fmt.Sprintf("sub%d", s), ResponseKind: gvk(), Verbs: words(rng.IntN(3)-1, "verb"),
					})
				}
				ver.Resources = append(ver.Resources, res)
			}
			grp.Versions = append(grp.Versions, ver)
		}
		l.Items = append(l.Items, grp)
	}
	return l
}

// randomSnapshot is a valid snapshot of random servers, as NewSnapshot
// accepts it; its group lists carry no document, so they are encoded.
func randomSnapshot(t testing.TB, rng *rand.Rand) *Snapshot {
	servers := make([]Server, 1+rng.IntN(6))
	for i := range servers {
		s := &servers[i]
		s.ID = fmt.Sprintf("apiserver-%c%d", 'a'+i, rng.IntN(1000))
		s.Cluster = fmt.Sprintf("kube-%c", 'a'+i)
		s.Version = fmt.Sprintf("v1.%d.%d", 30+rng.IntN(8), rng.IntN(5))
		s.Healthy = rng.IntN(3) > 0
		s.APIs, s.Core = randomGroupList(t, rng, false), randomGroupList(t, rng, true)
		if n := rng.IntN(5) - 1; n >= 0 {
			s.OpenAPI = []OpenAPIPath{}
			for p := range n {
				s.OpenAPI = append(s.OpenAPI, OpenAPIPath{Path: fmt.Sprintf("apis/group%d.example.io/v1", p), Hash: fmt.Sprintf("%X", rng.Uint64())})
			}
		}
	}
	randomFieldData(rng, servers)
	preferred := ""
	if rng.IntN(3) == 0 {
		preferred = servers[rng.IntN(len(servers))].ID
	}
	snap, err := NewSnapshot(1+rng.Uint64N(1<<63), preferred, servers)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// randomFieldData gives some of the resources the servers serve field
// selectors (on every server that serves one) and missing fields, as
// NewSnapshot accepts them.
func randomFieldData(rng *rand.Rand, servers []Server) {
	var served []groupVersionResource
	for i := range servers {
		for _, list := range []*GroupList{&servers[i].APIs, &servers[i].Core} {
			for _, g := range list.Items {
				for _, v := range g.Versions {
					for _, r := range v.Resources {
						if gvr := (groupVersionResource{g.Name(), v.Version, r.Resource}); !slices.Contains(served, gvr) {
							served = append(served, gvr)
						}
					}
				}
			}
		}
	}
	labels := []string{"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "type"}
	pick := func(from []string, max int) []string {
		var out []string
		for _, s := range from {
			if rng.IntN(2) == 0 && len(out) < max {
				out = append(out, s)
			}
		}
		if len(out) == 0 {
			out = from[:1]
		}
		return out
	}
	for _, gvr := range served {
		key := ResourceKey(gvr.group, gvr.version, gvr.resource)
		selectors, missing := rng.IntN(3) == 0, rng.IntN(3) == 0
		for i := range servers {
			srv := &servers[i]
			if !srv.serves(gvr) {
				continue
			}
			if selectors {
				if srv.FieldSelectors == nil {
					srv.FieldSelectors = map[string][]string{}
				}
				srv.FieldSelectors[key] = pick(labels, len(labels))
			}
			if missing && rng.IntN(2) == 0 {
				if srv.MissingFields == nil {
					srv.MissingFields = map[string][]string{}
				}
				srv.MissingFields[key] = pick([]string{"spec.a", "spec.b.c", "status.d"}, 3)
			}
		}
	}
}

// capturedSnapshot is a snapshot of the servers captured from real
// kube-apiservers, their documents as they served them.
func capturedSnapshot(t testing.TB, generation uint64, versions ...string) *Snapshot {
	t.Helper()
	captured, err := fixtures.Servers("default", versions...)
	if err != nil {
		t.Fatal(err)
	}
	servers := make([]Server, len(captured))
	for i, c := range captured {
		servers[i] = Server{ID: c.ID, Cluster: "kube-" + c.Version, Version: c.Version, Healthy: i%2 == 0}
		if servers[i].APIs, err = ParseGroupList(c.APIs); err != nil {
			t.Fatal(err)
		}
		if servers[i].Core, err = ParseGroupList(c.API); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := NewSnapshot(generation, captured[0].ID, servers)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// withoutDocuments is s with no group list remembering its document, for
// comparing what was read.
func withoutDocuments(s *Snapshot) *Snapshot {
	c := *s
	c.Servers = slices.Clone(s.Servers)
	for i := range c.Servers {
		c.Servers[i].APIs.source, c.Servers[i].Core.source = "", ""
	}
	return &c
}

func checkRoundTrip(t *testing.T, name string, s *Snapshot) {
	t.Helper()
	doc := s.AppendJSON(nil)
	parsed, err := ParseSnapshot(doc)
	if err != nil {
		t.Fatalf("%s: the encoding does not parse: %v\n%.400s", name, err, doc)
	}
	if !reflect.DeepEqual(withoutDocuments(parsed), withoutDocuments(s)) {
		t.Fatalf("%s: parse(encode(s)) differs from s\n%.400s", name, doc)
	}
	if again := parsed.AppendJSON(nil); !bytes.Equal(again, doc) {
		t.Fatalf("%s: encode(parse(encode(s))) differs from encode(s)", name)
	}
}

// The snapshot has one writer and one reader, and they agree: for seeded
// random snapshots and for the captured servers, parsing the encoding gives
// back the snapshot, and encoding that gives the same bytes.
func TestParseOfEncodeIsIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261207, 1))
	for i := range 300 {
		s := randomSnapshot(t, rng)
		checkRoundTrip(t, fmt.Sprintf("random %d", i), s)
		// The same content read from documents encodes as those documents.
		parsed, err := ParseSnapshot(s.AppendJSON(nil))
		if err != nil {
			t.Fatal(err)
		}
		checkRoundTrip(t, fmt.Sprintf("random %d, parsed", i), parsed)
	}
	checkRoundTrip(t, "captured", capturedSnapshot(t, 7, "v1.35.4", "v1.36.3", "v1.37.2"))
}

// The documents of a snapshot's servers are written as the servers sent
// them, byte for byte: what the controller fetched is what the plugin reads.
func TestEncodeEmbedsCapturedDocumentsAsServed(t *testing.T) {
	captured, err := fixtures.Servers("default", "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	doc := capturedSnapshot(t, 1, "v1.36.3").AppendJSON(nil)
	for _, body := range [][]byte{captured[0].APIs, captured[0].API} {
		if !bytes.Contains(doc, bytes.TrimSpace(body)) {
			t.Errorf("the snapshot does not embed the document as served:\n%.200s", body)
		}
	}
}

// NewSnapshot refuses what ParseSnapshot would refuse, so no writer can
// produce a document the plugin rejects.
func TestNewSnapshotRefusesWhatParseSnapshotRejects(t *testing.T) {
	rng := rand.New(rand.NewPCG(20261207, 2))
	base := randomSnapshot(t, rng)
	for len(base.Servers) < 2 {
		base = randomSnapshot(t, rng)
	}
	for _, c := range []struct {
		name  string
		spoil func(s *Snapshot)
	}{
		{"zero generation", func(s *Snapshot) { s.Generation = 0 }},
		{"no servers", func(s *Snapshot) { s.Servers = nil }},
		{"duplicate id", func(s *Snapshot) { s.Servers[1].ID = s.Servers[0].ID }},
		{"duplicate cluster", func(s *Snapshot) { s.Servers[1].Cluster = s.Servers[0].Cluster }},
		{"front-proxy suffix in a cluster", func(s *Snapshot) { s.Servers[0].Cluster += FrontProxyClusterSuffix }},
		{"space in a version", func(s *Snapshot) { s.Servers[0].Version = "v1 36" }},
		{"unknown preferred server", func(s *Snapshot) { s.Preferred = "apiserver-nobody" }},
		{"core group in /apis", func(s *Snapshot) { s.Servers[0].APIs = GroupList{Items: []Group{{}}} }},
		{"a group in /api", func(s *Snapshot) { s.Servers[0].Core = GroupList{Items: []Group{{Meta: ObjectMeta{Name: "apps"}}}} }},
		{"OpenAPI path listed twice", func(s *Snapshot) { s.Servers[0].OpenAPI = []OpenAPIPath{{"a", "1"}, {"a", "2"}} }},
		{"bad OpenAPI hash", func(s *Snapshot) { s.Servers[0].OpenAPI = []OpenAPIPath{{"a", "x-y"}} }},
		{"field selectors of an unserved resource", func(s *Snapshot) { s.Servers[0].FieldSelectors = map[string][]string{"v1/nothings": {"metadata.name"}} }},
		{"missing fields of an unserved resource", func(s *Snapshot) { s.Servers[0].MissingFields = map[string][]string{"v1/nothings": {"spec.a"}} }},
		{"a subresource", func(s *Snapshot) { s.Servers[0].MissingFields = map[string][]string{"v1/things/status": {"spec.a"}} }},
		{"a leading slash", func(s *Snapshot) { s.Servers[0].MissingFields = map[string][]string{"/v1/things": {"spec.a"}} }},
		{"an empty version", func(s *Snapshot) { s.Servers[0].MissingFields = map[string][]string{"apps//things": {"spec.a"}} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := *base
			s.Servers = slices.Clone(base.Servers)
			c.spoil(&s)
			_, buildErr := NewSnapshot(s.Generation, s.Preferred, s.Servers)
			_, parseErr := ParseSnapshot(s.AppendJSON(nil))
			if buildErr == nil || parseErr == nil {
				t.Fatalf("NewSnapshot: %v; ParseSnapshot: %v; want both to refuse", buildErr, parseErr)
			}
		})
	}
}

// BenchmarkSnapshotAppendJSON is what the controller pays on each poll to
// compare the current snapshot with the last: the captured three-version
// plane with its OpenAPI indexes.
func BenchmarkSnapshotAppendJSON(b *testing.B) {
	s := capturedSnapshot(b, 1, "v1.35.4", "v1.36.3", "v1.37.2")
	for i := range s.Servers {
		for p := range 50 {
			s.Servers[i].OpenAPI = append(s.Servers[i].OpenAPI, OpenAPIPath{Path: fmt.Sprintf("apis/group%02d.example.io/v1", p), Hash: fmt.Sprintf("%0128X", p)})
		}
	}
	buf := s.AppendJSON(nil)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	for b.Loop() {
		buf = s.AppendJSON(buf[:0])
	}
}
