// Package schemafields reduces a kube-apiserver's OpenAPI v3 document of one
// group version to what skewgate compares between servers: for every kind of
// that group version, the set of its field paths, and the field-selector
// labels the server publishes for it (x-kubernetes-selectable-fields, which
// custom resources carry when the server's CustomResourceFieldSelectors gate
// is on). Descriptions, defaults, validations and every other keyword are
// ignored; the document itself is not kept.
//
// A field path is the dotted chain of property names from the kind's root,
// "spec.template.spec.containers[].image": "[]" marks the items of an array
// and ".*" the values of a map. References ($ref, and allOf wrapping one) are
// followed; a reference already being expanded on the way down is recorded
// but not expanded again, so recursive schemas (JSONSchemaProps) end.
package schemafields

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"

	"github.com/skewgate/skewgate/discovery"
)

// Bounds of one document's reduction. A kind deeper or larger than these is
// kept with Truncated set, and is not compared.
const (
	// MaxDepth is the most property levels below a kind's root.
	MaxDepth = 40
	// MaxFieldsPerKind bounds one kind's field paths; the largest built-in
	// kind (Pod) has about 1,300.
	MaxFieldsPerKind = 20_000
	// MaxFieldsPerDocument bounds the paths of all kinds of one document.
	MaxFieldsPerDocument = 200_000
)

// Document is what a group version's OpenAPI v3 document says about its kinds.
type Document struct {
	// Kinds holds every kind of the document's own group version (list kinds
	// and the meta types every document repeats left out).
	Kinds map[discovery.GVK]Kind
}

// Kind is one kind of a Document.
type Kind struct {
	Fields Fields
	// SelectableFields are the extra field-selector labels the server says it
	// honours for the kind (x-kubernetes-selectable-fields), sorted; nil when
	// the document does not carry the extension.
	SelectableFields []string
	// Truncated is set when the walk stopped at a bound: Fields is then only
	// a part of the kind's paths.
	Truncated bool
}

// Fields is a sorted set of field paths, held as one string of paths each
// ended by '\n', so that a large set costs one allocation.
type Fields string

// Len is the number of paths.
func (f Fields) Len() int { return strings.Count(string(f), "\n") }

// All yields the paths in order.
func (f Fields) All() iter.Seq[string] {
	return func(yield func(string) bool) {
		for rest := string(f); rest != ""; {
			path, tail, _ := strings.Cut(rest, "\n")
			if !yield(path) {
				return
			}
			rest = tail
		}
	}
}

// Lacks returns, in order, up to limit of the paths other has and f lacks,
// and how many there are in all.
func (f Fields) Lacks(other Fields, limit int) (paths []string, count int) {
	mine, theirs := string(f), string(other)
	for theirs != "" {
		want, theirsRest, _ := strings.Cut(theirs, "\n")
		for mine != "" {
			have, mineRest, _ := strings.Cut(mine, "\n")
			if have >= want {
				break
			}
			mine = mineRest
		}
		have, _, _ := strings.Cut(mine, "\n")
		if mine == "" || have != want {
			count++
			if len(paths) < limit {
				paths = append(paths, want)
			}
		}
		theirs = theirsRest
	}
	return paths, count
}

// Differing yields, in order, the paths some of sets has and another lacks,
// each with which of sets have it (bit i for sets[i]; at most 64 sets). A
// path had by exactly the sets that have its parent path (the path it is a
// property of; every set for a property of the root) is left out: no set has
// a property without its parent, so the parent says where it is.
func Differing(sets []Fields) iter.Seq2[string, uint64] {
	return func(yield func(string, uint64) bool) {
		all := uint64(1)<<len(sets) - 1
		// left holds what is left of each set, heads its first path.
		left, heads := make([]string, len(sets)), make([]string, len(sets))
		for i, f := range sets {
			left[i] = string(f)
			heads[i], _, _ = strings.Cut(left[i], "\n")
		}
		// partial holds the paths of the union some set lacks, with which
		// have them; the others are every set's.
		partial := map[string]uint64{}
		for {
			path, found := "", false
			for i := range left {
				if left[i] != "" && (!found || heads[i] < path) {
					path, found = heads[i], true
				}
			}
			if !found {
				return
			}
			var having uint64
			for i := range left {
				if left[i] != "" && heads[i] == path {
					having |= 1 << uint(i)
					_, left[i], _ = strings.Cut(left[i], "\n")
					heads[i], _, _ = strings.Cut(left[i], "\n")
				}
			}
			parent := all
			if p, ok := ParentPath(path); ok {
				if having, ok := partial[p]; ok {
					parent = having
				}
			}
			if having != all {
				partial[path] = having
			}
			if having != parent && !yield(path, having) {
				return
			}
		}
	}
}

// ParentPath is the path p is a property of: p without its last name and
// the array items ("[]") and map values (".*") that name is a property of;
// ok is false for a property of the root.
func ParentPath(p string) (parent string, ok bool) {
	i := strings.LastIndexByte(p, '.')
	if i < 0 {
		return "", false
	}
	p = p[:i]
	for {
		if trimmed, ok := strings.CutSuffix(p, "[]"); ok {
			p = trimmed
		} else if trimmed, ok := strings.CutSuffix(p, ".*"); ok {
			p = trimmed
		} else {
			return p, true
		}
	}
}

