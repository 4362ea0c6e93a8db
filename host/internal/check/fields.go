package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/internal/schemafields"
)

// schemaSkew is, per resource ("apps/v1/deployments"), the field paths one
// side's schema has and the other's lacks, from the OpenAPI v3 documents
// `make fixtures` captured and compared for each pair of adjacent pinned
// versions (fixtures/schema-skew.json). A patch release changes no schema,
// so the pair is chosen by minor versions.
type schemaSkew struct {
	// source names the comparison in evidence.
	source    string
	resources map[string]*resourceSkew
}

// resourceSkew holds the paths of one resource only each side has.
type resourceSkew struct {
	onlyFrom, onlyTo *pathTrie
}

// schemaSkewFor finds the captured comparison of the two sides' minor
// versions. It returns nil and a note when there is none to use, and nil
// and no note when both sides are one minor version (their schemas agree).
func schemaSkewFor(from, to *side) (*schemaSkew, string, error) {
	fv, fok := parseVersion(from.version)
	tv, tok := parseVersion(to.version)
	if !fok || !tok {
		return nil, fmt.Sprintf("schemas not compared: the version of %s is not known", to.label), nil
	}
	if fv.major == tv.major && fv.minor == tv.minor {
		return nil, "", nil
	}
	pairs, err := fixtures.LoadSchemaSkew()
	if err != nil {
		return nil, "", err
	}
	for _, p := range pairs {
		older, _ := parseVersion(p.Older)
		newer, _ := parseVersion(p.Newer)
		fromIsOlder := sameMinor(fv, older) && sameMinor(tv, newer)
		if !fromIsOlder && !(sameMinor(fv, newer) && sameMinor(tv, older)) {
			continue
		}
		skew := &schemaSkew{
			source:    fmt.Sprintf("the OpenAPI v3 schemas of kube-apiserver %s and %s, compared by make fixtures (schema-skew.json)", p.Older, p.Newer),
			resources: map[string]*resourceSkew{},
		}
		for _, r := range p.Resources {
			onlyOlder, onlyNewer := newPathTrie(r.OnlyInOlder), newPathTrie(r.OnlyInNewer)
			if fromIsOlder {
				skew.resources[r.Resource] = &resourceSkew{onlyFrom: onlyOlder, onlyTo: onlyNewer}
			} else {
				skew.resources[r.Resource] = &resourceSkew{onlyFrom: onlyNewer, onlyTo: onlyOlder}
			}
		}
		return skew, "", nil
	}
	return nil, fmt.Sprintf("schemas not compared: no captured comparison of Kubernetes %d.%d and %d.%d", fv.major, fv.minor, tv.major, tv.minor), nil
}

// liveSchemaSkew compares the OpenAPI v3 schemas two live servers serve, for
// every group version both serve whose documents differ (the index's hashes),
// reducing each document to its kinds' field paths as skewgate's controller
// does (package schemafields) and keeping only the paths.
func liveSchemaSkew(ctx context.Context, from, to *side) (*schemaSkew, error) {
	fromIndex, err := openAPIIndex(ctx, from.client)
	if err != nil {
		return nil, err
	}
	toIndex, err := openAPIIndex(ctx, to.client)
	if err != nil {
		return nil, err
	}
	skew := &schemaSkew{
		source:    fmt.Sprintf("the OpenAPI v3 schemas %s and %s serve (GET /openapi/v3)", from.label, to.label),
		resources: map[string]*resourceSkew{},
	}
	for path, fromEntry := range fromIndex {
		toEntry, ok := toIndex[path]
		gv, isGroupVersion := openAPIGroupVersion(path)
		if !ok || !isGroupVersion || fromEntry.Hash == toEntry.Hash || !from.api.ServesGroupVersion(gv) || !to.api.ServesGroupVersion(gv) {
			continue
		}
		fromDoc, err := openAPIDocument(ctx, from.client, fromEntry, gv)
		if err != nil {
			return nil, err
		}
		toDoc, err := openAPIDocument(ctx, to.client, toEntry, gv)
		if err != nil {
			return nil, err
		}
		for _, r := range from.api.sortedResources() {
			if r.GroupVersion != gv || to.api.resource(r.GroupVersionResource) == nil {
				continue
			}
			k := discovery.GVK{Group: gv.Group, Version: gv.Version, Kind: r.Kind}
			fk, fok := fromDoc.Kinds[k]
			tk, tok := toDoc.Kinds[k]
			if !fok || !tok || fk.Truncated || tk.Truncated {
				continue
			}
			onlyFrom, _ := tk.Fields.Lacks(fk.Fields, fk.Fields.Len())
			onlyTo, _ := fk.Fields.Lacks(tk.Fields, tk.Fields.Len())
			if len(onlyFrom) > 0 || len(onlyTo) > 0 {
				skew.resources[tableKey(r.GroupVersionResource)] = &resourceSkew{onlyFrom: newPathTrie(onlyFrom), onlyTo: newPathTrie(onlyTo)}
			}
		}
	}
	return skew, nil
}

