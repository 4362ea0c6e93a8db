package discovery

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// MaxSkewPaths bounds the paths of one resource's FieldSkew: the plugin
// builds a tree of them for every resource at each configuration, and
// between adjacent minors the most a kind has is about 60 (v1.36 to v1.37
// Pods).
const MaxSkewPaths = 1024

// FieldSkew is what the snapshot knows of one resource whose schemas differ
// between its servers: enough to answer "does server S know field path P"
// for every path some server knows and another does not. Since schema 1.3.
type FieldSkew struct {
	// Paths are field paths, sorted: property names joined by '.', "[]"
	// after an array's name for its items and "*" for the values of a map
	// ("spec.template.spec.volumes[].image", "metadata.labels.*"). A path is
	// listed when the servers whose schema has it are not all those whose
	// schema has the path's parent: its children are known only where it
	// is, so a deeper path adds nothing unless fewer servers know it.
	Paths []string
	// Schemas group the servers the controller compared by what their
	// schema of the resource has. A server the resource is served by but in
	// no group was not compared (its schema is unknown): it counts as
	// knowing none of the paths.
	Schemas []FieldSchema
}

// FieldSchema is one schema of a resource, shared by the servers that have it.
type FieldSchema struct {
	// Servers index Snapshot.Servers, sorted.
	Servers []int
	// Knows index FieldSkew.Paths: the paths the schema has, sorted.
	Knows []int
}

// fieldSkewMember is the snapshot's "fieldSkew": per resource key, its
// FieldSkew. It is read as one flat loop per level, as every member of the
// snapshot is, to keep the plugin's configure call chain short.
var fieldSkewMember = member[Snapshot]{
	name: "fieldSkew",
	read: func(v JSONValue, s *Snapshot, _ *reading) error {
		if !v.Exists() {
			return nil
		}
		if !v.IsObject() {
			return fmt.Errorf("must be an object of resources, got %s", describeValue(v))
		}
		skew := map[string]FieldSkew{}
		for resources := v.Members(); resources.Next(); {
			key, entry := resources.Key().Str(), resources.Value()
			if _, dup := skew[key]; dup {
				return fmt.Errorf("%q: listed twice", key)
			}
			if !entry.IsObject() {
				return fmt.Errorf("%q: must be an object with paths and schemas, got %s", key, describeValue(entry))
			}
			var f FieldSkew
			for members := entry.Members(); members.Next(); {
				name, value := members.Key().Str(), members.Value()
				switch name {
				case "paths":
					if !value.IsArray() {
						return fmt.Errorf("%q: paths: must be an array of strings, got %s", key, describeValue(value))
					}
					f.Paths = []string{}
					for paths := value.Members(); paths.Next(); {
						if !paths.Value().IsString() {
							return fmt.Errorf("%q: paths: must be an array of strings, got %s", key, describeValue(paths.Value()))
						}
						if len(f.Paths) == MaxSkewPaths {
							return fmt.Errorf("%q: paths: more than %d", key, MaxSkewPaths)
						}
						f.Paths = append(f.Paths, paths.Value().Str())
					}
				case "schemas":
					if !value.IsArray() {
						return fmt.Errorf("%q: schemas: must be an array of objects, got %s", key, describeValue(value))
					}
					for schemas := value.Members(); schemas.Next(); {
						at := fmt.Sprintf("%q: schemas[%d]", key, len(f.Schemas))
						schema := schemas.Value()
						if !schema.IsObject() {
							return fmt.Errorf("%s: must be an object with servers and knows, got %s", at, describeValue(schema))
						}
						var fs FieldSchema
						for parts := schema.Members(); parts.Next(); {
							var list *[]int
							switch part := parts.Key().Str(); part {
							case "servers":
								list = &fs.Servers
							case "knows":
								list = &fs.Knows
							default:
								return fmt.Errorf("%s: %q: not a member of a schema (servers, knows)", at, part)
							}
							if !parts.Value().IsArray() {
								return fmt.Errorf("%s: %s: must be an array of indexes, got %s", at, parts.Key().Str(), describeValue(parts.Value()))
							}
							*list = []int{}
							for indexes := parts.Value().Members(); indexes.Next(); {
								n, ok := indexes.Value().Uint()
								if !ok || n > MaxSkewPaths {
									return fmt.Errorf("%s: %s: must be an array of indexes, got %s", at, parts.Key().Str(), describeValue(indexes.Value()))
								}
								*list = append(*list, int(n))
							}
						}
						f.Schemas = append(f.Schemas, fs)
					}
				default:
					return fmt.Errorf("%q: %q: not a member of a field skew (paths, schemas)", key, name)
				}
			}
			skew[key] = f
		}
		if len(skew) > 0 {
			s.FieldSkew = skew
		}
		return nil
	},
	omitted: func(s *Snapshot) bool { return len(s.FieldSkew) == 0 },
	write: func(dst []byte, s *Snapshot) []byte {
		dst = append(dst, '{')
		for i, key := range slices.Sorted(maps.Keys(s.FieldSkew)) {
			if i > 0 {
				dst = append(dst, ',')
			}
			f := s.FieldSkew[key]
			dst = appendJSONString(dst, key)
			dst = append(dst, `:{"paths":`...)
			dst = appendStrings(dst, f.Paths)
			dst = append(dst, `,"schemas":[`...)
			for j := range f.Schemas {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, `{"servers":`...)
				dst = appendInts(dst, f.Schemas[j].Servers)
				dst = append(dst, `,"knows":`...)
				dst = appendInts(dst, f.Schemas[j].Knows)
				dst = append(dst, '}')
			}
			dst = append(dst, "]}"...)
		}
		return append(dst, '}')
	},
}

