package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/host/testcluster"
)

// Server indexes of the field-skew cluster: a rolling upgrade from 1.30 to 1.31, two of three
// servers upgraded.
const (
	fieldsOld       = 0 // 1.30.14
	fieldsUpgraded  = 1 // 1.31.4
	fieldsUpgraded2 = 2 // 1.31.4
)

// leaseStrategyGate makes the 1.31 servers store Lease spec.strategy and spec.preferredHolder,
// fields 1.31's schema adds (fixtures/schema-skew.json). Every field 1.31 adds to a kind is
// behind an alpha gate, off by default: without one, 1.31 drops the field as 1.30 does.
const leaseStrategyGate = "CoordinatedLeaderElection"

// fieldSkewSpec also turns on, for the write-body scenarios (fieldbody_test.go), the gates of a
// Pod template field only 1.31 has and of one only 1.30 has.
func fieldSkewSpec() testcluster.Spec {
	upgraded := func(name string) testcluster.ServerSpec {
		return testcluster.ServerSpec{Name: name, Version: testcluster.KubeVersion131,
			FeatureGates: map[string]bool{leaseStrategyGate: true, supplementalGroupsPolicyGate: true},
			// The gate's controller in kube-apiserver watches LeaseCandidates.
			RuntimeConfig: []string{"coordination.k8s.io/v1alpha1=true"}}
	}
	return testcluster.Spec{Servers: []testcluster.ServerSpec{
		fieldsOld: {Name: "fields-1-30", Version: testcluster.KubeVersion130,
			FeatureGates: map[string]bool{dynamicResourceAllocationGate: true}},
		fieldsUpgraded:  upgraded("fields-1-31-a"),
		fieldsUpgraded2: upgraded("fields-1-31-b"),
	}}
}

// sharedFieldSkew is the field-skew cluster of the baseline and of skewgate's scenarios.
var sharedFieldSkew = &sharedCluster{spec: fieldSkewSpec()}

const (
	// kubeletServices is the request a 1.31 kubelet lists Services with: since 1.31 it asks
	// only for those with a cluster IP, a field selector 1.30 servers refuse.
	kubeletServices = "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&limit=500&resourceVersion=0"
	// kubeletRequests is how many times the scenarios send it.
	kubeletRequests = 200

	widgetsPath     = "/apis/fields.skewgate.test/v1/widgets"
	widgetsByColor  = widgetsPath + "?fieldSelector=spec.color%3Dred"
	widgetRequests  = 30
	leaseWrites     = 9
	leaseReads      = 30
	leasesPath      = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	leaseStrategy   = "OldestEmulationVersion"
	fieldSkewWaitAt = 2 * time.Minute
)

// widgetCRD has a selectable field, which 1.31 honours (CustomResourceFieldSelectors, beta
// there) and 1.30 does not (alpha, off).
const widgetCRD = `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"widgets.fields.skewgate.test"},
"spec":{"group":"fields.skewgate.test","scope":"Namespaced",
 "names":{"plural":"widgets","singular":"widget","kind":"Widget","listKind":"WidgetList"},
 "versions":[{"name":"v1","served":true,"storage":true,"selectableFields":[{"jsonPath":".spec.color"}],
  "schema":{"openAPIV3Schema":{"type":"object","properties":{"spec":{"type":"object","properties":{"color":{"type":"string"}}}}}}}]}}`

