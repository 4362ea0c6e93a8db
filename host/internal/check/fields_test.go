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
