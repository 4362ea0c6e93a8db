package check

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
)

// objectMeta is the part of an object's metadata the check reads.
type objectMeta struct {
	Name            string               `json:"name"`
	Namespace       string               `json:"namespace"`
	OwnerReferences []ownerReference     `json:"ownerReferences"`
	ManagedFields   []managedFieldsEntry `json:"managedFields"`
}

type ownerReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Name       string `json:"name"`
}

// managedFieldsEntry records, per field manager, the apiVersion of its last
// write: which API version a writer actually uses, from the object itself;
// and the fields it set (FieldsV1, decoded only for resources whose schemas
// differ between the sides).
type managedFieldsEntry struct {
	Manager     string          `json:"manager"`
	Operation   string          `json:"operation"`
	APIVersion  string          `json:"apiVersion"`
	Time        string          `json:"time"`
	Subresource string          `json:"subresource"`
	FieldsV1    json.RawMessage `json:"fieldsV1"`
}

// objectMetaWithoutFields decodes an object's metadata leaving the managed
// fields' sets unread: most resources' schemas agree on both sides.
type objectMetaWithoutFields struct {
	Name            string           `json:"name"`
	Namespace       string           `json:"namespace"`
	OwnerReferences []ownerReference `json:"ownerReferences"`
	ManagedFields   []struct {
		Manager     string `json:"manager"`
		Operation   string `json:"operation"`
		APIVersion  string `json:"apiVersion"`
		Time        string `json:"time"`
		Subresource string `json:"subresource"`
	} `json:"managedFields"`
}

func (m *objectMetaWithoutFields) objectMeta() objectMeta {
	out := objectMeta{Name: m.Name, Namespace: m.Namespace, OwnerReferences: m.OwnerReferences}
	for _, e := range m.ManagedFields {
		out.ManagedFields = append(out.ManagedFields, managedFieldsEntry{Manager: e.Manager, Operation: e.Operation,
			APIVersion: e.APIVersion, Time: e.Time, Subresource: e.Subresource})
	}
	return out
}

// objectRef names one object in evidence.
type objectRef struct {
	Resource  GroupVersionResource `json:"-"`
	Namespace string               `json:"namespace,omitempty"`
	Name      string               `json:"name"`
}

func (o objectRef) String() string {
	s := o.Resource.String() + " "
	if o.Namespace != "" {
		s += o.Namespace + "/"
	}
	return s + o.Name
}

// maxExamples bounds the example objects kept per finding.
const maxExamples = 3

// ownerUse is every dependent naming owners of one apiVersion and kind.
type ownerUse struct {
	dependents int
	examples   []objectRef
}

// writerKey is a field manager writing a kind through one apiVersion.
type writerKey struct {
	kind    GroupVersionKind
	manager string
}

// writerUse is the objects a manager last wrote through one apiVersion.
type writerUse struct {
	objects  int
	latest   string
	examples []objectRef
}

// scanResult is what the object scan found; every map is keyed by what a
// finding reports, so its size is bounded by the cluster's API, not by its
// objects.
type scanResult struct {
	// listed is every resource listed, and objects their counts.
	listed  []GroupVersionResource
	objects map[GroupResource]int
	// namespaces counts, for resources served by one side only, their
	// objects per namespace.
	namespaces map[GroupResource]map[string]int
	examples   map[GroupResource][]objectRef
	// owners are ownerReferences whose apiVersion and kind one side serves
	// and the other does not.
	owners map[[2]string]*ownerUse
	// writers are managedFields entries whose apiVersion one side serves for
	// the object's kind and the other does not.
	writers map[writerKey]*writerUse
	// fields are the fields objects set that one side's schema lacks, and
	// fieldObjects counts the objects setting any of a resource's.
	fields       map[fieldKey]*fieldUse
	fieldObjects map[fieldGroup]int
	// malformedFields counts managed-fields sets that could not be read.
	malformedFields int
}

// fieldKey is a field path of a resource ("apps/v1/deployments") one side's
// schema lacks; lacksTo says which.
type fieldKey struct {
	resource, path string
	lacksTo        bool
}

// fieldGroup is a resource and the side whose schema lacks fields of it.
type fieldGroup struct {
	resource string
	lacksTo  bool
}

// fieldUse is the objects that set such a field, and who set it.
type fieldUse struct {
	objects  int
	managers map[string]int
	examples []objectRef
}

func newScanResult() *scanResult {
	return &scanResult{
		objects:      map[GroupResource]int{},
		namespaces:   map[GroupResource]map[string]int{},
		examples:     map[GroupResource][]objectRef{},
		owners:       map[[2]string]*ownerUse{},
		writers:      map[writerKey]*writerUse{},
		fields:       map[fieldKey]*fieldUse{},
		fieldObjects: map[fieldGroup]int{},
	}
}

