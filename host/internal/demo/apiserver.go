package demo

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/skewgate/skewgate/discovery"
)

const discoveryContentType = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// Documents are one API server's own (nopeer) aggregated discovery documents.
type Documents struct {
	APIs, API []byte
}

// resourceInfo is what a fake API server needs to answer for a resource.
type resourceInfo struct {
	kind       string
	namespaced bool
}

type gv struct{ group, version string }

type gvr struct{ group, version, resource string }

// fakeAPIServer answers like a kube-apiserver that serves exactly what its
// discovery documents list: discovery (aggregated and legacy), /version,
// health, /openapi/v3, and resource requests with an empty list or a minimal
// object; 404 as kube-apiserver writes it for anything else.
type fakeAPIServer struct {
	name, version string
	docs          Documents
	etags         [2]string // /apis, /api
	versions      map[string][]string
	resources     map[gvr]resourceInfo
	// lists are the discovery items, kept for the legacy documents.
	lists    [2]discovery.GroupList
	openAPI  *openAPI
	requests atomic.Uint64
}

func newFakeAPIServer(name, version string, docs Documents, fields schemaFields) (*fakeAPIServer, error) {
	s := &fakeAPIServer{name: name, version: version, docs: docs, versions: map[string][]string{}, resources: map[gvr]resourceInfo{}}
	for i, raw := range [][]byte{docs.APIs, docs.API} {
		list, err := discovery.ParseGroupList(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		s.lists[i] = list
		sum := sha512.Sum512(raw)
		s.etags[i] = `"` + strings.ToUpper(hex.EncodeToString(sum[:])) + `"`
		for _, g := range list.Items {
			for _, v := range g.Versions {
				s.versions[g.Name()] = append(s.versions[g.Name()], v.Version)
				for _, r := range v.Resources {
					info := resourceInfo{namespaced: r.Scope == "Namespaced"}
					if r.ResponseKind != nil {
						info.kind = r.ResponseKind.Kind
					}
					s.resources[gvr{g.Name(), v.Version, r.Resource}] = info
				}
			}
		}
	}
	var err error
	if s.openAPI, err = newOpenAPI(version, s.lists[:], fields); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func (s *fakeAPIServer) servesGroupVersion(group, version string) bool {
	for _, v := range s.versions[group] {
		if v == version {
			return true
		}
	}
	return false
}

func (s *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.requests.Add(1)
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case path == "/readyz" || path == "/healthz" || path == "/livez":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "ok")
	case path == "/version":
		s.serveVersion(w)
	case path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/"):
		s.openAPI.serve(w, r, path)
	case path == "/apis" || path == "/api":
		s.serveDiscoveryRoot(w, r, path)
	case strings.HasPrefix(path, "/api/"):
		s.serveGroupPath(w, r, "", strings.Split(strings.TrimPrefix(path, "/api/"), "/"))
	case strings.HasPrefix(path, "/apis/"):
		parts := strings.Split(strings.TrimPrefix(path, "/apis/"), "/")
		if len(parts) == 1 {
			s.serveLegacyGroup(w, r, parts[0])
			return
		}
		s.serveGroupPath(w, r, parts[0], parts[1:])
	default:
		http.NotFound(w, r)
	}
}

