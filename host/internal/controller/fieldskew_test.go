package controller

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/internal/schemafields"
)

// widgetServer is a server of widgets whose example.com/v1 document has the
// hash doc.
func widgetServer(t *testing.T, id, version string, healthy bool, doc string) *serverState {
	t.Helper()
	return fieldServer(t, id, version, healthy, map[string]string{"apis/example.com/v1": doc}, widgetsResource)
}

func widgetDoc(k schemafields.Kind) *schemafields.Document {
	return kindDoc("example.com", "v1", "Widget", k)
}

const widgetsKey = "example.com/v1/widgets"

// knowledgeOf computes the field knowledge of the servers, each widget
// document of docs given by its hash, and requires that it can be published.
func knowledgeOf(t *testing.T, states []*serverState, docs map[string]schemafields.Fields) *fieldKnowledge {
	t.Helper()
	reduced := map[string]*schemafields.Document{}
	for hash, fields := range docs {
		reduced[hash] = widgetDoc(schemafields.Kind{Fields: fields})
	}
	k := computeFieldKnowledge(states, nil, reduced)
	checkPublishable(t, states, k)
	return k
}

// knownBy is the part of a FieldSkew a path's servers are read from: each
// path with the servers whose schema has it.
func knownBy(f discovery.FieldSkew) map[string][]int {
	out := map[string][]int{}
	for _, p := range f.Paths {
		out[p] = []int{}
	}
	for _, schema := range f.Schemas {
		for _, p := range schema.Knows {
			out[f.Paths[p]] = append(out[f.Paths[p]], schema.Servers...)
		}
	}
	for _, servers := range out {
		slices.Sort(servers)
	}
	return out
}

func TestFieldSkewListsEachPathWhoseServersDifferFromItsParents(t *testing.T) {
	for _, tc := range []struct {
		name    string
		schemas []schemafields.Fields // one per server, in order
		want    map[string][]int      // nil: no field skew
	}{
		{
			"alike schemas",
			[]schemafields.Fields{fieldsOf("spec", "spec.color"), fieldsOf("spec", "spec.color")},
			nil,
		},
		{
			// The image volume source and its properties are new: the
			// properties are where it is, and only it is listed.
			"a new property and its own",
			[]schemafields.Fields{
				fieldsOf("spec", "spec.volumes", "spec.volumes[].name"),
				fieldsOf("spec", "spec.volumes", "spec.volumes[].image", "spec.volumes[].image.pullPolicy", "spec.volumes[].image.reference", "spec.volumes[].name"),
			},
			map[string][]int{"spec.volumes[].image": {1}},
		},
		{
			"properties each side lacks",
			[]schemafields.Fields{
				fieldsOf("spec", "spec.claims", "spec.claims[].source", "spec.claims[].source.name"),
				fieldsOf("spec", "spec.claims", "spec.claims[].name", "spec.policy"),
			},
			map[string][]int{"spec.claims[].name": {1}, "spec.claims[].source": {0}, "spec.policy": {1}},
		},
		{
			// A property of a new property that fewer servers have is
			// listed below it.
			"a property fewer servers have than its parent",
			[]schemafields.Fields{
				fieldsOf("spec"),
				fieldsOf("spec", "spec.image", "spec.image.reference"),
				fieldsOf("spec", "spec.image", "spec.image.pullPolicy", "spec.image.reference"),
			},
			map[string][]int{"spec.image": {1, 2}, "spec.image.pullPolicy": {2}},
		},
		{
			"map values",
			[]schemafields.Fields{
				fieldsOf("spec", "spec.byName", "spec.byName.*.size"),
				fieldsOf("spec", "spec.byName", "spec.byName.*.size", "spec.byName.*.weight", "spec.byName.*.weight.unit"),
			},
			map[string][]int{"spec.byName.*.weight": {1}},
		},
	} {
		var states []*serverState
		docs := map[string]schemafields.Fields{}
		for i, fields := range tc.schemas {
			hash := fmt.Sprintf("H%d", i)
			states = append(states, widgetServer(t, fmt.Sprintf("s%d", i), "v1.31.4", true, hash))
			docs[hash] = fields
		}
		k := knowledgeOf(t, states, docs)
		skew, listed := k.skew[widgetsKey]
		if tc.want == nil {
			if listed || len(k.skew) != 0 {
				t.Errorf("%s: fieldSkew %v, want none", tc.name, k.skew)
			}
			continue
		}
		if got := knownBy(skew); !maps.EqualFunc(got, tc.want, slices.Equal) {
			t.Errorf("%s: paths and their servers %v, want %v", tc.name, got, tc.want)
		}
		if !slices.IsSorted(skew.Paths) {
			t.Errorf("%s: paths %q not sorted", tc.name, skew.Paths)
		}
	}
}

