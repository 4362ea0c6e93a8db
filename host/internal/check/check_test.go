package check

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/fixtures"
)

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func newTestFlagSet(o *Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("check", pflag.ContinueOnError)
	o.AddFlags(fs)
	return fs
}

// findingKeys lists "Kind Subject" of every finding.
func findingKeys(r *Report) []string {
	if r == nil {
		return []string{"(no report)"}
	}
	var out []string
	for _, f := range r.Findings {
		out = append(out, f.Kind+" "+f.Subject)
	}
	return out
}

// seedCommon adds what every cluster holds: a namespace's ordinary objects.
func seedCommon(f *fakeServer) {
	f.add("/api/v1/namespaces", meta("", "default"), meta("", "kube-system"))
	f.add("/api/v1/configmaps", meta("default", "app-config", writtenBy("kubectl-client-side-apply", "v1")))
	f.add("/apis/apps/v1/deployments", meta("default", "web", writtenBy("kubectl", "apps/v1")))
}

// TestNoFindingsOnCleanClustersOfEveryPinnedPair checks a cluster of every
// pinned version holding only ordinary objects against every pinned
// version: the documents differ, nothing uses the differences, so there is
// no finding; and the report lists the differences themselves.
func TestNoFindingsOnCleanClustersOfEveryPinnedPair(t *testing.T) {
	versions, err := pinnedVersions()
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) < 3 {
		t.Fatalf("pinned versions %v: want at least three", versions)
	}
	for _, from := range versions {
		f := newFakeServer(t, from, "default")
		seedCommon(f)
		for _, to := range versions {
			t.Run(from+"->"+to, func(t *testing.T) {
				code, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", to)
				if code != ExitClean || len(r.Findings) != 0 {
					t.Fatalf("exit %d, findings %v\n%s", code, findingKeys(r), stderr)
				}
				wantFrom, wantTo := fixtureDifference(t, from, to), fixtureDifference(t, to, from)
				if !slices.Equal(r.From.ServedOnlyHere, wantFrom) || !slices.Equal(r.To.ServedOnlyHere, wantTo) {
					t.Errorf("served only by %s: %v, want %v; only by %s: %v, want %v", from, r.From.ServedOnlyHere, wantFrom,
						to, r.To.ServedOnlyHere, wantTo)
				}
				if r.Scan.Objects != 4 {
					t.Errorf("objects %d, want the 4 seeded", r.Scan.Objects)
				}
			})
		}
	}
}

