// Package rehearsal runs kubeadm high-availability upgrades the way users run them, on real
// nodes (host/testcluster/kubenode), with real controllers and kubelets working throughout, and
// counts the harms a version-skewed control plane does: dependents the garbage collector
// wrongly deletes, objects a namespace deletion leaves behind, client requests that fail,
// false 404s and 400s, interrupted watches, Pods that fail to start, and the upgrade's wall
// time. What serves the control-plane endpoint is the scenario's: a plain round-robin proxy or
// TCP load balancer (the baselines) or skewgate.
package rehearsal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// Scenario is one rehearsal: the versions, and what serves the control-plane endpoint.
type Scenario struct {
	From, To string
	Kinds    NewKinds
	// Endpoint starts what serves kubenode.ControlPlaneEndpoint at the bridge's address, in front
	// of nodes, before the first node initialises the cluster.
	Endpoint func(ctx context.Context, c *kubenode.Cluster, nodes []*kubenode.Node, log testcluster.Logger) (io.Closer, error)
	// NodeLocal, if set, installs what serves each control-plane node's own components, on every
	// node once the cluster is formed and before the workloads start.
	NodeLocal func(ctx context.Context, n *kubenode.Node, log testcluster.Logger) error
	// ControllersThroughEndpoint points every kube-controller-manager at the control-plane
	// endpoint instead of its node's own API server: the clusters kubeadm made before 1.19.1
	// (kubernetes/kubernetes#94398 moved them to the local server; upgrades keep the files), and
	// every installation whose controllers use the load balancer.
	ControllersThroughEndpoint bool
}

// Baseline is the endpoint users have today: a per-request round-robin L7 proxy.
func Baseline(_ context.Context, c *kubenode.Cluster, nodes []*kubenode.Node, log testcluster.Logger) (io.Closer, error) {
	return StartRoundRobinProxy(c.Network, nodes[0], nodes, log)
}

// TCPBaseline is the endpoint kubeadm's high-availability guide sets up: a TCP load balancer
// that keeps each client connection on the server it was given.
func TCPBaseline(_ context.Context, c *kubenode.Cluster, nodes []*kubenode.Node, log testcluster.Logger) (io.Closer, error) {
	return StartTCPBalancer(c.Network, nodes[0], nodes, log)
}

var nodeNames = []string{"cp-1", "cp-2", "cp-3"}

const (
	// afterUpgrade is how long the load and the observers go on once the last node is upgraded.
	afterUpgrade = 20 * time.Second
	// namespaceGoneTimeout bounds the deletion of the deleted namespace.
	namespaceGoneTimeout = 3 * time.Minute
	// podRestartTimeout bounds the restart of the workload Pod on an upgraded node.
	podRestartTimeout = 3 * time.Minute
	// kubectlAttempts is how often the procedure runs kubectl drain or uncordon before giving
	// up, as an operator would run it again after a transient failure.
	kubectlAttempts = 5
	podPollInterval = 2 * time.Second
	// newKindsTimeout bounds how long the new kinds' workloads may go on after the upgrade.
	newKindsTimeout = 2 * time.Minute
)

// ignoredPreflightErrors are kubeadm's checks that cannot pass on these nodes: the kernel
// configuration check on cgroup v1; the upgrade's health checks that need Ready nodes (no pod
// network is installed, so nodes stay NotReady; host-network Pods run regardless); the CoreDNS
// migration checks, which fail on a cluster without CoreDNS (its start version is empty);
// and the image check of a cluster made by kubeadm before 1.31, which cannot record that CoreDNS
// and kube-proxy are not installed and looks for their images, which are not built here.
var ignoredPreflightErrors = "SystemVerification,ControlPlaneNodesReady,CreateJob,CoreDNSUnsupportedPlugins,CoreDNSMigration,ImagePull"

