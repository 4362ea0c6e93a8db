package discovery

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestMergePreservingRelativeOrderMatchesUpstreamExamples(t *testing.T) {
	tests := []struct {
		name  string
		lists [][]string
		want  []string
	}{
		{"no lists", nil, nil},
		{"one empty list", [][]string{{}}, []string{}},
		{"superset list is taken as is", [][]string{{"a", "b", "c"}, {"b", "c"}}, []string{"a", "b", "c"}},
		{"ties break lexicographically", [][]string{{"a", "c"}, {"b", "c"}}, []string{"a", "b", "c"}},
		{"first complete list wins a conflict", [][]string{{"a", "b"}, {"b", "a"}}, []string{"a", "b"}},
		{"first complete list wins the reverse conflict", [][]string{{"b", "a"}, {"a", "b"}}, []string{"b", "a"}},
		{"smallest ready name first", [][]string{{"z", "c"}, {"b", "c"}}, []string{"b", "z", "c"}},
		{"independent chains interleave by name", [][]string{{"c", "d"}, {"a", "b"}}, []string{"a", "b", "c", "d"}},
		{"cycle without a complete list sorts everything", [][]string{{"b", "a"}, {"a", "b"}, {"c"}}, []string{"a", "b", "c"}},
		{"adjacent repeat is a cycle", [][]string{{"a", "a"}}, []string{"a"}},
		{"distant repeat is a cycle", [][]string{{"a", "b", "a"}, {"c"}}, []string{"a", "b", "c"}},
		{"a list with a repeat is never the shortcut", [][]string{{"b", "b"}, {"b"}}, []string{"b"}},
		{"edges are counted once", [][]string{{"x", "y"}, {"x", "y"}, {"w", "y"}}, []string{"w", "x", "y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mergePreservingRelativeOrder(tt.lists)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("mergePreservingRelativeOrder(%q) = %q, want %q", tt.lists, got, tt.want)
			}
		})
	}
}

// mergeTestResource is a namespaced resource with the given verbs.
func mergeTestResource(name string, verbs ...string) Resource {
	return Resource{Resource: name, Scope: "Namespaced", SingularResource: strings.TrimSuffix(name, "s"), Verbs: verbs}
}

func mergeTestGroup(name, freshness string, resources ...Resource) Group {
	return Group{Meta: ObjectMeta{Name: name}, Versions: []Version{{Version: "v1", Resources: resources, Freshness: freshness}}}
}

func mergedJSON(groups []Group) string {
	return string(GroupList{Items: groups}.AppendJSON(nil, false))
}

func TestMergeGroupsReturnsLocalVerbatimWhenEveryListAgrees(t *testing.T) {
	// Freshness is not compared, so neither server's document changes the
	// other's: upstream returns its own document unchanged.
	current := []Group{mergeTestGroup("apps", "Current", mergeTestResource("deployments", "get"))}
	stale := []Group{mergeTestGroup("apps", "Stale", mergeTestResource("deployments", "get"))}
	servers := []ServerGroups{{ServerID: "a", Groups: current}, {ServerID: "b", Groups: stale}}
	for _, tt := range []struct {
		localID string
		want    []Group
	}{{"a", current}, {"b", stale}} {
		t.Run("local="+tt.localID, func(t *testing.T) {
			got := MergeGroups(servers, tt.localID)
			if &got[0] != &tt.want[0] {
				t.Fatalf("MergeGroups did not return the local list itself: %s", mergedJSON(got))
			}
		})
	}
}

func TestMergeGroupsTakesMetadataAndFreshnessFromLowestIDOnceListsDiffer(t *testing.T) {
	low := mergeTestGroup("apps", "Stale", mergeTestResource("deployments", "get"))
	low.Meta.Labels = map[string]string{"from": "low"}
	high := mergeTestGroup("apps", "Current", mergeTestResource("deployments", "get"), mergeTestResource("statefulsets", "get"))
	high.Meta.Labels = map[string]string{"from": "high"}
	servers := []ServerGroups{{ServerID: "z", Groups: []Group{high}}, {ServerID: "m", Groups: []Group{low}}}
	want := `{"metadata":{},"items":[{"metadata":{"name":"apps","labels":{"from":"low"}},"versions":[{"version":"v1","resources":[` +
		`{"resource":"deployments","scope":"Namespaced","singularResource":"deployment","verbs":["get"]},` +
		`{"resource":"statefulsets","scope":"Namespaced","singularResource":"statefulset","verbs":["get"]}],"freshness":"Stale"}]}]}`
	for _, localID := range []string{"m", "z"} {
		if got := mergedJSON(MergeGroups(servers, localID)); got != want {
			t.Fatalf("local %s:\n got %s\nwant %s", localID, got, want)
		}
	}
}

