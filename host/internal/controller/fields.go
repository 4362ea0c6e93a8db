package controller

import (
	"encoding/binary"
	"maps"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/schemafields"
)

// metadataLabels are the field-selector labels every resource accepts:
// metadata.namespace only where the resource is namespaced (custom resources
// of a cluster-scoped definition refuse it).
func metadataLabels(namespaced bool) []string {
	if namespaced {
		return []string{"metadata.name", "metadata.namespace"}
	}
	return []string{"metadata.name"}
}

// fieldKnowledge is the snapshot's field-level knowledge.
type fieldKnowledge struct {
	// servers are each server's part (discovery.Server's FieldSelectors and
	// MissingFields), in snapshot order.
	servers []serverFields
	// skew is the snapshot's FieldSkew.
	skew map[string]discovery.FieldSkew
	// tooSkewed are the resources left out of skew because their schemas
	// differ in more than discovery.MaxSkewPaths paths, with how many.
	tooSkewed map[string]int
}

type serverFields struct {
	selectors, missing map[string][]string
}

// servedResource is one server's resource as its discovery describes it.
type servedResource struct {
	server         int
	group, version string
	resource       *discovery.Resource
}

// kindOf returns the schema of the resource's kind in the server's OpenAPI
// v3 document of the resource's group version, when that document was
// fetched.
func (r servedResource) kindOf(s *serverState, docs map[string]*schemafields.Document) (schemafields.Kind, bool) {
	k := r.resource.ResponseKind
	if k == nil || !s.openAPI.ok {
		return schemafields.Kind{}, false
	}
	gvk := *k
	// Discovery leaves out the group and version of a kind of the resource's
	// own group version.
	if gvk.Group == "" && gvk.Version == "" {
		gvk.Group, gvk.Version = r.group, r.version
	}
	path := "apis/" + r.group + "/" + r.version
	if r.group == "" {
		path = "api/" + r.version
	}
	i, found := slices.BinarySearchFunc(s.openAPI.value, path, func(p discovery.OpenAPIPath, path string) int {
		switch {
		case p.Path < path:
			return -1
		case p.Path > path:
			return 1
		}
		return 0
	})
	if !found {
		return schemafields.Kind{}, false
	}
	doc := docs[s.openAPI.value[i].Hash]
	if doc == nil {
		return schemafields.Kind{}, false
	}
	kind, ok := doc.Kinds[gvk]
	return kind, ok
}

func (r servedResource) listable() bool {
	return slices.Contains(r.resource.Verbs, "list") || slices.Contains(r.resource.Verbs, "watch")
}

// computeFieldKnowledge works out, for the servers in snapshot order:
//
//   - for every listable resource whose accepted field-selector labels differ
//     between the servers serving it, each such server's labels: those of
//     its version's table (labelsOfVersion), or for a resource the table
//     lacks the metadata labels and the selectable fields its own OpenAPI v3
//     document publishes for the kind; and while one of them is unhealthy,
//     for every resource whose labels the tables give for all of them and
//     differ between the tables' minors;
//   - for every resource at least two healthy servers serve, where the
//     servers' documents are known: the field paths of the kind that another
//     of them has and each one lacks (at most discovery.MaxMissingFields of
//     them), and which of them has each path that differs (FieldSkew).
func computeFieldKnowledge(states []*serverState, tables []labelTable, docs map[string]*schemafields.Document) *fieldKnowledge {
	out := &fieldKnowledge{servers: make([]serverFields, len(states))}
	byKey := map[string][]servedResource{}
	for i, s := range states {
		for _, list := range []*discovery.GroupList{&s.core.value, &s.apis.value} {
			for gi := range list.Items {
				g := &list.Items[gi]
				for vi := range g.Versions {
					v := &g.Versions[vi]
					for ri := range v.Resources {
						r := &v.Resources[ri]
						key := discovery.ResourceKey(g.Name(), v.Version, r.Resource)
						byKey[key] = append(byKey[key], servedResource{i, g.Name(), v.Version, r})
					}
				}
			}
		}
	}
	versionLabels := make([]map[string][]string, len(states))
	for i, s := range states {
		versionLabels[i] = labelsOfVersion(tables, s.version)
	}
	for _, key := range slices.Sorted(maps.Keys(byKey)) {
		servers := byKey[key]
		if len(servers) < 2 {
			continue
		}
		assignSelectors(out.servers, key, servers, states, tables, versionLabels, docs)
		schemas := comparedSchemas(servers, states, docs)
		assignMissing(out.servers, key, schemas)
		out.assignSkew(key, schemas)
	}
	return out
}