// rehearsal is one run's state.
type rehearsal struct {
	s       Scenario
	log     testcluster.Logger
	cluster *kubenode.Cluster
	nodes   []*kubenode.Node
	direct  []*kubernetes.Clientset
	client  *endpointClient
	tally   *tally
	patches string

	mu sync.Mutex
	// versions holds each node's API server's version while it is ready, "" while it is down
	// or not ready.
	versions map[string]string
	// sampled is when each node's latest finished sample was sent.
	sampled map[string]time.Time
	// noCapableAt is when the latest sample that found no ready server able to serve the
	// common resources (false) or the new ones (true) was sent: a server that does not answer
	// is down from then on, however long its sample waited.
	noCapableAt map[bool]time.Time
	// downAt is when the latest sample that found a node's API server not ready was sent.
	downAt   time.Time
	podFails map[string]string
}

// Run runs the scenario from a cluster of three control-plane nodes at s.From to all of them at
// s.To, and returns what it counted. It needs root.
func Run(ctx context.Context, log testcluster.Logger, s Scenario) (counts Counts, err error) {
	r := &rehearsal{s: s, log: log, versions: map[string]string{}, sampled: map[string]time.Time{}, noCapableAt: map[bool]time.Time{},
		podFails: map[string]string{}}
	r.tally = newTally(r.phase)
	if r.cluster, err = kubenode.New(ctx, log); err != nil {
		return counts, err
	}
	defer func() { err = errors.Join(err, r.cluster.Close()) }()
	if r.patches, err = os.MkdirTemp("", "rehearsal-patches-"); err != nil {
		return counts, err
	}
	defer os.RemoveAll(r.patches)
	if err := writeAPIServerPatch(r.patches, s.Kinds.APIServerArgs); err != nil {
		return counts, err
	}
	for _, name := range nodeNames {
		n, err := r.cluster.AddNode(ctx, name, s.From)
		if err != nil {
			return counts, err
		}
		r.nodes = append(r.nodes, n)
	}
	if err := r.cluster.SetControlPlaneEndpoint(r.cluster.Network.BridgeAddress()); err != nil {
		return counts, err
	}
	endpoint, err := s.Endpoint(ctx, r.cluster, r.nodes, log)
	if err != nil {
		return counts, err
	}
	defer endpoint.Close()
	if err := r.form(ctx); err != nil {
		return counts, err
	}
	if s.NodeLocal != nil {
		for _, n := range r.nodes {
			if err := s.NodeLocal(ctx, n, log); err != nil {
				return counts, err
			}
		}
	}
	if s.ControllersThroughEndpoint {
		for _, n := range r.nodes {
			if err := controllerManagerThroughEndpoint(ctx, n); err != nil {
				return counts, err
			}
		}
	}
	return r.rehearse(ctx)
}

// writeAPIServerPatch writes the kubeadm patch that gives the upgraded API servers args.
func writeAPIServerPatch(dir string, args []string) error {
	var ops []string
	for _, a := range args {
		ops = append(ops, `{"op":"add","path":"/spec/containers/0/command/-","value":`+strconv.Quote(a)+`}`)
	}
	return os.WriteFile(filepath.Join(dir, "kube-apiserver0+json.json"), []byte("["+strings.Join(ops, ",")+"]"), 0o644)
}

// form makes the three-node control plane and the clients.
func (r *rehearsal) form(ctx context.Context) error {
	start := time.Now()
	if err := r.nodes[0].Init(ctx); err != nil {
		return err
	}
	if err := r.nodes[0].WaitControlPlane(ctx); err != nil {
		return err
	}
	for _, n := range r.nodes[1:] {
		if err := n.JoinControlPlane(ctx); err != nil {
			return err
		}
		if err := n.WaitControlPlane(ctx); err != nil {
			return err
		}
	}
	r.log.Logf("three control-plane nodes of %s up in %s", r.s.From, time.Since(start).Round(time.Second))
	for _, n := range r.nodes {
		config, err := n.AdminConfig()
		if err != nil {
			return err
		}
		config.Timeout = 15 * time.Second
		cs, err := kubernetes.NewForConfig(config)
		if err != nil {
			return err
		}
		r.direct = append(r.direct, cs)
	}
	config, err := r.nodes[0].AdminConfig()
	if err != nil {
		return err
	}
	config.Host = "https://" + kubenode.ControlPlaneEndpoint + ":" + strconv.Itoa(kubenode.APIServerPort)
	transport, err := rest.TransportFor(config)
	if err != nil {
		return err
	}
	r.client = &endpointClient{http: &http.Client{Transport: transport}, base: config.Host, tally: r.tally,
		noCapableServerAround: r.noCapableServerAround, serverDownAround: r.serverDownAround}
	return nil
}

