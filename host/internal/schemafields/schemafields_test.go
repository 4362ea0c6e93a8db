package schemafields

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
)

// doc renders an OpenAPI v3 document with the given component schemas.
func doc(t *testing.T, schemas map[string]any) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"openapi": "3.0.0", "info": map[string]any{"title": "Kubernetes"},
		"components": map[string]any{"schemas": schemas}})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func gvkExt(group, version, kind string) []map[string]string {
	return []map[string]string{{"group": group, "version": version, "kind": kind}}
}

func ref(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }

// described is how kube-apiserver points a property with a description of its
// own at a component.
func described(name string) map[string]any {
	return map[string]any{"description": "ignored", "default": map[string]any{}, "allOf": []any{ref(name)}}
}

func reduce(t *testing.T, raw []byte, group, version string) *Document {
	t.Helper()
	d, err := Reduce(raw, group, version)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func paths(f Fields) []string { return slices.Collect(f.All()) }

var widget = discovery.GVK{Group: "example.com", Version: "v1", Kind: "Widget"}

func TestReduceFollowsReferencesIntoArraysAndMaps(t *testing.T) {
	raw := doc(t, map[string]any{
		"com.example.v1.Widget": map[string]any{
			"description": "A widget.",
			"type":        "object",
			"properties": map[string]any{
				"apiVersion": map[string]any{"type": "string", "description": "ignored"},
				"metadata":   described("meta.ObjectMeta"),
				"spec": map[string]any{"type": "object", "properties": map[string]any{
					"parts":  map[string]any{"type": "array", "items": described("com.example.v1.Part")},
					"labels": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
					"byName": map[string]any{"type": "object", "additionalProperties": ref("com.example.v1.Part")},
					"open":   map[string]any{"type": "object", "additionalProperties": true},
				}},
			},
			"x-kubernetes-group-version-kind": gvkExt("example.com", "v1", "Widget"),
		},
		"com.example.v1.Part": map[string]any{"type": "object", "properties": map[string]any{
			"name": map[string]any{"type": "string"},
			"size": map[string]any{"type": "integer", "format": "int32"},
		}},
		"meta.ObjectMeta": map[string]any{"type": "object", "properties": map[string]any{
			"name":   map[string]any{"type": "string"},
			"labels": map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
		}},
	})
	d := reduce(t, raw, "example.com", "v1")
	k, ok := d.Kinds[widget]
	if !ok || len(d.Kinds) != 1 {
		t.Fatalf("kinds %v, want only %v", d.Kinds, widget)
	}
	want := []string{
		"apiVersion", "metadata", "metadata.labels", "metadata.name", "spec",
		"spec.byName", "spec.byName.*.name", "spec.byName.*.size", "spec.labels", "spec.open",
		"spec.parts", "spec.parts[].name", "spec.parts[].size",
	}
	if got := paths(k.Fields); !slices.Equal(got, want) {
		t.Errorf("paths:\n%q\nwant:\n%q", got, want)
	}
	if k.Fields.Len() != len(want) || k.Truncated || k.SelectableFields != nil {
		t.Errorf("Len %d, Truncated %v, SelectableFields %v; want %d, false, nil", k.Fields.Len(), k.Truncated, k.SelectableFields, len(want))
	}
	candidates := []string{"apiVersion", "metadata", "metadata.labels", "metadata.name", "spec", "spec.byName", "spec.labels", "spec.open", "spec.parts"}
	if got := k.Fields.SelectorCandidates(); !slices.Equal(got, candidates) {
		t.Errorf("selector candidates %q, want %q", got, candidates)
	}
}

// JSONSchemaProps refers to itself: a reference is expanded once on each way
// down, so the walk ends and the set is finite.
func TestReduceEndsRecursiveSchemas(t *testing.T) {
	raw := doc(t, map[string]any{
		"com.example.v1.Widget": map[string]any{
			"properties":                      map[string]any{"schema": described("Props")},
			"x-kubernetes-group-version-kind": gvkExt("example.com", "v1", "Widget"),
		},
		"Props": map[string]any{"properties": map[string]any{
			"type":       map[string]any{"type": "string"},
			"properties": map[string]any{"additionalProperties": described("Props")},
			"items":      described("Props"),
			"not":        ref("Props"),
		}},
	})
	k := reduce(t, raw, "example.com", "v1").Kinds[widget]
	want := []string{"schema", "schema.items", "schema.not", "schema.properties", "schema.type"}
	if got := paths(k.Fields); !slices.Equal(got, want) || k.Truncated {
		t.Errorf("paths %q (truncated %v), want %q", got, k.Truncated, want)
	}
}

func TestReduceKeepsOnlyTheDocumentsOwnKinds(t *testing.T) {
	object := func(gvk []map[string]string) map[string]any {
		return map[string]any{"properties": map[string]any{"x": map[string]any{"type": "string"}}, "x-kubernetes-group-version-kind": gvk}
	}
	raw := doc(t, map[string]any{
		"com.example.v1.Widget":     object(gvkExt("example.com", "v1", "Widget")),
		"com.example.v1.WidgetList": object(gvkExt("example.com", "v1", "WidgetList")),
		"com.example.v2.Widget":     object(gvkExt("example.com", "v2", "Widget")),
		"autoscaling.v1.Scale":      object(gvkExt("autoscaling", "v1", "Scale")),
		"meta.v1.DeleteOptions": object([]map[string]string{
			{"group": "example.com", "version": "v1", "kind": "DeleteOptions"},
			{"group": "", "version": "v1", "kind": "DeleteOptions"},
		}),
		"com.example.v1.Part": map[string]any{"properties": map[string]any{"x": map[string]any{"type": "string"}}},
	})
	d := reduce(t, raw, "example.com", "v1")
	var got []string
	for gvk := range d.Kinds {
		got = append(got, gvk.Kind)
	}
	if !slices.Equal(got, []string{"Widget"}) {
		t.Errorf("kinds %q, want only Widget", got)
	}
}

func TestReduceReadsSelectableFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		ext  any
		want []string
	}{
		{"absent", nil, nil},
		{"empty", []any{}, []string{}},
		{"sorted and unique", []any{
			map[string]any{"fieldPath": "spec.size"}, map[string]any{"fieldPath": "spec.color"},
			map[string]any{"fieldPath": "spec.size"}, map[string]any{"fieldPath": ""},
		}, []string{"spec.color", "spec.size"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			widgetSchema := map[string]any{"x-kubernetes-group-version-kind": gvkExt("example.com", "v1", "Widget")}
			if tc.ext != nil {
				widgetSchema["x-kubernetes-selectable-fields"] = tc.ext
			}
			k := reduce(t, doc(t, map[string]any{"com.example.v1.Widget": widgetSchema}), "example.com", "v1").Kinds[widget]
			if !slices.Equal(k.SelectableFields, tc.want) || (k.SelectableFields == nil) != (tc.want == nil) {
				t.Errorf("SelectableFields %#v, want %#v", k.SelectableFields, tc.want)
			}
		})
	}
}

