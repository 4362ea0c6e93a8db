package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/internal/schemafields"
	"github.com/skewgate/skewgate/host/testcluster"
)

// fieldSelectorsDir is where the per-version field-selector tables go, next to the Go package
// that embeds them.
const fieldSelectorsDir = "fieldselectors"

// metadataLabels are the field-selector labels of every resource's metadata that the probes try
// besides the kind's schema paths (they are schema paths too; listed so that a kind without a
// schema still gets them probed).
var metadataLabels = []string{"metadata.name", "metadata.namespace"}

// FieldSelectorTable describes one fixtures/fieldselectors/<version>.json.
type FieldSelectorTable struct {
	Path      string `json:"path"`
	Version   string `json:"version"`
	SHA256    string `json:"sha256"`
	Bytes     int    `json:"bytes"`
	Resources int    `json:"resources"`
	// Probes counts the list requests made; Accepted those answered 200.
	Probes   int `json:"probes"`
	Accepted int `json:"accepted"`
	// WithoutSchema lists resources whose kind the version's OpenAPI v3 documents lack, so only
	// the metadata labels were probed.
	WithoutSchema []string `json:"withoutSchema"`
}

// resource is a top-level resource as discovery describes it.
type resource struct {
	gvr
	kind     discovery.GVK
	listable bool
}

// key is how the snapshot and the tables name the resource: "v1/services", "apps/v1/deployments".
func (r gvr) key() string {
	if r.group == "" {
		return r.version + "/" + r.resource
	}
	return r.group + "/" + r.version + "/" + r.resource
}

func parseResources(body []byte) ([]resource, error) {
	var list apidiscoveryv2.APIGroupDiscoveryList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("decoding discovery: %w", err)
	}
	var out []resource
	for _, g := range list.Items {
		for _, v := range g.Versions {
			for _, r := range v.Resources {
				l := resource{gvr: gvr{g.Name, v.Version, r.Resource}, listable: slices.Contains(r.Verbs, "list")}
				if k := r.ResponseKind; k != nil {
					// An empty group and version stand for the resource's own.
					l.kind = discovery.GVK{Group: k.Group, Version: k.Version, Kind: k.Kind}
					if k.Group == "" && k.Version == "" {
						l.kind.Group, l.kind.Version = g.Name, v.Version
					}
				}
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// serverFields is what one server's OpenAPI v3 documents and probes say about its resources.
type serverFields struct {
	// kinds maps a resource key to its kind's field paths, for resources whose kind has a schema.
	kinds map[string]kindFields
	// labels maps a resource key to the labels the server accepted.
	labels map[string][]string
	table  FieldSelectorTable
}

type kindFields struct {
	kind   string
	fields schemafields.Fields
}

// probeFields reads the OpenAPI v3 documents of srv's resources and probes, for every listable
// resource not in skip, each label a field selector could name: metadata.name,
// metadata.namespace and every path of the kind's schema that leads through no array or map.
// A label is accepted when GET <collection>?fieldSelector=<label>=x&limit=1 answers 200 and
// refused when it answers 400; any other answer fails the capture.
func (c *capturer) probeFields(client *http.Client, srv testcluster.Server, resources []resource, skip map[string][]string) (serverFields, error) {
	out := serverFields{kinds: map[string]kindFields{}, labels: map[string][]string{}}
	index, err := c.openAPIIndex(client, srv)
	if err != nil {
		return serverFields{}, err
	}
	docs := map[string]*schemafields.Document{}
	for _, r := range resources {
		if _, done := skip[r.key()]; done {
			continue
		}
		docPath := openAPIDocumentPath(r.gvr)
		doc, ok := docs[docPath]
		if !ok {
			if doc, err = c.openAPIDocument(client, srv, index, docPath, r.group, r.version); err != nil {
				return serverFields{}, err
			}
			docs[docPath] = doc
		}
		candidates := slices.Clone(metadataLabels)
		k, ok := doc.Kinds[r.kind]
		if k.Truncated {
			return serverFields{}, fmt.Errorf("%s: the schema of %s exceeds the reduction's bounds", srv.Name, r.kind.Kind)
		}
		if ok {
			out.kinds[r.key()] = kindFields{r.kind.Kind, k.Fields}
			candidates = append(candidates, k.Fields.SelectorCandidates()...)
		}
		if !r.listable {
			continue
		}
		if !ok {
			out.table.WithoutSchema = append(out.table.WithoutSchema, r.key())
		}
		slices.Sort(candidates)
		candidates = slices.Compact(candidates)
		var accepted []string
		for _, label := range candidates {
			status, _, body, err := fetch(c.ctx, client, srv.URL+r.collectionPath()+"?fieldSelector="+url.QueryEscape(label+"=x")+"&limit=1", "application/json")
			if err != nil {
				return serverFields{}, err
			}
			out.table.Probes++
			switch status {
			case http.StatusOK:
				accepted = append(accepted, label)
			case http.StatusBadRequest:
			default:
				return serverFields{}, fmt.Errorf("%s: field selector %s on %s: HTTP %d: %s", srv.Name, label, r.collectionPath(), status, body)
			}
		}
		if len(accepted) == 0 {
			return serverFields{}, fmt.Errorf("%s: %s accepts no field selector at all", srv.Name, r.collectionPath())
		}
		out.table.Accepted += len(accepted)
		out.labels[r.key()] = accepted
	}
	return out, nil
}

// openAPIDocumentPath is the /openapi/v3 index path of a resource's group version.
func openAPIDocumentPath(r gvr) string {
	if r.group == "" {
		return "api/" + r.version
	}
	return "apis/" + r.group + "/" + r.version
}

// openAPIIndex fetches srv's /openapi/v3 index.
func (c *capturer) openAPIIndex(client *http.Client, srv testcluster.Server) ([]discovery.OpenAPIPath, error) {
	status, _, body, err := fetch(c.ctx, client, srv.URL+"/openapi/v3", "application/json")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("%s /openapi/v3: HTTP %d", srv.Name, status)
	}
	index, err := discovery.ParseOpenAPIIndex(body)
	if err != nil {
		return nil, fmt.Errorf("%s /openapi/v3: %w", srv.Name, err)
	}
	return index, nil
}

// openAPIDocument fetches and reduces the document the index lists at docPath; a group version
// the index lacks has no kinds.
func (c *capturer) openAPIDocument(client *http.Client, srv testcluster.Server, index []discovery.OpenAPIPath, docPath, group, version string) (*schemafields.Document, error) {
	i := slices.IndexFunc(index, func(p discovery.OpenAPIPath) bool { return p.Path == docPath })
	if i < 0 {
		return &schemafields.Document{}, nil
	}
	status, _, body, err := fetch(c.ctx, client, srv.URL+index[i].URL(), "application/json")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("%s %s: HTTP %d", srv.Name, index[i].URL(), status)
	}
	doc, err := schemafields.Reduce(body, group, version)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", srv.Name, index[i].URL(), err)
	}
	return doc, nil
}

