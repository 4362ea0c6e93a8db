package discovery

// The types below mirror k8s.io/api apidiscovery/v2 closely enough that
// encoding them (AppendJSON) is byte-identical to encoding/json on upstream's
// types and merging them (MergeGroups) decides exactly as upstream does.
//
// Slices keep the difference between absent (nil) and empty: upstream's merge
// compares resources with reflect.DeepEqual, which tells nil from [], and an
// empty Verbs or Items encodes as [] while a nil one encodes as null.
// ParseGroupList produces nil for a missing or null array and an empty
// non-nil slice for [], exactly as decoding with encoding/json does.

// GroupList mirrors apidiscovery.k8s.io/v2 APIGroupDiscoveryList: the body of an
// aggregated /apis or /api discovery document. The list-level kind, apiVersion
// and metadata are not kept: upstream rebuilds the list without them before
// hashing, and AppendJSON writes the constant ones itself.
type GroupList struct {
	Items []Group
	// source is the document the list was parsed from, "" for a list built
	// otherwise; a snapshot embeds it as it is (Snapshot.AppendJSON), so a
	// parsed list's Items must not be changed.
	source string
}

// Group mirrors apidiscovery.k8s.io/v2 APIGroupDiscovery.
type Group struct {
	// Type is the item's own TypeMeta; API servers leave it empty, but a
	// document that carries it keeps it through a merge as upstream does.
	Type     TypeMeta
	Meta     ObjectMeta
	Versions []Version
}

// Name is the API group name ("" for the core group).
func (g *Group) Name() string { return g.Meta.Name }

// TypeMeta mirrors meta/v1 TypeMeta.
type TypeMeta struct {
	Kind       string
	APIVersion string
}

// ObjectMeta is the part of meta/v1 ObjectMeta a discovery document can carry:
// API servers set only the name. Labels and annotations are kept so a document
// that has them still encodes exactly; ParseGroupList rejects every other
// ObjectMeta field rather than drop it silently.
type ObjectMeta struct {
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// Version mirrors apidiscovery.k8s.io/v2 APIVersionDiscovery.
type Version struct {
	Version   string
	Resources []Resource
	// Freshness is "Current" or "Stale" on documents API servers serve; any
	// string is kept as is.
	Freshness string
}

// Resource mirrors apidiscovery.k8s.io/v2 APIResourceDiscovery.
type Resource struct {
	Resource         string
	ResponseKind     *GVK
	Scope            string
	SingularResource string
	Verbs            []string
	ShortNames       []string
	Categories       []string
	Subresources     []Subresource
}

// Subresource mirrors apidiscovery.k8s.io/v2 APISubresourceDiscovery.
type Subresource struct {
	Subresource   string
	ResponseKind  *GVK
	AcceptedTypes []GVK
	Verbs         []string
}

// GVK mirrors meta/v1 GroupVersionKind.
type GVK struct {
	Group, Version, Kind string
}
