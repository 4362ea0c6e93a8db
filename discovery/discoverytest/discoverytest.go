package discoverytest

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
)

// Server describes one API server of a test control plane.
type Server struct {
	ID, Cluster, Version string
	Healthy, Draining    bool
	// Groups maps "group/version" to resource names; the core group is "/v1".
	Groups map[string][]string
	// OpenAPI maps the paths of the server's /openapi/v3 index ("apis/apps/v1")
	// to their hashes; nil leaves the index out of the snapshot.
	OpenAPI map[string]string
	// FieldSelectors and MissingFields are the server's field-level data
	// (discovery.Server); nil leaves them out.
	FieldSelectors, MissingFields map[string][]string
}

// commonAPIs is what every server of the skewed control plane serves.
var commonAPIs = map[string][]string{
	"/v1":                                  {"pods", "namespaces", "configmaps"},
	"apps/v1":                              {"deployments", "statefulsets"},
	"admissionregistration.k8s.io/v1":      {"validatingadmissionpolicies"},
	"admissionregistration.k8s.io/v1beta1": {"validatingadmissionpolicies"},
	"coordination.k8s.io/v1":               {"leases"},
	"apiextensions.k8s.io/v1":              {"customresourcedefinitions"},
	"authorization.k8s.io/v1":              {"subjectaccessreviews"},
	"rbac.authorization.k8s.io/v1":         {"roles", "rolebindings"},
	"batch/v1":                             {"jobs", "cronjobs"},
	"policy/v1":                            {"poddisruptionbudgets"},
}

// WithFieldSkew gives the skewed control plane's servers field-level data:
// kube-a (v1.35) accepts only metadata.name and metadata.namespace as pod
// field-selector labels, kube-b and kube-c also spec.nodeName; kube-a's
// deployments lack fields the others' have.
func WithFieldSkew(servers []Server) []Server {
	servers[0].FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace"}}
	servers[1].FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace", "spec.nodeName"}}
	servers[2].FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace", "spec.nodeName"}}
	servers[0].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.template.spec.hostUsers"}}
	return servers
}

// WithBothWayFieldSkew gives the skewed control plane's deployments the
// schemas of v1.35 and v1.36, which differ both ways: only kube-a (v1.35)
// knows spec.template.spec.workloadRef, only kube-b and kube-c (v1.36)
// spec.template.spec.schedulingGroup. It returns the servers and the
// snapshot's FieldSkew; SnapshotJSONWithFieldSkew puts them together.
func WithBothWayFieldSkew(servers []Server) ([]Server, map[string]discovery.FieldSkew) {
	const deployments = "apps/v1/deployments"
	servers[0].MissingFields = map[string][]string{deployments: {"spec.template.spec.schedulingGroup"}}
	servers[1].MissingFields = map[string][]string{deployments: {"spec.template.spec.workloadRef"}}
	servers[2].MissingFields = map[string][]string{deployments: {"spec.template.spec.workloadRef"}}
	return servers, map[string]discovery.FieldSkew{deployments: {
		Paths: []string{"spec.template.spec.schedulingGroup", "spec.template.spec.workloadRef"},
		Schemas: []discovery.FieldSchema{
			{Servers: []int{0}, Knows: []int{1}},
			{Servers: []int{1, 2}, Knows: []int{0}},
		},
	}}
}

// SkewedControlPlane is a v1.35 server next to two v1.36 servers, one of which
// enables an alpha API: the shape of a rolling upgrade. Only the v1.36 servers
// serve mutatingadmissionpolicies; only kube-c serves coordination.k8s.io/v1alpha2.
func SkewedControlPlane() []Server {
	return []Server{
		{ID: "apiserver-aaa", Cluster: "kube-a", Version: "v1.35.4", Healthy: true, Groups: withAPIs(nil)},
		{ID: "apiserver-bbb", Cluster: "kube-b", Version: "v1.36.3", Healthy: true, Groups: withAPIs(map[string][]string{
			"admissionregistration.k8s.io/v1": {"mutatingadmissionpolicies"},
		})},
		{ID: "apiserver-ccc", Cluster: "kube-c", Version: "v1.36.3", Healthy: true, Groups: withAPIs(map[string][]string{
			"admissionregistration.k8s.io/v1": {"mutatingadmissionpolicies"},
			"coordination.k8s.io/v1alpha2":    {"leasecandidates"},
		})},
	}
}

func withAPIs(extra map[string][]string) map[string][]string {
	m := make(map[string][]string, len(commonAPIs)+len(extra))
	for k, v := range commonAPIs {
		m[k] = slices.Clone(v)
	}
	for k, v := range extra {
		m[k] = append(m[k], v...)
	}
	return m
}

type resourceJSON struct {
	Resource         string   `json:"resource"`
	Scope            string   `json:"scope"`
	SingularResource string   `json:"singularResource"`
	Verbs            []string `json:"verbs"`
}

type versionJSON struct {
	Version   string         `json:"version"`
	Resources []resourceJSON `json:"resources"`
	Freshness string         `json:"freshness"`
}

type groupJSON struct {
	Metadata map[string]string `json:"metadata"`
	Versions []versionJSON     `json:"versions"`
}

