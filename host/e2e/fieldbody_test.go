package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/host/testcluster"
)

// Between two minor releases the Pod template's schema can differ both ways: each side has a
// field the other lacks (fixtures/schema-skew.json), so no server's schema is a superset of the
// others'. Every such field is behind an alpha gate, off by default, and a server whose gate is
// off drops the field as if it did not know it: the clusters turn on, on each server, the gate of
// the field its own schema has.
const (
	// supplementalGroupsPolicyGate makes 1.31 store spec.securityContext.supplementalGroupsPolicy.
	supplementalGroupsPolicyGate = "SupplementalGroupsPolicy"
	// dynamicResourceAllocationGate makes 1.30 store spec.resourceClaims, whose items have the
	// source 1.31 replaced.
	dynamicResourceAllocationGate = "DynamicResourceAllocation"
	// genericWorkloadGate makes 1.35 store spec.workloadRef and 1.36 spec.schedulingGroup, which
	// replaced it.
	genericWorkloadGate = "GenericWorkload"
)

// Server indexes of the workload-skew cluster: a rolling upgrade from 1.35 to 1.36, two of three
// servers upgraded.
const (
	workloadOld       = 0 // 1.35.4
	workloadUpgraded  = 1 // 1.36.3
	workloadUpgraded2 = 2 // 1.36.3
)

// workloadSkewSpec is a cluster of its own rather than the shared skewed one: 1.36 with the gate
// runs the PodGroup admission plugin, which watches scheduling.k8s.io/v1alpha2 Workloads, and the
// server is not ready until that list succeeds; serving the group would add a resource the
// skewed cluster's scenarios do not expect only the 1.36 servers to serve.
func workloadSkewSpec() testcluster.Spec {
	upgraded := func(name string) testcluster.ServerSpec {
		return testcluster.ServerSpec{Name: name, Version: testcluster.KubeVersion136,
			FeatureGates:  map[string]bool{genericWorkloadGate: true},
			RuntimeConfig: []string{"scheduling.k8s.io/v1alpha2=true"}}
	}
	return testcluster.Spec{Servers: []testcluster.ServerSpec{
		workloadOld: {Name: "workload-1-35", Version: testcluster.KubeVersion135,
			FeatureGates: map[string]bool{genericWorkloadGate: true}},
		workloadUpgraded:  upgraded("workload-1-36-a"),
		workloadUpgraded2: upgraded("workload-1-36-b"),
	}}
}

// sharedWorkloadSkew is the 1.35/1.36 cluster of the write-body scenarios.
var sharedWorkloadSkew = &sharedCluster{spec: workloadSkewSpec()}

const (
	deploymentsPath = "/apis/apps/v1/namespaces/default/deployments"
	pauseImage      = "registry.k8s.io/pause:3.10"
	protobufType    = "application/vnd.kubernetes.protobuf"
	// bodySkewReps is how many times each case writes each field. The round robin's turn is set
	// before each, so that a case's plain requests start at every server twice; kubectl sends as
	// many requests as its caches need, so its writes land less evenly.
	bodySkewReps = 6
)

// podField is a field of the Pod template that only one side's schema has.
type podField struct {
	short string // in object names
	path  string // as schema-skew.json spells it
	// newerOnly says which side has it: the newer minor release, or the older one.
	newerOnly bool
	// key is the PodSpec member the field is in, and value that member's JSON value setting it.
	key   string
	value any
	// mention is what a server's refusal of the field names.
	mention string
	// typed sets the field on a k8s.io/api PodSpec; nil when that release of the types lacks it.
	typed func(*corev1.PodSpec)
	// wire is the field as PodSpec protobuf bytes, for a field k8s.io/api lacks.
	wire []byte
}

// bodySkewPair is one version pair: its cluster, a server of each side, the kubectl of the newer
// release, and a field only each side has.
type bodySkewPair struct {
	name           string
	cluster        *sharedCluster
	older, newer   string // versions
	oldIdx, newIdx int
	kubectl        string
	fields         []podField // newer only, older only
}

