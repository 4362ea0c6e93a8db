package discovery_test

import (
	"slices"
	"strings"
	"testing"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// skewedServers are the servers of discoverytest.SkewedControlPlane: kube-a
// (v1.35) serves no mutatingadmissionpolicies, kube-b and kube-c do.
func skewedServers(t *testing.T) []Server {
	t.Helper()
	snap, err := ParseSnapshot(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane()))
	if err != nil {
		t.Fatal(err)
	}
	return snap.Servers
}

const mutatingPolicies = "admissionregistration.k8s.io/v1/mutatingadmissionpolicies"

// withFieldData gives the servers field selectors for pods (which every
// server serves) and for mutating admission policies (only kube-b and
// kube-c), and kube-a missing fields of deployments.
func withFieldData(t *testing.T) []Server {
	servers := skewedServers(t)
	servers[0].FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace"}}
	servers[1].FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace", "spec.nodeName"},
		mutatingPolicies: {"metadata.name"}}
	servers[2].FieldSelectors = map[string][]string{"v1/pods": {"metadata.name", "metadata.namespace", "spec.nodeName"},
		mutatingPolicies: {"metadata.name", "spec.paramKind"}}
	servers[0].MissingFields = map[string][]string{"apps/v1/deployments": {"spec.template.spec.hostUsers", "status.terminatingReplicas"}}
	return servers
}