func newFields(paths []string) Fields {
	slices.Sort(paths)
	paths = slices.Compact(paths)
	n := 0
	for _, p := range paths {
		n += len(p) + 1
	}
	var b strings.Builder
	b.Grow(n)
	for _, p := range paths {
		b.WriteString(p)
		b.WriteByte('\n')
	}
	return Fields(b.String())
}

// SelectorCandidates are the paths a field selector could name: those that
// lead through no array and no map.
func (f Fields) SelectorCandidates() []string {
	var out []string
	for p := range f.All() {
		if !strings.Contains(p, "[]") && !strings.Contains(p, ".*") {
			out = append(out, p)
		}
	}
	return out
}

// schema is the part of an OpenAPI v3 schema object the reduction reads.
type schema struct {
	Ref                  string             `json:"$ref"`
	AllOf                []*schema          `json:"allOf"`
	Properties           map[string]*schema `json:"properties"`
	Items                schemaOrOther      `json:"items"`
	AdditionalProperties schemaOrOther      `json:"additionalProperties"`
	GVK                  []discovery.GVK    `json:"x-kubernetes-group-version-kind"`
	SelectableFields     *[]struct {
		FieldPath string `json:"fieldPath"`
	} `json:"x-kubernetes-selectable-fields"`
}

// schemaOrOther is a keyword that may hold a schema or something else (a
// boolean additionalProperties); only a schema is kept.
type schemaOrOther struct{ *schema }

func (s *schemaOrOther) UnmarshalJSON(data []byte) error {
	if trimmed := bytes.TrimSpace(data); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil
	}
	s.schema = new(schema)
	return json.Unmarshal(data, s.schema)
}

type document struct {
	Components struct {
		Schemas map[string]*schema `json:"schemas"`
	} `json:"components"`
}

const componentRefPrefix = "#/components/schemas/"

// Reduce reads the OpenAPI v3 document of group version group/version (as
// served at /openapi/v3/apis/<group>/<version>, or api/v1 for the core group).
func Reduce(raw []byte, group, version string) (*Document, error) {
	var doc document
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decoding the OpenAPI v3 document: %w", err)
	}
	if doc.Components.Schemas == nil {
		return nil, errors.New("the OpenAPI v3 document has no components.schemas")
	}
	out := &Document{Kinds: map[discovery.GVK]Kind{}}
	budget := MaxFieldsPerDocument
	for _, name := range slices.Sorted(maps.Keys(doc.Components.Schemas)) {
		s := doc.Components.Schemas[name]
		if s == nil || len(s.GVK) != 1 {
			// Several GVKs mark a meta type (DeleteOptions, WatchEvent) every
			// document repeats for every group version.
			continue
		}
		gvk := s.GVK[0]
		if gvk.Group != group || gvk.Version != version || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		w := walker{schemas: doc.Components.Schemas, limit: min(MaxFieldsPerKind, budget), expanding: map[string]bool{name: true}}
		w.walk("", s, 0)
		budget -= len(w.paths)
		k := Kind{Fields: newFields(w.paths), Truncated: w.truncated}
		if s.SelectableFields != nil {
			k.SelectableFields = []string{}
			for _, f := range *s.SelectableFields {
				if f.FieldPath != "" {
					k.SelectableFields = append(k.SelectableFields, f.FieldPath)
				}
			}
			slices.Sort(k.SelectableFields)
			k.SelectableFields = slices.Compact(k.SelectableFields)
		}
		out.Kinds[gvk] = k
	}
	return out, nil
}

// walker collects one kind's field paths.
type walker struct {
	schemas map[string]*schema
	limit   int
	paths   []string
	// expanding holds the components being expanded on the way down.
	expanding map[string]bool
	truncated bool
}

// walk records the paths below s, whose own path is prefix ("" at the root).
func (w *walker) walk(prefix string, s *schema, depth int) {
	if s == nil || w.truncated {
		return
	}
	if depth > MaxDepth {
		w.truncated = true
		return
	}
	// A $ref, or an allOf of them (how a property with its own description
	// points at a component), stands for the referenced schemas.
	if s.Ref != "" || len(s.AllOf) > 0 {
		refs := s.AllOf
		if s.Ref != "" {
			refs = append([]*schema{{Ref: s.Ref}}, refs...)
		}
		for _, r := range refs {
			if r == nil {
				continue
			}
			name, ok := strings.CutPrefix(r.Ref, componentRefPrefix)
			if !ok {
				w.walk(prefix, r, depth)
				continue
			}
			target := w.schemas[name]
			if target == nil || w.expanding[name] {
				continue
			}
			w.expanding[name] = true
			w.walk(prefix, target, depth)
			delete(w.expanding, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.Properties)) {
		if strings.ContainsFunc(name, func(r rune) bool { return r < ' ' }) {
			continue // a control character cannot be part of a path of the set
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		if len(w.paths) >= w.limit {
			w.truncated = true
			return
		}
		w.paths = append(w.paths, path)
		w.walk(path, s.Properties[name], depth+1)
	}
	if s.Items.schema != nil {
		w.walk(prefix+"[]", s.Items.schema, depth+1)
	}
	if s.AdditionalProperties.schema != nil {
		w.walk(prefix+".*", s.AdditionalProperties.schema, depth+1)
	}
}