// fixtureDifference lists the resources the default documents of a serve and
// those of b do not, computed here without the check's code.
func fixtureDifference(t *testing.T, a, b string) []string {
	t.Helper()
	set := func(v string) map[string]bool {
		servers, err := fixtures.Servers("default", v)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, doc := range [][]byte{servers[0].APIs, servers[0].API} {
			var list struct {
				Items []struct {
					Metadata struct{ Name string }
					Versions []struct {
						Version   string
						Resources []struct{ Resource string }
					}
				}
			}
			if err := json.Unmarshal(doc, &list); err != nil {
				t.Fatal(err)
			}
			for _, g := range list.Items {
				for _, v := range g.Versions {
					for _, r := range v.Resources {
						out[GroupVersion{g.Metadata.Name, v.Version}.String()+" "+r.Resource] = true
					}
				}
			}
		}
		return out
	}
	sa, sb := set(a), set(b)
	out := []string{}
	for k := range sa {
		if !sb[k] {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(x, y string) int {
		gx, gy := groupResourceOf(x), groupResourceOf(y)
		if gx != gy {
			return strings.Compare(gx, gy)
		}
		return strings.Compare(x, y)
	})
	return out
}

// groupResourceOf orders "apiVersion resource" as the report does: group,
// resource, version.
func groupResourceOf(s string) string {
	apiVersion, resource, _ := strings.Cut(s, " ")
	group, _, found := strings.Cut(apiVersion, "/")
	if !found {
		group = ""
	}
	return group + " " + resource
}

// seededCluster is a 1.35.4 cluster serving the extra group versions
// (coordination.k8s.io/v1alpha2, networking.k8s.io/v1beta1,
// storage.k8s.io/v1beta1), which 1.36.3 does not serve by default, seeded
// with one instance of every hazard; the same seeding as the real-cluster
// test in host/e2e.
func seededCluster(t *testing.T) *fakeServer {
	f := newFakeServer(t, "v1.35.4", "extra")
	seedCommon(f)
	const lc = "/apis/coordination.k8s.io/v1alpha2/leasecandidates"
	// Owners of a kind only 1.35.4 serves here, with dependents.
	for i := range 3 {
		owner := fmt.Sprintf("owner-%d", i)
		f.add(lc, meta("skew-gc", owner))
		for j := range 2 {
			f.add("/api/v1/configmaps", meta("skew-gc", fmt.Sprintf("dependent-%d-%d", i, j),
				ownedBy("coordination.k8s.io/v1alpha2", "LeaseCandidate", owner)))
		}
	}
	// A namespace holding objects of that kind.
	for i := range 4 {
		f.add(lc, meta("skew-ns", fmt.Sprintf("candidate-%d", i)))
	}
	// A CRD whose stored versions include one it no longer serves.
	f.add("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", map[string]any{
		"metadata": map[string]any{"name": "widgets.skew.example.com"},
		"spec": map[string]any{"group": "skew.example.com", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "kind": "Widget"},
			"versions": []any{
				map[string]any{"name": "v1alpha1", "served": false, "storage": false},
				map[string]any{"name": "v1", "served": true, "storage": true},
			}},
		"status": map[string]any{"storedVersions": []any{"v1alpha1", "v1"}},
	})
	f.serveGroupVersion("skew.example.com", "v1", "widgets", "Widget", true)
	f.add("/apis/skew.example.com/v1/widgets", meta("default", "w-1"), meta("default", "w-2"))
	// A webhook guarding servicecidrs through a version only 1.35.4 serves.
	f.add("/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", map[string]any{
		"metadata": map[string]any{"name": "skew-webhook"},
		"webhooks": []any{map[string]any{"name": "servicecidrs.skew.example.com", "failurePolicy": "Ignore",
			"rules": []any{map[string]any{"apiGroups": []any{"networking.k8s.io"}, "apiVersions": []any{"v1beta1"},
				"resources": []any{"servicecidrs"}, "operations": []any{"CREATE"}}}}},
	})
	// A bound policy whose paramKind only 1.35.4 serves.
	f.add("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies", map[string]any{
		"metadata": map[string]any{"name": "skew-params"},
		"spec": map[string]any{"paramKind": map[string]any{"apiVersion": "coordination.k8s.io/v1alpha2", "kind": "LeaseCandidate"},
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{"apiGroups": []any{""}, "apiVersions": []any{"v1"},
				"resources": []any{"configmaps"}, "operations": []any{"CREATE"}}}}},
	})
	f.add("/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings", map[string]any{
		"metadata": map[string]any{"name": "skew-params"}, "spec": map[string]any{"policyName": "skew-params"},
	})
	// An object a writer keeps writing through a version 1.36.3 removes,
	// and one whose last-applied annotation names a removed version
	// though it was written through a served one: not a finding.
	f.add("/apis/networking.k8s.io/v1/servicecidrs",
		meta("", "kubernetes", writtenBy("kube-apiserver", "networking.k8s.io/v1")),
		meta("", "skew-beta", writtenBy("cidr-operator", "networking.k8s.io/v1beta1")))
	f.add("/apis/apps/v1/deployments", meta("default", "legacy",
		annotated("kubectl.kubernetes.io/last-applied-configuration", `{"apiVersion":"extensions/v1beta1","kind":"Deployment"}`),
		writtenBy("kubectl-client-side-apply", "apps/v1")))
	// The APIServices the servers registered for the extra group versions.
	f.add("/apis/apiregistration.k8s.io/v1/apiservices",
		map[string]any{"metadata": map[string]any{"name": "v1.apps", "labels": map[string]any{autoRegisterLabel: "onstart"}},
			"spec": map[string]any{"group": "apps", "version": "v1"}},
		map[string]any{"metadata": map[string]any{"name": "v1alpha2.coordination.k8s.io", "labels": map[string]any{autoRegisterLabel: "onstart"}},
			"spec": map[string]any{"group": "coordination.k8s.io", "version": "v1alpha2"}})
	return f
}

// seededFindings are the findings the seeded cluster must give against
// 1.36.3, and no other.
var seededFindings = []string{
	"Resource leasecandidates.coordination.k8s.io",
	"RemovedAPIInUse networking.k8s.io/v1beta1 servicecidrs",
	"GarbageCollection coordination.k8s.io/v1alpha2 LeaseCandidate",
	"NamespaceDeletion namespace skew-gc",
	"NamespaceDeletion namespace skew-ns",
	"CRDStoredVersion customresourcedefinition widgets.skew.example.com v1alpha1",
	"APIService apiservice v1alpha2.coordination.k8s.io",
	"AdmissionCoverage validatingwebhookconfiguration skew-webhook (webhook servicecidrs.skew.example.com)",
	"AdmissionParamKind validatingadmissionpolicy skew-params",
}

