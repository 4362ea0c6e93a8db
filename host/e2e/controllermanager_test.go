package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/host/testcluster"
)

// The harm skewgate exists to prevent is done by kube-controller-manager: its garbage collector
// deletes dependents whose owner only looked absent, and its namespace controller finishes a
// namespace deletion leaving behind objects of APIs it did not know of. These scenarios run a real
// controller manager of the version that runs next to each server during a 1.35 -> 1.36 upgrade.

const (
	// ownedObjects is how many owners (and dependents, and skewed objects in a namespace) each
	// scenario creates.
	ownedObjects = 20
	// gcCollectingTimeout covers the garbage collector's start: up to 30 s waiting for resource
	// monitors that cannot sync, as in the baseline.
	gcCollectingTimeout = 2 * time.Minute
	// gcObservation is how long the scenarios watch for wrong deletions once the owners and
	// dependents exist: longer than the garbage collector's 30 s discovery resync, after which a
	// client behind a round-robin proxy may see a different server's API set.
	gcObservation = 40 * time.Second
	// harmSettling is how long the baseline keeps counting after its first wrong deletion.
	harmSettling = 5 * time.Second
	// controllerManagerStopGrace is how long a stopped controller manager may take to exit.
	controllerManagerStopGrace = 10 * time.Second
	// collectTimeout bounds the garbage collection of dependents whose owners were deleted, and
	// the deletion of a namespace.
	collectTimeout = 2 * time.Minute
)

// Owners are LeaseCandidates: only the 1.36 server with the extra API serves them.
var leaseCandidates = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1alpha2", Resource: "leasecandidates"}

// startControllerManager runs kube-controller-manager with kubeconfig until the test ends, and
// prints its log tail if the test failed.
func startControllerManager(t *testing.T, cluster *testcluster.Cluster, name, version, kubeconfig string) *testcluster.Process {
	t.Helper()
	m, err := cluster.StartControllerManager(context.Background(), testcluster.ControllerManagerSpec{Name: name, Version: version, Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Stop(controllerManagerStopGrace)
		if t.Failed() {
			t.Logf("last lines of the %s log:\n%s", name, m.LogTail(60))
		}
	})
	return m
}

// waitCollecting waits until the garbage collector has started collecting.
func waitCollecting(t *testing.T, m *testcluster.Process) {
	t.Helper()
	eventually(t, "the garbage collector collecting", gcCollectingTimeout, 200*time.Millisecond, func() error {
		if exited, err := m.Exited(); exited {
			t.Fatalf("kube-controller-manager exited: %v\n%s", err, m.LogTail(40))
		}
		if !m.LogContains("Proceeding to collect garbage") {
			return fmt.Errorf("not yet")
		}
		return nil
	})
}

// componentKubeconfig writes a kubeadm-shaped kubeconfig for kube-controller-manager's client
// certificate, talking to server.
func componentKubeconfig(t *testing.T, cluster *testcluster.Cluster, server, caFile, tlsServerName string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "controller-manager.conf")
	if err := cluster.WriteComponentKubeconfig(path, testcluster.ControllerManagerUser, server, caFile, tlsServerName); err != nil {
		t.Fatal(err)
	}
	return path
}

// clusterObjects reads and writes objects directly on the servers, as the admin.
type clusterObjects struct {
	kube kubernetes.Interface
	// skewed serves leasecandidates.
	skewed dynamic.NamespaceableResourceInterface
}

func newClusterObjects(cluster *testcluster.Cluster) *clusterObjects {
	return &clusterObjects{
		kube:   kubernetes.NewForConfigOrDie(cluster.AdminRESTConfig(skewedUpgraded)),
		skewed: dynamic.NewForConfigOrDie(cluster.AdminRESTConfig(skewedWithExtra)).Resource(leaseCandidates),
	}
}