func assignSelectors(out []serverFields, key string, servers []servedResource, states []*serverState,
	tables []labelTable, versionLabels []map[string][]string, docs map[string]*schemafields.Document) {
	if !slices.ContainsFunc(servers, servedResource.listable) {
		return
	}
	labels := make([][]string, len(servers))
	differ, fromTables, someUnhealthy := false, true, false
	for i, r := range servers {
		someUnhealthy = someUnhealthy || !states[r.server].healthy
		l, known := versionLabels[r.server][key]
		fromTables = fromTables && known
		if !known {
			l = metadataLabels(r.resource.Scope == "Namespaced")
			if kind, ok := r.kindOf(states[r.server], docs); ok && len(kind.SelectableFields) > 0 {
				// A label the snapshot cannot carry is left out: the server
				// then counts as refusing it, which only narrows less.
				l = append(slices.Clone(l), kind.SelectableFields...)
				l = slices.DeleteFunc(l, func(label string) bool { return !snapshotToken(label) })
				slices.Sort(l)
				l = slices.Compact(l)
			}
		}
		labels[i] = l
		differ = differ || !slices.Equal(l, labels[0])
	}
	// Alike labels are said too while a server of the resource is unhealthy,
	// if the tables give every server's and a minor release changed them: the
	// unhealthy server's labels are those of the version it had, and back
	// from a restart as a newer one it may be the one server that accepts a
	// label. Unsaid, no server would be known to refuse that label, and the
	// others' 400 would reach the client rather than a 503. Labels that come
	// from a server's own schema are not said: an aggregated server publishes
	// none, and would seem to refuse all but the metadata.
	if !differ && !(someUnhealthy && fromTables && labelsChangedAcrossMinors(tables, key)) {
		return
	}
	for i, r := range servers {
		k := &out[r.server]
		if k.selectors == nil {
			k.selectors = map[string][]string{}
		}
		k.selectors[key] = labels[i]
	}
}

// comparedSchema is a server's schema of a resource's kind, one the
// comparison can rely on.
type comparedSchema struct {
	server int
	fields schemafields.Fields
}

// comparedSchemas are the schemas of the resource's kind of the servers
// whose schema is known: healthy, with the kind in their fetched document
// and not truncated. A server that is down is not compared: what it lacks
// is unknown.
func comparedSchemas(servers []servedResource, states []*serverState, docs map[string]*schemafields.Document) []comparedSchema {
	var compared []comparedSchema
	for _, r := range servers {
		if !states[r.server].healthy {
			continue
		}
		if kind, ok := r.kindOf(states[r.server], docs); ok && !kind.Truncated {
			compared = append(compared, comparedSchema{r.server, kind.Fields})
		}
	}
	return compared
}

func assignMissing(out []serverFields, key string, compared []comparedSchema) {
	for _, a := range compared {
		var lacking []string
		for _, b := range compared {
			if a.fields == b.fields {
				continue
			}
			// The first discovery.MaxMissingFields of the union are among the first
			// discovery.MaxMissingFields of each part.
			paths, _ := a.fields.Lacks(b.fields, discovery.MaxMissingFields)
			for _, p := range paths {
				lacking = append(lacking, asSnapshotToken(p))
			}
		}
		if len(lacking) == 0 {
			continue
		}
		slices.Sort(lacking)
		lacking = slices.Compact(lacking)
		k := &out[a.server]
		if k.missing == nil {
			k.missing = map[string][]string{}
		}
		k.missing[key] = lacking[:min(len(lacking), discovery.MaxMissingFields)]
	}
}

