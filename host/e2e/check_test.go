package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/host/testcluster"
)

// `skewgate check` against real kube-apiservers: a 1.35.4 cluster whose servers also serve the
// group versions 1.36.3 leaves off by default (coordination.k8s.io/v1alpha2,
// networking.k8s.io/v1beta1, storage.k8s.io/v1beta1), seeded with one instance of every hazard,
// checked against the built-in 1.36.3 documents and then against its first server upgraded to
// 1.36.3, where the harms the findings predict are then shown to happen; and a clean 1.35.4
// cluster with no finding against either. The check runs as a service account bound by
// host/deploy/check/rbac.yaml only.

// checkExtraAPIs are the group versions the seeded cluster's 1.35.4 servers serve beyond the
// defaults: the "extra" profile of the captured fixtures.
var checkExtraAPIs = []string{"coordination.k8s.io/v1alpha2=true", "networking.k8s.io/v1beta1=true", "storage.k8s.io/v1beta1=true"}

var (
	serviceCIDRsV1  = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}
	crds            = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	widgetsV1alpha1 = schema.GroupVersionResource{Group: "skew.example.com", Version: "v1alpha1", Resource: "widgets"}
)

// checkFeatureGates lets the seeded 1.35.4 servers store the pod template field workloadRef
// (alpha in 1.35), which 1.36 replaced by schedulingGroup.
var checkFeatureGates = map[string]bool{"GenericWorkload": true}

// seededCheckFindings are the findings of the seeded cluster against 1.36.3, as "kind subject".
var seededCheckFindings = []string{
	"Resource leasecandidates.coordination.k8s.io",
	"RemovedAPIInUse networking.k8s.io/v1beta1 servicecidrs",
	"GarbageCollection coordination.k8s.io/v1alpha2 LeaseCandidate",
	"NamespaceDeletion namespace skew-gc",
	"NamespaceDeletion namespace skew-ns",
	"CRDStoredVersion customresourcedefinition widgets.skew.example.com v1alpha1",
	"APIService apiservice v1alpha2.coordination.k8s.io",
	"APIService apiservice v1beta1.networking.k8s.io",
	"APIService apiservice v1beta1.storage.k8s.io",
	"AdmissionCoverage validatingwebhookconfiguration skew-webhook (webhook servicecidrs.skew.example.com)",
	"AdmissionParamKind validatingadmissionpolicy skew-params",
	"FieldsLostOnWrite apps/v1 deployments",
}

func TestCheckFindsEverySeededHazardAgainstTheDocumentsAndTheFirstUpgradedServer(t *testing.T) {
	cluster := startCluster(t, testcluster.Spec{Servers: []testcluster.ServerSpec{
		{Name: "check-seeded-0", Version: testcluster.KubeVersion135, RuntimeConfig: checkExtraAPIs, FeatureGates: checkFeatureGates},
		{Name: "check-seeded-1", Version: testcluster.KubeVersion135, RuntimeConfig: checkExtraAPIs, FeatureGates: checkFeatureGates},
	}})
	seedHazards(t, cluster)
	kubeconfig := checkKubeconfig(t, cluster)

	report := runCheck(t, 1, "--kubeconfig", kubeconfig, "--to", testcluster.KubeVersion136)
	requireFindings(t, "against the built-in v1.36.3 documents", report, seededCheckFindings)
	t.Logf("against the built-in documents:\n%s", runCheckTable(t, "--kubeconfig", kubeconfig, "--to", testcluster.KubeVersion136))

	// The first server upgraded, with 1.36.3's defaults.
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	if err := cluster.RestartAs(ctx, 1, testcluster.ServerSpec{Version: testcluster.KubeVersion136}); err != nil {
		t.Fatal(err)
	}
	upgraded := cluster.Server(1).URL
	report = runCheck(t, 1, "--kubeconfig", kubeconfig, "--to-server", upgraded)
	// The upgraded server has deleted the APIServices of the group versions it does not serve, as
	// the APIService findings said it would: the check no longer sees them.
	requireFindings(t, "against the upgraded server", report, slices.DeleteFunc(slices.Clone(seededCheckFindings), func(f string) bool {
		return strings.HasPrefix(f, "APIService ")
	}))
	t.Logf("against the upgraded server:\n%s", runCheckTable(t, "--kubeconfig", kubeconfig, "--to-server", upgraded))
	requirePredictedHarms(t, cluster)

	// A client of the resource only the 1.35.4 server serves, through skewgate: the finding names it.
	g := startSkewgate(t, cluster, gatewayConfig{})
	sidecar := g.restConfig()
	sidecar.UserAgent = "election-sidecar/v2.1.0 (linux/amd64)"
	if _, err := dynamic.NewForConfigOrDie(sidecar).Resource(leaseCandidates).Namespace("skew-ns").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	report = runCheck(t, 1, "--kubeconfig", kubeconfig, "--to-server", upgraded, "--from-skewgate", g.metricsURL)
	var clients []string
	for _, f := range report.Findings {
		for _, c := range f.Clients {
			clients = append(clients, f.Kind+": "+c.UserAgent+" "+c.Verb+" "+c.Resource)
		}
	}
	if want := []string{"Resource: election-sidecar/v2.1.0 list coordination.k8s.io/v1alpha2 leasecandidates"}; !slices.Equal(clients, want) {
		t.Errorf("clients %q, want %q", clients, want)
	}
}

