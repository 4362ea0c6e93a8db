package check

import (
	"cmp"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/discovery"
)

// GroupVersion names an API group version; Group is "" for the core group.
type GroupVersion struct{ Group, Version string }

// String is the apiVersion spelling: "v1" for the core group, "apps/v1"
// otherwise.
func (gv GroupVersion) String() string {
	if gv.Group == "" {
		return gv.Version
	}
	return gv.Group + "/" + gv.Version
}

// parseAPIVersion splits an apiVersion as objects carry it ("apps/v1", "v1").
func parseAPIVersion(apiVersion string) (GroupVersion, bool) {
	group, version, found := strings.Cut(apiVersion, "/")
	if !found {
		group, version = "", apiVersion
	}
	if version == "" || strings.Contains(version, "/") {
		return GroupVersion{}, false
	}
	return GroupVersion{group, version}, true
}

// GroupResource names a resource across its versions.
type GroupResource struct{ Group, Resource string }

func (gr GroupResource) String() string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}

// GroupVersionResource names a resource of one group version.
type GroupVersionResource struct {
	GroupVersion
	Resource string
}

func (r GroupVersionResource) GroupResource() GroupResource {
	return GroupResource{r.Group, r.Resource}
}

// String is "<apiVersion> <resource>", e.g. "coordination.k8s.io/v1alpha2 leasecandidates".
func (r GroupVersionResource) String() string { return r.GroupVersion.String() + " " + r.Resource }

// path is the collection's URL path, cluster-wide.
func (r GroupVersionResource) path() string {
	if r.Group == "" {
		return "/api/" + r.Version + "/" + r.Resource
	}
	return "/apis/" + r.Group + "/" + r.Version + "/" + r.Resource
}

func compareGVR(a, b GroupVersionResource) int {
	return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Version, b.Version))
}

// GroupVersionKind names a kind of one group version.
type GroupVersionKind struct {
	GroupVersion
	Kind string
}

// Resource is one top-level resource a side serves.
type Resource struct {
	GroupVersionResource
	Kind       string
	Namespaced bool
	Verbs      []string
}

func (r *Resource) listable() bool { return slices.Contains(r.Verbs, "list") }

// API is what the API servers of one side serve, from their discovery
// documents: top-level resources only (subresources are not objects).
type API struct {
	resources map[GroupVersionResource]*Resource
	// kinds maps a kind to the resource serving it; where a group version
	// serves a kind under several resources (none do upstream), the first
	// listed wins, as a RESTMapper's first match does.
	kinds map[GroupVersionKind]*Resource
	// versions lists every group resource's served versions in the order of
	// the discovery document: the first is the group's preferred one.
	versions map[GroupResource][]string
	// groupVersions holds every served group version, including those
	// listing no resources.
	groupVersions map[GroupVersion]bool
}

func newAPI() *API {
	return &API{
		resources:     map[GroupVersionResource]*Resource{},
		kinds:         map[GroupVersionKind]*Resource{},
		versions:      map[GroupResource][]string{},
		groupVersions: map[GroupVersion]bool{},
	}
}

// apiFromDiscovery indexes a side's aggregated /apis and /api documents.
func apiFromDiscovery(lists ...discovery.GroupList) *API {
	a := newAPI()
	for _, list := range lists {
		for gi := range list.Items {
			g := &list.Items[gi]
			for vi := range g.Versions {
				v := &g.Versions[vi]
				gv := GroupVersion{g.Name(), v.Version}
				a.groupVersions[gv] = true
				for ri := range v.Resources {
					r := &v.Resources[ri]
					res := &Resource{
						GroupVersionResource: GroupVersionResource{gv, r.Resource},
						Namespaced:           r.Scope == "Namespaced",
						Verbs:                r.Verbs,
					}
					if r.ResponseKind != nil {
						res.Kind = r.ResponseKind.Kind
					}
					a.add(res)
				}
			}
		}
	}
	return a
}

func (a *API) add(r *Resource) {
	if _, dup := a.resources[r.GroupVersionResource]; dup {
		return
	}
	a.groupVersions[r.GroupVersion] = true
	a.resources[r.GroupVersionResource] = r
	gr := r.GroupResource()
	a.versions[gr] = append(a.versions[gr], r.Version)
	if r.Kind != "" {
		k := GroupVersionKind{r.GroupVersion, r.Kind}
		if _, dup := a.kinds[k]; !dup {
			a.kinds[k] = r
		}
	}
}

// Serves reports whether the side serves the resource.
func (a *API) Serves(r GroupVersionResource) bool { return a.resources[r] != nil }

// resource is the served resource, or nil.
func (a *API) resource(r GroupVersionResource) *Resource { return a.resources[r] }

// kind is the resource serving a kind, or nil: what a garbage collector's
// RESTMapper resolves an ownerReference's apiVersion and kind to.
func (a *API) kind(k GroupVersionKind) *Resource { return a.kinds[k] }

// servedVersions lists the versions of a group resource the side serves,
// preferred first.
func (a *API) servedVersions(gr GroupResource) []string { return a.versions[gr] }

// ServesGroupVersion reports whether the side serves a group version.
func (a *API) ServesGroupVersion(gv GroupVersion) bool { return a.groupVersions[gv] }

// sortedResources lists every served resource in a stable order.
func (a *API) sortedResources() []*Resource {
	out := make([]*Resource, 0, len(a.resources))
	for _, r := range a.resources {
		out = append(out, r)
	}
	slices.SortFunc(out, func(x, y *Resource) int { return compareGVR(x.GroupVersionResource, y.GroupVersionResource) })
	return out
}
