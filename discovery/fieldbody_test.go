package discovery_test

import (
	"strings"
	"testing"

	. "github.com/skewgate/skewgate/discovery"
)

const (
	deployments     = "/apis/apps/v1/namespaces/ns/deployments"
	kubeA, kubeB    = ServerSet(0b001), ServerSet(0b010)
	kubeC, newMinor = ServerSet(0b100), ServerSet(0b110)
)

func bodySkewIndex(t *testing.T, edit func([]Server)) *Index {
	t.Helper()
	return fieldIndex(t, IndexOptions{}, func(s []Server) {
		s[0].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.template.spec.schedulingGroup"}}
		s[1].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.template.spec.schedulingGroup.podGroupName", "spec.template.spec.workloadRef"}}
		s[2].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.template.spec.workloadRef"}}
		if edit != nil {
			edit(s)
		}
	}, func(snap *Snapshot) { snap.FieldSkew = map[string]FieldSkew{"apps/v1/deployments": BothWaySkew()} })
}

type bodyCase struct {
	name, method, path, contentType, body string
	want                                  ServerSet
	use                                   BodyUse
}

func checkBodyCases(t *testing.T, ix *Index, cases []bodyCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := Request{Method: c.method, Path: c.path, ContentType: c.contentType,
				ContentLength: int64(len(c.body)), Body: []byte(c.body)}
			var got ServerSet
			for pick := range uint64(6) {
				d := ix.Decide(&req, pick)
				if d.Action != Route || d.Body != c.use {
					t.Fatalf("decision %+v; want Route, body %v", d, c.use)
				}
				got |= 1 << uint(d.Server)
			}
			if got != c.want {
				t.Errorf("routed to %03b; want %03b", got, c.want)
			}
			if capable := ix.Capable(&req, 0); capable != c.want {
				t.Errorf("Capable %03b; want %03b, where Decide picks from", capable, c.want)
			}
		})
	}
}

// A write of a resource whose schemas differ both ways goes to the servers
// whose schema has every field its body sets; of several, those lacking
// nothing, else those of the newest minor.
func TestWriteGoesToServersWhoseSchemaHasEveryFieldItsBodySets(t *testing.T) {
	const json, merge, strategic, apply, jsonPatch = "application/json", "application/merge-patch+json",
		"application/strategic-merge-patch+json", "application/apply-patch+yaml", "application/json-patch+json"
	withNew := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"schedulingGroup":{},"containers":[{"name":"c","image":"i"}]}}}}`
	withOld := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},"spec":{"template":{"spec":{"workloadRef":{"name":"w"},"containers":[{"name":"c","image":"i"}]}}}}`
	plain := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d","labels":{"schedulingGroup":"x"}},"spec":{"replicas":2}}`
	checkBodyCases(t, bodySkewIndex(t, nil), []bodyCase{
		{"create setting a field only the newer schema has", "POST", deployments, json, withNew, newMinor, BodyRead},
		{"create setting a field only the older schema has", "POST", deployments, json, withOld, kubeA, BodyRead},
		{"update setting a field only kube-c's schema has", "PUT", deployments + "/d", json,
			`{"spec":{"template":{"spec":{"schedulingGroup":{"podGroupName":"g"}}}}}`, kubeC, BodyRead},
		{"create setting both sides' fields: invalid everywhere, the newest minor says so", "POST", deployments, json,
			`{"spec":{"template":{"spec":{"schedulingGroup":{},"workloadRef":{}}}}}`, newMinor, BodyRead},
		{"create setting no field that differs: the newest minor", "POST", deployments, json, plain, newMinor, BodyRead},
		{"status update", "PUT", deployments + "/d/status", json, withOld, kubeA, BodyRead},
		{"merge patch", "PATCH", deployments + "/d", merge, `{"spec":{"template":{"spec":{"workloadRef":null}}}}`, kubeA, BodyRead},
		{"strategic merge patch with directives", "PATCH", deployments + "/d", strategic,
			`{"$patch":"merge","spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"c"}],"containers":[{"name":"c","resizePolicy":[]}],"nodeSelector":{"$patch":"replace"}}}}}`,
			newMinor, BodyRead},
		{"a map's key", "PATCH", deployments + "/d", merge, `{"spec":{"template":{"spec":{"nodeSelector":{"disk":"ssd"}}}}}`, newMinor, BodyRead},
		{"server-side apply sent as JSON", "PATCH", deployments + "/d", apply + "; charset=utf-8", withOld, kubeA, BodyRead},
		{"JSON patch adding a field", "PATCH", deployments + "/d", jsonPatch,
			`[{"op":"test","path":"/metadata/name","value":"d"},{"op":"add","path":"/spec/template/spec/workloadRef","value":{"name":"w"}}]`, kubeA, BodyRead},
		{"JSON patch adding an object holding a field", "PATCH", deployments + "/d", jsonPatch,
			`[{"op":"replace","path":"/spec/template","value":{"spec":{"schedulingGroup":{"podGroupName":"g"}}}}]`, kubeC, BodyRead},
		{"JSON patch into an array's item", "PATCH", deployments + "/d", jsonPatch,
			`[{"op":"add","path":"/spec/template/spec/containers/0/resizePolicy","value":[]},{"op":"add","path":"/spec/template/spec/containers/-","value":{"name":"d"}}]`,
			newMinor, BodyRead},
		{"JSON patch moving a field away", "PATCH", deployments + "/d", jsonPatch,
			`[{"op":"move","from":"/spec/template/spec/workloadRef","path":"/metadata/annotations/x"}]`, kubeA, BodyRead},
		{"JSON patch removing a field, escaped", "PATCH", deployments + "/d", jsonPatch,
			`[{"op":"remove","path":"/spec/template/spec/nodeSelector/a~1b~0c"}]`, newMinor, BodyRead},
		{"server-side apply in YAML is not read", "PATCH", deployments + "/d", apply, "spec:\n  template:\n    spec:\n      workloadRef: {}\n", newMinor, BodyUnreadable},
		{"protobuf is not read", "POST", deployments, "application/vnd.kubernetes.protobuf", "k8s\x00\n\x0b\n\x07apps/v1", newMinor, BodyUnreadable},
		{"a body that is not JSON", "POST", deployments, json, `{"spec":`, newMinor, BodyUnreadable},
		{"a JSON patch that is an object", "PATCH", deployments + "/d", jsonPatch, withOld, newMinor, BodyUnreadable},
		{"a scale's body is another kind", "PUT", deployments + "/d/scale", json, withOld, newMinor, BodyNotConsulted},
		{"delete", "DELETE", deployments + "/d", json, `{"propagationPolicy":"Foreground"}`, newMinor, BodyNotConsulted},
		{"read", "GET", deployments + "/d", "", "", newMinor, BodyNotConsulted},
	})
}