func TestCheckFindsNothingOnACleanCluster(t *testing.T) {
	cluster := startCluster(t, testcluster.Spec{Servers: []testcluster.ServerSpec{
		{Name: "check-clean-0", Version: testcluster.KubeVersion135},
		{Name: "check-clean-1", Version: testcluster.KubeVersion135},
	}})
	kubeconfig := checkKubeconfig(t, cluster)
	requireFindings(t, "against the built-in v1.36.3 documents", runCheck(t, 0, "--kubeconfig", kubeconfig, "--to", testcluster.KubeVersion136), nil)
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	if err := cluster.Restart(ctx, 1, testcluster.KubeVersion136); err != nil {
		t.Fatal(err)
	}
	requireFindings(t, "against the upgraded server",
		runCheck(t, 0, "--kubeconfig", kubeconfig, "--to-server", cluster.Server(1).URL), nil)
	if out := runCheckTable(t, "--kubeconfig", kubeconfig, "--to", testcluster.KubeVersion136); !strings.HasPrefix(out, "No findings") {
		t.Errorf("table output: %q", out)
	}
}

// checkReport is the part of the check's JSON report the tests read.
type checkReport struct {
	Findings []struct {
		Kind, Subject, Summary string
		During, After          struct{ Impact, Detail string }
		Evidence               []string
		Clients                []struct{ UserAgent, Verb, Resource string }
	}
	Scan struct {
		Resources, Objects int
		Requests           int64
		Seconds            float64
	}
}

// runCheck runs bin/skewgate check with -o json, requires exit status want and returns the report.
func runCheck(t *testing.T, want int, args ...string) checkReport {
	t.Helper()
	out, stderr, code := runSkewgateCheck(t, append(args, "-o", "json")...)
	if code != want {
		t.Fatalf("skewgate check %s: exit %d, want %d\n%s\n%s", strings.Join(args, " "), code, want, stderr, out)
	}
	var r checkReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("report: %v\n%s", err, out)
	}
	return r
}

func runCheckTable(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, _ := runSkewgateCheck(t, args...)
	return string(out) + string(stderr)
}

