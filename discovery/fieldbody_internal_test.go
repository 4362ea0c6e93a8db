package discovery

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// BothWaySkew is the shape of v1.35 -> v1.36 Deployments: only the v1.36
// servers (kube-b, kube-c) know spec.template.spec.schedulingGroup, only the
// v1.35 one (kube-a) spec.template.spec.workloadRef; the containers' and
// node selector's paths are there to exercise arrays and maps.
func BothWaySkew() FieldSkew {
	return FieldSkew{
		Paths: []string{
			"spec.template.spec.containers[].resizePolicy",    // 0: kube-b, kube-c
			"spec.template.spec.nodeSelector.*",               // 1: kube-b, kube-c
			"spec.template.spec.schedulingGroup",              // 2: kube-b, kube-c
			"spec.template.spec.schedulingGroup.podGroupName", // 3: kube-c only
			"spec.template.spec.workloadRef",                  // 4: kube-a
		},
		Schemas: []FieldSchema{
			{Servers: []int{0}, Knows: []int{4}},
			{Servers: []int{1}, Knows: []int{0, 1, 2}},
			{Servers: []int{2}, Knows: []int{0, 1, 2, 3}},
		},
	}
}

// referenceKnowing reads a JSON object body token by token with
// encoding/json, descending recursively, every member counted even when its
// name repeats: the obvious reading that the plugin's iterative walk must
// agree with.
func referenceKnowing(t *skewTree, body []byte) (ServerSet, bool) {
	if !json.Valid(body) {
		return 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	knowing := ^ServerSet(0)
	child := func(node int32, step string) int32 {
		for _, c := range t.nodes[node].children {
			if node != noNode && t.nodes[c].step == step {
				return c
			}
		}
		return noNode
	}
	// value reads one value at node (noNode: outside the tree).
	var value func(node int32)
	value = func(node int32) {
		tok, _ := dec.Token()
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				name, _ := dec.Token()
				next := int32(noNode)
				if node != noNode {
					next = child(node, name.(string))
					if next == noNode && !strings.HasPrefix(name.(string), "$") {
						next = child(node, valuesStep)
					}
				}
				if next != noNode {
					knowing &= t.nodes[next].knowing
				}
				value(next)
			}
			dec.Token()
		case json.Delim('['):
			next := int32(noNode)
			if node != noNode {
				next = child(node, itemsStep)
			}
			for dec.More() {
				if next != noNode {
					knowing &= t.nodes[next].knowing
				}
				value(next)
			}
			dec.Token()
		}
	}
	if first := bytes.TrimLeft(body, " \t\r\n"); len(first) == 0 || first[0] != '{' {
		return 0, false
	}
	value(0)
	if knowing != ^ServerSet(0) {
		knowing &= t.compared
	}
	return knowing, true
}

// FuzzBodyWalkAgreesWithDecodingTheBody checks the iterative walk over a
// body against a recursive reading of the decoded body, on any input,
// nested as deep as it likes.
func FuzzBodyWalkAgreesWithDecodingTheBody(f *testing.F) {
	f.Add([]byte(`{"spec":{"template":{"spec":{"schedulingGroup":{"podGroupName":"g"},"containers":[{"resizePolicy":[]}]}}}}`))
	f.Add([]byte(`{"spec":{"template":{"spec":{"nodeSelector":{"$patch":"replace","a":"b"},"workloadRef":null}}}}`))
	f.Add([]byte(`{"spec":{"template":{"spec":{"schedul\u0069ngGroup":{}}}}}`))
	f.Add([]byte(`{"spec":` + strings.Repeat(`{"a":[`, 2000) + strings.Repeat(`]}`, 2000) + `}`))
	f.Add([]byte(`{"spec":{"template":{"spec":{"containers":` + strings.Repeat("[", 3000) + strings.Repeat("]", 3000) + `}}}}`))
	skew := BothWaySkew()
	tree := newSkewTree(&skew)
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := tree.knowingEveryField(body, objectBody)
		want, wantOK := referenceKnowing(tree, body)
		if ok != wantOK || got != want {
			t.Fatalf("walk: %03b (%v); decoding: %03b (%v)", got, ok, want, wantOK)
		}
	})
}

// The walk keeps at most one open object or array per level of the tree,
// however deep the body nests.
func TestBodyWalkStackIsBoundedByTheTreeNotTheBody(t *testing.T) {
	skew := BothWaySkew()
	tree := newSkewTree(&skew)
	depth := 0
	for _, p := range skew.Paths {
		steps, _ := splitFieldPath(p, nil)
		depth = max(depth, len(steps))
	}
	body := `{"spec":{"template":{"spec":{"containers":[` + strings.Repeat(`{"resizePolicy":[`, 1) + strings.Repeat("[", 10000) +
		strings.Repeat("]", 10000) + `]}]}}}}`
	doc, ok := ParseJSON([]byte(body))
	if !ok {
		t.Fatal("not JSON")
	}
	knowing := ^ServerSet(0)
	stack := tree.walk(doc, 0, &knowing, nil)
	if cap(stack) > 2*depth+4 {
		t.Errorf("the walk's stack grew to %d entries for a tree %d deep", cap(stack), depth)
	}
	if knowing&0b111 != 0b110 {
		t.Errorf("knowing %03b; want the servers that know resizePolicy", knowing&0b111)
	}
}

func TestSplitFieldPath(t *testing.T) {
	for _, c := range []struct {
		path string
		want []string
	}{
		{"spec.containers[].image", []string{"spec", "containers", "[]", "image"}},
		{"metadata.labels.*", []string{"metadata", "labels", "*"}},
		{"spec.matrix[][].x", []string{"spec", "matrix", "[]", "[]", "x"}},
	} {
		if got, ok := splitFieldPath(c.path, nil); !ok || !slices.Equal(got, c.want) {
			t.Errorf("%s: %q (%v); want %q", c.path, got, ok, c.want)
		}
	}
	for _, bad := range []string{"", ".a", "a.", "a..b", "[]", "a.[]"} {
		if _, ok := splitFieldPath(bad, nil); ok {
			t.Errorf("%q read as a field path", bad)
		}
	}
}
