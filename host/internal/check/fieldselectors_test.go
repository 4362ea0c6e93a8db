package check

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/gateway"
)

// fakeSkewgate serves the record of a request log after the given requests
// went through it, as skewgate serve's metrics listener does.
func fakeSkewgate(t *testing.T, requests ...[2]string) string {
	l := gateway.NewRequestLog(0, 0)
	for _, r := range requests {
		target := discovery.ParseTarget("GET", r[0])
		l.RecordAnswered(&target, r[1], http.StatusOK)
	}
	s := httptest.NewServer(l)
	t.Cleanup(s.Close)
	return s.URL
}

// TestKubeletSelectorRefusedByTheCurrentServers is kubernetes#127316: a
// 1.31 kubelet lists services with spec.clusterIP!=None, which a 1.30 server
// refuses with 400. The live target server accepts it; the current one is
// asked and refuses.
func TestKubeletSelectorRefusedByTheCurrentServers(t *testing.T) {
	current := newFakeServer(t, "v1.35.4", "default")
	current.reportedVersion = "v1.30.14"
	current.refusedSelectors["/api/v1/services"] = []string{"spec.clusterIP", "spec.type"}
	current.add("/api/v1/nodes", meta("", "node-1"))
	target := newFakeServer(t, "v1.35.4", "default")
	target.reportedVersion = "v1.31.4"
	skewgate := fakeSkewgate(t,
		[2]string{"/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&limit=500", "kubelet/v1.31.4 (linux/amd64) kubernetes/x"},
		[2]string{"/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&limit=500", "kubelet/v1.31.4 (linux/amd64) kubernetes/x"},
		[2]string{"/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "kubelet/v1.31.4 (linux/amd64) kubernetes/x"})
	code, r, stderr := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to-server", target.server.URL, "--from-skewgate", skewgate)
	if code != ExitFindings {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if got := findingKeys(r); !slices.Equal(got, []string{"FieldSelector v1 services spec.clusterIP"}) {
		t.Fatalf("findings %v", got)
	}
	f := r.Findings[0]
	if f.During.Impact != Breaks || f.After.Impact != Unaffected || !strings.Contains(f.During.Detail, "v1.30.14 servers answer 400") {
		t.Errorf("verdicts %+v %+v", f.During, f.After)
	}
	evidence := strings.Join(f.Evidence, "\n")
	for _, want := range []string{"v1.30.14: refused (a list with it and limit=1); v1.31.4: accepted (a list with it and limit=1)",
		"kubelet 1.31, on the cluster's 1 node: pkg/kubelet/kubelet.go", "kubelet/v1.31.4 list 2 times (recorded by skewgate)"} {
		if !strings.Contains(evidence, want) {
			t.Errorf("evidence lacks %q:\n%s", want, evidence)
		}
	}
	if len(f.Clients) != 1 || f.Clients[0].UserAgent != "kubelet/v1.31.4" || f.Clients[0].Requests != 2 {
		t.Errorf("clients %+v", f.Clients)
	}
}

// TestFieldSelectorsFromACapturedTable: a target given as documents is
// compared by its field-selector table; without one, the labels in use are
// named in a note, not passed as accepted.
func TestFieldSelectorsFromACapturedTable(t *testing.T) {
	current := newFakeServer(t, "v1.35.4", "default")
	current.refusedSelectors["/api/v1/services"] = []string{"spec.type"}
	skewgate := fakeSkewgate(t, [2]string{"/api/v1/watch/services?fieldSelector=spec.type%3DLoadBalancer", "lb-controller/v0.3.1"})
	dir := t.TempDir()
	for name, body := range map[string][]byte{"apis.json": current.apis, "api.json": current.core} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, r, stderr := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to-fixtures", dir, "--from-skewgate", skewgate)
	if len(r.Findings) != 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "field selectors not compared") ||
		!strings.Contains(strings.Join(r.Notes, "\n"), "v1 services spec.type") {
		t.Fatalf("without a table: findings %v, notes %v\n%s", findingKeys(r), r.Notes, stderr)
	}
	table, _ := json.Marshal(map[string]any{"version": "v1.35.4", "resources": map[string][]string{"v1/services": {"metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"}}})
	if err := os.WriteFile(filepath.Join(dir, fieldSelectorFile), table, 0o600); err != nil {
		t.Fatal(err)
	}
	code, r, stderr := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to-fixtures", dir, "--from-skewgate", skewgate)
	if code != ExitFindings || !slices.Equal(findingKeys(r), []string{"FieldSelector v1 services spec.type"}) {
		t.Fatalf("with a table: exit %d, findings %v\n%s", code, findingKeys(r), stderr)
	}
	if ev := strings.Join(r.Findings[0].Evidence, "\n"); !strings.Contains(ev, "accepted (its captured table)") ||
		!strings.Contains(ev, "lb-controller/v0.3.1 watch 1 times") {
		t.Errorf("evidence %s", ev)
	}
}

// TestFindingsNameTheClientsSkewgateSaw: with --from-skewgate, a finding
// about a resource lists the recorded requests for it.
func TestFindingsNameTheClientsSkewgateSaw(t *testing.T) {
	f := seededCluster(t)
	skewgate := fakeSkewgate(t,
		[2]string{"/apis/coordination.k8s.io/v1alpha2/namespaces/skew-ns/leasecandidates", "election-sidecar/v2.1.0 (linux/amd64)"},
		[2]string{"/apis/coordination.k8s.io/v1alpha2/namespaces/skew-gc/leasecandidates/owner-1", "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/x"},
		[2]string{"/apis/networking.k8s.io/v1beta1/servicecidrs", "cidr-operator/v0.9 (linux/amd64)"},
		[2]string{"/api/v1/configmaps", "kubectl/v1.36.3 (linux/amd64)"})
	_, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "--from-skewgate", skewgate)
	if r == nil {
		t.Fatal(stderr)
	}
	clients := map[string][]string{}
	for _, fd := range r.Findings {
		for _, c := range fd.Clients {
			clients[fd.Kind] = append(clients[fd.Kind], c.UserAgent+" "+c.Verb+" "+c.Resource)
		}
	}
	want := map[string][]string{
		KindResource: {"kube-controller-manager/v1.35.4 get coordination.k8s.io/v1alpha2 leasecandidates",
			"election-sidecar/v2.1.0 list coordination.k8s.io/v1alpha2 leasecandidates"},
		KindGarbageCollection: {"kube-controller-manager/v1.35.4 get coordination.k8s.io/v1alpha2 leasecandidates"},
		KindRemovedAPI:        {"cidr-operator/v0.9 list networking.k8s.io/v1beta1 servicecidrs"},
	}
	for kind, w := range want {
		if !slices.Equal(clients[kind], w) {
			t.Errorf("%s clients %v, want %v", kind, clients[kind], w)
		}
	}
	if len(clients) != len(want) {
		t.Errorf("clients on %v", clients)
	}
}

// TestKubeletSelectorAgainstThePinnedTable is kubernetes#127316 on the
// pinned 1.30.14 -> 1.31.4 pair: the current 1.30.14 servers are asked, the
// target answers from the table make fixtures captured from a real 1.31.4.
func TestKubeletSelectorAgainstThePinnedTable(t *testing.T) {
	current := newFakeServer(t, "v1.30.14", "default")
	current.refusedSelectors["/api/v1/services"] = []string{"spec.clusterIP", "spec.type"}
	current.add("/api/v1/nodes", meta("", "node-1"), meta("", "node-2"))
	code, r, stderr := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to", "v1.31.4")
	if code != ExitFindings || !slices.Equal(findingKeys(r), []string{"FieldSelector v1 services spec.clusterIP"}) {
		t.Fatalf("exit %d, findings %v\n%s", code, findingKeys(r), stderr)
	}
	if ev := r.Findings[0].Evidence[0]; ev != "v1.30.14: refused (a list with it and limit=1); v1.31.4: accepted (its captured table)" {
		t.Errorf("evidence %q", ev)
	}
	// Without nodes no kubelet runs: nothing selects on the label.
	bare := newFakeServer(t, "v1.30.14", "default")
	bare.refusedSelectors["/api/v1/services"] = []string{"spec.clusterIP"}
	if code, r, _ := runJSON(t, "--kubeconfig", bare.kubeconfig(fakeToken), "--to", "v1.31.4"); code != ExitClean {
		t.Errorf("without nodes: exit %d, findings %v", code, findingKeys(r))
	}
}