func TestMergeGroupsUnionsVerbsSortedAndTakesSubresourcesFromHigherID(t *testing.T) {
	low := mergeTestResource("deployments", "watch", "get", "list")
	low.Subresources = []Subresource{
		{Subresource: "status", Verbs: []string{"get"}},
		{Subresource: "scale", Verbs: []string{"get"}},
	}
	high := mergeTestResource("deployments", "list", "create")
	high.Subresources = []Subresource{{Subresource: "scale", Verbs: []string{"update"}}}
	untouched := mergeTestResource("replicasets", "watch", "get")
	servers := []ServerGroups{
		{ServerID: "b", Groups: []Group{mergeTestGroup("apps", "Current", high, untouched)}},
		{ServerID: "a", Groups: []Group{mergeTestGroup("apps", "Current", low, untouched)}},
	}
	got := MergeGroups(servers, "a")
	merged := got[0].Versions[0].Resources
	if want := []string{"create", "get", "list", "watch"}; !reflect.DeepEqual(merged[0].Verbs, want) {
		t.Errorf("verbs %q, want the sorted union %q", merged[0].Verbs, want)
	}
	wantSubresources := []Subresource{{Subresource: "scale", Verbs: []string{"update"}}, {Subresource: "status", Verbs: []string{"get"}}}
	if !reflect.DeepEqual(merged[0].Subresources, wantSubresources) {
		t.Errorf("subresources %+v, want %+v", merged[0].Subresources, wantSubresources)
	}
	if want := []string{"watch", "get"}; !reflect.DeepEqual(merged[1].Verbs, want) {
		t.Errorf("an agreed resource's verbs became %q, want them untouched %q", merged[1].Verbs, want)
	}
}