func TestFieldSkewGroupsServersOfOneSchema(t *testing.T) {
	older := fieldsOf("spec", "spec.color")
	newer := fieldsOf("spec", "spec.color", "spec.size")
	for _, tc := range []struct {
		name string
		// docs are the servers' document hashes, in order: "old" and
		// "new" documents have the older and newer schemas, "new2" the
		// newer too (another document, as an aggregated server's would be).
		docs []string
		want []discovery.FieldSchema
	}{
		{"one server each", []string{"old", "new"}, []discovery.FieldSchema{{Servers: []int{0}, Knows: []int{}}, {Servers: []int{1}, Knows: []int{0}}}},
		{"interleaved", []string{"new", "old", "new", "old", "new"},
			[]discovery.FieldSchema{{Servers: []int{0, 2, 4}, Knows: []int{0}}, {Servers: []int{1, 3}, Knows: []int{}}}},
		{"one schema, two documents", []string{"old", "new", "new2"},
			[]discovery.FieldSchema{{Servers: []int{0}, Knows: []int{}}, {Servers: []int{1, 2}, Knows: []int{0}}}},
	} {
		var states []*serverState
		for i, doc := range tc.docs {
			states = append(states, widgetServer(t, fmt.Sprintf("s%d", i), "v1.31.4", true, doc))
		}
		k := knowledgeOf(t, states, map[string]schemafields.Fields{"old": older, "new": newer, "new2": newer})
		skew := k.skew[widgetsKey]
		if !slices.Equal(skew.Paths, []string{"spec.size"}) {
			t.Errorf("%s: paths %q, want [spec.size]", tc.name, skew.Paths)
		}
		if !slices.EqualFunc(skew.Schemas, tc.want, func(a, b discovery.FieldSchema) bool {
			return slices.Equal(a.Servers, b.Servers) && slices.Equal(a.Knows, b.Knows)
		}) {
			t.Errorf("%s: schemas %+v, want %+v", tc.name, skew.Schemas, tc.want)
		}
	}
}

func TestServersNotComparedAreInNoSchema(t *testing.T) {
	older := fieldsOf("spec", "spec.color")
	newer := fieldsOf("spec", "spec.color", "spec.size")
	for _, tc := range []struct {
		name string
		// third is the server that is not compared.
		third *serverState
		docs  map[string]*schemafields.Document
	}{
		{"unhealthy", widgetServer(t, "c", "v1.30.14", false, "old"), nil},
		{"schema unknown", widgetServer(t, "c", "v1.30.14", true, "unfetched"), nil},
		{"schema truncated", widgetServer(t, "c", "v1.30.14", true, "truncated"),
			map[string]*schemafields.Document{"truncated": widgetDoc(schemafields.Kind{Fields: fieldsOf("spec"), Truncated: true})}},
		{"kind not in its document", widgetServer(t, "c", "v1.30.14", true, "other"),
			map[string]*schemafields.Document{"other": kindDoc("example.com", "v1", "Gadget", schemafields.Kind{Fields: older})}},
	} {
		states := []*serverState{
			widgetServer(t, "a", "v1.30.14", true, "old"),
			widgetServer(t, "b", "v1.31.4", true, "new"),
			tc.third,
		}
		docs := map[string]*schemafields.Document{"old": widgetDoc(schemafields.Kind{Fields: older}), "new": widgetDoc(schemafields.Kind{Fields: newer})}
		maps.Copy(docs, tc.docs)
		k := computeFieldKnowledge(states, nil, docs)
		checkPublishable(t, states, k)
		skew := k.skew[widgetsKey]
		var inSchemas []int
		for _, schema := range skew.Schemas {
			inSchemas = append(inSchemas, schema.Servers...)
		}
		if slices.Sort(inSchemas); !slices.Equal(inSchemas, []int{0, 1}) || !slices.Equal(skew.Paths, []string{"spec.size"}) {
			t.Errorf("%s: paths %q of the servers %v, want spec.size of the compared 0 and 1", tc.name, skew.Paths, inSchemas)
		}
	}

	// Of one compared server and others not compared there is no skew to tell.
	states := []*serverState{widgetServer(t, "a", "v1.30.14", true, "old"), widgetServer(t, "b", "v1.31.4", false, "new")}
	if k := knowledgeOf(t, states, map[string]schemafields.Fields{"old": older, "new": newer}); k.skew != nil {
		t.Errorf("fieldSkew %v with one compared server", k.skew)
	}
}

