package discovery

import (
	"container/heap"
	"slices"
	"sort"
)

// ServerGroups is one API server's own aggregated discovery items.
type ServerGroups struct {
	ServerID string
	Groups   []Group
}

// MergeGroups merges the servers' discovery items into the items upstream's
// peer-aggregated discovery serves (KEP-4020; mergeResources in k8s.io/apiserver
// pkg/endpoints/discovery/aggregated, v0.37) when it runs on the server localID,
// decision for decision:
//
//   - Servers are processed in ascending ServerID order whatever their order in
//     servers. A group, version or resource seen first is kept as is; one seen
//     again is merged into it, so metadata, Freshness, responseKind, scope,
//     singular name, short names and categories come from the lowest ID that has
//     the item. Two different entries for one resource get the sorted union of
//     their verbs (nil if both have none) and the union of their subresources,
//     the later (higher-ID) entry winning per subresource name.
//   - If every server's group-name list equals localID's and nothing merged
//     differed, localID's own items are returned verbatim; if the name lists
//     agree but content merged, the merged groups come in localID's order;
//     otherwise the order is the relative-order merge of all name lists in ID
//     order (see mergePreservingRelativeOrder). Versions within a group and
//     resources within a version follow the same scheme pairwise.
//   - Names repeated inside one list follow upstream's maps: a repeated group
//     is merged into the first like another server's; a repeated version or
//     resource of the side already held replaces the earlier one, of the
//     incoming side is merged into the held one (see mergeNamed). A group
//     repeated in localID's list is emitted once per repetition when localID's
//     order is used.
//   - A localID that names no entry stands for a server with no groups, which
//     still counts; entries sharing a ServerID are reduced to the last one, as
//     upstream's map of peers would.
//
// skewgate is no API server and has no "self", so it passes the lowest
// ServerID. The choice matters only in the verbatim case above, which is the
// one case where upstream's servers disagree with each other: there each
// server serves its own list, which may differ from the others' in what the
// merge does not compare (version Freshness, group metadata, repeated
// entries). In every other case each server's ID gives the same result. The
// lowest ID is the choice that makes the verbatim case agree with the others,
// where all of that comes from the lowest ID, and so the result is always
// exactly what the lowest-ID server would serve from the same documents.
//
// The inputs are not modified. The result shares groups, slices and maps with
// them, so treat both as read-only.
func MergeGroups(servers []ServerGroups, localID string) []Group {
	lists := serversByID(servers, localID)
	var local []Group
	for _, s := range lists {
		if s.ServerID == localID {
			local = s.Groups
		}
	}
	if len(lists) <= 1 {
		return local
	}

	localNames := groupNames(local)
	index := make(map[string]int, len(local))
	merged := make([]Group, 0, len(local))
	allNames := make([][]string, 0, len(lists))
	contentChanged := false
	namesIdentical := true
	for _, s := range lists {
		names := groupNames(s.Groups)
		for i := range s.Groups {
			name := names[i]
			if at, seen := index[name]; seen {
				group, changed := mergeGroupVersions(&merged[at], &s.Groups[i])
				merged[at] = group
				contentChanged = contentChanged || changed
			} else {
				index[name] = len(merged)
				merged = append(merged, s.Groups[i])
			}
		}
		allNames = append(allNames, names)
		namesIdentical = namesIdentical && slices.Equal(names, localNames)
	}

	if !contentChanged && namesIdentical {
		return local
	}
	order := localNames
	if !namesIdentical {
		order = mergePreservingRelativeOrder(allNames)
	}
	out := make([]Group, 0, len(order))
	for _, name := range order {
		if at, ok := index[name]; ok {
			out = append(out, merged[at])
		}
	}
	return out
}

// serverGroupsByID and subresourcesByName sort with package sort, which the
// plugin links anyway, instead of a generic instantiation per element type
// (20 KB of module each).
type serverGroupsByID []ServerGroups

func (s serverGroupsByID) Len() int           { return len(s) }
func (s serverGroupsByID) Less(i, j int) bool { return s[i].ServerID < s[j].ServerID }
func (s serverGroupsByID) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

type subresourcesByName []Subresource

func (s subresourcesByName) Len() int           { return len(s) }
func (s subresourcesByName) Less(i, j int) bool { return s[i].Subresource < s[j].Subresource }
func (s subresourcesByName) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }

// serversByID sorts the servers by ID, keeps the last entry of each ID and
// adds an empty entry for localID if none has it.
func serversByID(servers []ServerGroups, localID string) []ServerGroups {
	all := make([]ServerGroups, 0, len(servers)+1)
	// The stand-in for localID sorts first among its equals, so a real entry
	// replaces it below.
	all = append(all, ServerGroups{ServerID: localID})
	all = append(all, servers...)
	sort.Stable(serverGroupsByID(all))
	out := all[:0]
	for i, s := range all {
		if i+1 < len(all) && all[i+1].ServerID == s.ServerID {
			continue
		}
		out = append(out, s)
	}
	return out
}