// leaseJSON is a Lease with the fields only 1.31's schema has.
func leaseJSON(name string) []byte {
	return []byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"` + name + `","namespace":"default"},` +
		`"spec":{"holderIdentity":"e2e","strategy":"` + leaseStrategy + `","preferredHolder":"e2e"}}`)
}

// prepareFieldSkew creates the widget definition through a 1.31 server, as a user of the
// upgraded servers would, and checks on each server directly that the cluster is skewed as the
// scenarios expect: 1.30 refuses the kubelet's selector, the widget selector and the new lease
// fields (strict), 1.31 accepts all three.
func prepareFieldSkew(t *testing.T, cluster *testcluster.Cluster) {
	t.Helper()
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()
	upgraded := cluster.Server(fieldsUpgraded).URL
	if resp := mustDo(t, direct, http.MethodPost, upgraded+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", nil, []byte(widgetCRD)); resp.status != http.StatusCreated && resp.status != http.StatusConflict {
		t.Fatalf("creating the widget definition: HTTP %d: %s", resp.status, resp.body)
	}
	for _, color := range []string{"red", "blue"} {
		eventually(t, "creating the "+color+" widget", fieldSkewWaitAt, 200*time.Millisecond, func() error {
			resp, err := do(direct, http.MethodPost, upgraded+"/apis/fields.skewgate.test/v1/namespaces/default/widgets", nil,
				[]byte(`{"apiVersion":"fields.skewgate.test/v1","kind":"Widget","metadata":{"name":"`+color+`"},"spec":{"color":"`+color+`"}}`))
			if err != nil || (resp.status != http.StatusCreated && resp.status != http.StatusConflict) {
				return fmt.Errorf("HTTP %d (%v): %s", resp.status, err, resp.body)
			}
			return nil
		})
	}
	for i, s := range cluster.Servers() {
		want := http.StatusOK
		if i == fieldsOld {
			want = http.StatusBadRequest
		}
		for _, path := range []string{kubeletServices, widgetsByColor} {
			eventually(t, fmt.Sprintf("%s answering GET %s with %d", s.Name, path, want), fieldSkewWaitAt, 200*time.Millisecond, func() error {
				if resp, err := do(direct, http.MethodGet, s.URL+path, nil, nil); err != nil || resp.status != want {
					return fmt.Errorf("HTTP %d (%v): %s", resp.status, err, resp.body)
				}
				return nil
			})
		}
		wantWrite := http.StatusCreated
		if i == fieldsOld {
			wantWrite = http.StatusBadRequest
		}
		resp := mustDo(t, direct, http.MethodPost, s.URL+leasesPath+"?dryRun=All&fieldValidation=Strict", nil, leaseJSON("dry-run"))
		if resp.status != wantWrite {
			t.Fatalf("%s: strict create of a lease with spec.strategy = %d, want %d: %s", s.Name, resp.status, wantWrite, resp.body)
		}
	}
}

// leaseStrategyOnUpgraded reads a lease from a 1.31 server directly: whether it exists, and
// its spec.strategy.
func leaseStrategyOnUpgraded(t *testing.T, cluster *testcluster.Cluster, name string) (exists bool, strategy string) {
	t.Helper()
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()
	resp := mustDo(t, direct, http.MethodGet, cluster.Server(fieldsUpgraded).URL+leasesPath+"/"+name, nil, nil)
	if resp.status == http.StatusNotFound {
		return false, ""
	}
	if resp.status != http.StatusOK {
		t.Fatalf("reading lease %s from %s: HTTP %d: %s", name, cluster.Server(fieldsUpgraded).Name, resp.status, resp.body)
	}
	return true, strategyOf(t, resp.body)
}

func strategyOf(t *testing.T, body []byte) string {
	t.Helper()
	var lease struct {
		Spec struct {
			Strategy string `json:"strategy"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &lease); err != nil {
		t.Fatalf("decoding a lease: %v: %s", err, body)
	}
	return lease.Spec.Strategy
}

// fieldSkewCounts is what one way into the cluster did to the scenarios' requests.
type fieldSkewCounts struct {
	kubeletBadRequests, watchBadRequests, widgetBadRequests int
	// applyRefused counts kubectl applies refused for an unknown field, applyDropped those that
	// succeeded without storing it; createDropped the typed creates that did not store it, and
	// createWarnings the unknown-field warnings they got; readsWithout the reads of a lease that
	// came back without spec.strategy.
	applyRefused, applyDropped, createDropped, createWarnings, readsWithout int
}