func runSkewgateCheck(t *testing.T, args ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	if skewgateBuild.err != nil {
		t.Fatal(skewgateBuild.err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(skewgateBuild.binary, append([]string{"check"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatal(err)
	}
	return out.Bytes(), errOut.Bytes(), cmd.ProcessState.ExitCode()
}

func requireFindings(t *testing.T, what string, r checkReport, want []string) {
	t.Helper()
	var got []string
	for _, f := range r.Findings {
		got = append(got, f.Kind+" "+f.Subject)
		if len(f.Evidence) == 0 || f.During.Detail == "" || f.After.Detail == "" {
			t.Errorf("%s: finding %s %s without evidence or verdicts", what, f.Kind, f.Subject)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: findings\n  %s\nwant\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	t.Logf("%s: %d findings; %d resources, %d objects listed with %d requests in %.2fs", what, len(got),
		r.Scan.Resources, r.Scan.Objects, r.Scan.Requests, r.Scan.Seconds)
}

// checkKubeconfig applies host/deploy/check/rbac.yaml and writes a kubeconfig for server 0 with a
// token of its service account.
func checkKubeconfig(t *testing.T, cluster *testcluster.Cluster) string {
	t.Helper()
	admin := cluster.AdminRESTConfig(0)
	manifest, err := os.ReadFile(filepath.Join(repoRoot, "host", "deploy", "check", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(manifest), "\n---\n") {
		createFromYAML(t, admin, doc)
	}
	expiry := int64(3600)
	token, err := kubernetes.NewForConfigOrDie(admin).CoreV1().ServiceAccounts("kube-system").CreateToken(context.Background(), "skewgate-check",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "check",
		"clusters": []any{map[string]any{"name": "c", "cluster": map[string]any{
			"server": cluster.Server(0).URL, "certificate-authority": cluster.PKI().Files.CACert, "tls-server-name": testcluster.ServingServerName}}},
		"users":    []any{map[string]any{"name": "skewgate-check", "user": map[string]any{"token": token.Status.Token}}},
		"contexts": []any{map[string]any{"name": "check", "context": map[string]any{"cluster": "c", "user": "skewgate-check"}}},
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "check.kubeconfig")
	writeFile(t, path, data)
	// RBAC reaches every server's authorizer cache within a moment.
	eventually(t, "the check's permissions", time.Minute, 500*time.Millisecond, func() error {
		if _, stderr, code := runSkewgateCheck(t, "--kubeconfig", path, "--to", testcluster.KubeVersion135); code == 2 {
			return fmt.Errorf("%s", stderr)
		}
		return nil
	})
	return path
}

// createFromYAML creates the object a YAML document describes, through the admin credential.
func createFromYAML(t *testing.T, cfg *rest.Config, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := obj.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return createObject(t, cfg, obj, "")
}

// createObject creates obj through the resource its apiVersion and kind name, as fieldManager.
func createObject(t *testing.T, cfg *rest.Config, obj *unstructured.Unstructured, fieldManager string) *unstructured.Unstructured {
	t.Helper()
	gv, err := schema.ParseGroupVersion(obj.GetAPIVersion())
	if err != nil {
		t.Fatal(err)
	}
	resource := strings.ToLower(obj.GetKind()) + "s"
	if strings.HasSuffix(resource, "ys") {
		resource = strings.TrimSuffix(resource, "ys") + "ies"
	}
	client := dynamic.NewForConfigOrDie(cfg).Resource(gv.WithResource(resource))
	var ri dynamic.ResourceInterface = client
	if ns := obj.GetNamespace(); ns != "" {
		ri = client.Namespace(ns)
	}
	created, err := ri.Create(context.Background(), obj, metav1.CreateOptions{FieldManager: fieldManager})
	if err != nil {
		t.Fatalf("creating %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	return created
}

func object(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON([]byte(doc)); err != nil {
		t.Fatal(err)
	}
	return obj
}

// seedHazards creates, through server 0, one instance of every hazard the check looks for.
func seedHazards(t *testing.T, cluster *testcluster.Cluster) {
	t.Helper()
	admin := cluster.AdminRESTConfig(0)
	for _, ns := range []string{"skew-gc", "skew-ns"} {
		createObject(t, admin, object(t, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"`+ns+`"}}`), "")
	}
	createObject(t, admin, object(t, `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"skew-vap","labels":{"skew":"vap"}}}`), "")
	// Owners of a kind only these servers serve, each with two dependents.
	for i := range 3 {
		lc := object(t, string(leaseCandidate(fmt.Sprintf("owner-%d", i))))
		lc.SetNamespace("skew-gc")
		owner := createObject(t, admin, lc, "")
		for j := range 2 {
			cm := object(t, string(configMap(fmt.Sprintf("dependent-%d-%d", i, j))))
			cm.SetNamespace("skew-gc")
			cm.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "coordination.k8s.io/v1alpha2", Kind: "LeaseCandidate",
				Name: owner.GetName(), UID: owner.GetUID()}})
			createObject(t, admin, cm, "")
		}
	}
	// A namespace holding objects of that kind.
	for i := range 4 {
		lc := object(t, string(leaseCandidate(fmt.Sprintf("candidate-%d", i))))
		lc.SetNamespace("skew-ns")
		createObject(t, admin, lc, "")
	}
	seedCRDWithUnservedStoredVersion(t, admin)
	// A writer using a version 1.36.3 does not serve, and an object whose last-applied annotation
	// names a removed version though it was written through a served one (no finding).
	createObject(t, admin, object(t, `{"apiVersion":"networking.k8s.io/v1beta1","kind":"ServiceCIDR","metadata":{"name":"skew-beta"},"spec":{"cidrs":["10.200.0.0/24"]}}`), "cidr-operator")
	// A Deployment whose pod template sets a field only 1.35's schema has.
	createObject(t, admin, object(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"gang","namespace":"default"},`+
		`"spec":{"selector":{"matchLabels":{"app":"gang"}},"template":{"metadata":{"labels":{"app":"gang"}},"spec":{`+
		`"workloadRef":{"name":"training","podGroup":"workers"},"containers":[{"name":"c","image":"example.invalid/c"}]}}}}`), "workload-operator")
	createObject(t, admin, object(t, `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"legacy","namespace":"default","annotations":{`+
		`"kubectl.kubernetes.io/last-applied-configuration":"{\"apiVersion\":\"extensions/v1beta1\",\"kind\":\"Deployment\"}"}},`+
		`"spec":{"selector":{"matchLabels":{"app":"legacy"}},"template":{"metadata":{"labels":{"app":"legacy"}},"spec":{"containers":[{"name":"c","image":"example.invalid/c"}]}}}}`),
		"kubectl-client-side-apply")
	// A webhook guarding servicecidrs through the version only these servers serve. It fails
	// closed and no service answers it, so every request it is called for is refused: that shows
	// where it is called.
	createObject(t, admin, object(t, `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingWebhookConfiguration",`+
		`"metadata":{"name":"skew-webhook"},"webhooks":[{"name":"servicecidrs.skew.example.com","failurePolicy":"Fail","sideEffects":"None",`+
		`"admissionReviewVersions":["v1"],"clientConfig":{"service":{"namespace":"default","name":"no-such-webhook"}},`+
		`"rules":[{"apiGroups":["networking.k8s.io"],"apiVersions":["v1beta1"],"resources":["servicecidrs"],"operations":["CREATE"]}]}]}`), "")
	// A bound policy whose paramKind only these servers serve, matching ConfigMaps created in
	// namespace skew-vap.
	createObject(t, admin, object(t, `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy","metadata":{"name":"skew-params"},`+
		`"spec":{"failurePolicy":"Fail","paramKind":{"apiVersion":"coordination.k8s.io/v1alpha2","kind":"LeaseCandidate"},`+
		`"matchConstraints":{"namespaceSelector":{"matchLabels":{"skew":"vap"}},"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["CREATE"],"resources":["configmaps"]}]},`+
		`"validations":[{"expression":"true"}]}}`), "")
	createObject(t, admin, object(t, `{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBinding","metadata":{"name":"skew-params"},`+
		`"spec":{"policyName":"skew-params","validationActions":["Deny"],"paramRef":{"name":"params","namespace":"skew-vap","parameterNotFoundAction":"Allow"}}}`), "")
}

// seedCRDWithUnservedStoredVersion creates a CRD storing v1alpha1, two objects stored so, then
// moves its storage to v1 and stops serving v1alpha1: status.storedVersions keeps v1alpha1.
func seedCRDWithUnservedStoredVersion(t *testing.T, admin *rest.Config) {
	t.Helper()
	version := func(name string, served, storage bool) string {
		return fmt.Sprintf(`{"name":%q,"served":%t,"storage":%t,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}`, name, served, storage)
	}
	crd := func(versions ...string) string {
		return `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.skew.example.com"},` +
			`"spec":{"group":"skew.example.com","scope":"Namespaced","names":{"plural":"widgets","singular":"widget","kind":"Widget"},"versions":[` +
			strings.Join(versions, ",") + `]}}`
	}
	createObject(t, admin, object(t, crd(version("v1alpha1", true, true))), "")
	client := dynamic.NewForConfigOrDie(admin)
	eventually(t, "the widgets CRD served", time.Minute, 200*time.Millisecond, func() error {
		_, err := client.Resource(widgetsV1alpha1).Namespace("default").List(context.Background(), metav1.ListOptions{})
		return err
	})
	for _, name := range []string{"w-1", "w-2"} {
		if _, err := client.Resource(widgetsV1alpha1).Namespace("default").Create(context.Background(),
			object(t, `{"apiVersion":"skew.example.com/v1alpha1","kind":"Widget","metadata":{"name":"`+name+`"}}`), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	current, err := client.Resource(crds).Get(context.Background(), "widgets.skew.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updated := object(t, crd(version("v1alpha1", false, false), version("v1", true, true)))
	updated.SetResourceVersion(current.GetResourceVersion())
	if _, err := client.Resource(crds).Update(context.Background(), updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "storedVersions [v1alpha1 v1]", time.Minute, 200*time.Millisecond, func() error {
		got, err := client.Resource(crds).Get(context.Background(), "widgets.skew.example.com", metav1.GetOptions{})
		if err != nil {
			return err
		}
		stored, _, _ := unstructured.NestedStringSlice(got.Object, "status", "storedVersions")
		if !slices.Equal(stored, []string{"v1alpha1", "v1"}) {
			return fmt.Errorf("storedVersions %v", stored)
		}
		return nil
	})
}

// requirePredictedHarms shows, on the cluster with server 1 upgraded, that what the findings
// predicted happens: the resource answers 404 there, the APIServices are gone and the group
// document of a 1.35.4 server leaves the group version out, the webhook is not called there, the
// policy denies there, a write there drops the field only 1.35's schema has, and a CRD update
// dropping the stored version is refused.
func requirePredictedHarms(t *testing.T, cluster *testcluster.Cluster) {
	t.Helper()
	old, upgraded := cluster.AdminRESTConfig(0), cluster.AdminRESTConfig(1)
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()
	if got := mustDo(t, direct, "GET", cluster.Server(1).URL+"/apis/coordination.k8s.io/v1alpha2/namespaces/skew-ns/leasecandidates", nil, nil).status; got != 404 {
		t.Errorf("Resource: the upgraded server answered %d for leasecandidates, want 404", got)
	}
	if got := mustDo(t, direct, "GET", cluster.Server(0).URL+"/apis/apiregistration.k8s.io/v1/apiservices/v1alpha2.coordination.k8s.io", nil, nil).status; got != 404 {
		t.Errorf("APIService: v1alpha2.coordination.k8s.io is still registered (%d)", got)
	}
	if doc := mustDo(t, direct, "GET", cluster.Server(0).URL+"/apis/coordination.k8s.io", nil, nil); strings.Contains(string(doc.body), "v1alpha2") {
		t.Errorf("APIService: the 1.35.4 server's /apis/coordination.k8s.io still lists v1alpha2: %s", doc.body)
	}
	cidr := func(name string) *unstructured.Unstructured {
		return object(t, `{"apiVersion":"networking.k8s.io/v1","kind":"ServiceCIDR","metadata":{"name":"`+name+`"},"spec":{"cidrs":["10.201.0.0/24"]}}`)
	}
	if _, err := dynamic.NewForConfigOrDie(old).Resource(serviceCIDRsV1).Create(context.Background(), cidr("through-old"), metav1.CreateOptions{}); err == nil ||
		!strings.Contains(err.Error(), "servicecidrs.skew.example.com") {
		t.Errorf("AdmissionCoverage: the 1.35.4 server did not call the webhook for a v1 servicecidr: %v", err)
	}
	if _, err := dynamic.NewForConfigOrDie(upgraded).Resource(serviceCIDRsV1).Create(context.Background(), cidr("through-upgraded"), metav1.CreateOptions{}); err != nil {
		t.Errorf("AdmissionCoverage: the upgraded server called the webhook: %v", err)
	}
	cm := func(name string) *unstructured.Unstructured {
		o := object(t, string(configMap(name)))
		o.SetNamespace("skew-vap")
		return o
	}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if _, err := dynamic.NewForConfigOrDie(old).Resource(configMaps).Namespace("skew-vap").Create(context.Background(), cm("through-old"), metav1.CreateOptions{}); err != nil {
		t.Errorf("AdmissionParamKind: the 1.35.4 server denied: %v", err)
	}
	_, err := dynamic.NewForConfigOrDie(upgraded).Resource(configMaps).Namespace("skew-vap").Create(context.Background(), cm("through-upgraded"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "paramKind") {
		t.Errorf("AdmissionParamKind: the upgraded server admitted a ConfigMap the policy matches: %v", err)
	}
	deploymentsV1 := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	if _, err := dynamic.NewForConfigOrDie(upgraded).Resource(deploymentsV1).Namespace("default").Patch(context.Background(), "gang",
		types.MergePatchType, []byte(`{"metadata":{"labels":{"touched":"through-1-36"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	gang, err := dynamic.NewForConfigOrDie(old).Resource(deploymentsV1).Namespace("default").Get(context.Background(), "gang", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref, found, _ := unstructured.NestedMap(gang.Object, "spec", "template", "spec", "workloadRef"); found {
		t.Errorf("FieldsLostOnWrite: workloadRef survived a write through the 1.36.3 server: %v", ref)
	}
	client := dynamic.NewForConfigOrDie(old)
	current, err := client.Resource(crds).Get(context.Background(), "widgets.skew.example.com", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(current.Object, "spec", "versions")
	_ = unstructured.SetNestedSlice(current.Object, versions[1:], "spec", "versions")
	if _, err := client.Resource(crds).Update(context.Background(), current, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "must remain in spec.versions until a storage migration") {
		t.Errorf("CRDStoredVersion: dropping v1alpha1 from spec.versions: %v", err)
	}
}

// BenchmarkCheck10000Objects measures the check on a 1.35.4 cluster of 10,000 objects in 100
// namespaces (ConfigMaps, Secrets, LeaseCandidates and ConfigMaps they own): the wall time of
// bin/skewgate check --to v1.36.3, its peak resident memory and the requests it sent. It starts
// a cluster of its own; run it alone:
//
//	go test -run '^$' -bench Check10000Objects -benchtime 3x ./host/e2e
func BenchmarkCheck10000Objects(b *testing.B) {
	cluster, err := testcluster.Start(context.Background(), b, testcluster.Spec{Servers: []testcluster.ServerSpec{
		{Name: "check-bench", Version: testcluster.KubeVersion135, RuntimeConfig: checkExtraAPIs},
	}})
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	admin := cluster.AdminRESTConfig(0)
	admin.QPS, admin.Burst = 1000, 1000
	kube := kubernetes.NewForConfigOrDie(admin)
	candidates := dynamic.NewForConfigOrDie(admin).Resource(leaseCandidates)
	const namespaces, perNamespace = 100, 100
	work := make(chan int)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for n := range work {
				errs <- seedBenchNamespace(kube, candidates, fmt.Sprintf("bench-%03d", n))
			}
		}()
	}
	go func() {
		for n := range namespaces {
			work <- n
		}
		close(work)
	}()
	for range namespaces {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	kubeconfig := cluster.AdminKubeconfig()
	b.ResetTimer()
	var peakRSS int64
	var report checkReport
	for range b.N {
		var out bytes.Buffer
		cmd := exec.Command(skewgateBuild.binary, "check", "--kubeconfig", kubeconfig, "--to", testcluster.KubeVersion136, "-o", "json")
		cmd.Stdout = &out
		if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
			b.Fatalf("skewgate check: %v", err)
		}
		if usage, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			peakRSS = max(peakRSS, usage.Maxrss*1024)
		}
		if err := json.Unmarshal(out.Bytes(), &report); err != nil {
			b.Fatal(err)
		}
	}
	if report.Scan.Objects < namespaces*perNamespace {
		b.Fatalf("%d objects listed, want at least %d", report.Scan.Objects, namespaces*perNamespace)
	}
	b.ReportMetric(float64(report.Scan.Objects), "objects")
	b.ReportMetric(float64(report.Scan.Requests), "requests")
	b.ReportMetric(float64(peakRSS)/(1<<20), "peak-RSS-MiB")
}

// seedBenchNamespace creates a namespace of 100 objects: 80 ConfigMaps, 10 Secrets, 5
// LeaseCandidates and 5 ConfigMaps each owned by one of them.
func seedBenchNamespace(kube kubernetes.Interface, candidates dynamic.NamespaceableResourceInterface, ns string) error {
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range 80 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": strings.Repeat("v", 200)}}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for i := range 10 {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%d", i)}, StringData: map[string]string{"k": "v"}}
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for i := range 5 {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(leaseCandidate(fmt.Sprintf("lc-%d", i))); err != nil {
			return err
		}
		owner, err := candidates.Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("owned-%d", i), OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "coordination.k8s.io/v1alpha2", Kind: "LeaseCandidate", Name: owner.GetName(), UID: owner.GetUID()}}}}
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}