// captureFieldSelectors probes both servers of version v's cluster (the extra one only for the
// resources the default one lacks), stores the version's table and keeps the default server's
// field paths for the schema comparison.
func (c *capturer) captureFieldSelectors(cl *testcluster.Cluster, v string) error {
	client := adminClient(cl)
	labels := map[string][]string{}
	var table FieldSelectorTable
	for i, profile := range []string{profileDefault, profileExtra} {
		srv := cl.Server(i)
		var resources []resource
		for _, request := range []string{"/apis", "/api"} {
			_, _, body, err := fetch(c.ctx, client, srv.URL+request, acceptNoPeer)
			if err != nil {
				return err
			}
			parsed, err := parseResources(body)
			if err != nil {
				return fmt.Errorf("%s %s: %w", srv.Name, request, err)
			}
			resources = append(resources, parsed...)
		}
		found, err := c.probeFields(client, srv, resources, labels)
		if err != nil {
			return err
		}
		maps.Copy(labels, found.labels)
		table.Probes += found.table.Probes
		table.Accepted += found.table.Accepted
		table.WithoutSchema = append(table.WithoutSchema, found.table.WithoutSchema...)
		if profile == profileDefault {
			c.fields[v] = found.kinds
		}
	}
	c.labels[v] = labels
	slices.Sort(table.WithoutSchema)
	table.WithoutSchema = slices.Compact(table.WithoutSchema)
	if table.WithoutSchema == nil {
		table.WithoutSchema = []string{}
	}
	raw, err := tableJSON(v, labels)
	if err != nil {
		return err
	}
	rel := path.Join(fieldSelectorsDir, strings.TrimPrefix(v, "v")+".json")
	doc, err := c.write(rel, raw)
	if err != nil {
		return err
	}
	table.Path, table.Version, table.SHA256, table.Bytes, table.Resources = rel, v, doc.SHA256, doc.Bytes, len(labels)
	c.manifest.FieldSelectors = append(c.manifest.FieldSelectors, table)
	c.log.Printf("%s: %d field-selector probes over %d resources, %d accepted", v, table.Probes, len(labels), table.Accepted)
	return nil
}

// tableJSON writes a field-selector table with one resource a line: small to
// embed, and a difference between captures is a line's.
func tableJSON(version string, labels map[string][]string) ([]byte, error) {
	v, err := json.Marshal(version)
	if err != nil {
		return nil, err
	}
	b := append([]byte(`{"version":`), v...)
	b = append(b, ",\n\"resources\":{"...)
	for i, key := range slices.Sorted(maps.Keys(labels)) {
		k, err := json.Marshal(key)
		if err != nil {
			return nil, err
		}
		l, err := json.Marshal(labels[key])
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(append(append(append(b, '\n'), k...), ':'), l...)
	}
	return append(b, "\n}}\n"...), nil
}

// compareSchemas lists the resources both versions' default servers serve whose kinds' field
// paths differ.
func (c *capturer) compareSchemas(older, newer string) fixtures.SchemaSkew {
	skew := fixtures.SchemaSkew{Older: older, Newer: newer, Resources: []fixtures.SchemaSkewResource{}}
	for _, key := range slices.Sorted(maps.Keys(c.fields[newer])) {
		n := c.fields[newer][key]
		o, ok := c.fields[older][key]
		if !ok {
			continue
		}
		onlyInNewer, _ := o.fields.Lacks(n.fields, n.fields.Len())
		onlyInOlder, _ := n.fields.Lacks(o.fields, o.fields.Len())
		if len(onlyInNewer) == 0 && len(onlyInOlder) == 0 {
			continue
		}
		skew.Resources = append(skew.Resources, fixtures.SchemaSkewResource{Resource: key, Kind: n.kind,
			OnlyInNewer: nonNil(onlyInNewer), OnlyInOlder: nonNil(onlyInOlder)})
	}
	c.log.Printf("schemas %s -> %s: %d resources differ", older, newer, len(skew.Resources))
	return skew
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// write stores a generated file in the staging directory and describes it.
func (c *capturer) write(rel string, data []byte) (Document, error) {
	if err := writeFile(path.Join(c.staging, rel), data); err != nil {
		return Document{}, err
	}
	sum := sha256.Sum256(data)
	return Document{Path: rel, SHA256: hex.EncodeToString(sum[:]), Bytes: len(data)}, nil
}