func appendInts(dst []byte, ns []int) []byte {
	dst = append(dst, '[')
	for i, n := range ns {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(n), 10)
	}
	return append(dst, ']')
}

// checkFieldSkew checks every resource's FieldSkew: a resource some server
// serves, 1..MaxSkewPaths well-formed paths, sorted and distinct, and
// schemas whose servers serve the resource, each server in one schema at
// most, and whose paths are indexes of Paths, sorted and distinct.
func (s *Snapshot) checkFieldSkew() error {
	var steps []string
	for _, key := range slices.Sorted(maps.Keys(s.FieldSkew)) {
		f := s.FieldSkew[key]
		at := fmt.Sprintf("snapshot: fieldSkew: %q", key)
		gvr, ok := parseResourceKey(key)
		if !ok {
			return fmt.Errorf("%s: not a resource (group/version/resource, or version/resource for the core group)", at)
		}
		if len(f.Paths) == 0 || len(f.Paths) > MaxSkewPaths {
			return fmt.Errorf("%s: paths: need 1 to %d, got %d", at, MaxSkewPaths, len(f.Paths))
		}
		for i, p := range f.Paths {
			if err := checkToken("field path", p); err != nil {
				return fmt.Errorf("%s: paths: %w", at, err)
			}
			var ok bool
			if steps, ok = splitFieldPath(p, steps[:0]); !ok {
				return fmt.Errorf("%s: paths: %q: not a field path (names joined by '.', \"[]\" after an array's name, \"*\" for a map's values)", at, p)
			}
			if i > 0 && p <= f.Paths[i-1] {
				return fmt.Errorf("%s: paths: %q: not sorted after %q, or listed twice", at, p, f.Paths[i-1])
			}
		}
		var seen ServerSet
		for j, schema := range f.Schemas {
			where := fmt.Sprintf("%s: schemas[%d]", at, j)
			if len(schema.Servers) == 0 {
				return fmt.Errorf("%s: servers: must not be empty", where)
			}
			for k, i := range schema.Servers {
				if i >= len(s.Servers) {
					return fmt.Errorf("%s: servers: %d: the snapshot has %d servers", where, i, len(s.Servers))
				}
				if k > 0 && i <= schema.Servers[k-1] {
					return fmt.Errorf("%s: servers: %d: not sorted after %d, or listed twice", where, i, schema.Servers[k-1])
				}
				if seen.Has(i) {
					return fmt.Errorf("%s: servers: %s is in another schema of the resource too", where, serverLabel(i, s.Servers[i].ID))
				}
				seen |= 1 << uint(i)
				if !s.Servers[i].serves(gvr) {
					return fmt.Errorf("%s: servers: %s does not serve the resource", where, serverLabel(i, s.Servers[i].ID))
				}
			}
			for k, p := range schema.Knows {
				if p >= len(f.Paths) {
					return fmt.Errorf("%s: knows: %d: the resource has %d paths", where, p, len(f.Paths))
				}
				if k > 0 && p <= schema.Knows[k-1] {
					return fmt.Errorf("%s: knows: %d: not sorted after %d, or listed twice", where, p, schema.Knows[k-1])
				}
			}
		}
	}
	return nil
}

