package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubeadmskewgate"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// leaderLeases are the leader-election leases of the control-plane components that skewgate's
// node-local static Pod serves.
var leaderLeases = []string{"kube-controller-manager", "kube-scheduler"}

// endpointClient is a client with kubeadm's admin credentials through the control-plane endpoint.
func endpointClient(t *testing.T, n *kubenode.Node) *kubernetes.Clientset {
	t.Helper()
	config, err := n.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	config.Host = "https://" + kubenode.ControlPlaneEndpoint + ":" + strconv.Itoa(kubenode.APIServerPort)
	config.Timeout = 15 * time.Second
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// leasesRenewedAfter waits until both leader leases were renewed after since, and returns their
// holders.
func leasesRenewedAfter(t *testing.T, ctx context.Context, client *kubernetes.Clientset, since time.Time) map[string]string {
	t.Helper()
	holders := map[string]string{}
	eventually(t, "kube-controller-manager's and kube-scheduler's leases renewed after "+since.Format(time.TimeOnly), 3*time.Minute, time.Second, func() error {
		for _, name := range leaderLeases {
			lease, err := client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if lease.Spec.RenewTime == nil || lease.Spec.HolderIdentity == nil || !lease.Spec.RenewTime.After(since) {
				return fmt.Errorf("lease %s: holder %v, renewed %v", name, lease.Spec.HolderIdentity, lease.Spec.RenewTime)
			}
			holders[name], _, _ = strings.Cut(*lease.Spec.HolderIdentity, "_")
		}
		return nil
	})
	return holders
}

// podBound creates a Pod that tolerates every taint (the nodes stay NotReady without a pod
// network) and waits until kube-scheduler has bound it to a node.
func podBound(t *testing.T, ctx context.Context, client *kubernetes.Clientset, name string) string {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:  []corev1.Container{{Name: "app", Image: kubenode.ImageRepository + "/app:none"}},
		},
	}
	eventually(t, "Pod "+name+" created", time.Minute, time.Second, func() error {
		_, err := client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	var node string
	eventually(t, "Pod "+name+" bound by kube-scheduler", 3*time.Minute, time.Second, func() error {
		p, err := client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Spec.NodeName == "" {
			return fmt.Errorf("not bound")
		}
		node = p.Spec.NodeName
		return nil
	})
	return node
}

// endpointUser asks for a SelfSubjectReview through the control-plane endpoint.
func endpointUser(t *testing.T, ctx context.Context, client *kubernetes.Clientset) string {
	t.Helper()
	var user string
	eventually(t, "a SelfSubjectReview through the endpoint", time.Minute, time.Second, func() error {
		review, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		user = review.Status.UserInfo.Username
		return nil
	})
	return user
}

// routed waits until the load balancer counts n's API server healthy, or not.
func routed(t *testing.T, ctx context.Context, lb *kubeadmskewgate.LoadBalancer, n *kubenode.Node, want bool) {
	t.Helper()
	eventually(t, fmt.Sprintf("the load balancer counting %s's API server healthy: %t", n.Name, want), 3*time.Minute, 100*time.Millisecond, func() error {
		healthy, err := lb.Routes(ctx, n)
		if err != nil {
			return err
		}
		if healthy != want {
			return fmt.Errorf("healthy: %t", healthy)
		}
		return nil
	})
}

// probeResult is one request through the endpoint.
type probeResult struct {
	at  time.Time
	err error
}

// endpointProbe sends a GET through the endpoint every interval until stopped, as a client that
// keeps working through the outage would.
type endpointProbe struct {
	mu      sync.Mutex
	results []probeResult
	stop    context.CancelFunc
	done    chan struct{}
}

func startEndpointProbe(ctx context.Context, client *kubernetes.Clientset, interval time.Duration) *endpointProbe {
	ctx, stop := context.WithCancel(ctx)
	p := &endpointProbe{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			at := time.Now()
			_, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
			if ctx.Err() != nil {
				return
			}
			p.mu.Lock()
			p.results = append(p.results, probeResult{at: at, err: err})
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	return p
}

// finish stops the probe and returns its results.
func (p *endpointProbe) finish() []probeResult {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.results)
}

// outage sums up the probe's results from since on: how many requests failed, and how long after
// since the last failed one was sent (0 when none failed).
func outage(results []probeResult, since time.Time) (sent, failed int, lastFailure time.Duration, firstErr error) {
	for _, r := range results {
		if r.at.Before(since) {
			continue
		}
		sent++
		if r.err != nil {
			failed++
			lastFailure = r.at.Sub(since)
			if firstErr == nil {
				firstErr = r.err
			}
		}
	}
	return sent, failed, lastFailure, firstErr
}

func TestKubeadmHAControlPlaneBehindSkewgateKeepsWorkingWhenOneAPIServerStops(t *testing.T) {
	besideOtherScenariosWithOwnClusters(t)
	requireSkewgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	scenarioStart := time.Now()
	c := newKubeadmCluster(ctx, t)
	dir, digest := userDeployDir(t, ctx)

	var nodes []*kubenode.Node
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		n, err := c.AddNode(ctx, name, testcluster.KubeVersion136)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}

	// The load balancer as the README starts it, then the cluster behind it.
	start := time.Now()
	lb, err := kubeadmskewgate.StartLoadBalancer(ctx, dir, skewgateBuild.binary, skewgateBuild.wasm, c, nodes, t)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the cluster's cleanup, so it runs first: the load balancer stops before
	// the network it is in.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("load balancer log:\n%s", lb.Process.LogTail(60))
		}
		if err := lb.Close(); err != nil {
			t.Errorf("stopping the load balancer: %v", err)
		}
	})
	t.Logf("certificates made and the load balancer started as the README says: %s", time.Since(start).Round(time.Second))
	start = time.Now()
	if err := nodes[0].Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].WaitControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes[1:] {
		if err := n.JoinControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("kubeadm init and two joins through skewgate to three ready control-plane nodes: %s", time.Since(start).Round(time.Second))
	for _, n := range nodes {
		if got := kubernetesDirState(t, n)["controller-manager.conf"]; !strings.Contains(got, "server https://"+n.IP.String()+":6443") {
			t.Errorf("node %s: controller-manager.conf %s, want the node's own API server", n.Name, got)
		}
	}

	// The node-local static Pod on every node, as the README installs it.
	start = time.Now()
	client := endpointClient(t, nodes[0])
	for _, n := range nodes {
		if err := kubeadmskewgate.InstallNodeLocal(ctx, dir, n, t); err != nil {
			t.Fatal(err)
		}
		skewgateReady(t, ctx, client, n.Name, digest)
	}
	t.Logf("node-local skewgate installed on three nodes as the README says: %s", time.Since(start).Round(time.Second))

	// Every component works, each client as itself: through the load balancer, and through each
	// node's skewgate.
	if got := endpointUser(t, ctx, client); got != "kubernetes-admin" {
		t.Errorf("SelfSubjectReview through the load balancer: %q, want kubernetes-admin", got)
	}
	for _, n := range nodes {
		routed(t, ctx, lb, n, true)
	}
	for _, n := range nodes {
		componentsConnectedThroughSkewgate(t, ctx, n)
		for conf, want := range map[string]string{
			"admin.conf":              "kubernetes-admin",
			"controller-manager.conf": "system:kube-controller-manager",
			"scheduler.conf":          "system:kube-scheduler",
		} {
			if got := whoAmIThrough(t, ctx, n, conf); got != want {
				t.Errorf("node %s: SelfSubjectReview with %s: %q, want %q", n.Name, conf, got, want)
			}
		}
		if err := n.WaitControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
	}
	holders := leasesRenewedAfter(t, ctx, client, time.Now())
	t.Logf("leases renewed through node-local skewgate; holders %v; Pod bound to %s", holders, podBound(t, ctx, client, "bound-before"))
	for _, n := range nodes {
		logNodeUsage(t, n)
	}
	if mem, err := lb.Process.ResidentMemory(); err == nil {
		t.Logf("load balancer: RSS %d MiB", mem.VmRSS>>20)
	}

	// One API server stops: that of the node whose kube-controller-manager leads, so that its
	// components go on only through its node's skewgate.
	victim := nodes[slices.IndexFunc(nodes, func(n *kubenode.Node) bool { return n.Name == holders["kube-controller-manager"] })]
	var survivor *kubenode.Node
	for _, n := range nodes {
		if n != victim {
			survivor = n
			break
		}
	}
	observer := nodeClient(t, survivor)
	probe := startEndpointProbe(ctx, client, 100*time.Millisecond)
	manifest := victim.HostPath("/etc/kubernetes/manifests/kube-apiserver.yaml")
	parked := victim.HostPath("/etc/kubernetes/kube-apiserver.yaml.stopped")
	stopped := time.Now()
	if err := os.Rename(manifest, parked); err != nil {
		t.Fatal(err)
	}
	routed(t, ctx, lb, victim, false)
	t.Logf("the load balancer stopped routing to %s %s after the stop", victim.Name, time.Since(stopped).Round(100*time.Millisecond))
	eventually(t, "node "+victim.Name+"'s kube-apiserver container stopped", 3*time.Minute, 200*time.Millisecond, func() error {
		out, err := victim.Run(ctx, "crictl", "ps", "-q", "--name", "kube-apiserver")
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			return fmt.Errorf("still running: %q (%v)", out, err)
		}
		return nil
	})
	gone := time.Now()
	t.Logf("node %s's kube-apiserver stopped (manifest moved away), its container gone after %s", victim.Name, gone.Sub(stopped).Round(100*time.Millisecond))

	holdersDuring := leasesRenewedAfter(t, ctx, observer, gone.Add(time.Second))
	boundTo := podBound(t, ctx, client, "bound-during")
	if got := endpointUser(t, ctx, client); got != "kubernetes-admin" {
		t.Errorf("SelfSubjectReview through the load balancer without %s's server: %q", victim.Name, got)
	}
	for _, n := range nodes {
		for conf, want := range map[string]string{"controller-manager.conf": "system:kube-controller-manager", "scheduler.conf": "system:kube-scheduler"} {
			if got := whoAmIThrough(t, ctx, n, conf); got != want {
				t.Errorf("node %s without %s's server: SelfSubjectReview with %s: %q, want %q", n.Name, victim.Name, conf, got, want)
			}
		}
	}
	// Long enough for every lease to be renewed several times without the server.
	time.Sleep(time.Until(gone.Add(30 * time.Second)))
	leasesRenewedAfter(t, ctx, observer, gone.Add(25*time.Second))
	results := probe.finish()
	sent, failed, lastFailure, firstErr := outage(results, stopped)
	t.Logf("without %s's API server: leases renewed (holders %v), Pod bound to %s; through the load balancer %d of %d requests (one every 100 ms) failed from the stop on, the last %s after it (first error: %v)",
		victim.Name, holdersDuring, boundTo, failed, sent, lastFailure.Round(100*time.Millisecond), firstErr)
	// Failures while the server shuts down are logged above; once it is gone, no request through
	// the load balancer may fail.
	if sentGone, failedGone, _, err := outage(results, gone); sentGone == 0 || failedGone > 0 {
		t.Errorf("through the load balancer without %s's API server: %d of %d requests failed (first error: %v)", victim.Name, failedGone, sentGone, err)
	}

	// Restored, the node serves again.
	start = time.Now()
	if err := os.Rename(parked, manifest); err != nil {
		t.Fatal(err)
	}
	if err := victim.WaitControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("node %s's kube-apiserver restored and ready: %s", victim.Name, time.Since(start).Round(time.Second))
	routed(t, ctx, lb, victim, true)
	t.Logf("the load balancer routes to %s again %s after the restore", victim.Name, time.Since(start).Round(100*time.Millisecond))
	leasesRenewedAfter(t, ctx, client, time.Now())
	logNodeUsage(t, victim)
	t.Logf("scenario took %s", time.Since(scenarioStart).Round(time.Second))
}