func TestFieldSkewLeavesOutPathsTheSnapshotCannotCarry(t *testing.T) {
	long := "spec." + strings.Repeat("x", maxTokenLength)
	states := []*serverState{widgetServer(t, "a", "v1.30.14", true, "A"), widgetServer(t, "b", "v1.31.4", true, "B")}
	k := knowledgeOf(t, states, map[string]schemafields.Fields{
		"A": fieldsOf("spec"),
		// A property named "", "[]" or with a space, and one too long,
		// each with a property of its own.
		"B": fieldsOf("spec", "spec.", "spec..x", "spec.[]", "spec.[].x", "spec.with space", "spec.with space.x",
			long, long+".x", "spec.ok", "spec.ok.x"),
	})
	if got := k.skew[widgetsKey].Paths; !slices.Equal(got, []string{"spec.ok"}) {
		t.Errorf("paths %q, want only spec.ok", got)
	}
	// MissingFields still marks the older server.
	if got := k.servers[0].missing[widgetsKey]; len(got) == 0 {
		t.Error("the older server's missingFields do not mark widgets")
	}
}

func TestFieldSkewLeavesOutAResourceOfMorePathsThanItCarries(t *testing.T) {
	paths := []string{"spec"}
	for i := range discovery.MaxSkewPaths + 1 {
		paths = append(paths, fmt.Sprintf("spec.f%04d", i))
	}
	for _, tc := range []struct {
		name  string
		paths []string
		want  bool // listed in fieldSkew
	}{
		{"as many as it carries", paths[:1+discovery.MaxSkewPaths], true},
		{"one more", paths, false},
	} {
		var log bytes.Buffer
		c := &Controller{log: slog.New(slog.NewTextHandler(&log, nil)), schemas: newSchemas()}
		c.schemas.docs = map[string]*schemafields.Document{
			"A": widgetDoc(schemafields.Kind{Fields: fieldsOf("spec")}),
			"B": widgetDoc(schemafields.Kind{Fields: fieldsOf(slices.Clone(tc.paths)...)}),
		}
		states := []*serverState{widgetServer(t, "a", "v1.30.14", true, "A"), widgetServer(t, "b", "v1.31.4", true, "B")}
		snap := c.unnumbered(states)
		if _, listed := snap.FieldSkew[widgetsKey]; listed != tc.want {
			t.Errorf("%s: in fieldSkew %v, want %v", tc.name, listed, tc.want)
		}
		if _, missing := snap.Servers[0].MissingFields[widgetsKey]; !missing {
			t.Errorf("%s: the older server's missingFields do not mark widgets", tc.name)
		}
		if warned := strings.Contains(log.String(), "resource="+widgetsKey); warned == tc.want {
			t.Errorf("%s: warned %v, want %v; log:\n%s", tc.name, warned, !tc.want, log.String())
		}
		if err := snap.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

// capturedSchemaFields are, per version of a pair of schema-skew.json and
// per resource, the field paths of the resource's kind: those only its side
// has, and the paths above them both sides share, which are all the captured
// comparison tells of what both have and all the skew depends on.
func capturedSchemaFields(pair fixtures.SchemaSkew) map[string]map[string]schemafields.Fields {
	out := map[string]map[string]schemafields.Fields{pair.Older: {}, pair.Newer: {}}
	for _, r := range pair.Resources {
		only := map[string]bool{}
		for _, p := range slices.Concat(r.OnlyInOlder, r.OnlyInNewer) {
			only[p] = true
		}
		var shared []string
		for p := range only {
			for a, ok := schemafields.ParentPath(p); ok; a, ok = schemafields.ParentPath(a) {
				if !only[a] {
					shared = append(shared, a)
				}
			}
		}
		out[pair.Older][r.Resource] = fieldsOf(slices.Concat(shared, r.OnlyInOlder)...)
		out[pair.Newer][r.Resource] = fieldsOf(slices.Concat(shared, r.OnlyInNewer)...)
	}
	return out
}

// capturedPair is a healthy server of each version of the pair with its
// captured discovery documents and, for every group version of a resource
// whose schemas differ, an OpenAPI v3 document whose kinds have the
// captured field paths.
func capturedPair(t *testing.T, pair fixtures.SchemaSkew) ([]*serverState, map[string]*schemafields.Document) {
	t.Helper()
	captured, err := fixtures.Servers("default", pair.Older, pair.Newer)
	if err != nil {
		t.Fatal(err)
	}
	fields := capturedSchemaFields(pair)
	docs := map[string]*schemafields.Document{}
	var states []*serverState
	for _, srv := range captured {
		s := completeServer(srv.ID, true, srv.APIs, srv.API)
		s.version = srv.Version
		var index []discovery.OpenAPIPath
		for _, r := range pair.Resources {
			parts := strings.Split(r.Resource, "/")
			group, version, path := "", parts[0], "api/"+parts[0]
			if len(parts) == 3 {
				group, version, path = parts[0], parts[1], "apis/"+parts[0]+"/"+parts[1]
			}
			hash := fmt.Sprintf("%x", sha256.Sum256([]byte(srv.Version+"@"+path)))
			if docs[hash] == nil {
				docs[hash] = &schemafields.Document{Kinds: map[discovery.GVK]schemafields.Kind{}}
				index = append(index, discovery.OpenAPIPath{Path: path, Hash: hash})
			}
			docs[hash].Kinds[discovery.GVK{Group: group, Version: version, Kind: r.Kind}] = schemafields.Kind{Fields: fields[srv.Version][r.Resource]}
		}
		slices.SortFunc(index, func(a, b discovery.OpenAPIPath) int { return strings.Compare(a.Path, b.Path) })
		s.openAPI = fetched[[]discovery.OpenAPIPath]{value: index, etag: `"openapi-` + srv.ID + `"`, ok: true}
		states = append(states, s)
	}
	return states, docs
}

// The captured schemas of each pair of adjacent versions: the field skew
// tells, for every path one side's schema has and the other's lacks, which
// server has it (a path not listed is known where its nearest listed parent
// is), and a write goes to the server whose schema has what its body sets.
func TestFieldSkewOfTheCapturedSchemasTellsWhereEachPathIs(t *testing.T) {
	pairs, err := fixtures.LoadSchemaSkew()
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range pairs {
		states, docs := capturedPair(t, pair)
		k := computeFieldKnowledge(states, nil, docs)
		checkPublishable(t, states, k)
		if len(k.skew) != len(pair.Resources) || len(k.tooSkewed) != 0 {
			t.Errorf("%s/%s: field skew of %d resources (%d over the bound), want the %d captured", pair.Older, pair.Newer,
				len(k.skew), len(k.tooSkewed), len(pair.Resources))
		}
		for _, r := range pair.Resources {
			listed := knownBy(k.skew[r.Resource])
			for server, only := range [][]string{r.OnlyInOlder, r.OnlyInNewer} {
				for _, p := range only {
					// The servers that know p are those its nearest listed
					// parent, or itself, lists.
					known := []int{0, 1}
					for a, ok := p, true; ok; a, ok = schemafields.ParentPath(a) {
						if servers, isListed := listed[a]; isListed {
							known = servers
							break
						}
					}
					if !slices.Equal(known, []int{server}) {
						t.Errorf("%s/%s: %s: %s is known by servers %v, want only %d", pair.Older, pair.Newer, r.Resource, p, known, server)
					}
				}
			}
		}
	}

	pair := pairs[slices.IndexFunc(pairs, func(p fixtures.SchemaSkew) bool { return p.Older == "v1.30.14" && p.Newer == "v1.31.4" })]
	states, docs := capturedPair(t, pair)
	k := computeFieldKnowledge(states, nil, docs)
	deployments := knownBy(k.skew["apps/v1/deployments"])
	for path, want := range map[string][]int{
		"spec.template.spec.securityContext.supplementalGroupsPolicy": {1},
		"spec.template.spec.resourceClaims[].source":                  {0},
		"spec.template.spec.volumes[].image":                          {1},
	} {
		if got, ok := deployments[path]; !ok || !slices.Equal(got, want) {
			t.Errorf("deployments: %s known by %v (listed %v), want %v", path, got, ok, want)
		}
	}
	if _, ok := deployments["spec.template.spec.volumes[].image.pullPolicy"]; ok {
		t.Error("deployments: spec.template.spec.volumes[].image.pullPolicy is listed; its parent says where it is")
	}

	servers := make([]discovery.Server, len(states))
	for i, s := range states {
		servers[i] = s.snapshotServer()
		servers[i].FieldSelectors, servers[i].MissingFields = k.servers[i].selectors, k.servers[i].missing
	}
	snap := &discovery.Snapshot{Generation: 1, Servers: servers, FieldSkew: k.skew}
	if err := snap.Validate(); err != nil {
		t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		body string
		want string
	}{
		{`{"spec":{"template":{"spec":{"securityContext":{"supplementalGroupsPolicy":"Strict"}}}}}`, "v1.31.4"},
		{`{"spec":{"template":{"spec":{"resourceClaims":[{"name":"gpu","source":{"resourceClaimName":"gpu"}}]}}}}`, "v1.30.14"},
		// Both lack fields the other has: the newest minor.
		{`{"spec":{"replicas":3}}`, "v1.31.4"},
	} {
		req := &discovery.Request{Method: "POST", Path: "/apis/apps/v1/namespaces/default/deployments",
			ContentType: "application/json", ContentLength: int64(len(tc.body)), Body: []byte(tc.body)}
		d := ix.Decide(req, 0)
		if d.Action != discovery.Route || ix.Servers()[d.Server].Version != tc.want {
			t.Errorf("POST %s: %v to server %d, want a route to %s", tc.body, d.Action, d.Server, tc.want)
		}
	}
}