// merge adds o's counts to r.
func (r *scanResult) merge(o *scanResult) {
	r.listed = append(r.listed, o.listed...)
	for gr, n := range o.objects {
		r.objects[gr] += n
	}
	for gr, byNS := range o.namespaces {
		if r.namespaces[gr] == nil {
			r.namespaces[gr] = map[string]int{}
		}
		for ns, n := range byNS {
			r.namespaces[gr][ns] += n
		}
	}
	for gr, ex := range o.examples {
		r.examples[gr] = appendExamples(r.examples[gr], ex...)
	}
	for k, u := range o.owners {
		if r.owners[k] == nil {
			r.owners[k] = &ownerUse{}
		}
		r.owners[k].dependents += u.dependents
		r.owners[k].examples = appendExamples(r.owners[k].examples, u.examples...)
	}
	for k, u := range o.writers {
		w := r.writers[k]
		if w == nil {
			w = &writerUse{}
			r.writers[k] = w
		}
		w.objects += u.objects
		w.latest = max(w.latest, u.latest)
		w.examples = appendExamples(w.examples, u.examples...)
	}
	for k, u := range o.fields {
		f := r.fields[k]
		if f == nil {
			f = &fieldUse{managers: map[string]int{}}
			r.fields[k] = f
		}
		f.objects += u.objects
		for m, n := range u.managers {
			f.managers[m] += n
		}
		f.examples = appendExamples(f.examples, u.examples...)
	}
	for g, n := range o.fieldObjects {
		r.fieldObjects[g] += n
	}
	r.malformedFields += o.malformedFields
}

func appendExamples(dst []objectRef, add ...objectRef) []objectRef {
	for _, o := range add {
		if len(dst) == maxExamples {
			break
		}
		dst = append(dst, o)
	}
	return dst
}

// scanner classifies objects against the two sides.
type scanner struct {
	from, to *API
	// skew, when not nil, lists the fields one side's schema lacks.
	skew *schemaSkew
	// owner kinds and writer versions are classified once: a cluster's
	// objects name few distinct ones.
	ownerSkew  map[[2]string]bool
	writerSkew map[GroupVersionKind]bool
}

func newScanner(from, to *API, skew *schemaSkew) *scanner {
	return &scanner{from: from, to: to, skew: skew, ownerSkew: map[[2]string]bool{}, writerSkew: map[GroupVersionKind]bool{}}
}

// kindSkewed reports whether exactly one side serves the kind in that
// apiVersion.
func (s *scanner) kindSkewed(k GroupVersionKind) bool {
	skewed, ok := s.writerSkew[k]
	if !ok {
		skewed = (s.from.kind(k) != nil) != (s.to.kind(k) != nil)
		s.writerSkew[k] = skewed
	}
	return skewed
}

func (s *scanner) ownerSkewed(apiVersion, kind string) bool {
	key := [2]string{apiVersion, kind}
	skewed, ok := s.ownerSkew[key]
	if !ok {
		if gv, valid := parseAPIVersion(apiVersion); valid {
			skewed = s.kindSkewed(GroupVersionKind{gv, kind})
		}
		s.ownerSkew[key] = skewed
	}
	return skewed
}

// oneSided reports whether exactly one side serves the group resource, in any
// version.
func (s *scanner) oneSided(gr GroupResource) bool {
	return (len(s.from.servedVersions(gr)) > 0) != (len(s.to.servedVersions(gr)) > 0)
}