// controllerManagerThroughEndpoint points n's kube-controller-manager at the control-plane
// endpoint and restarts its container; the kubelet starts it again with the new kubeconfig.
func controllerManagerThroughEndpoint(ctx context.Context, n *kubenode.Node) error {
	path := n.HostPath("/etc/kubernetes/controller-manager.conf")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	local := fmt.Sprintf("server: https://%s:%d", n.IP, kubenode.APIServerPort)
	if !strings.Contains(string(data), local) {
		return fmt.Errorf("node %s: controller-manager.conf does not name %s", n.Name, local)
	}
	endpoint := fmt.Sprintf("server: https://%s:%d", kubenode.ControlPlaneEndpoint, kubenode.APIServerPort)
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), local, endpoint, 1)), 0o600); err != nil {
		return err
	}
	ids, err := n.Run(ctx, "crictl", "ps", "--quiet", "--name", "kube-controller-manager")
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(string(ids)) {
		if _, err := n.Run(ctx, "crictl", "stop", id); err != nil {
			return err
		}
	}
	return n.WaitControlPlane(ctx)
}

// observe runs f against the first node's API server that answers, talking to it directly: the
// rehearsal's own view, apart from the endpoint under test.
func (r *rehearsal) observe(f func(*kubernetes.Clientset) error) error {
	var errs []error
	for _, cs := range r.direct {
		err := f(cs)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// sampleInterval is how often the rehearsal asks each node's API server whether it is ready:
// several times within a load balancer's probe interval, so that a restart's moments of refused
// connections are seen.
const sampleInterval = 250 * time.Millisecond

// probeLag is how old the view a load balancer routes by may be: skewgate's and the baseline
// proxy's probes come once a second, and one more for the probe in flight.
const probeLag = 2 * time.Second

// watchVersions records every sampleInterval which version each node's API server answers
// with while its /readyz answers 200, as a load balancer's readiness probe sees it.
func (r *rehearsal) watchVersions(ctx context.Context, wg *sync.WaitGroup) {
	for i, n := range r.nodes {
		wg.Go(func() {
			for ctx.Err() == nil {
				sent := time.Now()
				answered := ""
				if _, err := r.direct[i].Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err == nil {
					if v, err := r.direct[i].Discovery().ServerVersion(); err == nil {
						answered = v.GitVersion
					}
				}
				r.mu.Lock()
				if previous, seen := r.versions[n.Name]; !seen || previous != answered {
					r.log.Logf("node %s: API server ready as %q (sampled at %s)", n.Name, answered, sent.Format(logTime))
				}
				if answered == "" && sent.After(r.downAt) {
					r.downAt = sent
				}
				r.versions[n.Name] = answered
				r.sampled[n.Name] = sent
				for _, new := range []bool{false, true} {
					if !r.capableLocked(new) && sent.After(r.noCapableAt[new]) {
						r.noCapableAt[new] = sent
					}
				}
				r.mu.Unlock()
				sleep(ctx, sampleInterval)
			}
		})
	}
}

// phase is what each node's API server answers, in the nodes' order ("cp-1=v1.35.4 cp-2= …").
func (r *rehearsal) phase() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, n := range r.nodes {
		parts = append(parts, n.Name+"="+r.versions[n.Name])
	}
	return strings.Join(parts, " ")
}

// noCapableServerAround says whether no ready server could serve the rehearsal's common
// resources (new false) or new ones (new true) at some time around a request sent at sent and
// just answered: a 503 with Retry-After is then the truth. The window opens probeLag before the
// request, since a load balancer routes by probes that old, and closes with the first samples
// sent after the answer, which it waits for (at most maxJudgeWait): a server that refused
// connections between two samples, or stopped answering, is seen down only by them.
func (r *rehearsal) noCapableServerAround(ctx context.Context, new bool, sent time.Time) bool {
	r.awaitSamplesAfter(ctx, time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.capableLocked(new) || !r.noCapableAt[new].Before(sent.Add(-probeLag))
}

// serverDownAround says whether some node's API server was not ready at some time around a
// request sent at sent and just answered, the window of noCapableServerAround: kubeadm then
// restarts that node's etcd or server, and a write may fail anywhere meanwhile (kube-apiserver
// answers 500 "etcdserver: request timed out, possibly due to previous leader failure" for a
// proposal dropped when the leader hands over, 504 when its own etcd stopped under it).
func (r *rehearsal) serverDownAround(ctx context.Context, sent time.Time) bool {
	r.awaitSamplesAfter(ctx, time.Now())
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.downAt.Before(sent.Add(-probeLag))
}

// awaitSamplesAfter waits until every node has finished a sample sent after t, at most
// maxJudgeWait.
func (r *rehearsal) awaitSamplesAfter(ctx context.Context, t time.Time) {
	for deadline := t.Add(maxJudgeWait); ctx.Err() == nil && time.Now().Before(deadline) && !r.sampledSince(t); {
		sleep(ctx, sampleInterval/5)
	}
}

// maxJudgeWait bounds how long a 503 waits for the samples that judge it: a sample of a server
// that does not answer ends with its client's time-out.
const maxJudgeWait = 35 * time.Second

// sampledSince says whether every node has finished a sample sent after t.
func (r *rehearsal) sampledSince(t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.nodes {
		if !r.sampled[n.Name].After(t) {
			return false
		}
	}
	return true
}

// capableLocked says whether a ready server serves the rehearsal's resources (new ones only
// from s.To); r.mu is held.
func (r *rehearsal) capableLocked(new bool) bool {
	for _, v := range r.versions {
		if v != "" && (!new || v == r.s.To) {
			return true
		}
	}
	return false
}

// servicesNotRead is the kubelet's reason not to start a Pod with service links before it has
// listed the Services.
const servicesNotRead = "services have not yet been read at least once"

// failedWaitingReasons are the container states of a Pod that failed to start.
var failedWaitingReasons = []string{
	"CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff",
	"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
}

// watchPods records every Pod that shows a failure to start, polling all namespaces.
func (r *rehearsal) watchPods(ctx context.Context, wg *sync.WaitGroup) {
	wg.Go(func() {
		for ctx.Err() == nil {
			_ = r.observe(func(cs *kubernetes.Clientset) error {
				pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
				if err != nil {
					return err
				}
				for _, p := range pods.Items {
					r.recordPod(p)
				}
				return nil
			})
			sleep(ctx, podPollInterval)
		}
	})
}

// upgradeHealthCheck names the Pods of the Job kubeadm upgrade creates for its CreateJob check,
// which is among ignoredPreflightErrors: on these nodes its Pod may fail whatever serves the
// endpoint, so it is none of the rehearsal's Pods.
const upgradeHealthCheck = "upgrade-health-check-"

func isUpgradeHealthCheck(namespace, name string) bool {
	return namespace == metav1.NamespaceSystem && strings.HasPrefix(name, upgradeHealthCheck)
}

func (r *rehearsal) recordPod(p corev1.Pod) {
	if isUpgradeHealthCheck(p.Namespace, p.Name) {
		return
	}
	name := p.Namespace + "/" + p.Name
	reason := ""
	if p.Status.Phase == corev1.PodFailed {
		reason = "Failed: " + p.Status.Reason
	}
	for _, s := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
		if w := s.State.Waiting; w != nil && slices.Contains(failedWaitingReasons, w.Reason) {
			reason = w.Reason + ": " + firstLine([]byte(w.Message))
		}
	}
	if reason == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.podFails[name]; !seen {
		r.podFails[name] = reason
		r.log.Logf("pod %s failed to start: %s", name, reason)
	}
}

// rehearse sets up the workloads, upgrades every node by kubeadm's procedure while they run,
// and counts.
func (r *rehearsal) rehearse(ctx context.Context) (Counts, error) {
	var counts Counts
	for _, ns := range []string{loadNamespace, dependentNamespace, deletedNamespace, podNamespace} {
		if err := r.observe(func(cs *kubernetes.Clientset) error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return counts, err
		}
	}
	if err := r.startWorkloadPods(ctx); err != nil {
		return counts, err
	}

	observeCtx, stopObserving := context.WithCancel(ctx)
	var observers sync.WaitGroup
	defer func() { stopObserving(); observers.Wait() }()
	r.watchVersions(observeCtx, &observers)
	r.watchPods(observeCtx, &observers)

	loadCtx, stopLoad := context.WithCancel(ctx)
	var load sync.WaitGroup
	defer func() { stopLoad(); load.Wait() }()
	r.client.runLoad(loadCtx, &load, "load", configMaps(loadNamespace))
	r.client.watch(loadCtx, &load, configMaps(loadNamespace))

	order, err := r.upgradeOrder(ctx)
	if err != nil {
		return counts, err
	}
	for _, n := range r.nodes {
		if err := n.Provision(ctx, r.s.To); err != nil {
			return counts, err
		}
	}

	start := time.Now()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	newKinds := make(chan error, 1)
	go func() {
		if err := r.waitNewKinds(workCtx, order[0]); err != nil {
			newKinds <- err
			return
		}
		r.log.Logf("the new kinds are served by %s, %s into the upgrade", order[0].Name, time.Since(start).Round(time.Second))
		newKinds <- r.client.newKindWorkloads(workCtx, loadCtx, &load, r.s.Kinds, &counts)
	}()
	for i, n := range order {
		steps, err := r.upgradeNode(ctx, n, i+1)
		if err != nil {
			return counts, err
		}
		counts.UpgradeSteps = append(counts.UpgradeSteps, steps...)
	}
	counts.UpgradeWallTime = time.Since(start)
	r.log.Logf("upgrade from %s to %s took %s", r.s.From, r.s.To, counts.UpgradeWallTime.Round(time.Second))
	select {
	case err := <-newKinds:
		if err != nil {
			return counts, err
		}
	case <-time.After(newKindsTimeout):
		return counts, fmt.Errorf("the new kinds' workloads did not finish within %s of the upgrade's end", newKindsTimeout)
	}
	sleep(ctx, afterUpgrade)
	stopLoad()
	load.Wait()
	r.tally.into(&counts)

	if err := r.countLeftovers(ctx, &counts); err != nil {
		return counts, err
	}
	if err := r.countFailedPodEvents(ctx); err != nil {
		return counts, err
	}
	stopObserving()
	observers.Wait()
	r.mu.Lock()
	counts.PodsFailedToStart = r.podFails
	r.mu.Unlock()
	for _, why := range counts.PodsFailedToStart {
		if strings.Contains(why, servicesNotRead) {
			counts.ServiceLinkFailures++
		}
	}
	for _, failure := range r.tally.failures {
		r.log.Logf("at %s", failure)
	}
	for _, key := range slices.Sorted(maps.Keys(r.tally.byPhase)) {
		r.log.Logf("%s: %d", key, r.tally.byPhase[key])
	}
	return counts, nil
}

// upgradeOrder puts the node of the leading kube-controller-manager last: the leader stays an
// old one while the other nodes are upgraded, as in every upgrade that does not start on the
// leader's node, so that the old controllers act on the cluster while the new servers serve
// kinds the old ones do not.
func (r *rehearsal) upgradeOrder(ctx context.Context) ([]*kubenode.Node, error) {
	var holder string
	if err := r.observe(func(cs *kubernetes.Clientset) error {
		lease, err := cs.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "kube-controller-manager", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if lease.Spec.HolderIdentity == nil {
			return errors.New("kube-controller-manager's lease has no holder")
		}
		holder, _, _ = strings.Cut(*lease.Spec.HolderIdentity, "_")
		return nil
	}); err != nil {
		return nil, err
	}
	order := slices.Clone(r.nodes)
	i := slices.IndexFunc(order, func(n *kubenode.Node) bool { return n.Name == holder })
	if i < 0 {
		return nil, fmt.Errorf("kube-controller-manager's leader %q is no node", holder)
	}
	leader := order[i]
	order = append(slices.Delete(order, i, i+1), leader)
	r.log.Logf("kube-controller-manager leads on %s; upgrade order %s, %s, %s", holder, order[0].Name, order[1].Name, order[2].Name)
	return order, nil
}

// waitNewKinds waits until n's API server serves both new kinds.
func (r *rehearsal) waitNewKinds(ctx context.Context, n *kubenode.Node) error {
	cs := r.direct[slices.Index(r.nodes, n)]
	for {
		ok := true
		for _, gvr := range r.s.Kinds.Discovery {
			list, err := cs.Discovery().ServerResourcesForGroupVersion(gvr[0])
			if err != nil || !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == gvr[1] }) {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// upgradeNode follows kubeadm's upgrade procedure on one control-plane node: upgrade kubeadm,
// `kubeadm upgrade apply` on the first node and `kubeadm upgrade node` on the others, drain,
// upgrade the kubelet and kubectl, restart the kubelet, uncordon. The node's workload Pod is
// restarted once the new kubelet runs. n is the nth node upgraded; its steps are returned.
func (r *rehearsal) upgradeNode(ctx context.Context, n *kubenode.Node, nth int) ([]UpgradeStep, error) {
	start := time.Now()
	clock := &stepClock{node: nth, last: start}
	if err := n.UseBinaries(r.s.To, testcluster.Kubeadm); err != nil {
		return nil, err
	}
	argv := []string{"kubeadm", "upgrade", "node"}
	if nth == 1 {
		argv = []string{"kubeadm", "upgrade", "apply", r.s.To, "--yes"}
	}
	argv = append(argv, "--patches", r.patches, "--ignore-preflight-errors", ignoredPreflightErrors, "--v=1")
	kubeadm, err := runKubeadmUpgrade(ctx, n, argv, clock.last)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	now := time.Now()
	clock.steps = kubeadm.upgradeSteps(nth, now)
	r.log.Logf("node %s: %s took %s: %s", n.Name, strings.Join(argv[:3], " "), now.Sub(clock.last).Round(time.Second), joinSteps(clock.steps))
	clock.last = now
	if r.s.ControllersThroughEndpoint {
		conf, err := os.ReadFile(n.HostPath("/etc/kubernetes/controller-manager.conf"))
		if err != nil {
			return nil, err
		}
		if !strings.Contains(string(conf), kubenode.ControlPlaneEndpoint) {
			return nil, fmt.Errorf("node %s: kubeadm pointed kube-controller-manager back at another server", n.Name)
		}
	}
	if err := r.kubectl(ctx, n, "drain", n.Name, "--ignore-daemonsets", "--timeout=3m"); err != nil {
		return nil, err
	}
	clock.done("drain")
	if err := n.UseBinaries(r.s.To, testcluster.KubeletComponent, testcluster.Kubectl); err != nil {
		return nil, err
	}
	n.RestartKubelet()
	restarted := time.Now()
	// The node's workload starts again as soon as its new kubelet runs (a DaemonSet's Pods
	// tolerate the cordon), when the kubelet has read the least.
	old, err := r.deleteWorkloadPod(ctx, n)
	if err != nil {
		return nil, err
	}
	if err := r.waitKubelet(ctx, n); err != nil {
		return nil, err
	}
	clock.done("new kubelet reported")
	r.waitReplacedWorkloadPod(ctx, n, old, restarted)
	clock.done("workload Pod running")
	if err := r.kubectl(ctx, n, "uncordon", n.Name); err != nil {
		return nil, err
	}
	clock.done("uncordon")
	if err := n.WaitControlPlane(ctx); err != nil {
		return nil, err
	}
	clock.done("control plane ready")
	r.log.Logf("node %s upgraded to %s in %s", n.Name, r.s.To, time.Since(start).Round(time.Second))
	return clock.steps, nil
}

// kubectl runs kubectl with args on n, again after a failure up to kubectlAttempts times: a step
// of the procedure may meet a server that refuses it for a moment (behind the TCP balancer,
// `kubectl uncordon` was once answered 403 for the cluster admin while a node's server restarted).
func (r *rehearsal) kubectl(ctx context.Context, n *kubenode.Node, args ...string) error {
	var err error
	for range kubectlAttempts {
		if _, err = n.Run(ctx, append([]string{"kubectl"}, args...)...); err == nil {
			return nil
		}
		r.log.Logf("node %s: kubectl %s failed, again: %v", n.Name, args[0], err)
		sleep(ctx, 5*time.Second)
	}
	return err
}

// waitKubelet waits until the node reports the kubelet of s.To.
func (r *rehearsal) waitKubelet(ctx context.Context, n *kubenode.Node) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var got string
		err := r.observe(func(cs *kubernetes.Clientset) error {
			node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err == nil {
				got = node.Status.NodeInfo.KubeletVersion
			}
			return err
		})
		if err == nil && got == r.s.To {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s reports kubelet %q, not %s: %v", n.Name, got, r.s.To, err)
		}
		sleep(ctx, time.Second)
	}
}

// workloadPod is the DaemonSet whose Pod runs on every node: host network, service links on (the
// kubelet builds their environment from the Services it has read), the pause image.
func workloadDaemonSet(image string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "rehearsal-links"}
	links, automount := true, false
	grace := int64(1)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "rehearsal-links", Namespace: podNamespace},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:                   true,
					EnableServiceLinks:            &links,
					AutomountServiceAccountToken:  &automount,
					TerminationGracePeriodSeconds: &grace,
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers:                    []corev1.Container{{Name: "pause", Image: image, ImagePullPolicy: corev1.PullIfNotPresent}},
				},
			},
		},
	}
}

