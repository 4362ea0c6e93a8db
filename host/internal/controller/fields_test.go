package controller

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures/fieldselectors"
	"github.com/skewgate/skewgate/host/internal/schemafields"
)

// testResource is a resource of a test server's discovery.
type testResource struct {
	group, version, resource, kind string
	namespaced                     bool
	verbs                          []string
}

var (
	servicesResource = testResource{"", "v1", "services", "Service", true, []string{"create", "get", "list", "watch"}}
	leasesResource   = testResource{"coordination.k8s.io", "v1", "leases", "Lease", true, []string{"create", "get", "list", "update", "watch"}}
	widgetsResource  = testResource{"example.com", "v1", "widgets", "Widget", true, []string{"get", "list", "watch"}}
	gadgetsResource  = testResource{"example.com", "v1", "gadgets", "Gadget", false, []string{"get", "list"}}
	reviewsResource  = testResource{"authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", false, []string{"create"}}
)

// groupListJSON renders an aggregated discovery document of the resources,
// the core group's (core true) or the others', with response kinds as
// servers write them (group and version left empty).
func groupListJSON(t *testing.T, core bool, resources ...testResource) []byte {
	t.Helper()
	type resourceJSON struct {
		Resource     string            `json:"resource"`
		ResponseKind map[string]string `json:"responseKind"`
		Scope        string            `json:"scope"`
		Verbs        []string          `json:"verbs"`
	}
	byGV := map[[2]string][]resourceJSON{}
	for _, r := range resources {
		if (r.group == "") != core {
			continue
		}
		scope := "Cluster"
		if r.namespaced {
			scope = "Namespaced"
		}
		gv := [2]string{r.group, r.version}
		byGV[gv] = append(byGV[gv], resourceJSON{r.resource, map[string]string{"group": "", "version": "", "kind": r.kind}, scope, r.verbs})
	}
	items := []any{}
	for _, gv := range slices.SortedFunc(maps.Keys(byGV), func(a, b [2]string) int { return strings.Compare(a[0]+"/"+a[1], b[0]+"/"+b[1]) }) {
		meta := map[string]string{}
		if gv[0] != "" {
			meta["name"] = gv[0]
		}
		items = append(items, map[string]any{"metadata": meta, "versions": []any{map[string]any{"version": gv[1], "resources": byGV[gv]}}})
	}
	raw, err := json.Marshal(map[string]any{"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": map[string]any{}, "items": items})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func groupListOf(t *testing.T, core bool, resources ...testResource) discovery.GroupList {
	t.Helper()
	list, err := discovery.ParseGroupList(groupListJSON(t, core, resources...))
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// fieldServer is a server state with documents and an OpenAPI v3 index
// mapping paths ("apis/example.com/v1") to hashes.
func fieldServer(t *testing.T, id, version string, healthy bool, openAPI map[string]string, resources ...testResource) *serverState {
	t.Helper()
	s := &serverState{address: id + ":6443", id: id, cluster: "cluster-" + id, version: version, healthy: healthy}
	s.core = fetched[discovery.GroupList]{value: groupListOf(t, true, resources...), etag: `"core-` + id + `"`, ok: true}
	s.apis = fetched[discovery.GroupList]{value: groupListOf(t, false, resources...), etag: `"apis-` + id + `"`, ok: true}
	var index []discovery.OpenAPIPath
	for _, path := range slices.Sorted(maps.Keys(openAPI)) {
		index = append(index, discovery.OpenAPIPath{Path: path, Hash: openAPI[path]})
	}
	s.openAPI = fetched[[]discovery.OpenAPIPath]{value: index, etag: `"openapi-` + id + `"`, ok: true}
	return s
}

func fieldsOf(paths ...string) schemafields.Fields {
	slices.Sort(paths)
	var b strings.Builder
	for _, p := range paths {
		b.WriteString(p + "\n")
	}
	return schemafields.Fields(b.String())
}

// kindDoc is a reduced document with one kind.
func kindDoc(group, version, kind string, k schemafields.Kind) *schemafields.Document {
	return &schemafields.Document{Kinds: map[discovery.GVK]schemafields.Kind{{Group: group, Version: version, Kind: kind}: k}}
}

func testTables(t *testing.T) []labelTable {
	t.Helper()
	tables, err := newLabelTables([]fieldselectors.Table{
		{Version: "v1.30.14", Resources: map[string][]string{"v1/services": {"metadata.name", "metadata.namespace"}}},
		{Version: "v1.31.4", Resources: map[string][]string{"v1/services": {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}}},
		{Version: "v1.35.4", Resources: map[string][]string{"v1/services": {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type", "spec.x"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tables
}

// checkPublishable requires that a snapshot of the servers with the
// knowledge passes the snapshot's own validation.
func checkPublishable(t *testing.T, states []*serverState, k *fieldKnowledge) {
	t.Helper()
	servers := make([]discovery.Server, len(states))
	for i, s := range states {
		servers[i] = s.snapshotServer()
		servers[i].FieldSelectors, servers[i].MissingFields = k.servers[i].selectors, k.servers[i].missing
	}
	snap := &discovery.Snapshot{Generation: 1, Servers: servers, FieldSkew: k.skew}
	if err := snap.Validate(); err != nil {
		t.Errorf("the snapshot with this knowledge is invalid: %v", err)
	}
}

func TestBuiltinLabelsComeFromTheTableOfTheServersVersion(t *testing.T) {
	tables := testTables(t)
	for _, tc := range []struct {
		version string
		want    []string // v1/services, nil: metadata only
	}{
		{"v1.30.14", []string{"metadata.name", "metadata.namespace"}},
		{"v1.31.0", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}},
		{"v1.31.4-gke.1200", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}},
		{"v1.31.4+k3s1", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}},
		// A minor between captured ones gets the older neighbour's table.
		{"v1.33.2", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}},
		// A pre-release may lack what its release added.
		{"v1.35.0-rc.1", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}},
		{"v1.35.0-alpha.3", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}},
		// Newer than every captured minor: the newest table.
		{"v1.40.0", []string{"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type", "spec.x"}},
		// Older than every captured minor, or unreadable: metadata only.
		{"v1.29.9", nil},
		{"v1.30.0-beta.0", nil},
		{"v2.0.0", nil},
		{"1.31.4", nil},
		{"v1.31", nil},
	} {
		if got := labelsOfVersion(tables, tc.version)["v1/services"]; !slices.Equal(got, tc.want) {
			t.Errorf("%s: services labels %q, want %q", tc.version, got, tc.want)
		}
	}
}

func TestEmbeddedLabelTablesCoverEveryCapturedVersion(t *testing.T) {
	tables, err := builtinLabelTables()
	if err != nil {
		t.Fatal(err)
	}
	var minors []int
	for _, tbl := range tables {
		minors = append(minors, tbl.minor)
	}
	if slices.Sort(minors); !slices.Equal(minors, []int{30, 31, 35, 36, 37}) {
		t.Errorf("tables of minors %v, want 30, 31, 35, 36, 37", minors)
	}
	// The labels the kubelet's service list uses exist from 1.31 on.
	for _, tc := range []struct {
		version string
		want    bool
	}{{"v1.30.14", false}, {"v1.31.4", true}, {"v1.37.2", true}} {
		if got := slices.Contains(labelsOfVersion(tables, tc.version)["v1/services"], "spec.clusterIP"); got != tc.want {
			t.Errorf("%s accepts spec.clusterIP for services: %v, want %v", tc.version, got, tc.want)
		}
	}
	// Which resources' labels a minor release changed: those said while a
	// server is unhealthy.
	for key, want := range map[string]bool{"v1/services": true, "v1/configmaps": false, "v1/pods": false, "no/such/resource": false} {
		if got := labelsChangedAcrossMinors(tables, key); got != want {
			t.Errorf("labels of %s changed across minors: %v, want %v", key, got, want)
		}
	}
	if _, err := newLabelTables([]fieldselectors.Table{{Version: "v1.31.4"}, {Version: "v1.31.5"}}); err == nil {
		t.Error("two tables of one minor were accepted")
	}
	if _, err := newLabelTables([]fieldselectors.Table{{Version: "v1.31.0-rc.1"}}); err == nil {
		t.Error("a table of a pre-release was accepted")
	}
}

func TestFieldSelectorsListEveryServerOfAResourceWhoseLabelsDiffer(t *testing.T) {
	const crdDoc = "apis/example.com/v1"
	old := fieldServer(t, "a-old", "v1.30.14", true, map[string]string{crdDoc: "H130"}, servicesResource, widgetsResource, gadgetsResource, leasesResource)
	// Unhealthy servers keep their labels: health is the plugin's to weigh.
	newer := fieldServer(t, "b-new", "v1.31.4", false, map[string]string{crdDoc: "H131"}, servicesResource, widgetsResource, gadgetsResource, leasesResource)
	unknown := fieldServer(t, "c-unknown", "v1.31.4", true, map[string]string{crdDoc: "Hunfetched"}, servicesResource, widgetsResource, gadgetsResource)
	docs := map[string]*schemafields.Document{
		"H130": {Kinds: map[discovery.GVK]schemafields.Kind{
			{Group: "example.com", Version: "v1", Kind: "Widget"}: {Fields: fieldsOf("spec", "spec.color")},
			{Group: "example.com", Version: "v1", Kind: "Gadget"}: {Fields: fieldsOf("spec", "spec.size")},
		}},
		"H131": {Kinds: map[discovery.GVK]schemafields.Kind{
			{Group: "example.com", Version: "v1", Kind: "Widget"}: {Fields: fieldsOf("spec", "spec.color"), SelectableFields: []string{"spec.color"}},
			{Group: "example.com", Version: "v1", Kind: "Gadget"}: {Fields: fieldsOf("spec", "spec.size"), SelectableFields: []string{"spec.size"}},
		}},
	}
	states := []*serverState{old, newer, unknown}
	k := computeFieldKnowledge(states, testTables(t), docs)
	want := []map[string][]string{
		{
			"v1/services":            {"metadata.name", "metadata.namespace"},
			"example.com/v1/widgets": {"metadata.name", "metadata.namespace"},
			"example.com/v1/gadgets": {"metadata.name"},
		},
		{
			"v1/services":            {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"},
			"example.com/v1/widgets": {"metadata.name", "metadata.namespace", "spec.color"},
			"example.com/v1/gadgets": {"metadata.name", "spec.size"},
		},
		{
			"v1/services": {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"},
			// Its document is not known: only the metadata labels.
			"example.com/v1/widgets": {"metadata.name", "metadata.namespace"},
			"example.com/v1/gadgets": {"metadata.name"},
		},
	}
	for i := range states {
		if !maps.EqualFunc(k.servers[i].selectors, want[i], slices.Equal) {
			t.Errorf("%s: fieldSelectors %v, want %v", states[i].id, k.servers[i].selectors, want[i])
		}
	}
	checkPublishable(t, states, k)

	// Healthy servers of one version accept the same: nothing to say.
	healthyNewer := fieldServer(t, "b-new", "v1.31.4", true, map[string]string{crdDoc: "H131"}, servicesResource, widgetsResource, gadgetsResource, leasesResource)
	same := computeFieldKnowledge([]*serverState{healthyNewer, unknown}, testTables(t), map[string]*schemafields.Document{"H131": docs["H131"], "Hunfetched": docs["H131"]})
	for i, s := range same.servers {
		if s.selectors != nil {
			t.Errorf("healthy server %d of one version: fieldSelectors %v, want none", i, s.selectors)
		}
	}
}

func TestTableLabelsAreSaidWhileAServerOfTheResourceIsUnhealthy(t *testing.T) {
	// Both servers were 1.30 when last probed; the unhealthy one may be back
	// as 1.31, which accepts spec.clusterIP: the snapshot must say that no
	// server known accepts it, so that the plugin answers 503 and not the
	// healthy server's 400.
	const crdDoc = "apis/example.com/v1"
	healthy := fieldServer(t, "a", "v1.30.14", true, map[string]string{crdDoc: "H"}, servicesResource, widgetsResource, leasesResource)
	restarting := fieldServer(t, "b", "v1.30.14", false, map[string]string{crdDoc: "H"}, servicesResource, widgetsResource, leasesResource)
	docs := map[string]*schemafields.Document{"H": kindDoc("example.com", "v1", "Widget",
		schemafields.Kind{Fields: fieldsOf("spec", "spec.color"), SelectableFields: []string{"spec.color"}})}
	states := []*serverState{healthy, restarting}
	k := computeFieldKnowledge(states, testTables(t), docs)
	// Services are in the tables, which disagree on them; widgets' labels
	// come from a schema and leases are in no test table: neither is said.
	want := map[string][]string{"v1/services": {"metadata.name", "metadata.namespace"}}
	for i := range states {
		if !maps.EqualFunc(k.servers[i].selectors, want, slices.Equal) {
			t.Errorf("%s: fieldSelectors %v, want %v", states[i].id, k.servers[i].selectors, want)
		}
	}
	checkPublishable(t, states, k)

	snap, err := discovery.NewSnapshot(1, "", []discovery.Server{
		withSelectors(healthy.snapshotServer(), k.servers[0].selectors), withSelectors(restarting.snapshotServer(), k.servers[1].selectors)})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	req := &discovery.Request{Method: "GET", Path: "/api/v1/namespaces/default/services", Query: "fieldSelector=spec.clusterIP%21%3DNone"}
	if d := ix.Decide(req, 0); d.Action != discovery.Unavailable {
		t.Errorf("a 1.31 selector while the other server is down: %v, want Unavailable", d.Action)
	}
	req.Query = "fieldSelector=metadata.name%3Dkubernetes"
	if d := ix.Decide(req, 0); d.Action == discovery.Unavailable {
		t.Errorf("a selector the healthy server accepts: %v, want it served", d.Action)
	}
}

func withSelectors(s discovery.Server, selectors map[string][]string) discovery.Server {
	s.FieldSelectors = selectors
	return s
}

func TestMissingFieldsComeFromTheHealthyServersSchemas(t *testing.T) {
	const leaseDoc, authzDoc = "apis/coordination.k8s.io/v1", "apis/authorization.k8s.io/v1"
	index := func(lease, authz string) map[string]string {
		return map[string]string{leaseDoc: lease, authzDoc: authz}
	}
	old := fieldServer(t, "a-old", "v1.30.14", true, index("L130", "Z130"), leasesResource, reviewsResource)
	newer := fieldServer(t, "b-new", "v1.31.4", true, index("L131", "Z131"), leasesResource, reviewsResource)
	newer2 := fieldServer(t, "c-new", "v1.31.4", true, index("L131", "Z131"), leasesResource, reviewsResource)
	downOdd := fieldServer(t, "d-down", "v1.31.4", false, index("Ldown", "Z131"), leasesResource, reviewsResource)
	var many []string
	for i := range 40 {
		many = append(many, "spec.resourceAttributes.fieldSelector.f"+string(rune('a'+i%26))+strings.Repeat("x", i/26))
	}
	docs := map[string]*schemafields.Document{
		"L130":  kindDoc("coordination.k8s.io", "v1", "Lease", schemafields.Kind{Fields: fieldsOf("spec", "spec.holderIdentity")}),
		"L131":  kindDoc("coordination.k8s.io", "v1", "Lease", schemafields.Kind{Fields: fieldsOf("spec", "spec.holderIdentity", "spec.preferredHolder", "spec.strategy")}),
		"Ldown": kindDoc("coordination.k8s.io", "v1", "Lease", schemafields.Kind{Fields: fieldsOf("spec", "spec.only-the-down-one")}),
		"Z130":  kindDoc("authorization.k8s.io", "v1", "SubjectAccessReview", schemafields.Kind{Fields: fieldsOf("spec", "spec.user")}),
		"Z131":  kindDoc("authorization.k8s.io", "v1", "SubjectAccessReview", schemafields.Kind{Fields: fieldsOf(append([]string{"spec", "spec.user"}, many...)...)}),
	}
	states := []*serverState{old, newer, newer2, downOdd}
	k := computeFieldKnowledge(states, testTables(t), docs)
	wantMany := slices.Sorted(slices.Values(many))[:discovery.MaxMissingFields]
	if got := k.servers[0].missing; !slices.Equal(got["coordination.k8s.io/v1/leases"], []string{"spec.preferredHolder", "spec.strategy"}) ||
		!slices.Equal(got["authorization.k8s.io/v1/subjectaccessreviews"], wantMany) || len(got) != 2 {
		t.Errorf("1.30 server: missingFields %v, want leases' two and the first %d of the reviews'", got, discovery.MaxMissingFields)
	}
	for _, s := range k.servers[1:] {
		if s.missing != nil {
			t.Errorf("missingFields %v on a server whose schema has every field of the healthy servers", s.missing)
		}
	}
	checkPublishable(t, states, k)

	// A truncated or unknown schema is not compared; a single healthy server
	// has nothing to be compared with.
	docs["L130"] = kindDoc("coordination.k8s.io", "v1", "Lease", schemafields.Kind{Fields: fieldsOf("spec"), Truncated: true})
	delete(docs, "Z130")
	if k := computeFieldKnowledge(states, testTables(t), docs); k.servers[0].missing != nil {
		t.Errorf("missingFields %v from a truncated and an unknown schema", k.servers[0].missing)
	}
	if k := computeFieldKnowledge([]*serverState{old, downOdd}, testTables(t), docs); k.servers[0].missing != nil || k.servers[1].missing != nil {
		t.Errorf("missingFields %v, %v with one healthy server", k.servers[0].missing, k.servers[1].missing)
	}
}

func TestFieldKnowledgeKeepsTheSnapshotValidWhateverTheSchemasSay(t *testing.T) {
	const crdDoc = "apis/example.com/v1"
	a := fieldServer(t, "a", "v1.31.4", true, map[string]string{crdDoc: "A"}, widgetsResource)
	b := fieldServer(t, "b", "v1.31.4", true, map[string]string{crdDoc: "B"}, widgetsResource)
	long := "spec." + strings.Repeat("x", 300)
	docs := map[string]*schemafields.Document{
		"A": kindDoc("example.com", "v1", "Widget", schemafields.Kind{Fields: fieldsOf("spec"),
			SelectableFields: []string{"spec.café", "spec.with space", long}}),
		"B": kindDoc("example.com", "v1", "Widget", schemafields.Kind{Fields: fieldsOf("spec", "spec.café", "spec.with space", long, "spec.ok"),
			SelectableFields: []string{"spec.ok"}}),
	}
	states := []*serverState{a, b}
	k := computeFieldKnowledge(states, nil, docs)
	if got := k.servers[0].selectors["example.com/v1/widgets"]; !slices.Equal(got, []string{"metadata.name", "metadata.namespace"}) {
		t.Errorf("labels the snapshot cannot carry were kept: %q", got)
	}
	got := k.servers[0].missing["example.com/v1/widgets"]
	want := []string{"spec.caf??", "spec.ok", "spec.with?space", long[:maxTokenLength]}
	if !slices.Equal(got, want) {
		t.Errorf("missingFields %q, want %q", got, want)
	}
	checkPublishable(t, states, k)
}