// assignSkew records the resource's FieldSkew when the compared schemas
// differ: one FieldSchema per distinct schema, with the servers that have it.
func (k *fieldKnowledge) assignSkew(key string, compared []comparedSchema) {
	var skew discovery.FieldSkew
	var distinct []schemafields.Fields
	for _, c := range compared {
		i := slices.Index(distinct, c.fields)
		if i < 0 {
			i = len(distinct)
			distinct = append(distinct, c.fields)
			skew.Schemas = append(skew.Schemas, discovery.FieldSchema{Knows: []int{}})
		}
		skew.Schemas[i].Servers = append(skew.Schemas[i].Servers, c.server)
	}
	if len(distinct) < 2 {
		return
	}
	count := 0
	for path, having := range schemafields.Differing(distinct) {
		// A path the snapshot cannot carry is left out rather than
		// respelled as MissingFields' evidence is: the plugin matches these
		// paths with the names a body sets, and a respelled one names
		// another field. Its properties, which contain it, are left out
		// too, so a body setting any of them is routed by MissingFields
		// alone, as with schema 1.2.
		if !snapshotFieldPath(path) {
			continue
		}
		if count++; count > discovery.MaxSkewPaths {
			continue
		}
		for i := range skew.Schemas {
			if having&(1<<uint(i)) != 0 {
				skew.Schemas[i].Knows = append(skew.Schemas[i].Knows, len(skew.Paths))
			}
		}
		skew.Paths = append(skew.Paths, path)
	}
	switch {
	case count > discovery.MaxSkewPaths:
		if k.tooSkewed == nil {
			k.tooSkewed = map[string]int{}
		}
		k.tooSkewed[key] = count
	case count > 0:
		if k.skew == nil {
			k.skew = map[string]discovery.FieldSkew{}
		}
		k.skew[key] = skew
	}
}

// fieldKnowledgeFor returns computeFieldKnowledge of the servers, computed
// again only when something it depends on changed: a server's ID, version,
// health or documents (told by their ETags), or the reduced schemas.
func (c *Controller) fieldKnowledgeFor(states []*serverState) *fieldKnowledge {
	key := c.fieldKey[:0]
	cacheable := true
	for _, s := range states {
		key = append(key, s.id...)
		key = append(key, 0)
		key = append(key, s.version...)
		key = append(key, 0)
		if s.healthy {
			key = append(key, 1)
		}
		for _, etag := range []string{s.apis.etag, s.core.etag, s.openAPI.etag} {
			cacheable = cacheable && etag != ""
			key = append(key, etag...)
			key = append(key, 0)
		}
	}
	key = binary.AppendUvarint(key, c.schemas.generation)
	if cacheable && c.fieldKnowledge != nil && string(key) == string(c.fieldKeyLast) {
		c.fieldKey = key
		return c.fieldKnowledge
	}
	c.fieldKey, c.fieldKeyLast = c.fieldKeyLast, key
	c.fieldKnowledge = computeFieldKnowledge(states, c.labelTables, c.schemas.docs)
	for _, key := range slices.Sorted(maps.Keys(c.fieldKnowledge.tooSkewed)) {
		c.log.Warn("a resource's schemas differ in more field paths than the snapshot carries; its writes are routed by the servers' missing fields alone, not by the fields their body sets",
			"resource", key, "paths", c.fieldKnowledge.tooSkewed[key], "max", discovery.MaxSkewPaths)
	}
	return c.fieldKnowledge
}

// maxTokenLength and snapshotToken are the snapshot's rule for a label or a
// field path (discovery checks it too, for the whole snapshot): applied here,
// an odd name from one server's schema cannot cost the snapshot.
const maxTokenLength = 253

func snapshotToken(s string) bool {
	if s == "" || len(s) > maxTokenLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// snapshotFieldPath reports whether the snapshot can carry a field path of
// its FieldSkew: a token with no empty name (a part between dots, less the
// "[]" after an array's), as a property named "" or "[]" would give.
func snapshotFieldPath(path string) bool {
	if !snapshotToken(path) {
		return false
	}
	for part := range strings.SplitSeq(path, ".") {
		for strings.HasSuffix(part, "[]") {
			part = part[:len(part)-2]
		}
		if part == "" {
			return false
		}
	}
	return true
}

// asSnapshotToken spells a field path as the snapshot can carry it: bytes
// the rule refuses become '?', and a path too long is cut. The paths are
// evidence for people; which resource lacks fields is what routes.
func asSnapshotToken(path string) string {
	if snapshotToken(path) {
		return path
	}
	b := []byte(path[:min(len(path), maxTokenLength)])
	for i, c := range b {
		if c <= ' ' || c >= 0x7f {
			b[i] = '?'
		}
	}
	if len(b) == 0 {
		return "?"
	}
	return string(b)
}