// startWorkloadPods starts the workload DaemonSet and waits until its Pod runs on every node.
func (r *rehearsal) startWorkloadPods(ctx context.Context) error {
	out, err := r.nodes[0].Run(ctx, "kubeadm", "config", "images", "list", "--kubernetes-version", r.s.From, "--image-repository", kubenode.ImageRepository)
	if err != nil {
		return err
	}
	image := ""
	for _, ref := range strings.Fields(string(out)) {
		if strings.HasPrefix(ref, kubenode.ImageRepository+"/pause:") {
			image = ref
		}
	}
	if err := r.observe(func(cs *kubernetes.Clientset) error {
		_, err := cs.AppsV1().DaemonSets(podNamespace).Create(ctx, workloadDaemonSet(image), metav1.CreateOptions{})
		return err
	}); err != nil {
		return err
	}
	for _, n := range r.nodes {
		if _, err := r.waitWorkloadPod(ctx, n, ""); err != nil {
			return err
		}
	}
	return nil
}

// waitWorkloadPod waits until a workload Pod other than the one of UID old runs on n.
func (r *rehearsal) waitWorkloadPod(ctx context.Context, n *kubenode.Node, old string) (string, error) {
	deadline := time.Now().Add(podRestartTimeout)
	for {
		var running string
		err := r.observe(func(cs *kubernetes.Clientset) error {
			pods, err := cs.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
			if err != nil {
				return err
			}
			for _, p := range pods.Items {
				if string(p.UID) != old && p.Status.Phase == corev1.PodRunning {
					running = string(p.UID)
				}
			}
			return nil
		})
		if err == nil && running != "" {
			return running, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("node %s: no workload pod running after %s: %v", n.Name, podRestartTimeout, err)
		}
		sleep(ctx, time.Second)
	}
}