// scanResource lists every object of r through c, page by page, and
// classifies each as it is decoded. A list restarted after its continue token
// expired starts its counts again.
func (s *scanner) scanResource(ctx context.Context, c *client, r *Resource, pageSize int) (*scanResult, error) {
	res := newScanResult()
	gr := r.GroupResource()
	oneSided := s.oneSided(gr)
	withFields := s.skew != nil && s.skew.listsGroupResource(gr)
	reset := func() { res = newScanResult() }
	err := c.listAll(ctx, r.path(), acceptMetadataList, pageSize, "listing "+r.String(), reset, func(dec *json.Decoder) error {
		var meta objectMeta
		if withFields {
			var item struct {
				Metadata objectMeta `json:"metadata"`
			}
			if err := dec.Decode(&item); err != nil {
				return err
			}
			meta = item.Metadata
		} else {
			var item struct {
				Metadata objectMetaWithoutFields `json:"metadata"`
			}
			if err := dec.Decode(&item); err != nil {
				return err
			}
			meta = item.Metadata.objectMeta()
		}
		s.classify(res, r, oneSided, &meta)
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.listed = []GroupVersionResource{r.GroupVersionResource}
	return res, nil
}

func (s *scanner) classify(res *scanResult, r *Resource, oneSided bool, m *objectMeta) {
	gr := r.GroupResource()
	ref := objectRef{Resource: r.GroupVersionResource, Namespace: m.Namespace, Name: m.Name}
	res.objects[gr]++
	if oneSided {
		if len(res.examples[gr]) < maxExamples {
			res.examples[gr] = append(res.examples[gr], ref)
		}
		if m.Namespace != "" {
			if res.namespaces[gr] == nil {
				res.namespaces[gr] = map[string]int{}
			}
			res.namespaces[gr][m.Namespace]++
		}
	}
	for _, o := range m.OwnerReferences {
		if !s.ownerSkewed(o.APIVersion, o.Kind) {
			continue
		}
		key := [2]string{o.APIVersion, o.Kind}
		u := res.owners[key]
		if u == nil {
			u = &ownerUse{}
			res.owners[key] = u
		}
		u.dependents++
		u.examples = appendExamples(u.examples, ref)
	}
	for _, f := range m.ManagedFields {
		gv, ok := parseAPIVersion(f.APIVersion)
		if !ok || r.Kind == "" {
			continue
		}
		k := GroupVersionKind{gv, r.Kind}
		if !s.kindSkewed(k) {
			continue
		}
		key := writerKey{k, f.Manager}
		w := res.writers[key]
		if w == nil {
			w = &writerUse{}
			res.writers[key] = w
		}
		w.objects++
		w.latest = max(w.latest, f.Time)
		w.examples = appendExamples(w.examples, ref)
	}
	if s.skew != nil {
		s.classifyFields(res, r, m, ref)
	}
}

// classifyFields records the fields the object's managers set that one
// side's schema lacks, each path once per object.
func (s *scanner) classifyFields(res *scanResult, r *Resource, m *objectMeta, ref objectRef) {
	seen := map[fieldKey]bool{}
	groups := map[fieldGroup]bool{}
	defer func() {
		for g := range groups {
			res.fieldObjects[g]++
		}
	}()
	for _, f := range m.ManagedFields {
		gv, ok := parseAPIVersion(f.APIVersion)
		if !ok {
			continue
		}
		rs := s.skew.resources[tableKey(GroupVersionResource{gv, r.Resource})]
		if rs == nil {
			continue
		}
		resource := tableKey(GroupVersionResource{gv, r.Resource})
		for _, side := range []struct {
			trie    *pathTrie
			lacksTo bool
		}{{rs.onlyFrom, true}, {rs.onlyTo, false}} {
			err := side.trie.managedPaths(f.FieldsV1, func(path string) {
				key := fieldKey{resource, path, side.lacksTo}
				u := res.fields[key]
				if u == nil {
					u = &fieldUse{managers: map[string]int{}}
					res.fields[key] = u
				}
				groups[fieldGroup{resource, side.lacksTo}] = true
				if !seen[key] {
					seen[key] = true
					u.objects++
					u.examples = appendExamples(u.examples, ref)
				}
				u.managers[f.Manager]++
			})
			if err != nil {
				res.malformedFields++
			}
		}
	}
}

// listPlan chooses, for every group resource either side serves, the one
// resource whose list shows its objects: the current side's preferred
// listable version, or, for a group resource only the target serves, the
// target's when its server shares the current cluster's storage (target may
// be nil). Each group resource is listed once: its versions are the same
// objects.
func listPlan(from *API, to *API) (fromList, toList []*Resource) {
	seen := map[GroupResource]bool{}
	for _, r := range from.sortedResources() {
		gr := r.GroupResource()
		if seen[gr] {
			continue
		}
		if pick := preferredListable(from, gr); pick != nil {
			seen[gr] = true
			fromList = append(fromList, pick)
		}
	}
	if to == nil {
		return fromList, nil
	}
	for _, r := range to.sortedResources() {
		gr := r.GroupResource()
		if seen[gr] || len(from.servedVersions(gr)) > 0 {
			continue
		}
		if pick := preferredListable(to, gr); pick != nil {
			seen[gr] = true
			toList = append(toList, pick)
		}
	}
	return fromList, toList
}

func preferredListable(a *API, gr GroupResource) *Resource {
	for _, v := range a.servedVersions(gr) {
		if r := a.resource(GroupVersionResource{GroupVersion{gr.Group, v}, gr.Resource}); r.listable() {
			return r
		}
	}
	return nil
}

// sortedKeys returns a map's keys sorted by cmp.
func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	return slices.SortedFunc(maps.Keys(m), cmp)
}