// runFieldSkewTraffic sends every scenario's requests to baseURL with client (plain requests),
// kubectl and rest (client-go), names its objects with prefix, and counts what went wrong.
// watchAttempts watches are opened, each required to deliver an event when it is accepted.
func runFieldSkewTraffic(t *testing.T, cluster *testcluster.Cluster, baseURL string, client *http.Client, k *kubectl, restConfig *rest.Config, prefix string, watchAttempts int) fieldSkewCounts {
	t.Helper()
	var c fieldSkewCounts
	for range kubeletRequests {
		resp := mustDo(t, client, http.MethodGet, baseURL+kubeletServices, nil, nil)
		switch resp.status {
		case http.StatusOK:
		case http.StatusBadRequest:
			c.kubeletBadRequests++
		default:
			t.Fatalf("the kubelet's service list: HTTP %d: %s", resp.status, resp.body)
		}
	}

	for i := range watchAttempts {
		// A plain proxy hands out requests in turn: sending i more first moves each watch to
		// another server.
		for range i {
			mustDo(t, client, http.MethodGet, baseURL+"/version", nil, nil)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+
			"/api/v1/namespaces/default/services?allowWatchBookmarks=true&fieldSelector=spec.clusterIP%21%3DNone&watch=true", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			cancel()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("the kubelet's service watch: HTTP %d", resp.StatusCode)
			}
			c.watchBadRequests++
			continue
		}
		// An accepted watch delivers a Service created afterwards.
		w := newWatchStream(resp)
		name := fmt.Sprintf("%s-watched-%d", prefix, i)
		if resp := mustDo(t, client, http.MethodPost, baseURL+"/api/v1/namespaces/default/services", nil,
			[]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"`+name+`"},"spec":{"ports":[{"port":80}]}}`)); resp.status != http.StatusCreated {
			t.Fatalf("creating service %s: HTTP %d: %s", name, resp.status, resp.body)
		}
		if err := w.expect("ADDED", name, watchEventTimeout); err != nil {
			t.Errorf("the service watch with the kubelet's selector: %v", err)
		}
		cancel()
	}

	for range widgetRequests {
		resp := mustDo(t, client, http.MethodGet, baseURL+widgetsByColor, nil, nil)
		switch resp.status {
		case http.StatusOK:
			var list struct {
				Items []struct {
					Metadata struct {
						Name string `json:"name"`
					} `json:"metadata"`
				} `json:"items"`
			}
			if err := json.Unmarshal(resp.body, &list); err != nil || len(list.Items) != 1 || list.Items[0].Metadata.Name != "red" {
				t.Errorf("widgets selected by spec.color=red: %s", resp.body)
			}
		case http.StatusBadRequest:
			c.widgetBadRequests++
		default:
			t.Fatalf("the widget list: HTTP %d: %s", resp.status, resp.body)
		}
	}

	manifestDir := t.TempDir()
	for i := range leaseWrites {
		// A plain proxy hands out requests in turn: sending i%3 more first moves each apply's
		// writes to another server.
		for range i % len(cluster.Servers()) {
			mustDo(t, client, http.MethodGet, baseURL+"/version", nil, nil)
		}
		name := fmt.Sprintf("%s-applied-%d", prefix, i)
		manifest := filepath.Join(manifestDir, name+".json")
		writeFile(t, manifest, leaseJSON(name))
		out, err := k.try(t.Context(), "apply", "--validate=strict", "-f", manifest)
		if err != nil {
			if !strings.Contains(out, `unknown field "spec.strategy"`) {
				t.Fatalf("kubectl apply %s: %v: %s", name, err, out)
			}
			c.applyRefused++
			continue
		}
		if exists, strategy := leaseStrategyOnUpgraded(t, cluster, name); !exists || strategy != leaseStrategy {
			c.applyDropped++
		}
	}

	var warnings atomic.Int64
	cfg := rest.CopyConfig(restConfig)
	cfg.WarningHandler = warningCounter{&warnings}
	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	strategy := coordinationv1.CoordinatedLeaseStrategy(leaseStrategy)
	for i := range leaseWrites {
		name := fmt.Sprintf("%s-created-%d", prefix, i)
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &name, Strategy: &strategy, PreferredHolder: &name}}
		if _, err := clientset.CoordinationV1().Leases("default").Create(t.Context(), lease, metav1.CreateOptions{FieldValidation: "Warn"}); err != nil {
			t.Fatalf("creating lease %s with client-go: %v", name, err)
		}
		if _, strategy := leaseStrategyOnUpgraded(t, cluster, name); strategy != leaseStrategy {
			c.createDropped++
		}
	}
	c.createWarnings = int(warnings.Load())

	// A lease with the new fields, read back repeatedly.
	name := prefix + "-read"
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coordinationv1.LeaseSpec{Strategy: &strategy}}
	direct, err := kubernetes.NewForConfig(cluster.AdminRESTConfig(fieldsUpgraded))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.CoordinationV1().Leases("default").Create(t.Context(), lease, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for range leaseReads {
		resp := mustDo(t, client, http.MethodGet, baseURL+leasesPath+"/"+name, nil, nil)
		if resp.status != http.StatusOK {
			t.Fatalf("reading lease %s: HTTP %d: %s", name, resp.status, resp.body)
		}
		if strategyOf(t, resp.body) != leaseStrategy {
			c.readsWithout++
		}
	}
	return c
}

// warningCounter counts the unknown-field warnings the servers send.
type warningCounter struct{ n *atomic.Int64 }

func (w warningCounter) HandleWarningHeader(_ int, _ string, text string) {
	if strings.Contains(text, "unknown field") {
		w.n.Add(1)
	}
}

// TestBaselineRoundRobinBreaksFieldSelectorsAndDropsNewFields is the harm: through a plain
// per-request round robin over a 1.30 server and two 1.31 servers, the kubelet's service list
// and watch and a list of custom resources by a selectable field get 400 from the 1.30 server,
// kubectl apply of a field only 1.31 knows is refused there and a client-go create loses it
// there, and a read there returns the object without it.
func TestBaselineRoundRobinBreaksFieldSelectorsAndDropsNewFields(t *testing.T) {
	cluster := sharedFieldSkew.get(t)
	prepareFieldSkew(t, cluster)
	proxy := newRoundRobinProxy(t, cluster)
	client := &http.Client{Timeout: 30 * time.Second}
	k := newKubectlAt(t, ensureKubectl(t), proxy.URL, "", kubeconfigUser{})
	c := runFieldSkewTraffic(t, cluster, proxy.URL, client, k, &rest.Config{Host: proxy.URL}, "baseline", len(cluster.Servers()))
	t.Logf("round robin over %s: kubelet service list 400 in %d of %d; watches refused %d of %d; widget selector 400 in %d of %d; "+
		"kubectl apply (strict) refused %d and stored without the field %d of %d; client-go create (warn) dropped the field %d of %d (%d warnings); "+
		"reads without the field %d of %d",
		versionsOf(cluster), c.kubeletBadRequests, kubeletRequests, c.watchBadRequests, len(cluster.Servers()), c.widgetBadRequests, widgetRequests,
		c.applyRefused, c.applyDropped, leaseWrites, c.createDropped, leaseWrites, c.createWarnings, c.readsWithout, leaseReads)
	var errs []error
	for what, n := range map[string]int{
		"kubelet service lists refused": c.kubeletBadRequests, "service watches refused": c.watchBadRequests,
		"widget lists refused": c.widgetBadRequests, "kubectl applies refused": c.applyRefused,
		"client-go creates that lost the field": c.createDropped, "reads without the field": c.readsWithout,
	} {
		if n == 0 {
			errs = append(errs, errors.New(what+": none"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("the round robin does not show the harm:\n%v", err)
	}
}

// TestSkewgateSendsFieldSelectorsAndNewFieldsToServersThatKnowThem is the same traffic through
// `skewgate serve`: every list and watch succeeds, and every write stores the field 1.31 knows
// and every read returns it, because the snapshot tells which servers accept which labels and
// whose schema lacks which fields.
func TestSkewgateSendsFieldSelectorsAndNewFieldsToServersThatKnowThem(t *testing.T) {
	cluster := sharedFieldSkew.get(t)
	prepareFieldSkew(t, cluster)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	snap := gw.waitSnapshot(t, "field-level knowledge in the gateway's snapshot", fieldSkewWaitAt, func(v snapshotView) error {
		if err := allHealthy(cluster)(v); err != nil {
			return err
		}
		old, _ := v.server(cluster.Server(fieldsOld).URL)
		upgraded, _ := v.server(cluster.Server(fieldsUpgraded).URL)
		var errs []error
		if labels := old.FieldSelectors["v1/services"]; labels == nil || slices.Contains(labels, "spec.clusterIP") {
			errs = append(errs, fmt.Errorf("1.30 services labels %q", labels))
		}
		if labels := upgraded.FieldSelectors["v1/services"]; !slices.Contains(labels, "spec.clusterIP") {
			errs = append(errs, fmt.Errorf("1.31 services labels %q", labels))
		}
		if labels := upgraded.FieldSelectors["fields.skewgate.test/v1/widgets"]; !slices.Contains(labels, "spec.color") {
			errs = append(errs, fmt.Errorf("1.31 widget labels %q", labels))
		}
		if labels := old.FieldSelectors["fields.skewgate.test/v1/widgets"]; labels == nil || slices.Contains(labels, "spec.color") {
			errs = append(errs, fmt.Errorf("1.30 widget labels %q", labels))
		}
		if missing := old.MissingFields["coordination.k8s.io/v1/leases"]; !slices.Contains(missing, "spec.strategy") {
			errs = append(errs, fmt.Errorf("1.30 missing lease fields %q", missing))
		}
		if missing := upgraded.MissingFields["coordination.k8s.io/v1/leases"]; missing != nil {
			errs = append(errs, fmt.Errorf("1.31 missing lease fields %q", missing))
		}
		return errors.Join(errs...)
	})
	old, _ := snap.server(cluster.Server(fieldsOld).URL)
	t.Logf("snapshot generation %d: labels differ between the servers for %d resources; the 1.30 server's schemas lack fields of %d resources",
		snap.Generation, len(old.FieldSelectors), len(old.MissingFields))

	client := gw.adminClient()
	defer client.CloseIdleConnections()
	k := newKubectl(t, ensureKubectl(t), gw, kubeconfigUser{ClientCertificate: gw.adminCertFile, ClientKey: gw.adminKeyFile})
	c := runFieldSkewTraffic(t, cluster, gw.URL, client, k, gw.restConfig(), "skewgate", len(cluster.Servers()))
	t.Logf("skewgate over %s: kubelet service list 400 in %d of %d; watches refused %d of %d; widget selector 400 in %d of %d; "+
		"kubectl apply (strict) refused %d and stored without the field %d of %d; client-go create (warn) dropped the field %d of %d (%d warnings); "+
		"reads without the field %d of %d",
		versionsOf(cluster), c.kubeletBadRequests, kubeletRequests, c.watchBadRequests, len(cluster.Servers()), c.widgetBadRequests, widgetRequests,
		c.applyRefused, c.applyDropped, leaseWrites, c.createDropped, leaseWrites, c.createWarnings, c.readsWithout, leaseReads)
	if c != (fieldSkewCounts{}) {
		t.Errorf("through skewgate: %+v, want nothing refused, dropped or warned about", c)
	}
}

func versionsOf(cluster *testcluster.Cluster) string {
	var vs []string
	for _, s := range cluster.Servers() {
		vs = append(vs, s.Version)
	}
	return strings.Join(vs, ", ")
}