// openAPIIndex reads a server's /openapi/v3 index by path.
func openAPIIndex(ctx context.Context, c *client) (map[string]discovery.OpenAPIPath, error) {
	resp, err := c.get(ctx, "/openapi/v3", nil, acceptJSON)
	if err != nil {
		return nil, c.requestError("reading the OpenAPI v3 index /openapi/v3", err)
	}
	defer closeBody(resp)
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.transportError(err)
	}
	paths, err := discovery.ParseOpenAPIIndex(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: /openapi/v3: %w", c.where(), err)
	}
	index := make(map[string]discovery.OpenAPIPath, len(paths))
	for _, p := range paths {
		index[p.Path] = p
	}
	return index, nil
}

// openAPIGroupVersion reads "apis/apps/v1" or "api/v1".
func openAPIGroupVersion(path string) (GroupVersion, bool) {
	if v, ok := strings.CutPrefix(path, "api/"); ok && !strings.Contains(v, "/") {
		return GroupVersion{"", v}, true
	}
	rest, ok := strings.CutPrefix(path, "apis/")
	group, version, found := strings.Cut(rest, "/")
	if !ok || !found || group == "" || version == "" || strings.Contains(version, "/") {
		return GroupVersion{}, false
	}
	return GroupVersion{group, version}, true
}

// openAPIDocument reads one group version's document and reduces it.
func openAPIDocument(ctx context.Context, c *client, p discovery.OpenAPIPath, gv GroupVersion) (*schemafields.Document, error) {
	what := "reading the OpenAPI v3 document of " + gv.String()
	u, query, _ := strings.Cut(p.URL(), "?")
	values, _ := url.ParseQuery(query)
	resp, err := c.get(ctx, u, values, acceptJSON)
	if err != nil {
		return nil, c.requestError(what, err)
	}
	defer closeBody(resp)
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.transportError(err)
	}
	doc, err := schemafields.Reduce(raw, gv.Group, gv.Version)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.where(), what, err)
	}
	return doc, nil
}

func sameMinor(a, b version) bool { return a.major == b.major && a.minor == b.minor }

// servesGroupResource reports whether the skew lists any version of gr.
func (s *schemaSkew) listsGroupResource(gr GroupResource) bool {
	for key := range s.resources {
		if r, ok := parseTableKey(key); ok && r.GroupResource() == gr {
			return true
		}
	}
	return false
}

// parseTableKey reads "apps/v1/deployments" or "v1/services".
func parseTableKey(key string) (GroupVersionResource, bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return GroupVersionResource{}, false
	}
	gv, ok := parseAPIVersion(key[:i])
	return GroupVersionResource{gv, key[i+1:]}, ok && key[i+1:] != ""
}

// pathTrie is a set of field paths ("spec.template.spec.containers[].image",
// "[]" an array's items, "*" a map's values) as a tree of their segments, so
// that a managed-fields set is walked only along branches that lead to one.
type pathTrie struct {
	children map[string]*pathTrie
	// path is set on the node that ends a path of the set.
	path string
}

func newPathTrie(paths []string) *pathTrie {
	root := &pathTrie{}
	for _, p := range paths {
		n := root
		for _, seg := range pathSegments(p) {
			if n.children == nil {
				n.children = map[string]*pathTrie{}
			}
			child := n.children[seg]
			if child == nil {
				child = &pathTrie{}
				n.children[seg] = child
			}
			n = child
		}
		n.path = p
	}
	return root
}

// pathSegments splits "a.b[].c" into "a", "b", "[]", "c".
func pathSegments(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		name, arrays := part, 0
		for strings.HasSuffix(name, "[]") {
			name, arrays = strings.TrimSuffix(name, "[]"), arrays+1
		}
		out = append(out, name)
		for range arrays {
			out = append(out, "[]")
		}
	}
	return out
}

// managedPaths walks a managed-fields set (fieldsV1: "f:<field>" for a
// field or a map key, "k:", "v:" and "i:" for list items, "." for the node
// itself) along the trie and calls found for every path of the trie the set
// holds. A malformed set is an error.
func (t *pathTrie) managedPaths(fieldsV1 json.RawMessage, found func(path string)) error {
	if len(t.children) == 0 || len(fieldsV1) == 0 {
		return nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(fieldsV1, &members); err != nil {
		return fmt.Errorf("managedFields fieldsV1: %w", err)
	}
	for key, value := range members {
		var next []*pathTrie
		switch {
		case strings.HasPrefix(key, "f:"):
			next = append(next, t.children[key[2:]], t.children["*"])
		case strings.HasPrefix(key, "k:"), strings.HasPrefix(key, "v:"), strings.HasPrefix(key, "i:"):
			next = append(next, t.children["[]"])
		}
		for _, n := range next {
			if n == nil {
				continue
			}
			if n.path != "" {
				found(n.path)
			}
			if err := n.managedPaths(value, found); err != nil {
				return err
			}
		}
	}
	return nil
}
