package check

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func writtenFields(manager, apiVersion, fieldsV1 string) func(map[string]any) {
	return func(m map[string]any) {
		entries, _ := m["managedFields"].([]any)
		m["managedFields"] = append(entries, map[string]any{"manager": manager, "operation": "Apply", "apiVersion": apiVersion,
			"time": "2026-02-03T04:05:06Z", "fieldsType": "FieldsV1", "fieldsV1": json.RawMessage(fieldsV1)})
	}
}

// TestFieldsOnlyOneSidesSchemaHas: 1.36 replaced the pod template's
// workloadRef (1.35, alpha) by schedulingGroup. Objects whose managers set
// workloadRef lose it at their next write through a 1.36 server; the
// captured comparison of the two versions' schemas says so, the objects'
// managed fields show who set it.
func TestFieldsOnlyOneSidesSchemaHas(t *testing.T) {
	f := newFakeServer(t, "v1.35.4", "default")
	const workloadRef = `{"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{}}},` +
		`"f:workloadRef":{".":{},"f:name":{},"f:podGroup":{}}}}}}`
	f.add("/apis/apps/v1/deployments",
		meta("team", "gang-0", writtenFields("workload-operator", "apps/v1", workloadRef)),
		meta("team", "gang-1", writtenFields("workload-operator", "apps/v1", workloadRef), writtenFields("kubectl", "apps/v1", `{"f:metadata":{"f:labels":{"f:app":{}}}}`)),
		meta("team", "plain", writtenFields("kubectl", "apps/v1", `{"f:spec":{"f:template":{"f:spec":{"f:containers":{}}}}}`)))
	// A pod template holding the field 1.36 added: only a 1.36 server can
	// have written it.
	f.add("/api/v1/podtemplates", meta("team", "next", writtenFields("scheduler-plugin", "v1",
		`{"f:template":{"f:spec":{"f:schedulingGroup":{".":{},"f:podGroupName":{}}}}}`)))
	code, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3")
	if code != ExitFindings || !slices.Equal(findingKeys(r), []string{"FieldsLostOnWrite apps/v1 deployments", "FieldsLostOnWrite v1 podtemplates"}) {
		t.Fatalf("exit %d, findings %v\n%s", code, findingKeys(r), stderr)
	}
	deployments, templates := r.Findings[0], r.Findings[1]
	if deployments.Summary != "2 objects set fields only v1.35.4's schema has: spec.template.spec.workloadRef and 2 more" ||
		deployments.After.Impact != Breaks || templates.After.Impact != Unaffected {
		t.Errorf("deployments %q after %s; templates after %s", deployments.Summary, deployments.After.Impact, templates.After.Impact)
	}
	evidence := strings.Join(deployments.Evidence, "\n")
	for _, want := range []string{
		"2 objects set spec.template.spec.workloadRef.podGroup (metadata.managedFields of field managers \"workload-operator\"), e.g. apps/v1 deployments team/gang-0, apps/v1 deployments team/gang-1",
		"schema-skew.json",
	} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence lacks %q:\n%s", want, evidence)
		}
	}
	if strings.Contains(evidence, "plain") || strings.Contains(evidence, `"kubectl"`) {
		t.Errorf("evidence names objects or managers that set no such field:\n%s", evidence)
	}
	// Within one minor version there is nothing to compare; across minors
	// without a captured comparison, a note says so.
	if code, _, _ := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.35"); code != ExitClean {
		t.Errorf("1.35 against 1.35: exit %d", code)
	}
	_, r, _ = runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.37.2")
	if !strings.Contains(strings.Join(r.Notes, "\n"), "schemas not compared: no captured comparison of Kubernetes 1.35 and 1.37") {
		t.Errorf("notes %v", r.Notes)
	}
}

func TestPathTrieMatchesManagedFieldsSets(t *testing.T) {
	trie := newPathTrie([]string{"spec.devices[].attributes.*.bools", "spec.cidrs[]", "a.b"})
	var found []string
	err := trie.managedPaths(json.RawMessage(`{"f:spec":{"f:devices":{"k:{\"name\":\"gpu\"}":{"f:attributes":{"f:vendor":{"f:bools":{}},"f:model":{"f:string":{}}}}},`+
		`"f:cidrs":{"v:\"10.0.0.0/8\"":{}}},"f:a":{".":{},"f:c":{}}}`), func(p string) { found = append(found, p) })
	slices.Sort(found)
	if err != nil || !slices.Equal(found, []string{"spec.cidrs[]", "spec.devices[].attributes.*.bools"}) {
		t.Errorf("found %v, %v", found, err)
	}
	if err := trie.managedPaths(json.RawMessage(`{"f:spec":"x"}`), func(string) {}); err == nil {
		t.Error("a malformed set was read")
	}
}

// deploymentSchema is a minimal OpenAPI v3 document of apps/v1 whose
// Deployment pod template has the given field.
func deploymentSchema(podField string) string {
	return `{"components":{"schemas":{"io.k8s.api.apps.v1.Deployment":{"x-kubernetes-group-version-kind":[{"group":"apps","version":"v1","kind":"Deployment"}],` +
		`"properties":{"spec":{"$ref":"#/components/schemas/spec"}}},` +
		`"spec":{"properties":{"replicas":{"type":"integer"},"template":{"properties":{"spec":{"properties":{"` + podField + `":{"properties":{"name":{"type":"string"}}}}}}}}}}}}`
}

// TestFieldsFromALiveTargetsSchemas: against a live target the two servers'
// own OpenAPI v3 documents are compared, whatever their versions.
func TestFieldsFromALiveTargetsSchemas(t *testing.T) {
	current := newFakeServer(t, "v1.35.4", "default")
	current.openAPI = map[string]string{"apis/apps/v1": deploymentSchema("workloadRef"), "api/v1": `{"components":{"schemas":{}}}`}
	current.add("/apis/apps/v1/deployments", meta("team", "gang", writtenFields("workload-operator", "apps/v1",
		`{"f:spec":{"f:template":{"f:spec":{"f:workloadRef":{".":{},"f:name":{}}}}}}`)))
	target := newFakeServer(t, "v1.36.3", "default")
	target.reportedVersion = "v1.36.9" // a version no comparison was captured for
	target.openAPI = map[string]string{"apis/apps/v1": deploymentSchema("schedulingGroup"), "api/v1": `{"components":{"schemas":{}}}`}
	code, r, stderr := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to-server", target.server.URL)
	if code != ExitFindings || !slices.Equal(findingKeys(r), []string{"FieldsLostOnWrite apps/v1 deployments"}) {
		t.Fatalf("exit %d, findings %v\n%s", code, findingKeys(r), stderr)
	}
	f := r.Findings[0]
	if f.Summary != "1 object sets fields only v1.35.4's schema has: spec.template.spec.workloadRef and 1 more" ||
		!strings.Contains(f.Evidence[0], "the OpenAPI v3 schemas v1.35.4 and v1.36.9 serve (GET /openapi/v3)") {
		t.Errorf("summary %q, evidence %q", f.Summary, f.Evidence[0])
	}
	// The same documents on both sides (the index's hashes agree) are not fetched.
	target.openAPI = current.openAPI
	target.mu.Lock()
	target.requests = nil
	target.mu.Unlock()
	if code, r, _ := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to-server", target.server.URL); code != ExitClean {
		t.Errorf("identical schemas: exit %d, findings %v", code, findingKeys(r))
	}
	for _, req := range target.requests {
		if strings.HasPrefix(req, "/openapi/v3/") {
			t.Errorf("fetched %s although its hash matched", req)
		}
	}
}
