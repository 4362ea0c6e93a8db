// Package discoverytest builds snapshot documents for tests: a control plane in
// the middle of a rolling upgrade, described by which server serves what.
package discoverytest

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// Server describes one API server of a test control plane.
type Server struct {
	ID, Cluster, Version string
	Healthy              bool
	// Groups maps "group/version" to resource names; the core group is "/v1".
	Groups map[string][]string
	// OpenAPI maps the paths of the server's /openapi/v3 index ("apis/apps/v1")
	// to their hashes; nil leaves the index out of the snapshot.
	OpenAPI map[string]string
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

// SkewedControlPlane is a v1.35 server next to two v1.36 servers, one of which
// enables an alpha API: the shape of a rolling upgrade. Only the v1.36 servers
// serve mutatingadmissionpolicies; only kube-c serves coordination.k8s.io/v1alpha2.
func SkewedControlPlane() []Server {
	return []Server{
		{"apiserver-aaa", "kube-a", "v1.35.4", true, withAPIs(nil), nil},
		{"apiserver-bbb", "kube-b", "v1.36.3", true, withAPIs(map[string][]string{
			"admissionregistration.k8s.io/v1": {"mutatingadmissionpolicies"},
		}), nil},
		{"apiserver-ccc", "kube-c", "v1.36.3", true, withAPIs(map[string][]string{
			"admissionregistration.k8s.io/v1": {"mutatingadmissionpolicies"},
			"coordination.k8s.io/v1alpha2":    {"leasecandidates"},
		}), nil},
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
	members := make([]Member, 0, len(servers))
	for _, s := range servers {
		m := Member{ID: s.ID, Cluster: s.Cluster, Version: s.Version, Healthy: s.Healthy,
			APIs: GroupListJSON(s.Groups, false), API: GroupListJSON(s.Groups, true)}
		if s.OpenAPI != nil {
			m.OpenAPIV3 = s.OpenAPI
		}
		members = append(members, m)
	}
	return RenderSnapshot(generation, members)
}

// Prefer returns the snapshot document with its preferred server set to id
// (node-local mode).
func Prefer(snapshot json.RawMessage, id string) json.RawMessage {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(snapshot, &doc); err != nil {
		panic("discoverytest: " + err.Error())
	}
	doc["preferred"] = mustMarshal(id)
	return mustMarshal(doc)
}

// Member is one server of a snapshot with its documents already rendered (or
// captured from a real server).
type Member struct {
	ID      string          `json:"id"`
	Cluster string          `json:"cluster"`
	Version string          `json:"version"`
	Healthy bool            `json:"healthy"`
	APIs    json.RawMessage `json:"apis"`
	API     json.RawMessage `json:"api"`
	// OpenAPIV3 maps the paths of the server's /openapi/v3 index to their
	// hashes, when the snapshot has it.
	OpenAPIV3 map[string]string `json:"openapiV3,omitempty"`
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

// RenderSnapshot renders a snapshot document (the format of discovery/doc.go).
func RenderSnapshot(generation uint64, members []Member) json.RawMessage {
	return mustMarshal(map[string]any{"generation": generation, "servers": members})
}

func mustMarshal(v any) json.RawMessage {
	out, err := json.Marshal(v)
	if err != nil {
		panic("discoverytest: " + err.Error())
	}
	return out
}