func TestMergeGroupsEncodesVerbsOfDifferingVerblessResourcesAsNull(t *testing.T) {
	// [] and null differ to reflect.DeepEqual, so the two entries are merged,
	// and an empty union is nil.
	servers := []ServerGroups{
		{ServerID: "a", Groups: []Group{mergeTestGroup("g", "", Resource{Resource: "r", Verbs: []string{}})}},
		{ServerID: "b", Groups: []Group{mergeTestGroup("g", "", Resource{Resource: "r"})}},
	}
	want := `{"metadata":{},"items":[{"metadata":{"name":"g"},"versions":[{"version":"v1","resources":[{"resource":"r","scope":"","singularResource":"","verbs":null}]}]}]}`
	if got := mergedJSON(MergeGroups(servers, "a")); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestMergeGroupsTreatsAnAbsentLocalAsAnEmptyServer(t *testing.T) {
	only := []ServerGroups{{ServerID: "b", Groups: []Group{mergeTestGroup("apps", "Current")}}}
	if got := MergeGroups(only, "b"); &got[0] != &only[0].Groups[0] {
		t.Fatalf("a single server's own list must come back as is, got %s", mergedJSON(got))
	}
	// With "a" as an extra empty server the lists differ, so the groups are
	// reassembled, and "a"'s empty order ranks nothing.
	got := MergeGroups(only, "a")
	if len(got) != 1 || &got[0] == &only[0].Groups[0] || got[0].Name() != "apps" {
		t.Fatalf("got %s, want a reassembled copy of b's list", mergedJSON(got))
	}
}

func TestMergeGroupsKeepsTheLastEntryOfARepeatedServerID(t *testing.T) {
	servers := []ServerGroups{
		{ServerID: "a", Groups: []Group{mergeTestGroup("first", "")}},
		{ServerID: "b", Groups: []Group{mergeTestGroup("other", "")}},
		{ServerID: "a", Groups: []Group{mergeTestGroup("second", "")}},
	}
	got := MergeGroups(servers, "a")
	if names := groupNames(got); !reflect.DeepEqual(names, []string{"other", "second"}) {
		t.Fatalf("groups %q, want the last entry of a to replace the first", names)
	}
}

func TestMergeGroupsDoesNotModifyItsInputs(t *testing.T) {
	for seed := range uint64(300) {
		raw := newDiscoveryGen(seed).serverSet()
		inputs, pristine := parseRawServers(t, raw), parseRawServers(t, raw)
		for _, localID := range []string{inputs[0].ServerID, "apiserver-a", "apiserver-absent"} {
			MergeGroups(inputs, localID)
		}
		if !reflect.DeepEqual(inputs, pristine) {
			t.Fatalf("seed %d: MergeGroups modified its inputs", seed)
		}
	}
}

func TestMergeGroupsIgnoresTheOrderOfServers(t *testing.T) {
	for seed := range uint64(500) {
		gen := newDiscoveryGen(seed)
		servers := parseRawServers(t, gen.serverSet())
		lowest := slices.MinFunc(servers, func(a, b ServerGroups) int { return strings.Compare(a.ServerID, b.ServerID) }).ServerID
		want := GroupList{Items: MergeGroups(servers, lowest)}
		wantJSON, wantETag := string(want.AppendJSON(nil, false)), ETag(want)
		for range 3 {
			shuffled := slices.Clone(servers)
			gen.r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			got := GroupList{Items: MergeGroups(shuffled, lowest)}
			if string(got.AppendJSON(nil, false)) != wantJSON || ETag(got) != wantETag {
				t.Fatalf("seed %d: server order %v changes the merged document", seed, serverIDs(shuffled))
			}
		}
	}
}

// TestMergeGroupsDependsOnLocalOnlyWhenItsListIsReturnedVerbatim proves why the
// lowest ID is a sound "local" for a gateway: any local yields the document the
// lowest ID yields, except when every server's group names agree and nothing
// merged differs, where each local gets its own list back unchanged.
func TestMergeGroupsDependsOnLocalOnlyWhenItsListIsReturnedVerbatim(t *testing.T) {
	verbatimCases := 0
	for seed := range uint64(500) {
		servers := parseRawServers(t, newDiscoveryGen(seed).serverSet())
		byLowest := slices.Clone(servers)
		slices.SortFunc(byLowest, func(a, b ServerGroups) int { return strings.Compare(a.ServerID, b.ServerID) })
		lowest := byLowest[0]
		want := mergedJSON(MergeGroups(servers, lowest.ServerID))
		lowestVerbatim := returnsOwnList(MergeGroups(servers, lowest.ServerID), lowest.Groups)
		if lowestVerbatim && len(servers) > 1 {
			verbatimCases++
		}
		for _, local := range byLowest[1:] {
			got := MergeGroups(servers, local.ServerID)
			switch {
			case lowestVerbatim && !returnsOwnList(got, local.Groups):
				t.Fatalf("seed %d: local %s: the lowest ID got its own list back but this local did not", seed, local.ServerID)
			case !lowestVerbatim && mergedJSON(got) != want:
				t.Fatalf("seed %d: local %s changes the merged document\n got %s\nwant %s", seed, local.ServerID, mergedJSON(got), want)
			}
		}
	}
	if verbatimCases == 0 {
		t.Fatal("no generated server set reached the verbatim case")
	}
}

// returnsOwnList reports whether merged is own itself, not a copy.
func returnsOwnList(merged, own []Group) bool {
	return len(merged) == len(own) && (len(own) == 0 || &merged[0] == &own[0])
}

func parseRawServers(t *testing.T, raw []rawServer) []ServerGroups {
	t.Helper()
	out := make([]ServerGroups, len(raw))
	for i, s := range raw {
		list, err := ParseGroupList(s.doc)
		if err != nil {
			t.Fatalf("server %s: %v", s.id, err)
		}
		out[i] = ServerGroups{ServerID: s.id, Groups: list.Items}
	}
	return out
}

func serverIDs(servers []ServerGroups) string {
	ids := make([]string, len(servers))
	for i, s := range servers {
		ids[i] = s.ServerID
	}
	return fmt.Sprint(ids)
}