// A server whose schema the controller did not compare (it was down) is in
// no schema: it gets no write that sets a field that differs, and the
// others still get theirs.
func TestServerNotComparedGetsNoWriteSettingAFieldThatDiffers(t *testing.T) {
	ix := bodySkewIndex(t, nil)
	skew := BothWaySkew()
	skew.Schemas = skew.Schemas[1:] // kube-a not compared
	ix = fieldIndex(t, IndexOptions{}, func(s []Server) {
		s[1].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.template.spec.schedulingGroup.podGroupName"}}
	}, func(snap *Snapshot) { snap.FieldSkew = map[string]FieldSkew{"apps/v1/deployments": skew} })
	checkBodyCases(t, ix, []bodyCase{
		// Nothing says kube-a knows it: the request goes where it would
		// have gone without the body.
		{"a field only the uncompared server may know", "POST", deployments, "application/json",
			`{"spec":{"template":{"spec":{"workloadRef":{}}}}}`, kubeC, BodyRead},
		{"a field kube-b and kube-c know", "POST", deployments, "application/json",
			`{"spec":{"template":{"spec":{"schedulingGroup":{}}}}}`, kubeC, BodyRead},
	})
}

// The plugin waits for a body only when it would decide: a readable write
// of a resource whose schemas differ, of a declared length it buffers.
func TestOnlyAReadableWriteOfASkewedResourceAwaitsItsBody(t *testing.T) {
	ix := bodySkewIndex(t, nil)
	cases := []struct {
		name, method, path, contentType string
		length                          int64
		await                           bool
	}{
		{"create", "POST", deployments, "application/json", 100, true},
		{"apply", "PATCH", deployments + "/d", "application/apply-patch+yaml", 100, true},
		{"at the bound", "PUT", deployments + "/d", "application/json", MaxInspectedBody, true},
		{"over the bound", "PUT", deployments + "/d", "application/json", MaxInspectedBody + 1, false},
		{"unknown length", "PUT", deployments + "/d", "application/json", -1, false},
		{"protobuf", "POST", deployments, "application/vnd.kubernetes.protobuf", 100, false},
		{"a resource whose schemas agree", "POST", "/api/v1/namespaces/ns/configmaps", "application/json", 100, false},
		{"scale", "PATCH", deployments + "/d/scale", "application/merge-patch+json", 100, false},
		{"read", "GET", deployments, "", -1, false},
	}
	for _, c := range cases {
		req := Request{Method: c.method, Path: c.path, ContentType: c.contentType, ContentLength: c.length, BodyAwaitable: true}
		d := ix.Decide(&req, 0)
		if (d.Action == AwaitBody) != c.await {
			t.Errorf("%s: decision %+v; want awaiting the body %v", c.name, d, c.await)
		}
		if d.Action == AwaitBody && ix.Capable(&req, 0) != 0 {
			t.Errorf("%s: Capable is not empty while the decision waits for the body", c.name)
		}
		req.BodyAwaitable = false
		if d := ix.Decide(&req, 0); d.Action == AwaitBody {
			t.Errorf("%s: decision %+v when the caller cannot wait for the body", c.name, d)
		}
	}
}

