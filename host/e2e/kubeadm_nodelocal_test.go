package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubeadmskewgate"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// These scenarios run skewgate as its users do: its image, started by a real kubelet on real
// kubeadm control-plane nodes (host/testcluster/kubenode), installed and removed by the
// commands of host/deploy/kubeadm/README.md, read from the README itself.

// skewgatePort is the static Pod's --secure-port.
const skewgatePort = "16443"

// readmeShellBlocks returns the ```sh blocks of the README's section that starts with the
// heading line, in order.
func readmeShellBlocks(t *testing.T, heading string) []string {
	t.Helper()
	blocks, err := kubeadmskewgate.ShellBlocks(filepath.Join(deployDir, kubeadmskewgate.README), heading)
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

// sourceRevision is what `make image` labels the image with: the commit, "-dirty" for a
// modified tree.
func sourceRevision(t *testing.T) string {
	t.Helper()
	head, err := exec.Command("git", "-C", repoRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	revision := strings.TrimSpace(string(head))
	if status, err := exec.Command("git", "-C", repoRoot, "status", "--porcelain").Output(); err != nil {
		t.Fatal(err)
	} else if len(bytes.TrimSpace(status)) > 0 {
		revision += "-dirty"
	}
	return revision
}

// userDeployDir is host/deploy/kubeadm as a user has it after `make image`: the files, the
// manifest pinning the image just built, and the image as build/skewgate-image.tar.
func userDeployDir(t *testing.T, ctx context.Context) (dir, digest string) {
	t.Helper()
	if skewgateBuild.err != nil {
		t.Fatal(skewgateBuild.err)
	}
	var out bytes.Buffer
	d, err := kubeadmskewgate.PrepareDeployment(ctx, deployDir, filepath.Join(t.TempDir(), "kubeadm"),
		skewgateBuild.binary, skewgateBuild.wasm, sourceRevision(t), &out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("skewgate's image: %s, %.1f MB compressed\n%s", d.Digest, float64(d.Size)/1e6, out.String())
	return d.Dir, d.Digest
}

// runReadmeBlocks runs each block in the node, in dir, as a user types it into a shell.
func runReadmeBlocks(t *testing.T, ctx context.Context, n *kubenode.Node, dir string, blocks []string) {
	t.Helper()
	if err := kubeadmskewgate.RunBlocks(ctx, n, dir, blocks, t); err != nil {
		t.Fatal(err)
	}
}

// kubernetesDirState is every file under the node's /etc/kubernetes with a digest of its
// contents; the two kubeconfigs the README edits are compared by what they say.
func kubernetesDirState(t *testing.T, n *kubenode.Node) map[string]string {
	t.Helper()
	root := n.HostPath("/etc/kubernetes")
	state := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if rel == "controller-manager.conf" || rel == "scheduler.conf" {
			cfg, err := clientcmd.Load(data)
			if err != nil {
				return err
			}
			cl := cfg.Clusters["kubernetes"]
			state[rel] = fmt.Sprintf("server %s, tls-server-name %q, CA %x, users %d", cl.Server, cl.TLSServerName, sha256.Sum256(cl.CertificateAuthorityData), len(cfg.AuthInfos))
			return nil
		}
		sum := sha256.Sum256(data)
		state[rel] = hex.EncodeToString(sum[:8])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return state
}

// nodeClient is a client with kubeadm's admin credentials to the node's own API server.
func nodeClient(t *testing.T, n *kubenode.Node) *kubernetes.Clientset {
	t.Helper()
	config, err := n.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	config.Timeout = 15 * time.Second
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// skewgateReady waits until the node's skewgate mirror Pod runs the image of digest and is
// started and ready, and returns its container status.
func skewgateReady(t *testing.T, ctx context.Context, client *kubernetes.Clientset, node, digest string) corev1.ContainerStatus {
	t.Helper()
	var status corev1.ContainerStatus
	eventually(t, "skewgate-"+node+" started and ready", 4*time.Minute, time.Second, func() error {
		pod, err := client.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "skewgate-"+node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if len(pod.Status.ContainerStatuses) != 1 {
			return fmt.Errorf("phase %s, %d container statuses", pod.Status.Phase, len(pod.Status.ContainerStatuses))
		}
		status = pod.Status.ContainerStatuses[0]
		if !status.Ready || status.Started == nil || !*status.Started || status.State.Running == nil {
			return fmt.Errorf("container %+v", status)
		}
		if !strings.HasSuffix(status.ImageID, digest) {
			return fmt.Errorf("runs image %s, want %s", status.ImageID, digest)
		}
		return nil
	})
	return status
}

// skewgateProcess returns the PID of the node's skewgate process.
func skewgateProcess(t *testing.T, n *kubenode.Node) kubenode.ProcessUsage {
	t.Helper()
	usage, err := n.Usage()
	if err != nil {
		t.Fatal(err)
	}
	var found []kubenode.ProcessUsage
	for _, u := range usage {
		if u.Name == "skewgate" {
			found = append(found, u)
		}
	}
	if len(found) != 1 {
		t.Fatalf("node %s runs %d skewgate processes", n.Name, len(found))
	}
	return found[0]
}

var procStatusField = regexp.MustCompile(`(?m)^(Uid|Gid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):\s*(.*)$`)

// checkRootWithoutCapabilities requires the process to run as root with no capability, unable
// to gain any.
func checkRootWithoutCapabilities(t *testing.T, pid int) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, m := range procStatusField.FindAllStringSubmatch(string(data), -1) {
		fields[m[1]] = strings.Join(strings.Fields(m[2]), " ")
	}
	want := map[string]string{
		"Uid": "0 0 0 0", "Gid": "0 0 0 0", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("skewgate's %s is %q, want %q (root without capabilities, no privilege escalation)", k, fields[k], v)
		}
	}
}

// skewgateKeys are the private keys of /etc/kubernetes/pki skewgate reads: its serving key and
// the front-proxy client key.
var skewgateKeys = []string{"/etc/kubernetes/pki/apiserver.key", "/etc/kubernetes/pki/front-proxy-client.key"}

// mountCovers reports whether mounting hostPath makes file visible: the file itself or a
// directory above it.
func mountCovers(hostPath, file string) bool {
	return file == hostPath || strings.HasPrefix(file, strings.TrimSuffix(hostPath, "/")+"/")
}

// checkOnlySkewgatesKeysMounted requires that of the node's private keys (every *.key under
// /etc/kubernetes/pki: the CA keys, the service-account key, etcd's) only skewgateKeys reach
// skewgate's container, each file of the pki directory alone (hostPath type File) and read-only:
// as the mirror Pod read back from the API server declares its volumes, and as the container
// runtime mounted them (crictl inspect). The image has no shell to list files from inside.
func checkOnlySkewgatesKeysMounted(t *testing.T, ctx context.Context, client *kubernetes.Clientset, n *kubenode.Node) {
	t.Helper()
	root := n.HostPath("/etc/kubernetes/pki")
	var keys []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".key") {
			rel, _ := filepath.Rel(root, p)
			keys = append(keys, "/etc/kubernetes/pki/"+filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"/etc/kubernetes/pki/ca.key", "/etc/kubernetes/pki/sa.key", "/etc/kubernetes/pki/front-proxy-ca.key", "/etc/kubernetes/pki/etcd/ca.key"} {
		if !slices.Contains(keys, want) {
			t.Fatalf("the node has no %s among its keys %v: not the kubeadm node this test checks", want, keys)
		}
	}
	visibleKeys := func(hostPaths []string) []string {
		var out []string
		for _, key := range keys {
			if slices.ContainsFunc(hostPaths, func(p string) bool { return mountCovers(p, key) }) {
				out = append(out, key)
			}
		}
		return out
	}

	pod, err := client.CoreV1().Pods(metav1.NamespaceSystem).Get(ctx, "skewgate-"+n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, v := range pod.Spec.Volumes {
		if v.HostPath == nil {
			continue
		}
		declared = append(declared, v.HostPath.Path)
		if mountCovers("/etc/kubernetes/pki", v.HostPath.Path) && (v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathFile) {
			t.Errorf("volume %s mounts %s as %v, want one file (type File)", v.Name, v.HostPath.Path, v.HostPath.Type)
		}
	}
	if got := visibleKeys(declared); !slices.Equal(got, skewgateKeys) {
		t.Errorf("the mirror Pod's hostPath volumes %v make the keys %v visible, want only %v", declared, got, skewgateKeys)
	}

	id, err := n.Run(ctx, "crictl", "ps", "-q", "--name", "skewgate")
	if err != nil || len(bytes.Fields(id)) != 1 {
		t.Fatalf("skewgate's container: %q (%v)", id, err)
	}
	out, err := n.Run(ctx, "crictl", "inspect", string(bytes.TrimSpace(id)))
	if err != nil {
		t.Fatal(err)
	}
	var inspected struct {
		Status struct {
			Mounts []struct {
				ContainerPath string `json:"containerPath"`
				HostPath      string `json:"hostPath"`
				Readonly      bool   `json:"readonly"`
			} `json:"mounts"`
		} `json:"status"`
	}
	if err := json.Unmarshal(out, &inspected); err != nil || len(inspected.Status.Mounts) == 0 {
		t.Fatalf("crictl inspect: no mounts read (%v):\n%.2000s", err, out)
	}
	var mounted []string
	for _, m := range inspected.Status.Mounts {
		mounted = append(mounted, m.HostPath)
		if mountCovers("/etc/kubernetes/pki", m.HostPath) && (!m.Readonly || m.ContainerPath != m.HostPath) {
			t.Errorf("the runtime mounted %s at %s, read-only %v; want it read-only at the same path", m.HostPath, m.ContainerPath, m.Readonly)
		}
	}
	if got := visibleKeys(mounted); !slices.Equal(got, skewgateKeys) {
		t.Errorf("the container's mounts %v make the keys %v visible, want only %v", mounted, got, skewgateKeys)
	}
}

// checkDebugHandlersOff requires the manifest's metrics listener to answer the debug
// endpoints 404: every process of the node reaches it, hostNetwork Pods included.
func checkDebugHandlersOff(t *testing.T, ctx context.Context, n *kubenode.Node) {
	t.Helper()
	for _, path := range []string{"/debug/snapshot", "/debug/requests"} {
		code, err := n.Run(ctx, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:16444"+path)
		if err != nil || string(code) != "404" {
			t.Errorf("GET %s on the node: %q (%v), want 404 without --debug-handlers", path, code, err)
		}
	}
}

// whoAmIThrough asks for a SelfSubjectReview with one of the node's kubeconfigs, through
// whatever server it names, and returns the user name the API server saw.
func whoAmIThrough(t *testing.T, ctx context.Context, n *kubenode.Node, kubeconfig string) string {
	t.Helper()
	var user string
	eventually(t, "a SelfSubjectReview with "+kubeconfig, 2*time.Minute, time.Second, func() error {
		out, err := n.Run(ctx, "kubectl", "--kubeconfig=/etc/kubernetes/"+kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
		if err != nil {
			return err
		}
		user = string(out)
		return nil
	})
	return user
}

// componentsConnectedThroughSkewgate waits until kube-controller-manager and kube-scheduler
// hold connections to skewgate's port on the node.
func componentsConnectedThroughSkewgate(t *testing.T, ctx context.Context, n *kubenode.Node) {
	t.Helper()
	eventually(t, "kube-controller-manager and kube-scheduler connected to skewgate", 3*time.Minute, time.Second, func() error {
		out, err := n.Run(ctx, "ss", "-Htnp", "state", "established", "( dport = :"+skewgatePort+" )")
		if err != nil {
			return err
		}
		for _, c := range []string{"kube-controller", "kube-scheduler"} {
			if !strings.Contains(string(out), `"`+c) {
				return fmt.Errorf("no connection of %s to :%s:\n%s", c, skewgatePort, out)
			}
		}
		return nil
	})
}

// componentsWork scales a Deployment to replicas and waits until kube-controller-manager has
// made that many Pods for it and kube-scheduler has tried to place each (the node has no pod
// network, so it stays NotReady and the scheduler reports every Pod unschedulable): both
// components work.
func componentsWork(t *testing.T, ctx context.Context, client *kubernetes.Clientset, replicas int32) {
	t.Helper()
	deployments := client.AppsV1().Deployments(metav1.NamespaceDefault)
	d, err := deployments.Get(ctx, "through-skewgate", metav1.GetOptions{})
	if err != nil {
		labels := map[string]string{"app": "through-skewgate"}
		d = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "through-skewgate"},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: kubenode.ImageRepository + "/app:none"}}},
				},
			},
		}
		if _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	} else {
		d.Spec.Replicas = ptr.To(replicas)
		if _, err := deployments.Update(ctx, d, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, fmt.Sprintf("%d Pods of the Deployment made and tried by the scheduler", replicas), 3*time.Minute, time.Second, func() error {
		pods, err := client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=through-skewgate"})
		if err != nil {
			return err
		}
		if int32(len(pods.Items)) != replicas {
			return fmt.Errorf("%d Pods", len(pods.Items))
		}
		for _, p := range pods.Items {
			events, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.name=" + p.Name + ",reason=FailedScheduling",
			})
			if err != nil {
				return err
			}
			if len(events.Items) == 0 && p.Spec.NodeName == "" {
				return fmt.Errorf("pod %s: not scheduled, no FailedScheduling event", p.Name)
			}
		}
		return nil
	})
}