// knower is the server a field is read back from: one whose schema has it.
func (p *bodySkewPair) knower(f podField) int {
	if f.newerOnly {
		return p.newIdx
	}
	return p.oldIdx
}

// knows reports whether a server of version stores f.
func (p *bodySkewPair) knows(version string, f podField) bool {
	if f.newerOnly {
		return version == p.newer
	}
	return version == p.older
}

// wireField is one length-delimited protobuf field.
func wireField(num protowire.Number, value []byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, value)
}

var bodySkewPairs = []*bodySkewPair{
	{
		name: "1.30.14+1.31.4", cluster: sharedFieldSkew, older: testcluster.KubeVersion130, newer: testcluster.KubeVersion131,
		oldIdx: fieldsOld, newIdx: fieldsUpgraded, kubectl: testcluster.KubeVersion131,
		fields: []podField{{
			short: "sgp", path: "spec.template.spec.securityContext.supplementalGroupsPolicy", newerOnly: true,
			// Strict, not the Merge a server may default to, so that only a write can have set it.
			key: "securityContext", value: map[string]any{"supplementalGroupsPolicy": "Strict"}, mention: "supplementalGroupsPolicy",
			typed: func(s *corev1.PodSpec) {
				s.SecurityContext = &corev1.PodSecurityContext{SupplementalGroupsPolicy: ptr.To(corev1.SupplementalGroupsPolicyStrict)}
			},
		}, {
			short: "claimsrc", path: "spec.template.spec.resourceClaims[].source", newerOnly: false,
			key: "resourceClaims", value: []any{map[string]any{"name": "gpu", "source": map[string]any{"resourceClaimTemplateName": "gpu"}}},
			mention: "resourceClaims",
			// k8s.io/api v1.30.14, core/v1/generated.proto: PodSpec.resourceClaims = 39,
			// PodResourceClaim.name = 1, PodResourceClaim.source = 2,
			// ClaimSource.resourceClaimTemplateName = 2.
			wire: wireField(39, slices.Concat(wireField(1, []byte("gpu")), wireField(2, wireField(2, []byte("gpu"))))),
		}},
	},
	{
		name: "1.35.4+1.36.3", cluster: sharedWorkloadSkew, older: testcluster.KubeVersion135, newer: testcluster.KubeVersion136,
		oldIdx: workloadOld, newIdx: workloadUpgraded, kubectl: testcluster.KubeVersion136,
		fields: []podField{{
			short: "group", path: "spec.template.spec.schedulingGroup", newerOnly: true,
			key: "schedulingGroup", value: map[string]any{"podGroupName": "group"}, mention: "schedulingGroup",
			typed: func(s *corev1.PodSpec) { s.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("group")} },
		}, {
			short: "workload", path: "spec.template.spec.workloadRef", newerOnly: false,
			key: "workloadRef", value: map[string]any{"name": "workload", "podGroup": "group"}, mention: "workloadRef",
			// k8s.io/api v1.35.4, core/v1/generated.proto: PodSpec.workloadRef = 42,
			// WorkloadReference.name = 1, WorkloadReference.podGroup = 2.
			wire: wireField(42, slices.Concat(wireField(1, []byte("workload")), wireField(2, []byte("group")))),
		}},
	},
}

// deploymentJSON is a Deployment of no replicas whose Pod template sets f, or nothing skewed
// without one.
func deploymentJSON(t *testing.T, name string, f *podField) []byte {
	t.Helper()
	podSpec := map[string]any{"containers": []any{map[string]any{"name": "pause", "image": pauseImage}}}
	if f != nil {
		podSpec[f.key] = f.value
	}
	labels := map[string]any{"app": name}
	data, err := json.Marshal(map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": name, "namespace": "default"},
		"spec": map[string]any{"replicas": 0, "selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": podSpec}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// typedDeployment is the same Deployment as k8s.io/api types it, with f set when they have it.
func typedDeployment(name string, f podField) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: pauseImage}}}}},
	}
	if f.typed != nil {
		f.typed(&d.Spec.Template.Spec)
	}
	return d
}