func TestFieldSkewIsWrittenSortedAndReadBack(t *testing.T) {
	servers := withFieldData(t)
	snap, err := NewSnapshot(1, "", servers)
	if err != nil {
		t.Fatal(err)
	}
	snap.FieldSkew = map[string]FieldSkew{"apps/v1/deployments": BothWaySkew(), "v1/pods": {
		Paths: []string{"spec.x"}, Schemas: []FieldSchema{{Servers: []int{0, 2}, Knows: []int{0}}, {Servers: []int{1}}}}}
	doc := snap.AppendJSON(nil)
	want := `"fieldSkew":{"apps/v1/deployments":{"paths":["spec.template.spec.containers[].resizePolicy","spec.template.spec.nodeSelector.*",` +
		`"spec.template.spec.schedulingGroup","spec.template.spec.schedulingGroup.podGroupName","spec.template.spec.workloadRef"],` +
		`"schemas":[{"servers":[0],"knows":[4]},{"servers":[1],"knows":[0,1,2]},{"servers":[2],"knows":[0,1,2,3]}]},` +
		`"v1/pods":{"paths":["spec.x"],"schemas":[{"servers":[0,2],"knows":[0]},{"servers":[1],"knows":[]}]}}`
	if !strings.Contains(string(doc), want) {
		t.Fatalf("the encoding lacks\n%s\nin\n%s", want, doc[len(doc)-min(len(doc), 800):])
	}
	parsed, err := ParseSnapshot(doc)
	if err != nil {
		t.Fatal(err)
	}
	if again := parsed.AppendJSON(nil); string(again) != string(doc) {
		t.Errorf("read back and written again, the snapshot differs")
	}
}