// deleteWorkloadPod deletes n's workload Pod at once (no grace: its kubelet is restarting), so
// that the DaemonSet's replacement is the new kubelet's to start, and returns the deleted Pod's
// UID.
func (r *rehearsal) deleteWorkloadPod(ctx context.Context, n *kubenode.Node) (string, error) {
	var old string
	err := r.observe(func(cs *kubernetes.Clientset) error {
		pods, err := cs.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return err
		}
		now := int64(0)
		for _, p := range pods.Items {
			old = string(p.UID)
			if err := cs.CoreV1().Pods(podNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil {
				return err
			}
		}
		return nil
	})
	return old, err
}

// waitReplacedWorkloadPod waits for the replacement of n's workload Pod old to run; a
// replacement that fails to start is recorded by watchPods, and one that never runs is recorded
// here.
func (r *rehearsal) waitReplacedWorkloadPod(ctx context.Context, n *kubenode.Node, old string, since time.Time) {
	if _, err := r.waitWorkloadPod(ctx, n, old); err != nil {
		r.mu.Lock()
		r.podFails[podNamespace+"/on-"+n.Name] = "never ran: " + err.Error()
		r.mu.Unlock()
		return
	}
	r.log.Logf("node %s: workload pod running again %s after the kubelet restart", n.Name, time.Since(since).Round(time.Second))
}