func TestSeededClusterGivesEveryHazardAndNoOther(t *testing.T) {
	f := seededCluster(t)
	code, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3")
	if code != ExitFindings {
		t.Fatalf("exit %d, want %d\n%s", code, ExitFindings, stderr)
	}
	if got := findingKeys(r); !slices.Equal(got, seededFindings) {
		t.Fatalf("findings\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(seededFindings, "\n  "))
	}
	for _, fd := range r.Findings {
		if len(fd.Evidence) == 0 || fd.During.Detail == "" || fd.After.Detail == "" || fd.Skewgate == "" || fd.Summary == "" {
			t.Errorf("%s %s: incomplete: %+v", fd.Kind, fd.Subject, fd)
		}
	}
	byKey := map[string]Finding{}
	for _, fd := range r.Findings {
		byKey[fd.Kind+" "+fd.Subject] = fd
	}
	for key, want := range map[string]string{
		"Resource leasecandidates.coordination.k8s.io":                                "7 objects in 2 namespaces, served only by v1.35.4",
		"GarbageCollection coordination.k8s.io/v1alpha2 LeaseCandidate":               "6 dependents name owners of a kind only v1.35.4 serves",
		"NamespaceDeletion namespace skew-ns":                                         "4 leasecandidates.coordination.k8s.io (served only by v1.35.4)",
		"RemovedAPIInUse networking.k8s.io/v1beta1 servicecidrs":                      "1 writer uses networking.k8s.io/v1beta1, which v1.36.3 does not serve",
		"CRDStoredVersion customresourcedefinition widgets.skew.example.com v1alpha1": "status.storedVersions lists v1alpha1, which neither v1.35.4 nor v1.36.3 serves; 2 objects of the kind",
	} {
		if got := byKey[key].Summary; got != want {
			t.Errorf("%s: summary %q, want %q", key, got, want)
		}
	}
	if ev := strings.Join(byKey["RemovedAPIInUse networking.k8s.io/v1beta1 servicecidrs"].Evidence, "\n"); !strings.Contains(ev, `"cidr-operator"`) ||
		strings.Contains(ev, `"kube-apiserver"`) {
		t.Errorf("the removed API's evidence names the wrong writers:\n%s", ev)
	}
	if got := byKey["AdmissionParamKind validatingadmissionpolicy skew-params"].After.Impact; got != Breaks {
		t.Errorf("paramKind after the upgrade: %s, want %s", got, Breaks)
	}
}

// TestTableOutput prints a line per finding, and "No findings" otherwise.
func TestTableOutput(t *testing.T) {
	f := seededCluster(t)
	code, out, _ := run(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitFindings || len(lines) != len(seededFindings)+1 || !strings.HasPrefix(lines[0], "KIND") {
		t.Fatalf("exit %d, table:\n%s", code, out)
	}
	clean := newFakeServer(t, "v1.35.4", "default")
	code, out, _ = run(t, "--kubeconfig", clean.kubeconfig(fakeToken), "--to", "v1.36.3")
	if code != ExitClean || !strings.HasPrefix(out, "No findings") {
		t.Fatalf("exit %d, output %q", code, out)
	}
	code, out, _ = run(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3", "-o", "yaml")
	if code != ExitFindings || !strings.Contains(out, "kind: GarbageCollection") {
		t.Fatalf("exit %d, yaml:\n%s", code, out)
	}
}

// TestToFixturesAndToServerAgreeWithTo: the same target given as built-in
// documents, as a directory and as a live server gives the same findings.
func TestToFixturesAndToServerAgreeWithTo(t *testing.T) {
	f := seededCluster(t)
	dir := t.TempDir()
	servers, err := fixtures.Servers("default", "v1.36.3")
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{"apis.json": servers[0].APIs, "api.json": servers[0].API} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, pinned, _ := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36.3")
	_, fromDir, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to-fixtures", dir)
	if fromDir == nil || !slices.Equal(findingKeys(fromDir), findingKeys(pinned)) {
		t.Fatalf("--to-fixtures findings differ from --to's:\n%v\n%v\n%s", findingKeys(fromDir), findingKeys(pinned), stderr)
	}
	// A live 1.36.3 server of another cluster: httptest servers share one
	// certificate, so the kubeconfig's CA verifies it too.
	target := newFakeServer(t, "v1.36.3", "default")
	_, live, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to-server", target.server.URL)
	if live == nil || !slices.Equal(findingKeys(live), findingKeys(pinned)) {
		t.Fatalf("--to-server findings differ from --to's:\n%v\n%v\n%s", findingKeys(live), findingKeys(pinned), stderr)
	}
	if live.To.Source == pinned.To.Source || live.To.Version != "v1.36.3" {
		t.Errorf("target described as %+v", live.To)
	}
}

// TestCRDShadowedByTheTargetsOwnGroupVersion: 1.37 serves
// storagemigration.k8s.io/v1 itself; a 1.36 cluster serving that group
// version through a CRD loses it to the built-in API.
func TestCRDShadowedByTheTargetsOwnGroupVersion(t *testing.T) {
	f := newFakeServer(t, "v1.36.3", "default")
	f.add("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", map[string]any{
		"metadata": map[string]any{"name": "storageversionmigrations.storagemigration.k8s.io"},
		"spec": map[string]any{"group": "storagemigration.k8s.io", "scope": "Cluster",
			"names":    map[string]any{"plural": "storageversionmigrations", "kind": "StorageVersionMigration"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true}}},
		"status": map[string]any{"storedVersions": []any{"v1"}},
	})
	f.serveGroupVersion("storagemigration.k8s.io", "v1", "storageversionmigrations", "StorageVersionMigration", false)
	f.add("/apis/storagemigration.k8s.io/v1/storageversionmigrations", meta("", "migrate-widgets"))
	code, r, stderr := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.37.2")
	if code != ExitFindings || !slices.Equal(findingKeys(r), []string{"CRDShadowed customresourcedefinition storageversionmigrations.storagemigration.k8s.io v1"}) {
		t.Fatalf("exit %d, findings %v\n%s", code, findingKeys(r), stderr)
	}
	if s := r.Findings[0].Summary; s != "v1.37.2 serves storagemigration.k8s.io/v1 itself; 1 object of the CRD" {
		t.Errorf("summary %q", s)
	}
	// The same CRD checked against 1.36.3, which does not serve the group
	// version itself, is served there as here.
	if code, r, _ := runJSON(t, "--kubeconfig", f.kubeconfig(fakeToken), "--to", "v1.36"); code != ExitClean {
		t.Errorf("against 1.36: exit %d, findings %v", code, findingKeys(r))
	}
}

// TestTargetServerOfTheSameClusterListsWhatOnlyItServes: mid-upgrade, the
// first upgraded server shares the cluster's storage: objects of resources
// only it serves are listed through it. Against the built-in documents they
// cannot be, and a note says so.
func TestTargetServerOfTheSameClusterListsWhatOnlyItServes(t *testing.T) {
	current := newFakeServer(t, "v1.35.4", "default")
	target := newFakeServer(t, "v1.36.3", "default")
	target.uid = current.uid
	target.add("/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", meta("", "add-labels"), meta("", "set-defaults"))
	current.add("/api/v1/configmaps", meta("team", "generated", ownedBy("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", "add-labels")))
	code, r, stderr := runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to-server", target.server.URL)
	want := []string{"Resource mutatingadmissionpolicies.admissionregistration.k8s.io",
		"GarbageCollection admissionregistration.k8s.io/v1 MutatingAdmissionPolicy"}
	if code != ExitFindings || !slices.Equal(findingKeys(r), want) {
		t.Fatalf("exit %d, findings %v\n%s", code, findingKeys(r), stderr)
	}
	for _, f := range r.Findings {
		if f.After.Impact != Unaffected || f.During.Impact != Breaks {
			t.Errorf("%s: during %s, after %s", f.Kind, f.During.Impact, f.After.Impact)
		}
	}
	if s := r.Findings[0].Summary; s != "2 objects, served only by v1.36.3" {
		t.Errorf("summary %q", s)
	}
	_, r, _ = runJSON(t, "--kubeconfig", current.kubeconfig(fakeToken), "--to", "v1.36.3")
	if !slices.Equal(findingKeys(r), want[1:]) || !strings.Contains(strings.Join(r.Notes, "\n"), "were not counted") {
		t.Errorf("against the documents: findings %v, notes %v", findingKeys(r), r.Notes)
	}
}