func TestFieldSkewDefectsAreRefusedNamingResourceAndField(t *testing.T) {
	cases := []struct {
		name string
		edit func(*FieldSkew)
		want string
	}{
		{"no paths", func(f *FieldSkew) { f.Paths = nil; f.Schemas = nil }, `"apps/v1/deployments": paths: need 1 to 1024, got 0`},
		{"unsorted paths", func(f *FieldSkew) { f.Paths[0], f.Paths[1] = f.Paths[1], f.Paths[0] }, "not sorted after"},
		{"an empty name", func(f *FieldSkew) { f.Paths[4] = "spec..x" }, `"spec..x": not a field path`},
		{"a path with a space", func(f *FieldSkew) { f.Paths[4] = "spec.a b" }, `paths: field path: "spec.a b": character ' ' is not allowed`},
		{"a server out of range", func(f *FieldSkew) { f.Schemas[0].Servers = []int{3} }, `schemas[0]: servers: 3: the snapshot has 3 servers`},
		{"a server in two schemas", func(f *FieldSkew) { f.Schemas[1].Servers = []int{0, 1} }, `schemas[1]: servers: servers[0] (apiserver-aaa) is in another schema of the resource too`},
		{"a schema without servers", func(f *FieldSkew) { f.Schemas[1].Servers = nil }, `schemas[1]: servers: must not be empty`},
		{"a path out of range", func(f *FieldSkew) { f.Schemas[2].Knows = []int{0, 5} }, `schemas[2]: knows: 5: the resource has 5 paths`},
		{"unsorted knows", func(f *FieldSkew) { f.Schemas[2].Knows = []int{1, 0} }, `schemas[2]: knows: 0: not sorted after 1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := BothWaySkew()
			c.edit(&f)
			snap := &Snapshot{Generation: 1, Servers: withFieldData(t), FieldSkew: map[string]FieldSkew{"apps/v1/deployments": f}}
			err := snap.Validate()
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "snapshot: fieldSkew: ") {
				t.Fatalf("error %v; want one naming fieldSkew and containing %q", err, c.want)
			}
		})
	}
	t.Run("a resource the server does not serve", func(t *testing.T) {
		snap := &Snapshot{Generation: 1, Servers: withFieldData(t), FieldSkew: map[string]FieldSkew{
			mutatingPolicies: {Paths: []string{"spec.x"}, Schemas: []FieldSchema{{Servers: []int{0}}}}}}
		if err := snap.Validate(); err == nil || !strings.Contains(err.Error(), "servers[0] (apiserver-aaa) does not serve the resource") {
			t.Fatalf("error %v", err)
		}
	})
	for _, doc := range []struct{ member, want string }{
		{`{"v1/pods":[]}`, `"v1/pods": must be an object with paths and schemas, got []`},
		{`{"v1/pods":{"paths":["a"],"servers":[]}}`, `"v1/pods": "servers": not a member of a field skew (paths, schemas)`},
		{`{"v1/pods":{"paths":["a"],"schemas":[{"servers":[-1]}]}}`, `"v1/pods": schemas[0]: servers: must be an array of indexes, got -1`},
		{`{"v1/pods":{"paths":[1]}}`, `"v1/pods": paths: must be an array of strings`},
	} {
		raw := `{"schemaVersion":"1.3","generation":1,"servers":[],"fieldSkew":` + doc.member + `}`
		if _, err := ParseSnapshot([]byte(raw)); err == nil || !strings.Contains(err.Error(), "snapshot: fieldSkew: "+doc.want) {
			t.Errorf("%s: error %v; want %q", doc.member, err, doc.want)
		}
	}
}

// Reads and bodiless requests of a resource whose schemas differ cost no
// allocation, as every other decision; only a write's body is read.
func TestDecideWithFieldSkewDoesNotAllocateWithoutABody(t *testing.T) {
	ix := bodySkewIndex(t, nil)
	for _, req := range []Request{
		{Method: "GET", Path: deployments + "/d"},
		{Method: "GET", Path: "/apis/apps/v1/watch/deployments", Query: "resourceVersion=7"},
		{Method: "DELETE", Path: deployments + "/d"},
		{Method: "POST", Path: deployments, ContentType: "application/json", ContentLength: 100, BodyAwaitable: true},
		{Method: "POST", Path: deployments, ContentType: "application/vnd.kubernetes.protobuf", ContentLength: 100},
	} {
		if n := testing.AllocsPerRun(100, func() { ix.Decide(&req, 1) }); n != 0 {
			t.Errorf("%s %s (%s): %v allocations per Decide; want 0", req.Method, req.Path, req.ContentType, n)
		}
	}
}

// deploymentOfSize is a Deployment setting the v1.35-only field, padded
// with containers to about size bytes, as a large pod template is.
func deploymentOfSize(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","labels":{"app":"web"}},` +
		`"spec":{"replicas":3,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},` +
		`"spec":{"workloadRef":{"name":"w"},"containers":[`)
	for i := 0; b.Len() < size-64; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"name":"c` + strings.Repeat("x", i%7) + `","image":"registry.example/web:1.0","args":["--port=8080","--verbose"],` +
			`"env":[{"name":"MODE","value":"production"}],"resources":{"requests":{"cpu":"100m","memory":"128Mi"}}}`)
	}
	b.WriteString(`]}}}}`)
	return []byte(b.String())
}

// BenchmarkDecideWriteByBody is the cost a write's body adds to its
// decision: the same create decided from its headers alone (as a resource
// whose schemas agree is) and from bodies of 1 KB, 10 KB and 1 MB.
func BenchmarkDecideWriteByBody(b *testing.B) {
	ix := bodySkewIndex(&testing.T{}, nil)
	b.Run("headers-only", func(b *testing.B) {
		req := Request{Method: "POST", Path: deployments, ContentType: "application/json", ContentLength: -1}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			ix.Decide(&req, uint64(i))
		}
	})
	for _, size := range []struct {
		name  string
		bytes int
	}{{"body=1KB", 1 << 10}, {"body=10KB", 10 << 10}, {"body=1MB", MaxInspectedBody}} {
		body := deploymentOfSize(size.bytes)
		req := Request{Method: "POST", Path: deployments, ContentType: "application/json", ContentLength: int64(len(body)), Body: body}
		if d := ix.Decide(&req, 0); d.Body != BodyRead || d.Server != 0 {
			b.Fatalf("decision %+v; want kube-a by the body", d)
		}
		b.Run(size.name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				ix.Decide(&req, uint64(i))
			}
		})
	}
}