// GroupListJSON renders the /apis (core false) or /api (core true) document of
// a server serving groups, in the deterministic order a real server would use
// for equal priorities (group name; newer version first).
func GroupListJSON(groups map[string][]string, core bool) json.RawMessage {
	byGroup := map[string][]versionJSON{}
	for gv, resources := range groups {
		g, v, _ := strings.Cut(gv, "/")
		if (g == "") != core {
			continue
		}
		var rs []resourceJSON
		for _, r := range resources {
			rs = append(rs, resourceJSON{r, "Namespaced", strings.TrimSuffix(r, "s"), []string{"get", "list", "watch"}})
		}
		byGroup[g] = append(byGroup[g], versionJSON{v, rs, "Current"})
	}
	items := []groupJSON{}
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		meta := map[string]string{}
		if g != "" {
			meta["name"] = g
		}
		vs := byGroup[g]
		slices.SortFunc(vs, func(a, b versionJSON) int { return strings.Compare(b.Version, a.Version) })
		items = append(items, groupJSON{meta, vs})
	}
	return mustMarshal(map[string]any{
		"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
		"metadata": map[string]any{}, "items": items,
	})
}

// SnapshotJSON renders a snapshot document for the servers.
func SnapshotJSON(generation uint64, servers []Server) json.RawMessage {
	members := make([]discovery.Server, 0, len(servers))
	for _, s := range servers {
		srv := ServerOf(s.ID, s.Cluster, s.Version, s.Healthy,
			GroupListJSON(s.Groups, false), GroupListJSON(s.Groups, true), s.OpenAPI)
		srv.FieldSelectors, srv.MissingFields = s.FieldSelectors, s.MissingFields
		srv.Draining = s.Draining
		members = append(members, srv)
	}
	return Encode(generation, "", members...)
}

// SnapshotJSONWithFieldSkew is SnapshotJSON with the snapshot's FieldSkew.
func SnapshotJSONWithFieldSkew(generation uint64, servers []Server, skew map[string]discovery.FieldSkew) json.RawMessage {
	snap, err := discovery.ParseSnapshot(SnapshotJSON(generation, servers))
	if err != nil {
		panic("discoverytest: " + err.Error())
	}
	snap.FieldSkew = skew
	if err := snap.Validate(); err != nil {
		panic("discoverytest: " + err.Error())
	}
	return snap.AppendJSON(nil)
}

// Prefer returns the snapshot document with its preferred server set to id
// (node-local mode), whether or not id names one of its servers.
func Prefer(snapshot json.RawMessage, id string) json.RawMessage {
	snap, err := discovery.ParseSnapshot(snapshot)
	if err != nil {
		panic("discoverytest: " + err.Error())
	}
	snap.Preferred = id
	return snap.AppendJSON(nil)
}

// ServerOf is a snapshot server with the /apis and /api documents given (as
// rendered by GroupListJSON or captured from a real server) and, unless nil,
// the /openapi/v3 index paths and hashes.
func ServerOf(id, cluster, version string, healthy bool, apis, api []byte, openAPI map[string]string) discovery.Server {
	srv := discovery.Server{ID: id, Cluster: cluster, Version: version, Healthy: healthy}
	var err error
	if srv.APIs, err = discovery.ParseGroupList(apis); err != nil {
		panic("discoverytest: apis: " + err.Error())
	}
	if srv.Core, err = discovery.ParseGroupList(api); err != nil {
		panic("discoverytest: api: " + err.Error())
	}
	if openAPI != nil {
		if srv.OpenAPI, err = discovery.ParseOpenAPIIndex(OpenAPIIndexJSON(openAPI)); err != nil {
			panic("discoverytest: openapi: " + err.Error())
		}
	}
	return srv
}

// CapturedSnapshotJSON is the snapshot document of servers captured from real
// kube-apiservers (fixtures.Servers), every one healthy, server i in cluster
// "kube-<version>".
func CapturedSnapshotJSON(generation uint64, servers []fixtures.Server) json.RawMessage {
	members := make([]discovery.Server, len(servers))
	for i, s := range servers {
		members[i] = ServerOf(s.ID, "kube-"+s.Version, s.Version, true, s.APIs, s.API, nil)
	}
	return Encode(generation, "", members...)
}

// Encode is the snapshot document of the servers as the controller writes it
// (discovery.NewSnapshot, then AppendJSON); it panics on a snapshot
// NewSnapshot refuses.
func Encode(generation uint64, preferred string, servers ...discovery.Server) json.RawMessage {
	snap, err := discovery.NewSnapshot(generation, preferred, servers)
	if err != nil {
		panic("discoverytest: " + err.Error())
	}
	return snap.AppendJSON(nil)
}

// OpenAPIIndexJSON renders a /openapi/v3 index as kube-apiserver writes it:
// per path, the server-relative URL carrying the path's hash.
func OpenAPIIndexJSON(hashes map[string]string) json.RawMessage {
	type entry struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	}
	paths := make(map[string]entry, len(hashes))
	for path, hash := range hashes {
		paths[path] = entry{"/openapi/v3/" + path + "?hash=" + hash}
	}
	return mustMarshal(map[string]any{"paths": paths})
}

// OpenAPIPaths are the paths of the /openapi/v3 index of a server serving
// groups (Server.Groups), as kube-apiserver lists them: every group and group
// version plus the non-resource paths every server has.
func OpenAPIPaths(groups map[string][]string) []string {
	paths := []string{".well-known/openid-configuration", "api", "apis", "logs", "openid/v1/jwks", "version"}
	for gv := range groups {
		if g, v, _ := strings.Cut(gv, "/"); g == "" {
			paths = append(paths, "api/"+v)
		} else {
			paths = append(paths, "apis/"+g, "apis/"+gv)
		}
	}
	slices.Sort(paths)
	return slices.Compact(paths)
}

func mustMarshal(v any) json.RawMessage {
	out, err := json.Marshal(v)
	if err != nil {
		panic("discoverytest: " + err.Error())
	}
	return out
}