func groupNames(groups []Group) []string {
	names := make([]string, len(groups))
	for i := range groups {
		names[i] = groups[i].Meta.Name
	}
	return names
}

// mergeGroupVersions is upstream's mergeVersionsAcrossGroup: b's versions
// merged into a's. It reports whether the result differs from a, in which case
// it carries a's type and metadata.
func mergeGroupVersions(a, b *Group) (Group, bool) {
	versions, changed := mergeNamed(a.Versions, b.Versions, func(v *Version) string { return v.Version }, mergeVersionResources)
	if !changed {
		return *a, false
	}
	return Group{Type: a.Type, Meta: a.Meta, Versions: versions}, true
}

// mergeVersionResources is upstream's mergeResourcesAcrossVersion: b's
// resources merged into a's, keeping a's version name and Freshness.
func mergeVersionResources(a, b Version) (Version, bool) {
	resources, changed := mergeNamed(a.Resources, b.Resources, func(r *Resource) string { return r.Resource }, mergeResourcePair)
	if !changed {
		return a, false
	}
	return Version{Version: a.Version, Resources: resources, Freshness: a.Freshness}, true
}

// mergeResourcePair keeps a resource both sides list identically and merges
// the capabilities of one they list differently.
func mergeResourcePair(a, b Resource) (Resource, bool) {
	if resourcesEqual(&a, &b) {
		return a, false
	}
	return mergeResourceCapabilities(&a, &b), true
}

// mergeNamed merges the named items of b into those of a the way upstream
// merges the versions of a group and the resources of a version. Items are
// keyed by name; a later item of a replaces an earlier one of the same name;
// an item of b whose name is new is added, one whose name is known is combined
// with the known one. If nothing combined reported a change and both sides list
// the same names in the same order, the result is a itself and false.
// Otherwise the items come in a's name order when the name lists are equal
// (repeated names once) or in their relative-order merge, and it reports true.
func mergeNamed[T any](a, b []T, nameOf func(*T) string, combine func(known, incoming T) (T, bool)) ([]T, bool) {
	if sameItems(a, b, nameOf, combine) {
		return a, false
	}
	aNames := make([]string, len(a))
	bNames := make([]string, len(b))
	index := make(map[string]int, len(a)+len(b))
	items := make([]T, 0, len(a)+len(b))
	for i := range a {
		name := nameOf(&a[i])
		aNames[i] = name
		if at, seen := index[name]; seen {
			items[at] = a[i]
		} else {
			index[name] = len(items)
			items = append(items, a[i])
		}
	}
	changed := false
	for i := range b {
		name := nameOf(&b[i])
		bNames[i] = name
		if at, seen := index[name]; seen {
			var differs bool
			items[at], differs = combine(items[at], b[i])
			changed = changed || differs
		} else {
			index[name] = len(items)
			items = append(items, b[i])
		}
	}
	sameNames := slices.Equal(aNames, bNames)
	if !changed && sameNames {
		return a, false
	}
	order := aNames
	if !sameNames {
		order = mergePreservingRelativeOrder([][]string{aNames, bNames})
	}
	out := make([]T, 0, len(order))
	for _, name := range order {
		if at, ok := index[name]; ok {
			out = append(out, items[at])
			delete(index, name)
		}
	}
	return out, true
}

// sameItems is the allocation-free answer for the common case of two servers
// listing the same items: it reports true when both sides name the same items
// in the same order, no name repeats, and combine finds no difference at any
// position. That is exactly when mergeNamed keys every item of b to the item of
// a at the same position and returns a unchanged.
func sameItems[T any](a, b []T, nameOf func(*T) string, combine func(known, incoming T) (T, bool)) bool {
	if len(a) != len(b) {
		return false
	}
	// Discovery documents list resources sorted by name, so while the names
	// strictly increase they are distinct; once they do not, a short list
	// (versions) is checked pairwise and a long one takes the long way.
	increasing := true
	for i := range a {
		name := nameOf(&a[i])
		if name != nameOf(&b[i]) {
			return false
		}
		increasing = increasing && (i == 0 || name > nameOf(&a[i-1]))
		if !increasing {
			if len(a) > 8 {
				return false
			}
			for j := range i {
				if nameOf(&a[j]) == name {
					return false
				}
			}
		}
		if _, differs := combine(a[i], b[i]); differs {
			return false
		}
	}
	return true
}

// mergeResourceCapabilities is upstream's mergeResourceCapabilities: a (or b if
// a has no name) with the sorted union of both verb lists, nil if both are
// empty, and the union of both subresource lists sorted by name, the later entry
// winning per name, nil if both are empty.
func mergeResourceCapabilities(a, b *Resource) Resource {
	var verbs []string
	if n := len(a.Verbs) + len(b.Verbs); n > 0 {
		verbs = make([]string, 0, n)
		verbs = append(append(verbs, a.Verbs...), b.Verbs...)
		slices.Sort(verbs)
		verbs = slices.Compact(verbs)
	}
	var subresources []Subresource
	if n := len(a.Subresources) + len(b.Subresources); n > 0 {
		subresources = make([]Subresource, 0, n)
		for _, list := range [2][]Subresource{a.Subresources, b.Subresources} {
			for _, s := range list {
				if at := slices.IndexFunc(subresources, func(known Subresource) bool { return known.Subresource == s.Subresource }); at >= 0 {
					subresources[at] = s
				} else {
					subresources = append(subresources, s)
				}
			}
		}
		sort.Sort(subresourcesByName(subresources))
	}
	merged := *a
	if merged.Resource == "" {
		merged = *b
	}
	merged.Verbs = verbs
	merged.Subresources = subresources
	return merged
}