// protobufDeployment is the request body of a protobuf create of a Deployment setting f: the
// Kubernetes envelope ("k8s\0" and a runtime.Unknown) around the typed object's bytes, followed
// by f's wire bytes when the types lack it. A message field that occurs twice is merged, so
// Deployment.spec (2) > DeploymentSpec.template (3) > PodTemplateSpec.spec (2) > f adds f to the
// Pod template.
func protobufDeployment(t *testing.T, name string, f podField) []byte {
	t.Helper()
	raw, err := typedDeployment(name, f).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if f.wire != nil {
		raw = append(raw, wireField(2, wireField(3, wireField(2, f.wire)))...)
	}
	unknown := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, Raw: raw}
	envelope, err := unknown.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte("k8s\x00"), envelope...)
}

// contains reports whether got has everything want has: maps by key, lists item by item.
func contains(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range w {
			if !contains(g[k], v) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !contains(g[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return got == want
	}
}

// hasField reports whether a Deployment's JSON sets f in its Pod template.
func hasField(t *testing.T, body []byte, f podField) bool {
	t.Helper()
	var d struct {
		Spec struct {
			Template struct {
				Spec map[string]any `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatalf("decoding a Deployment: %v: %s", err, body)
	}
	return contains(d.Spec.Template.Spec[f.key], f.value)
}

// storedOn reads Deployment name from server i directly and reports whether it sets f.
func storedOn(t *testing.T, cluster *testcluster.Cluster, direct *http.Client, i int, name string, f podField) bool {
	t.Helper()
	resp := mustDo(t, direct, http.MethodGet, cluster.Server(i).URL+deploymentsPath+"/"+name, nil, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("reading deployment %s from %s: HTTP %d: %s", name, cluster.Server(i).Name, resp.status, resp.body)
	}
	return hasField(t, resp.body, f)
}

// createOn creates a Deployment directly on server i, strictly validated.
func createOn(t *testing.T, cluster *testcluster.Cluster, direct *http.Client, i int, name string, f *podField) {
	t.Helper()
	resp := mustDo(t, direct, http.MethodPost, cluster.Server(i).URL+deploymentsPath+"?fieldValidation=Strict", nil, deploymentJSON(t, name, f))
	if resp.status != http.StatusCreated {
		t.Fatalf("creating deployment %s on %s: HTTP %d: %s", name, cluster.Server(i).Name, resp.status, resp.body)
	}
}

// prepareBodySkew checks on each server directly that the pair's cluster is skewed both ways as
// the scenarios expect: a server whose schema has a field stores it (from JSON, and from protobuf,
// which also checks the wire bytes given for fields k8s.io/api lacks), and the others refuse it
// when strict.
func prepareBodySkew(t *testing.T, p *bodySkewPair, cluster *testcluster.Cluster, prefix string) {
	t.Helper()
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()
	for i, s := range cluster.Servers() {
		for _, f := range p.fields {
			if !p.knows(s.Version, f) {
				resp := mustDo(t, direct, http.MethodPost, s.URL+deploymentsPath+"?dryRun=All&fieldValidation=Strict", nil,
					deploymentJSON(t, prefix+"-probe", &f))
				if resp.status != http.StatusBadRequest || !bytes.Contains(resp.body, []byte(f.mention)) {
					t.Fatalf("%s (%s): strict create setting %s = HTTP %d, want 400 naming it: %s", s.Name, s.Version, f.path, resp.status, resp.body)
				}
				continue
			}
			name := fmt.Sprintf("%s-probe-%s-%d", prefix, f.short, i)
			createOn(t, cluster, direct, i, name, &f)
			if !storedOn(t, cluster, direct, i, name, f) {
				t.Fatalf("%s (%s) does not store %s: is its gate on?", s.Name, s.Version, f.path)
			}
			name += "-pb"
			resp := mustDo(t, direct, http.MethodPost, s.URL+deploymentsPath, http.Header{"Content-Type": {protobufType}}, protobufDeployment(t, name, f))
			if resp.status != http.StatusCreated {
				t.Fatalf("%s: protobuf create setting %s: HTTP %d: %s", s.Name, f.path, resp.status, resp.body)
			}
			if !storedOn(t, cluster, direct, i, name, f) {
				t.Fatalf("%s (%s) does not store %s from a protobuf create", s.Name, s.Version, f.path)
			}
		}
	}
}

// wayIn is how the scenarios reach the cluster: the round robin or skewgate.
type wayIn struct {
	prefix  string // of object names
	url     string
	client  *http.Client
	kubectl *kubectl
	rest    *rest.Config
	// turn makes the next request go to server i mod the cluster's size, where the way in
	// hands requests out in turn; nil where it does not.
	turn func(t *testing.T, i int)
}

// roundRobinTurn moves the round robin on with GET /version until the next request is server
// target's: then each case's requests start at a chosen server, whatever number kubectl sends.
func roundRobinTurn(proxyURL string, client *http.Client, servers int) func(t *testing.T, i int) {
	return func(t *testing.T, i int) {
		t.Helper()
		for range servers {
			resp := mustDo(t, client, http.MethodGet, proxyURL+"/version", nil, nil)
			backend, err := strconv.Atoi(resp.header.Get(backendHeader))
			if err != nil {
				t.Fatalf("GET /version through the round robin: no backend (HTTP %d)", resp.status)
			}
			if (backend+1)%servers == i%servers {
				return
			}
		}
		t.Fatal("the round robin did not come round in one turn")
	}
}

// outcome is what became of one write of a field.
type outcome int

const (
	kept outcome = iota
	refused
	lost
)

// bodyCase is one way of writing a field.
type bodyCase struct {
	name  string
	short string
	// readable is a JSON or YAML body, which skewgate reads.
	readable bool
	run      func(r *bodyRun, f podField, name string, i int) outcome
}

// bodyRun is one pair's cluster reached one way.
type bodyRun struct {
	t       *testing.T
	p       *bodySkewPair
	cluster *testcluster.Cluster
	w       *wayIn
	direct  *http.Client
	// manifests holds kubectl's input files.
	manifests string
	// readsWithout counts the reads, in the read-modify-write case, that came back without the
	// field, per field.
	readsWithout map[string]int
}

func (r *bodyRun) turn(i int) {
	if r.w.turn != nil {
		r.w.turn(r.t, i)
	}
}

// stored is the outcome of a write the server accepted: kept when a server whose schema has
// the field returns it.
func (r *bodyRun) stored(name string, f podField) outcome {
	r.t.Helper()
	if storedOn(r.t, r.cluster, r.direct, r.p.knower(f), name, f) {
		return kept
	}
	return lost
}

// kubectlApply runs kubectl apply with args on a manifest setting f.
func (r *bodyRun) kubectlApply(f podField, name string, i int, args ...string) outcome {
	t := r.t
	t.Helper()
	manifest := filepath.Join(r.manifests, name+".json")
	writeFile(t, manifest, deploymentJSON(t, name, &f))
	r.turn(i)
	out, err := r.w.kubectl.try(t.Context(), append(slices.Clip(args), "-f", manifest)...)
	if err != nil {
		if strings.Contains(out, f.mention) {
			return refused
		}
		t.Fatalf("kubectl %s of %s: %v: %s", strings.Join(args, " "), name, err, out)
	}
	return r.stored(name, f)
}

// answered is the outcome of a write sent as a plain request.
func (r *bodyRun) answered(resp response, f podField, name, what string) outcome {
	r.t.Helper()
	switch {
	case resp.status == http.StatusOK || resp.status == http.StatusCreated:
		return r.stored(name, f)
	case resp.status >= 400 && resp.status < 500 && bytes.Contains(resp.body, []byte(f.mention)):
		return refused
	}
	r.t.Fatalf("%s of %s: HTTP %d: %s", what, name, resp.status, resp.body)
	return 0
}

// patch adds f to an existing Deployment with a patch of contentType.
func (r *bodyRun) patch(f podField, name string, i int, contentType string, body []byte) outcome {
	t := r.t
	t.Helper()
	createOn(t, r.cluster, r.direct, r.p.knower(f), name, nil)
	r.turn(i)
	// No fieldValidation, as kubectl patch sends: the servers' default warns and drops.
	resp := mustDo(t, r.w.client, http.MethodPatch, r.w.url+deploymentsPath+"/"+name, http.Header{"Content-Type": {contentType}}, body)
	return r.answered(resp, f, name, contentType+" patch")
}

var bodyCases = []bodyCase{
	{name: "kubectl apply (client-side, strict)", short: "csa", readable: true, run: func(r *bodyRun, f podField, name string, i int) outcome {
		return r.kubectlApply(f, name, i, "apply", "--validate=strict")
	}},
	{name: "kubectl apply --server-side (strict)", short: "ssa", readable: true, run: func(r *bodyRun, f podField, name string, i int) outcome {
		return r.kubectlApply(f, name, i, "apply", "--server-side", "--field-manager=skewgate-e2e", "--validate=strict")
	}},
	{name: "JSON patch", short: "jp", readable: true, run: func(r *bodyRun, f podField, name string, i int) outcome {
		body, err := json.Marshal([]any{map[string]any{"op": "add", "path": "/spec/template/spec/" + f.key, "value": f.value}})
		if err != nil {
			r.t.Fatal(err)
		}
		return r.patch(f, name, i, "application/json-patch+json", body)
	}},
	{name: "strategic merge patch", short: "smp", readable: true, run: func(r *bodyRun, f podField, name string, i int) outcome {
		body, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{f.key: f.value}}}})
		if err != nil {
			r.t.Fatal(err)
		}
		return r.patch(f, name, i, "application/strategic-merge-patch+json", body)
	}},
	{name: "client-go create, protobuf", short: "pb", run: func(r *bodyRun, f podField, name string, i int) outcome {
		t := r.t
		cfg := rest.CopyConfig(r.w.rest)
		cfg.ContentType = protobufType
		clientset, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		r.turn(i)
		if f.typed != nil {
			_, err = clientset.AppsV1().Deployments("default").Create(t.Context(), typedDeployment(name, f), metav1.CreateOptions{})
		} else {
			err = clientset.AppsV1().RESTClient().Post().Namespace("default").Resource("deployments").
				SetHeader("Content-Type", protobufType).Body(protobufDeployment(t, name, f)).Do(t.Context()).Error()
		}
		if err != nil {
			var status apierrors.APIStatus
			if errors.As(err, &status) && status.Status().Code/100 == 4 && strings.Contains(err.Error(), f.mention) {
				return refused
			}
			t.Fatalf("protobuf create of %s: %v", name, err)
		}
		return r.stored(name, f)
	}},
	{name: "GET, then PUT of the read copy", short: "rmw", run: func(r *bodyRun, f podField, name string, i int) outcome {
		t := r.t
		createOn(t, r.cluster, r.direct, r.p.knower(f), name, &f)
		r.turn(i)
		read := mustDo(t, r.w.client, http.MethodGet, r.w.url+deploymentsPath+"/"+name, nil, nil)
		if read.status != http.StatusOK {
			t.Fatalf("reading deployment %s: HTTP %d: %s", name, read.status, read.body)
		}
		if !hasField(t, read.body, f) {
			r.readsWithout[f.short]++
		}
		resp := mustDo(t, r.w.client, http.MethodPut, r.w.url+deploymentsPath+"/"+name, nil, read.body)
		return r.answered(resp, f, name, "update")
	}},
}

// caseCount is what became of one case's writes of one field.
type caseCount struct{ refused, lost, readsWithout, n int }

// bodySkewCounts holds a caseCount per case and field of a pair, as [case][field].
type bodySkewCounts [][]caseCount

// runBodySkew writes each pair's fields each case's way, bodySkewReps times, through w.
func runBodySkew(t *testing.T, p *bodySkewPair, cluster *testcluster.Cluster, w *wayIn) bodySkewCounts {
	t.Helper()
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()
	r := &bodyRun{t: t, p: p, cluster: cluster, w: w, direct: direct, manifests: t.TempDir(), readsWithout: map[string]int{}}
	counts := make(bodySkewCounts, len(bodyCases))
	for ci, c := range bodyCases {
		counts[ci] = make([]caseCount, len(p.fields))
		for fi, f := range p.fields {
			cc := &counts[ci][fi]
			for i := range bodySkewReps {
				switch c.run(r, f, fmt.Sprintf("%s-%s-%s-%d", w.prefix, c.short, f.short, i), i) {
				case refused:
					cc.refused++
				case lost:
					cc.lost++
				}
				cc.n++
			}
			if c.short == "rmw" {
				cc.readsWithout = r.readsWithout[f.short]
			}
		}
	}
	return counts
}

// bodySkewBaseline keeps the baseline's counts per pair, so that skewgate's table shows both.
var bodySkewBaseline = map[string]bodySkewCounts{}

// bodySkewTable is a pair's counts as a table: per case and field, refused / lost of the
// writes, through the baseline and through skewgate (either nil when not measured).
func bodySkewTable(p *bodySkewPair, cluster *testcluster.Cluster, baseline, skewgate bodySkewCounts) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Deployment fields only one side's schema has, %s over %s (refused / lost of %d writes each):\n", p.name, versionsOf(cluster), bodySkewReps)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tfield (only in)\tround robin\tskewgate\t")
	cell := func(counts bodySkewCounts, ci, fi int) string {
		if counts == nil {
			return "-"
		}
		c := counts[ci][fi]
		s := fmt.Sprintf("%d / %d", c.refused, c.lost)
		if bodyCases[ci].short == "rmw" {
			s += fmt.Sprintf(" (read without it %d)", c.readsWithout)
		}
		return s
	}
	for ci, c := range bodyCases {
		for fi, f := range p.fields {
			side := p.older
			if f.newerOnly {
				side = p.newer
			}
			fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t\n", c.name, f.path, side, cell(baseline, ci, fi), cell(skewgate, ci, fi))
		}
	}
	tw.Flush()
	return b.String()
}

// TestBaselineRoundRobinRefusesOrDropsFieldsOnlyOneSideKnows is the harm: where each side of an
// upgrade has a Pod template field the other lacks, a per-request round robin sends a strict
// write setting one to a server whose schema lacks it, which refuses it (400, unknown field), and
// a non-strict or protobuf write there loses it. A read-modify-write whose read or write lands
// there loses it too, or is refused where what is left of the field's parent is invalid.
func TestBaselineRoundRobinRefusesOrDropsFieldsOnlyOneSideKnows(t *testing.T) {
	for _, p := range bodySkewPairs {
		t.Run(p.name, func(t *testing.T) {
			cluster := p.cluster.get(t)
			prepareBodySkew(t, p, cluster, "rr")
			started := time.Now()
			proxy := newRoundRobinProxy(t, cluster)
			client := &http.Client{Timeout: 30 * time.Second}
			defer client.CloseIdleConnections()
			kubectlBinary, err := testcluster.EnsureBinary(t.Context(), t, testcluster.Kubectl, p.kubectl)
			if err != nil {
				t.Fatalf("kubectl: %v", err)
			}
			w := &wayIn{prefix: "rr", url: proxy.URL, client: client,
				kubectl: newKubectlAt(t, kubectlBinary, proxy.URL, "", kubeconfigUser{}),
				rest:    &rest.Config{Host: proxy.URL}, turn: roundRobinTurn(proxy.URL, client, len(cluster.Servers()))}
			counts := runBodySkew(t, p, cluster, w)
			bodySkewBaseline[p.name] = counts
			t.Logf("%s\nmeasured in %s", bodySkewTable(p, cluster, counts, nil), time.Since(started).Round(time.Second))
			var errs []error
			for ci, c := range bodyCases {
				for fi, f := range p.fields {
					if cc := counts[ci][fi]; c.readable && cc.refused+cc.lost == 0 {
						errs = append(errs, fmt.Errorf("%s of %s: none of %d refused or lost", c.name, f.path, cc.n))
					}
				}
			}
			if err := errors.Join(errs...); err != nil {
				t.Errorf("the round robin does not show the harm:\n%v", err)
			}
		})
	}
}

// TestSkewgateSendsEachWriteToServersThatKnowEveryFieldItSets is the same traffic through
// `skewgate serve`, which reads JSON and YAML write bodies and sends each to the servers whose
// schema has every field it sets: none of them is refused or loses its field. Protobuf bodies
// are not read, and a read of a kind whose schemas differ both ways is answered by the newest
// minor release: a protobuf write or a read-modify-write keeps a field only the newer release
// has, and cannot keep one only the older release has, the documented limit (RATIONALE: "Why
// route writes by the fields their body sets?").
func TestSkewgateSendsEachWriteToServersThatKnowEveryFieldItSets(t *testing.T) {
	for _, p := range bodySkewPairs {
		t.Run(p.name, func(t *testing.T) {
			cluster := p.cluster.get(t)
			prepareBodySkew(t, p, cluster, "sg")
			started := time.Now()
			gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
			const deployments = "apps/v1/deployments"
			snap := gw.waitSnapshot(t, "both sides' missing Deployment fields in the gateway's snapshot", fieldSkewWaitAt, func(v snapshotView) error {
				if err := allHealthy(cluster)(v); err != nil {
					return err
				}
				var errs []error
				for _, i := range []int{p.oldIdx, p.newIdx} {
					if s, _ := v.server(cluster.Server(i).URL); len(s.MissingFields[deployments]) == 0 {
						errs = append(errs, fmt.Errorf("%s lists no missing Deployment fields", cluster.Server(i).Name))
					}
				}
				return errors.Join(errs...)
			})
			// The controller publishes which server's schema has each differing path with the
			// missing fields, in the same snapshot: without it no body can be routed by its fields.
			skew := snap.FieldSkew[deployments]
			t.Logf("snapshot generation %d: Deployment field skew over %d paths in %d schemas", snap.Generation, len(skew.Paths), len(skew.Schemas))
			for _, f := range p.fields {
				if !slices.Contains(skew.Paths, f.path) {
					t.Errorf("snapshot generation %d: the Deployment field skew does not list %s", snap.Generation, f.path)
				}
			}
			client := gw.adminClient()
			defer client.CloseIdleConnections()
			kubectlBinary, err := testcluster.EnsureBinary(t.Context(), t, testcluster.Kubectl, p.kubectl)
			if err != nil {
				t.Fatalf("kubectl: %v", err)
			}
			w := &wayIn{prefix: "sg", url: gw.URL, client: client,
				kubectl: newKubectl(t, kubectlBinary, gw, kubeconfigUser{ClientCertificate: gw.adminCertFile, ClientKey: gw.adminKeyFile}),
				rest:    gw.restConfig()}
			counts := runBodySkew(t, p, cluster, w)
			t.Logf("%s\nmeasured in %s, with skewgate's start", bodySkewTable(p, cluster, bodySkewBaseline[p.name], counts), time.Since(started).Round(time.Second))
			var errs []error
			for ci, c := range bodyCases {
				for fi, f := range p.fields {
					cc := counts[ci][fi]
					switch {
					case c.readable || f.newerOnly:
						if cc.refused+cc.lost != 0 {
							errs = append(errs, fmt.Errorf("%s of %s: %d refused, %d lost of %d, want none", c.name, f.path, cc.refused, cc.lost, cc.n))
						}
					case c.short == "pb":
						// Unread, the write goes to the newest minor, whose decoder skips the field.
						if cc.lost != cc.n {
							errs = append(errs, fmt.Errorf("%s of %s: %d refused, %d lost of %d, want every one lost (the newest minor has no such field)", c.name, f.path, cc.refused, cc.lost, cc.n))
						}
					default:
						// The read comes from the newest minor, without the field, so the write
						// cannot keep it: it is lost, or refused where the field's siblings are
						// invalid without it.
						if cc.refused+cc.lost != cc.n {
							errs = append(errs, fmt.Errorf("%s of %s: %d refused, %d lost of %d, want the field kept by none (the newest minor has no such field)", c.name, f.path, cc.refused, cc.lost, cc.n))
						}
					}
				}
			}
			if err := errors.Join(errs...); err != nil {
				t.Errorf("through skewgate:\n%v", err)
			}
		})
	}
}