func (s *fakeAPIServer) serveVersion(w http.ResponseWriter) {
	major, minor, _ := strings.Cut(strings.TrimPrefix(s.version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	writeJSON(w, http.StatusOK, map[string]string{
		"major": major, "minor": minor, "gitVersion": s.version, "gitTreeState": "clean",
		"goVersion": "go1.26.8", "compiler": "gc", "platform": "linux/amd64",
	})
}

// serveDiscoveryRoot answers GET /apis and /api: the server's own aggregated
// document to clients that accept it, the legacy list otherwise.
func (s *fakeAPIServer) serveDiscoveryRoot(w http.ResponseWriter, r *http.Request, path string) {
	i := 0
	if path == "/api" {
		i = 1
	}
	if strings.Contains(r.Header.Get("Accept"), "as=APIGroupDiscoveryList") {
		w.Header().Set("Vary", "Accept")
		w.Header().Set("ETag", s.etags[i])
		if r.Header.Get("If-None-Match") == s.etags[i] {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		doc := s.docs.APIs
		if i == 1 {
			doc = s.docs.API
		}
		w.Header().Set("Content-Type", discoveryContentType)
		w.Write(doc)
		return
	}
	if i == 1 {
		writeJSON(w, http.StatusOK, map[string]any{"kind": "APIVersions", "versions": s.versions[""]})
		return
	}
	type groupVersion struct {
		GroupVersion string `json:"groupVersion"`
		Version      string `json:"version"`
	}
	type group struct {
		Name             string         `json:"name"`
		Versions         []groupVersion `json:"versions"`
		PreferredVersion groupVersion   `json:"preferredVersion"`
	}
	groups := []group{}
	for _, g := range s.lists[0].Items {
		item := group{Name: g.Name()}
		for _, v := range g.Versions {
			item.Versions = append(item.Versions, groupVersion{g.Name() + "/" + v.Version, v.Version})
		}
		if len(item.Versions) > 0 {
			item.PreferredVersion = item.Versions[0]
		}
		groups = append(groups, item)
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

// serveLegacyGroup answers GET /apis/<group>.
func (s *fakeAPIServer) serveLegacyGroup(w http.ResponseWriter, r *http.Request, group string) {
	versions := s.versions[group]
	if group == "" || len(versions) == 0 {
		http.NotFound(w, r)
		return
	}
	type groupVersion struct {
		GroupVersion string `json:"groupVersion"`
		Version      string `json:"version"`
	}
	var list []groupVersion
	for _, v := range versions {
		list = append(list, groupVersion{group + "/" + v, v})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": list, "preferredVersion": list[0],
	})
}

// serveGroupPath answers everything under /api/<version> and
// /apis/<group>/<version>: the legacy resource list, and resource requests.
func (s *fakeAPIServer) serveGroupPath(w http.ResponseWriter, r *http.Request, group string, parts []string) {
	version := parts[0]
	if !s.servesGroupVersion(group, version) {
		// No handler is installed for the group version at all: the request
		// falls through to kube-apiserver's plain not-found handler.
		http.NotFound(w, r)
		return
	}
	rest := parts[1:]
	if len(rest) == 0 {
		s.serveResourceList(w, group, version)
		return
	}
	namespace := ""
	if rest[0] == "namespaces" && len(rest) >= 3 {
		namespace, rest = rest[1], rest[2:]
	}
	resource, name := rest[0], ""
	if len(rest) > 1 {
		name = rest[1]
	}
	info, ok := s.resources[gvr{group, version, resource}]
	if !ok {
		writeStatusNotFound(w)
		return
	}
	apiVersion := version
	if group != "" {
		apiVersion = group + "/" + version
	}
	meta := map[string]any{"resourceVersion": "1"}
	if name == "" {
		writeJSON(w, http.StatusOK, map[string]any{"kind": info.kind + "List", "apiVersion": apiVersion, "metadata": meta, "items": []any{}})
		return
	}
	meta["name"] = name
	if namespace != "" && info.namespaced {
		meta["namespace"] = namespace
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": info.kind, "apiVersion": apiVersion, "metadata": meta})
}

// serveResourceList answers the legacy GET /apis/<group>/<version> document.
func (s *fakeAPIServer) serveResourceList(w http.ResponseWriter, group, version string) {
	type resource struct {
		Name         string   `json:"name"`
		SingularName string   `json:"singularName"`
		Namespaced   bool     `json:"namespaced"`
		Kind         string   `json:"kind"`
		Verbs        []string `json:"verbs"`
	}
	resources := []resource{}
	list := s.lists[0]
	if group == "" {
		list = s.lists[1]
	}
	for _, g := range list.Items {
		if g.Name() != group {
			continue
		}
		for _, v := range g.Versions {
			if v.Version != version {
				continue
			}
			for _, r := range v.Resources {
				kind := ""
				if r.ResponseKind != nil {
					kind = r.ResponseKind.Kind
				}
				resources = append(resources, resource{r.Resource, r.SingularResource, r.Scope == "Namespaced", kind, r.Verbs})
			}
		}
	}
	groupVersion := version
	if group != "" {
		groupVersion = group + "/" + version
	}
	writeJSON(w, http.StatusOK, map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": groupVersion, "resources": resources})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(body, '\n'))
}

// notFoundStatus is kube-apiserver's answer for a path inside an installed
// group version that no route matches (its go-restful service error handler:
// apierrors.NewGenericServerResponse(404, ...)).
const notFoundStatus = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",` +
	`"message":"the server could not find the requested resource","reason":"NotFound","details":{},"code":404}` + "\n"

func writeStatusNotFound(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	w.Write([]byte(notFoundStatus))
}