// resourcesEqual is reflect.DeepEqual on two resources, which upstream uses to
// decide whether two servers agree: nil and empty slices differ.
func resourcesEqual(a, b *Resource) bool {
	return a.Resource == b.Resource &&
		gvkPointersEqual(a.ResponseKind, b.ResponseKind) &&
		a.Scope == b.Scope &&
		a.SingularResource == b.SingularResource &&
		stringsDeepEqual(a.Verbs, b.Verbs) &&
		stringsDeepEqual(a.ShortNames, b.ShortNames) &&
		stringsDeepEqual(a.Categories, b.Categories) &&
		(a.Subresources == nil) == (b.Subresources == nil) &&
		slices.EqualFunc(a.Subresources, b.Subresources, func(x, y Subresource) bool {
			return x.Subresource == y.Subresource &&
				gvkPointersEqual(x.ResponseKind, y.ResponseKind) &&
				(x.AcceptedTypes == nil) == (y.AcceptedTypes == nil) &&
				slices.Equal(x.AcceptedTypes, y.AcceptedTypes) &&
				stringsDeepEqual(x.Verbs, y.Verbs)
		})
}

func stringsDeepEqual(a, b []string) bool {
	return (a == nil) == (b == nil) && slices.Equal(a, b)
}

func gvkPointersEqual(a, b *GVK) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// mergePreservingRelativeOrder is MergePreservingRelativeOrder from
// k8s.io/apimachinery pkg/util/sort, which upstream orders merged names with:
//
//  1. Every pair of adjacent names in a list is a precedence edge.
//  2. The first list that holds every name exactly once is returned as is,
//     before any cycle check, so conflicting orders resolve to the earliest
//     complete list.
//  3. Otherwise names come in topological order, the smallest ready name
//     first (Kahn's algorithm with a min-heap).
//  4. If the edges form a cycle, which a repeated name in a list also causes,
//     all names come sorted.
func mergePreservingRelativeOrder(lists [][]string) []string {
	if len(lists) == 0 {
		return nil
	}
	ids := make(map[string]int)
	var names []string
	var next [][]int
	var inDegree []int
	node := func(name string) int {
		id, ok := ids[name]
		if !ok {
			id = len(names)
			ids[name] = id
			names = append(names, name)
			next = append(next, nil)
			inDegree = append(inDegree, 0)
		}
		return id
	}
	for _, list := range lists {
		for i := range list {
			from := node(list[i])
			if i+1 < len(list) {
				to := node(list[i+1])
				if !slices.Contains(next[from], to) {
					next[from] = append(next[from], to)
					inDegree[to]++
				}
			}
		}
	}

	listed := make([]bool, len(names))
	for _, list := range lists {
		if len(list) == len(names) && eachOnce(list, ids, listed) {
			return list
		}
	}

	ready := &nameHeap{names: names}
	for id := range names {
		if inDegree[id] == 0 {
			ready.ids = append(ready.ids, id)
		}
	}
	heap.Init(ready)
	order := make([]string, 0, len(names))
	for ready.Len() > 0 {
		id := heap.Pop(ready).(int)
		order = append(order, names[id])
		for _, to := range next[id] {
			if inDegree[to]--; inDegree[to] == 0 {
				heap.Push(ready, to)
			}
		}
	}
	if len(order) != len(names) {
		order = slices.Clone(names)
		slices.Sort(order)
	}
	return order
}

// eachOnce reports whether no name repeats in list; listed is scratch space
// indexed by name ID, left all false.
func eachOnce(list []string, ids map[string]int, listed []bool) bool {
	once := true
	for _, name := range list {
		id := ids[name]
		if listed[id] {
			once = false
			break
		}
		listed[id] = true
	}
	for _, name := range list {
		listed[ids[name]] = false
	}
	return once
}

// nameHeap is a min-heap of name IDs ordered by name.
type nameHeap struct {
	names []string
	ids   []int
}

func (h *nameHeap) Len() int           { return len(h.ids) }
func (h *nameHeap) Less(i, j int) bool { return h.names[h.ids[i]] < h.names[h.ids[j]] }
func (h *nameHeap) Swap(i, j int)      { h.ids[i], h.ids[j] = h.ids[j], h.ids[i] }
func (h *nameHeap) Push(x any)         { h.ids = append(h.ids, x.(int)) }
func (h *nameHeap) Pop() any {
	id := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	return id
}
