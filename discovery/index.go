package discovery

import (
	"cmp"
	"slices"
)

// ServerSet is a set of snapshot servers, bit i standing for Index.Servers()[i].
type ServerSet uint64

// Len is the number of servers in the set.
func (s ServerSet) Len() int {
	n := 0
	for ; s != 0; s &= s - 1 {
		n++
	}
	return n
}

// Has reports whether server i is in the set.
func (s ServerSet) Has(i int) bool { return s&(1<<uint(i)) != 0 }

// Pick returns the index of member pick modulo the set's size: a running
// counter as pick spreads choices uniformly. The set must not be empty.
func (s ServerSet) Pick(pick uint64) int {
	for n := pick % uint64(s.Len()); n > 0; n-- {
		s &= s - 1
	}
	i := 0
	for s&1 == 0 {
		s >>= 1
		i++
	}
	return i
}

type groupVersion struct{ group, version string }

type groupVersionResource struct{ group, version, resource string }

// Document is a discovery response skewgate serves itself.
type Document struct {
	// Body is the response body exactly as kube-apiserver's JSON serializer
	// writes it (kind and apiVersion included).
	Body []byte
	// ETag is the quoted entity tag upstream computes for the same content.
	ETag string
	// ContentType and CacheControl are the headers upstream answers with;
	// CacheControl may be empty.
	ContentType, CacheControl string
}

// Index answers "who serves this?" for one snapshot. It is built once per
// snapshot and then only read, so any number of requests may use it at once.
type Index struct {
	snap    *Snapshot
	all     ServerSet
	healthy ServerSet
	// routable is healthy, or all while no server is healthy (Routable).
	routable ServerSet
	// draining are the servers about to be stopped (Server.Draining).
	draining ServerSet
	// preferred indexes Servers() in node-local mode, -1 otherwise.
	preferred int
	// gvr and gv come from every server's /apis and /api; group holds, per API
	// group, the servers that serve every version of it that any server serves.
	gvr     map[groupVersionResource]ServerSet
	gv      map[groupVersion]ServerSet
	group   map[string]ServerSet
	apis    Document
	api     Document
	openAPI openAPIIndex
	// fields holds the resources the servers know different fields of;
	// nil when the snapshot says nothing about fields.
	fields map[groupVersionResource]*resourceFields
	// minors order the servers by release (minorOf), for the writes and
	// reads of a resource whose schemas differ.
	minors  []int
	options IndexOptions
}

// NewIndex is NewIndexWith the default options.
func NewIndex(snap *Snapshot) (*Index, error) { return NewIndexWith(snap, IndexOptions{}) }

// NewIndexWith validates the snapshot, then builds the capability maps and
// the merged /apis and /api documents.
func NewIndexWith(snap *Snapshot, options IndexOptions) (*Index, error) {
	if err := snap.Validate(); err != nil {
		return nil, err
	}
	ix := &Index{
		options:   options,
		snap:      snap,
		preferred: snap.PreferredIndex(),
		gvr:       make(map[groupVersionResource]ServerSet),
		gv:        make(map[groupVersion]ServerSet),
		group:     make(map[string]ServerSet),
	}
	for i := range snap.Servers {
		srv := &snap.Servers[i]
		bit := ServerSet(1) << uint(i)
		ix.all |= bit
		if srv.Healthy {
			ix.healthy |= bit
		}
		if srv.Draining {
			ix.draining |= bit
		}
		for _, list := range [2]*GroupList{&srv.APIs, &srv.Core} {
			for g := range list.Items {
				grp := &list.Items[g]
				for v := range grp.Versions {
					ver := &grp.Versions[v]
					ix.gv[groupVersion{grp.Name(), ver.Version}] |= bit
					for r := range ver.Resources {
						ix.gvr[groupVersionResource{grp.Name(), ver.Version, ver.Resources[r].Resource}] |= bit
					}
				}
			}
		}
	}
	ix.routable = ix.healthy
	if ix.routable == 0 {
		ix.routable = ix.all
	}
	ix.indexGroups()
	ix.indexFields(snap)
	ix.buildOpenAPI()
	ix.apis = mergedDocument(snap.Servers, func(s *Server) []Group { return s.APIs.Items })
	ix.api = mergedDocument(snap.Servers, func(s *Server) []Group { return s.Core.Items })
	return ix, nil
}

// indexGroups records, for the legacy /apis/<group> document, the servers whose
// answer lists every version of the group: those are the ones that do not lie by
// omission.
func (ix *Index) indexGroups() {
	versionsOf := make(map[string][]ServerSet)
	for gv, set := range ix.gv {
		if gv.group != "" {
			versionsOf[gv.group] = append(versionsOf[gv.group], set)
		}
	}
	for group, sets := range versionsOf {
		complete, some := ix.all, ServerSet(0)
		for _, s := range sets {
			complete &= s
			some |= s
		}
		if complete == 0 {
			complete = some
		}
		ix.group[group] = complete
	}
}

// mergedDocument merges one discovery document across all servers, healthy or
// not: a server that fails one probe must not make its APIs vanish from
// discovery; the controller decides when a server leaves the snapshot.
func mergedDocument(servers []Server, groupsOf func(*Server) []Group) Document {
	in := make([]ServerGroups, len(servers))
	for i := range servers {
		in[i] = ServerGroups{ServerID: servers[i].ID, Groups: groupsOf(&servers[i])}
	}
	lowest := slices.MinFunc(in, func(a, b ServerGroups) int { return cmp.Compare(a.ServerID, b.ServerID) })
	merged := GroupList{Items: MergeGroups(in, lowest.ServerID)}
	return Document{Body: ResponseBody(merged), ETag: ETag(merged), ContentType: AggregatedDiscoveryJSON, CacheControl: "public"}
}

// AggregatedDiscoveryJSON is the media type of the merged /apis and /api.
const AggregatedDiscoveryJSON = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// Snapshot returns the snapshot the index was built from.
func (ix *Index) Snapshot() *Snapshot { return ix.snap }

// Servers returns the snapshot's servers; ServerSet bits and Decision.Server
// index this slice.
func (ix *Index) Servers() []Server { return ix.snap.Servers }

// All is the set of every server in the snapshot.
func (ix *Index) All() ServerSet { return ix.all }

// Preferred is the index in Servers() of the server that takes every request
// it can serve (node-local mode), or -1 when requests are balanced.
func (ix *Index) Preferred() int { return ix.preferred }

// Healthy is the set of servers whose last probe succeeded.
func (ix *Index) Healthy() ServerSet { return ix.healthy }

// MergedAPIs is the document served for GET /apis with the aggregated Accept.
func (ix *Index) MergedAPIs() *Document { return &ix.apis }

// MergedCoreAPI is the document served for GET /api with the aggregated Accept.
func (ix *Index) MergedCoreAPI() *Document { return &ix.api }

// ServersForResource is the set of servers serving group/version/resource.
func (ix *Index) ServersForResource(group, version, resource string) ServerSet {
	return ix.gvr[groupVersionResource{group, version, resource}]
}

// ServersForGroupVersion is the set of servers serving group/version.
func (ix *Index) ServersForGroupVersion(group, version string) ServerSet {
	return ix.gv[groupVersion{group, version}]
}
