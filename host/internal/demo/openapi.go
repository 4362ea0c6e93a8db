package demo

import (
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
)

// openAPI is a fake API server's /openapi/v3: the index and one document per
// group version it serves, as kube-apiserver publishes them: the index lists
// each document's path with the hash of its content, and a document holds a
// schema per kind, marked with x-kubernetes-group-version-kind. The kinds
// have the field paths the captured comparison of the demo's versions found
// on this server's side (schema-skew.json), so the controller finds the
// fields one version lacks as it would on real servers.
type openAPI struct {
	index     []byte
	indexETag string
	documents map[string][]byte // by index path: "api/v1", "apis/apps/v1"
}

// schemaFields are the field paths of each resource ("apps/v1/deployments",
// as schema-skew.json spells it) in one server's schemas.
type schemaFields map[string][]string

// schemaFieldsOf returns, for the versions of each captured pair among
// versions, the field paths of the resources whose schemas differ between
// them. Besides its own paths, each side has the paths above them that both
// share, so that the only difference is the captured one.
func schemaFieldsOf(pairs []fixtures.SchemaSkew, versions []string) map[string]schemaFields {
	out := map[string]schemaFields{}
	for _, pair := range pairs {
		if !slices.Contains(versions, pair.Older) || !slices.Contains(versions, pair.Newer) {
			continue
		}
		older, newer := schemaFields{}, schemaFields{}
		for _, r := range pair.Resources {
			onlyOne := map[string]bool{}
			for _, p := range slices.Concat(r.OnlyInOlder, r.OnlyInNewer) {
				onlyOne[p] = true
			}
			var shared []string
			for p := range onlyOne {
				for i := strings.IndexByte(p, '.'); i >= 0; i = nextDot(p, i) {
					if prefix := p[:i]; !onlyOne[prefix] && !slices.Contains(shared, prefix) {
						shared = append(shared, prefix)
					}
				}
			}
			older[r.Resource] = slices.Concat(shared, r.OnlyInOlder)
			newer[r.Resource] = slices.Concat(shared, r.OnlyInNewer)
		}
		out[pair.Older], out[pair.Newer] = older, newer
	}
	return out
}

func nextDot(s string, i int) int {
	if j := strings.IndexByte(s[i+1:], '.'); j >= 0 {
		return i + 1 + j
	}
	return -1
}

// newOpenAPI builds the documents of a server of version serving lists (its
// /apis and /api) whose kinds have fields.
func newOpenAPI(version string, lists []discovery.GroupList, fields schemaFields) (*openAPI, error) {
	o := &openAPI{documents: map[string][]byte{}}
	type entry struct {
		ServerRelativeURL string `json:"serverRelativeURL"`
	}
	paths := map[string]entry{}
	for _, list := range lists {
		for _, g := range list.Items {
			for _, v := range g.Versions {
				path, prefix := "apis/"+g.Name()+"/"+v.Version, g.Name()+"/"+v.Version+"/"
				if g.Name() == "" {
					path, prefix = "api/"+v.Version, v.Version+"/"
				}
				schemas := map[string]any{}
				for _, r := range v.Resources {
					if r.ResponseKind == nil || r.ResponseKind.Kind == "" {
						continue
					}
					kind := r.ResponseKind.Kind
					schema := objectSchema()
					for _, p := range fields[prefix+r.Resource] {
						addField(schema, strings.Split(p, "."))
					}
					schema["x-kubernetes-group-version-kind"] = []map[string]string{{"group": g.Name(), "version": v.Version, "kind": kind}}
					schemas[strings.Join([]string{"io.k8s.demo", strings.ReplaceAll(g.Name(), ".", "_"), v.Version, kind}, ".")] = schema
				}
				doc, err := json.Marshal(map[string]any{
					"openapi": "3.0.0",
					"info":    map[string]string{"title": "Kubernetes", "version": version},
					"paths":   map[string]any{},
					"components": map[string]any{
						"schemas": schemas,
					},
				})
				if err != nil {
					return nil, err
				}
				o.documents[path] = doc
				paths[path] = entry{"/openapi/v3/" + path + "?hash=" + hashOf(doc)}
			}
		}
	}
	index, err := json.Marshal(map[string]any{"paths": paths})
	if err != nil {
		return nil, err
	}
	o.index, o.indexETag = index, `"`+hashOf(index)+`"`
	return o, nil
}

func objectSchema() map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{}}
}

// addField adds the field path segments (schemafields' spelling: "x[]" the
// items of array x, "*" the values of a map) below schema.
func addField(schema map[string]any, segments []string) {
	if len(segments) == 0 {
		return
	}
	if segments[0] == "*" {
		values, ok := schema["additionalProperties"].(map[string]any)
		if !ok {
			values = objectSchema()
			schema["additionalProperties"] = values
		}
		addField(values, segments[1:])
		return
	}
	name, isArray := strings.CutSuffix(segments[0], "[]")
	properties := schema["properties"].(map[string]any)
	field, ok := properties[name].(map[string]any)
	if !ok {
		field = objectSchema()
		if isArray {
			field = map[string]any{"type": "array", "items": objectSchema()}
		}
		properties[name] = field
	}
	if isArray {
		field = field["items"].(map[string]any)
	}
	addField(field, segments[1:])
}

func hashOf(b []byte) string {
	sum := sha512.Sum512(b)
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// serve answers GET /openapi/v3 and /openapi/v3/<path>: a document whatever
// hash the request names, as kube-apiserver does when its hash is current.
func (o *openAPI) serve(w http.ResponseWriter, r *http.Request, path string) {
	body, etag := o.index, o.indexETag
	if rest, ok := strings.CutPrefix(path, "/openapi/v3/"); ok {
		doc, found := o.documents[rest]
		if !found {
			http.NotFound(w, r)
			return
		}
		body, etag = doc, `"`+hashOf(doc)+`"`
	}
	if r.Header.Get("If-None-Match") == etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Etag", etag)
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.Write(body)
}