// nodeImages lists the images in the node's containerd, by name.
func nodeImages(t *testing.T, ctx context.Context, n *kubenode.Node) []string {
	t.Helper()
	raw, err := n.Run(ctx, "crictl", "images", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var images struct {
		Images []struct {
			RepoTags    []string `json:"repoTags"`
			RepoDigests []string `json:"repoDigests"`
		} `json:"images"`
	}
	if err := json.Unmarshal(raw, &images); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, img := range images.Images {
		names = append(names, img.RepoTags...)
		names = append(names, img.RepoDigests...)
	}
	return names
}

// logNodeUsage logs what the node's processes use, and skewgate's share.
func logNodeUsage(t *testing.T, n *kubenode.Node) {
	t.Helper()
	usage, err := n.Usage()
	if err != nil {
		t.Fatal(err)
	}
	var rss int64
	var cpu float64
	var lines []string
	for _, u := range usage {
		rss += u.RSS
		cpu += u.CPUSeconds
		lines = append(lines, fmt.Sprintf("%-24s RSS %4d MiB  CPU %6.1f s", u.Name, u.RSS>>20, u.CPUSeconds))
	}
	t.Logf("node %s: %d processes, RSS %d MiB, CPU %.1f s in all:\n  %s", n.Name, len(usage), rss>>20, cpu, strings.Join(lines, "\n  "))
}

// newKubeadmCluster starts an empty real-node cluster, torn down when t ends,
// with each node's kubelet log shown when t failed.
func newKubeadmCluster(ctx context.Context, t *testing.T) *kubenode.Cluster {
	t.Helper()
	c, err := kubenode.New(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes() {
			if t.Failed() {
				t.Logf("node %s, kubelet log:\n%s", n.Name, n.LogTail("kubelet", 40))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	return c
}

func TestKubeadmNodeLocalSkewgateInstalledAndRemovedAsTheREADMESays(t *testing.T) {
	besideOtherScenariosWithOwnClusters(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	scenarioStart := time.Now()
	c := newKubeadmCluster(ctx, t)
	dir, digest := userDeployDir(t, ctx)

	n, err := c.AddNode(ctx, "cp-1", testcluster.KubeVersion136)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := n.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubeadm init to a ready control plane: %s", time.Since(start).Round(time.Second))
	client := nodeClient(t, n)
	original := kubernetesDirState(t, n)

	start = time.Now()
	runReadmeBlocks(t, ctx, n, dir, readmeShellBlocks(t, "## Install"))
	status := skewgateReady(t, ctx, client, n.Name, digest)
	t.Logf("installed as the README says, skewgate ready: %s", time.Since(start).Round(time.Second))

	// The kubelet pulled nothing: every image on the node was imported.
	for _, name := range nodeImages(t, ctx, n) {
		if !strings.HasPrefix(name, kubenode.ImageRepository+"/") && !strings.HasPrefix(name, "registry.example.com/skewgate/skewgate") {
			t.Errorf("node has image %s, which nobody imported", name)
		}
	}
	events, err := client.CoreV1().Events(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=skewgate-" + n.Name + ",reason=Pulling"})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) > 0 {
		t.Errorf("the kubelet pulled skewgate's image: %s", events.Items[0].Message)
	}
	checkRootWithoutCapabilities(t, skewgateProcess(t, n).PID)
	checkOnlySkewgatesKeysMounted(t, ctx, client, n)
	checkDebugHandlersOff(t, ctx, n)

	// The components are at skewgate, and the API server sees them as themselves.
	componentsConnectedThroughSkewgate(t, ctx, n)
	for conf, want := range map[string]string{"controller-manager.conf": "system:kube-controller-manager", "scheduler.conf": "system:kube-scheduler"} {
		if got := original[conf]; !strings.Contains(got, "server https://"+n.IP.String()+":6443") {
			t.Errorf("%s before the install: %s, want the node's own API server", conf, got)
		}
		if got := kubernetesDirState(t, n)[conf]; !strings.Contains(got, "server https://127.0.0.1:"+skewgatePort) {
			t.Errorf("%s after the install: %s, want skewgate", conf, got)
		}
		if got := whoAmIThrough(t, ctx, n, conf); got != want {
			t.Errorf("SelfSubjectReview through skewgate with %s: %q, want %q", conf, got, want)
		}
	}
	componentsWork(t, ctx, client, 1)

	// The probes keep passing: no restart while it serves.
	time.Sleep(15 * time.Second)
	if s := skewgateReady(t, ctx, client, n.Name, digest); s.RestartCount != status.RestartCount {
		t.Errorf("skewgate restarted %d times while serving", s.RestartCount-status.RestartCount)
	}
	logNodeUsage(t, n)

	// Killed, the kubelet restarts it, and the components recover through it.
	start = time.Now()
	if err := syscall.Kill(skewgateProcess(t, n).PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "skewgate restarted by the kubelet", 3*time.Minute, time.Second, func() error {
		if s := skewgateReady(t, ctx, client, n.Name, digest); s.RestartCount <= status.RestartCount {
			return fmt.Errorf("restart count %d", s.RestartCount)
		}
		return nil
	})
	t.Logf("skewgate killed, restarted and ready: %s", time.Since(start).Round(time.Second))
	componentsConnectedThroughSkewgate(t, ctx, n)
	componentsWork(t, ctx, client, 2)
	t.Logf("the components work through the restarted skewgate: %s after the kill", time.Since(start).Round(time.Second))

	// Removed as the README says, the node is as kubeadm left it.
	start = time.Now()
	runReadmeBlocks(t, ctx, n, dir, readmeShellBlocks(t, "## Remove"))
	eventually(t, "skewgate's container gone", 3*time.Minute, time.Second, func() error {
		out, err := n.Run(ctx, "crictl", "ps", "-q", "--name", "skewgate")
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			return fmt.Errorf("still running: %q (%v)", out, err)
		}
		return nil
	})
	if err := n.WaitControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	after := kubernetesDirState(t, n)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for k := range original {
			seen[k] = true
		}
		for k := range after {
			seen[k] = true
		}
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	}) {
		if original[name] != after[name] {
			t.Errorf("/etc/kubernetes/%s after the removal: %q, before the install: %q", name, after[name], original[name])
		}
	}
	for conf, want := range map[string]string{"controller-manager.conf": "system:kube-controller-manager", "scheduler.conf": "system:kube-scheduler"} {
		if got := whoAmIThrough(t, ctx, n, conf); got != want {
			t.Errorf("SelfSubjectReview with %s after the removal: %q, want %q", conf, got, want)
		}
	}
	componentsWork(t, ctx, client, 3)
	if _, err := client.RbacV1().Roles(metav1.NamespaceSystem).Get(ctx, "skewgate:identity-leases", metav1.GetOptions{}); err == nil {
		t.Error("rbac.yaml's Role is still there")
	}
	if _, err := client.RbacV1().ClusterRoles().Get(ctx, "skewgate:cordoned-nodes", metav1.GetOptions{}); err == nil {
		t.Error("rbac.yaml's ClusterRole is still there")
	}
	t.Logf("removed as the README says, the components work without it: %s", time.Since(start).Round(time.Second))
	t.Logf("scenario took %s", time.Since(scenarioStart).Round(time.Second))
}