// Ten components each referring twice to the next expand to 2^10 paths of
// the last one: the bound stops the walk and marks the kind.
func TestReduceBoundsTheWalk(t *testing.T) {
	schemas := map[string]any{
		"com.example.v1.Widget": map[string]any{
			"properties":                      map[string]any{"a": ref("L0"), "b": ref("L0")},
			"x-kubernetes-group-version-kind": gvkExt("example.com", "v1", "Widget"),
		},
	}
	const levels = 20
	for i := range levels {
		next := map[string]any{"type": "string"}
		if i+1 < levels {
			next = ref(fmt.Sprintf("L%d", i+1))
		}
		schemas[fmt.Sprintf("L%d", i)] = map[string]any{"properties": map[string]any{"a": next, "b": next}}
	}
	k := reduce(t, doc(t, schemas), "example.com", "v1").Kinds[widget]
	if !k.Truncated || k.Fields.Len() != MaxFieldsPerKind {
		t.Errorf("Truncated %v with %d paths, want true with %d", k.Truncated, k.Fields.Len(), MaxFieldsPerKind)
	}

	deep := map[string]any{"type": "string"}
	for range MaxDepth + 1 {
		deep = map[string]any{"properties": map[string]any{"d": deep}}
	}
	deep["x-kubernetes-group-version-kind"] = gvkExt("example.com", "v1", "Widget")
	k = reduce(t, doc(t, map[string]any{"com.example.v1.Widget": deep}), "example.com", "v1").Kinds[widget]
	if !k.Truncated {
		t.Errorf("a schema %d levels deep was not marked truncated (%d paths)", MaxDepth+2, k.Fields.Len())
	}
}

func TestReduceSkipsPropertyNamesWithControlCharacters(t *testing.T) {
	raw := doc(t, map[string]any{"com.example.v1.Widget": map[string]any{
		"properties":                      map[string]any{"a\nb": map[string]any{"type": "string"}, "ok": map[string]any{"type": "string"}},
		"x-kubernetes-group-version-kind": gvkExt("example.com", "v1", "Widget"),
	}})
	if got := paths(reduce(t, raw, "example.com", "v1").Kinds[widget].Fields); !slices.Equal(got, []string{"ok"}) {
		t.Errorf("paths %q, want only ok", got)
	}
}