func TestFieldDataIsWrittenSortedAndReadBack(t *testing.T) {
	snap, err := NewSnapshot(1, "", withFieldData(t))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(snap.AppendJSON(nil))
	for _, want := range []string{
		`"fieldSelectors":{"admissionregistration.k8s.io/v1/mutatingadmissionpolicies":["metadata.name","spec.paramKind"],"v1/pods":["metadata.name","metadata.namespace","spec.nodeName"]}`,
		`"missingFields":{"apps/v1/deployments":["spec.template.spec.hostUsers","status.terminatingReplicas"]}`,
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the encoding lacks %s", want)
		}
	}
	parsed, err := ParseSnapshot([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	for i := range parsed.Servers {
		got, want := parsed.Servers[i], snap.Servers[i]
		if !equalLists(got.FieldSelectors, want.FieldSelectors) || !equalLists(got.MissingFields, want.MissingFields) {
			t.Errorf("server %d read back as %v %v; want %v %v", i, got.FieldSelectors, got.MissingFields, want.FieldSelectors, want.MissingFields)
		}
	}
	// Without field data the members are left out: a snapshot as of schema 1.0.
	plain, err := NewSnapshot(1, "", skewedServers(t))
	if err != nil {
		t.Fatal(err)
	}
	if doc := string(plain.AppendJSON(nil)); strings.Contains(doc, "fieldSelectors") || strings.Contains(doc, "missingFields") {
		t.Errorf("a snapshot without field data writes the members")
	}
}

func equalLists(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestFieldDataDefectsAreRefusedNamingServerAndField(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(s []Server)
		want  string
	}{
		{"a server that serves the resource leaves it out", func(s []Server) { delete(s[1].FieldSelectors, "v1/pods") },
			`snapshot: servers[1] (apiserver-bbb): fieldSelectors: "v1/pods" missing: servers[0] (apiserver-aaa) lists it`},
		{"a server that serves the resource has none", func(s []Server) { s[2].FieldSelectors = nil },
			`snapshot: servers[2] (apiserver-ccc): fieldSelectors: "`},
		{"unsorted labels", func(s []Server) { s[1].FieldSelectors["v1/pods"] = []string{"metadata.namespace", "metadata.name"} },
			`servers[1] (apiserver-bbb): fieldSelectors: "v1/pods": label: "metadata.name" not sorted after "metadata.namespace", or listed twice`},
		{"a label twice", func(s []Server) { s[1].FieldSelectors["v1/pods"] = []string{"metadata.name", "metadata.name"} },
			`"v1/pods": label: "metadata.name" not sorted after "metadata.name", or listed twice`},
		{"no labels", func(s []Server) { s[1].FieldSelectors["v1/pods"] = []string{} }, `servers[1] (apiserver-bbb): fieldSelectors: "v1/pods": no label`},
		{"an empty label", func(s []Server) { s[1].FieldSelectors["v1/pods"] = []string{""} }, `fieldSelectors: "v1/pods": label: must not be empty`},
		{"a label with a space", func(s []Server) { s[1].FieldSelectors["v1/pods"] = []string{"spec.node Name"} }, `label: "spec.node Name": character ' ' is not allowed`},
		{"a resource the server does not serve", func(s []Server) { s[0].FieldSelectors[mutatingPolicies] = []string{"metadata.name"} },
			`servers[0] (apiserver-aaa): fieldSelectors: "` + mutatingPolicies + `": a resource the server does not serve`},
		{"the core group with a slash", func(s []Server) { s[0].MissingFields["/v1/pods"] = []string{"spec.a"} },
			`servers[0] (apiserver-aaa): missingFields: "/v1/pods": not a resource`},
		{"too many missing fields", func(s []Server) {
			var paths []string
			for i := range MaxMissingFields + 1 {
				paths = append(paths, "spec.f"+string(rune('a'+i)))
			}
			s[0].MissingFields["apps/v1/deployments"] = paths
		}, `servers[0] (apiserver-aaa): missingFields: "apps/v1/deployments": 17 field paths, at most 16`},
		{"unsorted missing fields", func(s []Server) { s[0].MissingFields["apps/v1/deployments"] = []string{"status.a", "spec.a"} },
			`missingFields: "apps/v1/deployments": field path: "spec.a" not sorted after "status.a"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			servers := withFieldData(t)
			c.spoil(servers)
			_, buildErr := NewSnapshot(1, "", servers)
			_, parseErr := ParseSnapshot((&Snapshot{Generation: 1, Servers: servers}).AppendJSON(nil))
			for _, err := range []error{buildErr, parseErr} {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %v; want one containing %s", err, c.want)
				}
			}
		})
	}
}

func TestFieldDataOfTheWrongShapeIsRefusedNamingServerAndField(t *testing.T) {
	snap, err := NewSnapshot(1, "", withFieldData(t))
	if err != nil {
		t.Fatal(err)
	}
	valid := string(snap.AppendJSON(nil))
	const member = `"missingFields":{"apps/v1/deployments":["spec.template.spec.hostUsers","status.terminatingReplicas"]}`
	if !strings.Contains(valid, member) {
		t.Fatalf("test input lacks %s", member)
	}
	for _, c := range []struct{ name, member, want string }{
		{"not an object", `"missingFields":["spec.a"]`, `servers[0] (apiserver-aaa): missingFields: must be an object of resources, got ["spec.a"]`},
		{"not an array", `"missingFields":{"apps/v1/deployments":"spec.a"}`, `missingFields: "apps/v1/deployments": must be an array of strings, got "spec.a"`},
		{"not strings", `"missingFields":{"apps/v1/deployments":[1]}`, `missingFields: "apps/v1/deployments": must be an array of strings, got 1`},
		{"a resource twice", `"missingFields":{"apps/v1/deployments":["spec.a"],"apps/v1/deployments":["spec.b"]}`, `missingFields: "apps/v1/deployments": listed twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ParseSnapshot([]byte(strings.Replace(valid, member, c.member, 1))); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v; want one containing %s", err, c.want)
			}
		})
	}
	// An empty object is no data, as an absent member.
	parsed, err := ParseSnapshot([]byte(strings.Replace(valid, member, `"missingFields":{}`, 1)))
	if err != nil || parsed.Servers[0].MissingFields != nil {
		t.Errorf("empty missingFields read as %v, %v; want nil", parsed.Servers[0].MissingFields, err)
	}
}