func (o *clusterObjects) createNamespace(t *testing.T, name string) {
	t.Helper()
	if _, err := o.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (o *clusterObjects) createLeaseCandidate(t *testing.T, namespace, name string) *unstructured.Unstructured {
	t.Helper()
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(leaseCandidate(name)); err != nil {
		t.Fatal(err)
	}
	created, err := o.skewed.Namespace(namespace).Create(context.Background(), obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func (o *clusterObjects) createConfigMap(t *testing.T, namespace, name string, owners ...metav1.OwnerReference) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, OwnerReferences: owners}}
	if _, err := o.kube.CoreV1().ConfigMaps(namespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// counts is how many ConfigMaps and LeaseCandidates the namespace holds in storage.
func (o *clusterObjects) counts(t *testing.T, namespace string) (configMaps, leaseCandidates int) {
	t.Helper()
	cms, err := o.kube.CoreV1().ConfigMaps(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lcs, err := o.skewed.Namespace(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(cms.Items), len(lcs.Items)
}

// createOwnedConfigMaps creates ownedObjects LeaseCandidates in a new namespace, each owning a
// ConfigMap.
func (o *clusterObjects) createOwnedConfigMaps(t *testing.T, namespace string) {
	t.Helper()
	o.createNamespace(t, namespace)
	for i := range ownedObjects {
		owner := o.createLeaseCandidate(t, namespace, fmt.Sprintf("owner-%d", i))
		o.createConfigMap(t, namespace, fmt.Sprintf("dependent-%d", i), metav1.OwnerReference{
			APIVersion: "coordination.k8s.io/v1alpha2", Kind: "LeaseCandidate", Name: owner.GetName(), UID: owner.GetUID(),
		})
	}
}

// wronglyCollected runs the garbage collector of kube-controller-manager version, talking through
// kubeconfig; once it collects, creates owners and their dependents, as a running cluster does; and
// returns how many dependents it deleted although every owner exists, within gcObservation, and the
// controller manager, which runs until the test ends. With untilHarm it stops counting
// harmSettling after the first wrong deletion.
func wronglyCollected(t *testing.T, cluster *testcluster.Cluster, namespace, version, kubeconfig string, untilHarm bool) (deleted int, within time.Duration, m *testcluster.Process) {
	t.Helper()
	objects := newClusterObjects(cluster)
	m = startControllerManager(t, cluster, "kcm-"+namespace, version, kubeconfig)
	waitCollecting(t, m)
	objects.createOwnedConfigMaps(t, namespace)
	start := time.Now()
	count := func() int {
		dependents, owners := objects.counts(t, namespace)
		if owners != ownedObjects {
			t.Fatalf("%d of %d owners left; the scenario deletes none", owners, ownedObjects)
		}
		return ownedObjects - dependents
	}
	for time.Since(start) < gcObservation {
		time.Sleep(time.Second)
		if deleted = count(); untilHarm && deleted > 0 {
			time.Sleep(harmSettling)
			return count(), time.Since(start), m
		}
	}
	return deleted, time.Since(start), m
}

// requireGarbageCollected deletes every owner and waits until the garbage collector has deleted
// every dependent: protecting live owners must not stop collection.
func requireGarbageCollected(t *testing.T, cluster *testcluster.Cluster, namespace string) {
	t.Helper()
	objects := newClusterObjects(cluster)
	background := metav1.DeletePropagationBackground
	if err := objects.skewed.Namespace(namespace).DeleteCollection(context.Background(), metav1.DeleteOptions{PropagationPolicy: &background}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "every dependent collected", collectTimeout, 200*time.Millisecond, func() error {
		if dependents, _ := objects.counts(t, namespace); dependents > 0 {
			return fmt.Errorf("%d dependents left", dependents)
		}
		return nil
	})
	t.Logf("after the owners were deleted, all %d dependents were collected in %s", ownedObjects, time.Since(start).Round(100*time.Millisecond))
}

// namespaceLeftovers deletes a namespace holding ownedObjects LeaseCandidates (skewed) and as
// many ConfigMaps (common) while kube-controller-manager version runs with kubeconfig, waits until
// the namespace is gone, and returns what is left of its objects in storage.
func namespaceLeftovers(t *testing.T, cluster *testcluster.Cluster, namespace, version, kubeconfig string) (configMaps, leaseCandidates int) {
	t.Helper()
	objects := newClusterObjects(cluster)
	objects.createNamespace(t, namespace)
	for i := range ownedObjects {
		objects.createLeaseCandidate(t, namespace, fmt.Sprintf("skewed-%d", i))
		objects.createConfigMap(t, namespace, fmt.Sprintf("common-%d", i))
	}
	startControllerManager(t, cluster, "kcm-"+namespace, version, kubeconfig)
	ctx := context.Background()
	if err := objects.kube.CoreV1().Namespaces().Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	eventually(t, "namespace "+namespace+" gone", collectTimeout, 200*time.Millisecond, func() error {
		ns, err := objects.kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		}
		return fmt.Errorf("phase %s, conditions %v", ns.Status.Phase, ns.Status.Conditions)
	})
	configMaps, leaseCandidates = objects.counts(t, namespace)
	t.Logf("namespace %s gone %s after its deletion; left in storage: %d of %d LeaseCandidates, %d of %d ConfigMaps",
		namespace, time.Since(start).Round(100*time.Millisecond), leaseCandidates, ownedObjects, configMaps, ownedObjects)
	return configMaps, leaseCandidates
}

// baselineAttempts bounds the baseline's tries. Whether a garbage collector behind a round-robin
// proxy does harm depends on which servers answered its discovery requests: it deletes dependents
// when the API list it monitors lacks the owners' API while its REST mapper (a separate discovery
// request) knows it, so that it looks each owner up and the lookup lands on a server that answers
// 404. Roughly every second start does harm within gcObservation.
const baselineAttempts = 8

func TestBaselineGarbageCollectorThroughRoundRobinDeletesDependentsOfLiveOwners(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	rr := newRoundRobinProxy(t, cluster)
	kubeconfig := componentKubeconfig(t, cluster, rr.URL, "", "")
	for attempt := 1; attempt <= baselineAttempts; attempt++ {
		deleted, within, m := wronglyCollected(t, cluster, fmt.Sprintf("gc-round-robin-%d", attempt), testcluster.KubeVersion136, kubeconfig, true)
		m.Stop(controllerManagerStopGrace) // the next start must be the only controller manager
		t.Logf("baseline, start %d of kube-controller-manager %s through a per-request round-robin proxy: deleted %d of %d dependents whose owners exist, within %s",
			attempt, testcluster.KubeVersion136, deleted, ownedObjects, within.Round(time.Second))
		if deleted > 0 {
			return
		}
	}
	t.Fatalf("the garbage collector did no harm through the round-robin proxy in %d starts: the scenario does not reproduce the bug it guards against", baselineAttempts)
}

func TestBaselineNamespaceDeletionOnTheOldServerLeavesSkewedObjectsBehind(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	old := cluster.Server(skewedOld)
	configMaps, leftovers := namespaceLeftovers(t, cluster, "ns-direct-old", testcluster.KubeVersion135,
		componentKubeconfig(t, cluster, old.URL, cluster.PKI().Files.CACert, testcluster.ServingServerName))
	t.Logf("baseline: kube-controller-manager %s on its node's %s server directly left %d of %d LeaseCandidates in storage",
		testcluster.KubeVersion135, old.Version, leftovers, ownedObjects)
	if configMaps != 0 {
		t.Errorf("%d ConfigMaps left: the namespace controller did not even delete what its server serves", configMaps)
	}
	if leftovers == 0 {
		t.Fatal("the namespace controller left nothing behind on the old server: the scenario does not reproduce the bug it guards against")
	}
}

func TestGarbageCollectorThroughSkewgateKeepsDependentsOfLiveOwners(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	t.Run("load balancer", func(t *testing.T) {
		g := startSkewgate(t, cluster, gatewayConfig{})
		deleted, within, _ := wronglyCollected(t, cluster, "gc-skewgate-lb", testcluster.KubeVersion136, componentKubeconfig(t, cluster, g.URL, g.servingCAFile, ""), false)
		t.Logf("kube-controller-manager %s through skewgate (load balancer) deleted %d of %d dependents whose owners exist, within %s",
			testcluster.KubeVersion136, deleted, ownedObjects, within.Round(time.Second))
		if deleted != 0 {
			t.Fatalf("%d dependents of live owners deleted", deleted)
		}
		requireGarbageCollected(t, cluster, "gc-skewgate-lb")
	})
	t.Run("node-local next to the old server", func(t *testing.T) {
		n := newKubeadmNode(t, cluster, skewedOld)
		g := n.startNodeLocalSkewgate(t)
		n.pointComponentsAt(t, g.port)
		deleted, within, _ := wronglyCollected(t, cluster, "gc-skewgate-node-local", testcluster.KubeVersion135, n.kubeconfig("controller-manager.conf"), false)
		t.Logf("kube-controller-manager %s through node-local skewgate next to the %s server deleted %d of %d dependents whose owners exist, within %s",
			testcluster.KubeVersion135, n.local.Version, deleted, ownedObjects, within.Round(time.Second))
		if deleted != 0 {
			t.Fatalf("%d dependents of live owners deleted", deleted)
		}
		requireGarbageCollected(t, cluster, "gc-skewgate-node-local")
		t.Logf("node-local skewgate with %d servers: resident memory %.1f MiB", len(cluster.Servers()), float64(g.residentMemory(t))/(1<<20))
	})
}

func TestNamespaceDeletionThroughNodeLocalSkewgateLeavesNothingBehind(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	n := newKubeadmNode(t, cluster, skewedOld)
	g := n.startNodeLocalSkewgate(t)
	n.pointComponentsAt(t, g.port)
	configMaps, leftovers := namespaceLeftovers(t, cluster, "ns-skewgate-node-local", testcluster.KubeVersion135, n.kubeconfig("controller-manager.conf"))
	if configMaps != 0 || leftovers != 0 {
		t.Fatalf("left in storage: %d ConfigMaps, %d LeaseCandidates; want none", configMaps, leftovers)
	}
}

func TestControllerManagerKeepsItsOwnIdentityThroughNodeLocalSkewgate(t *testing.T) {
	cluster := sharedSkewed.get(t)
	n := newKubeadmNode(t, cluster, skewedOld)
	g := n.startNodeLocalSkewgate(t)
	n.pointComponentsAt(t, g.port)
	for _, c := range []struct{ conf, user string }{
		{"controller-manager.conf", testcluster.ControllerManagerUser},
		{"scheduler.conf", "system:kube-scheduler"},
	} {
		rc, err := clientcmd.BuildConfigFromFlags("", n.kubeconfig(c.conf))
		if err != nil {
			t.Fatal(err)
		}
		review, err := kubernetes.NewForConfigOrDie(rc).AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: SelfSubjectReview through node-local skewgate: %v", c.conf, err)
		}
		if got := review.Status.UserInfo.Username; got != c.user {
			t.Errorf("%s: authenticated as %q through node-local skewgate; want %q from its client certificate", c.conf, got, c.user)
		}
	}
}