func TestReduceRefusesWhatIsNoOpenAPIDocument(t *testing.T) {
	for _, raw := range []string{`not json`, `{"keys":[]}`, `{"components":{"schemas":[]}}`} {
		if _, err := Reduce([]byte(raw), "", "v1"); err == nil {
			t.Errorf("Reduce(%s) succeeded", raw)
		}
	}
}

func TestLacksListsWhatTheOtherSetHas(t *testing.T) {
	set := func(p ...string) Fields { return newFields(p) }
	old := set("a", "b.c", "d", "f")
	newer := set("a", "b", "b.c", "c", "d", "e", "g")
	gotPaths, count := old.Lacks(newer, 2)
	if !slices.Equal(gotPaths, []string{"b", "c"}) || count != 4 {
		t.Errorf("Lacks(limit 2) = %q, %d; want [b c], 4", gotPaths, count)
	}
	if gotPaths, count = old.Lacks(newer, 10); !slices.Equal(gotPaths, []string{"b", "c", "e", "g"}) || count != 4 {
		t.Errorf("Lacks(limit 10) = %q, %d; want [b c e g], 4", gotPaths, count)
	}
	if gotPaths, count = newer.Lacks(old, 10); !slices.Equal(gotPaths, []string{"f"}) || count != 1 {
		t.Errorf("reverse Lacks = %q, %d; want [f], 1", gotPaths, count)
	}
	if gotPaths, count = old.Lacks(old, 10); gotPaths != nil || count != 0 {
		t.Errorf("a set lacks %q (%d) of itself", gotPaths, count)
	}
	if gotPaths, _ = set().Lacks(old, 10); !slices.Equal(gotPaths, paths(old)) {
		t.Errorf("the empty set lacks %q, want all of %q", gotPaths, paths(old))
	}
	if s := set("b", "a", "b"); string(s) != "a\nb\n" || s.Len() != 2 {
		t.Errorf("set of b, a, b = %q (Len %d), want sorted and unique", s, s.Len())
	}
	if got := strings.Count(string(set()), "\n"); got != 0 {
		t.Errorf("empty set holds %d paths", got)
	}
}

func TestDifferingListsEachPathWhoseSetsDifferFromItsParents(t *testing.T) {
	set := func(p ...string) Fields { return newFields(p) }
	type yielded struct {
		path   string
		having uint64
	}
	for _, tc := range []struct {
		name string
		sets []Fields
		want []yielded
	}{
		{"alike sets", []Fields{set("a", "a.b"), set("a", "a.b")}, nil},
		{"no set", nil, nil},
		{
			"a property only one set has, and its properties",
			[]Fields{
				set("spec", "spec.volumes", "spec.volumes[].image", "spec.volumes[].image.pullPolicy", "spec.volumes[].name"),
				set("spec", "spec.volumes", "spec.volumes[].name"),
			},
			[]yielded{{"spec.volumes[].image", 0b01}},
		},
		{
			"a property fewer sets have than its parent",
			[]Fields{
				set("spec", "spec.image", "spec.image.pullPolicy", "spec.image.reference"),
				set("spec", "spec.image", "spec.image.reference"),
				set("spec"),
			},
			[]yielded{{"spec.image", 0b011}, {"spec.image.pullPolicy", 0b001}},
		},
		{
			"map values and array items are no parents",
			[]Fields{
				set("spec", "spec.byName", "spec.byName.*.size", "spec.grid", "spec.grid[][].x", "spec.grid[][].y"),
				set("spec", "spec.byName", "spec.grid", "spec.grid[][].x"),
			},
			[]yielded{{"spec.byName.*.size", 0b01}, {"spec.grid[][].y", 0b01}},
		},
		{
			"properties of the root, each set with its own",
			[]Fields{set("a", "b", "b.c", "d"), set("b", "b.c", "c", "d")},
			[]yielded{{"a", 0b01}, {"c", 0b10}},
		},
		{
			// A sibling that sorts between a parent and its properties
			// ("spec.a-b" before "spec.a.b") does not hide the parent.
			"siblings sorting between a parent and its properties",
			[]Fields{set("spec", "spec.a", "spec.a-b", "spec.a.b"), set("spec", "spec.a-b")},
			[]yielded{{"spec.a", 0b01}},
		},
	} {
		var got []yielded
		for path, having := range Differing(tc.sets) {
			got = append(got, yielded{path, having})
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: Differing yields %v, want %v", tc.name, got, tc.want)
		}
	}
	sets := make([]Fields, 64)
	for i := range sets {
		sets[i] = set("spec")
	}
	sets[63] = set("spec", "spec.x")
	var got []yielded
	for path, having := range Differing(sets) {
		got = append(got, yielded{path, having})
	}
	if want := []yielded{{"spec.x", 1 << 63}}; !slices.Equal(got, want) {
		t.Errorf("of 64 sets, the last alone has spec.x: Differing yields %v, want %v", got, want)
	}
}