// splitFieldPath appends the steps of a field path to steps: its property
// names, "[]" for an array's items and "*" for a map's values; ok is false
// for a path with an empty name.
func splitFieldPath(path string, steps []string) (_ []string, ok bool) {
	for part := range strings.SplitSeq(path, ".") {
		name := part
		for strings.HasSuffix(name, "[]") {
			name = name[:len(name)-2]
		}
		if name == "" {
			return steps, false
		}
		steps = append(steps, name)
		for range (len(part) - len(name)) / 2 {
			steps = append(steps, itemsStep)
		}
	}
	return steps, true
}

const (
	itemsStep  = "[]"
	valuesStep = "*"
)

// skewTree is a resource's FieldSkew as the index holds it: the tree of the
// paths' steps, each node that ends a path with the servers whose schema
// has it, so that reading a body walks the body and the tree together and
// skips every part of the body no path leads into.
type skewTree struct {
	nodes []skewNode
	// compared are the servers in some schema: those whose schema is known.
	compared ServerSet
}

type skewNode struct {
	step     string
	children []int32
	// knowing are the servers whose schema has the path the node ends; all
	// servers for a node that ends no path.
	knowing ServerSet
}

const noNode = -1

func newSkewTree(f *FieldSkew) *skewTree {
	t := &skewTree{nodes: []skewNode{{knowing: ^ServerSet(0)}}}
	knowing := make([]ServerSet, len(f.Paths))
	for _, schema := range f.Schemas {
		var servers ServerSet
		for _, i := range schema.Servers {
			servers |= 1 << uint(i)
		}
		t.compared |= servers
		for _, p := range schema.Knows {
			knowing[p] |= servers
		}
	}
	var steps []string
	for p, path := range f.Paths {
		steps, _ = splitFieldPath(path, steps[:0]) // checkFieldSkew checked it
		node := int32(0)
		for _, step := range steps {
			child := t.exactChild(node, step)
			if child == noNode {
				child = int32(len(t.nodes))
				t.nodes = append(t.nodes, skewNode{step: step, knowing: ^ServerSet(0)})
				t.nodes[node].children = append(t.nodes[node].children, child)
			}
			node = child
		}
		t.nodes[node].knowing = knowing[p]
	}
	return t
}

func (t *skewTree) exactChild(node int32, step string) int32 {
	for _, c := range t.nodes[node].children {
		if t.nodes[c].step == step {
			return c
		}
	}
	return noNode
}

// memberChild is the node an object member named name leads to: the
// property of that name, else a map's values; strategic merge patch
// directives ("$patch", "$setElementOrder/...") name no field.
func (t *skewTree) memberChild(node int32, name JSONValue) int32 {
	values := int32(noNode)
	for _, c := range t.nodes[node].children {
		switch step := t.nodes[c].step; step {
		case itemsStep:
		case valuesStep:
			values = c
		default:
			if name.is(step) {
				return c
			}
		}
	}
	if values != noNode && strings.HasPrefix(name.raw, `"$`) {
		return noNode
	}
	return values
}