// countLeftovers counts the dependents that are gone though their owners exist, and, once the
// deleted namespace is gone, the objects of the new kind it left in storage.
func (r *rehearsal) countLeftovers(ctx context.Context, counts *Counts) error {
	if err := r.observe(func(cs *kubernetes.Clientset) error {
		cms, err := cs.CoreV1().ConfigMaps(dependentNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		present := 0
		for _, cm := range cms.Items {
			if strings.HasPrefix(cm.Name, "dependent-") {
				present++
			}
		}
		counts.DependentsWronglyDeleted = counts.DependentsCreated - present
		return nil
	}); err != nil {
		return err
	}
	deadline := time.Now().Add(namespaceGoneTimeout)
	for {
		gone := false
		err := r.observe(func(cs *kubernetes.Clientset) error {
			_, err := cs.CoreV1().Namespaces().Get(ctx, deletedNamespace, metav1.GetOptions{})
			if err == nil {
				return nil
			}
			if apierrors.IsNotFound(err) {
				gone = true
				return nil
			}
			return err
		})
		if err == nil && gone {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("namespace %s still there %s after the upgrade: %v", deletedNamespace, namespaceGoneTimeout, err)
		}
		sleep(ctx, time.Second)
	}
	return r.observe(func(cs *kubernetes.Clientset) error {
		var list struct {
			Items []struct{} `json:"items"`
		}
		raw, err := cs.RESTClient().Get().AbsPath(r.s.Kinds.Namespaced(deletedNamespace).collection).DoRaw(ctx)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, &list); err != nil {
			return err
		}
		counts.ObjectsLeftByNamespaceDeletion = len(list.Items)
		return nil
	})
}

// countFailedPodEvents adds the Pods whose kubelet reported a failure to start them, which may
// have passed between two polls.
func (r *rehearsal) countFailedPodEvents(ctx context.Context) error {
	return r.observe(func(cs *kubernetes.Clientset) error {
		events, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "type=Warning,involvedObject.kind=Pod"})
		if err != nil {
			return err
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, e := range events.Items {
			if e.Reason != "Failed" || isUpgradeHealthCheck(e.InvolvedObject.Namespace, e.InvolvedObject.Name) {
				continue
			}
			name := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
			if _, seen := r.podFails[name]; !seen {
				r.podFails[name] = "event Failed: " + firstLine([]byte(e.Message))
			}
		}
		return nil
	})
}
