package kubenode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/skewgate/skewgate/host/testcluster"
)

// These tests run real nodes: containerd, runc, kubelets, kubeadm, static Pods of kube-apiserver,
// etcd, kube-controller-manager and kube-scheduler. Binaries missing from the cache are built
// first (`make test-binaries` builds them ahead).

// startCluster creates a cluster whose teardown the test checks: nothing the cluster made may be
// left on the machine.
func startCluster(t *testing.T, ctx context.Context) *Cluster {
	t.Helper()
	before := snapshotMachine(t)
	c, err := New(ctx, t)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		namespaces := c.Namespaces()
		for _, n := range c.Nodes() {
			if t.Failed() {
				t.Logf("node %s, kubelet log:\n%s\ncontainerd log:\n%s", n.Name, n.LogTail("kubelet", 40), n.LogTail("containerd", 20))
			}
		}
		start := time.Now()
		if err := c.Close(); err != nil {
			t.Errorf("teardown: %v", err)
		}
		t.Logf("teardown of %d nodes took %s", len(c.Nodes()), time.Since(start).Round(time.Millisecond))
		checkNothingLeft(t, before, namespaces, c.CgroupPrefix())
	})
	return c
}

// logUsage logs what the node's processes use, summed by program.
func logUsage(t *testing.T, n *Node) {
	t.Helper()
	usage, err := n.Usage()
	if err != nil {
		t.Fatal(err)
	}
	type total struct {
		count int
		rss   int64
		cpu   float64
	}
	byName := map[string]*total{}
	var names []string
	var all int64
	for _, u := range usage {
		if byName[u.Name] == nil {
			byName[u.Name] = &total{}
			names = append(names, u.Name)
		}
		byName[u.Name].count++
		byName[u.Name].rss += u.RSS
		byName[u.Name].cpu += u.CPUSeconds
		all += u.RSS
	}
	var b strings.Builder
	for _, name := range names {
		s := byName[name]
		fmt.Fprintf(&b, "\n  %-28s ×%d  RSS %4d MiB  CPU %6.1f s", name, s.count, s.rss>>20, s.cpu)
	}
	t.Logf("node %s: %d processes, RSS %d MiB in all:%s", n.Name, len(usage), all>>20, b.String())
}

func TestKubeadmControlPlaneNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := startCluster(t, ctx)

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
	t.Logf("kubeadm init to a ready control plane took %s", time.Since(start).Round(time.Second))

	// kubectl inside the node, through the node's own API server.
	out, err := n.Run(ctx, "kubectl", "get", "nodes", "-o", "custom-columns=NAME:.metadata.name,KUBELET:.status.nodeInfo.kubeletVersion", "--no-headers")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(string(out)), []string{"cp-1", testcluster.KubeVersion136}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("kubectl get nodes: %q, want %q", out, want)
	}

	// The API server's view through the network, from outside the node.
	config, err := n.AdminConfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	version, err := client.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if version.GitVersion != testcluster.KubeVersion136 {
		t.Errorf("server version %s, want %s", version.GitVersion, testcluster.KubeVersion136)
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var addresses []string
	for _, a := range node.Status.Addresses {
		addresses = append(addresses, a.Address)
	}
	if !strings.Contains(strings.Join(addresses, " "), n.IP.String()) {
		t.Errorf("node addresses %v lack the node's address %s", addresses, n.IP)
	}

	// Every image came from this machine: containerd pulled nothing.
	raw, err := n.Run(ctx, "crictl", "images", "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var images struct {
		Images []struct {
			RepoTags []string `json:"repoTags"`
		} `json:"images"`
	}
	if err := json.Unmarshal(raw, &images); err != nil {
		t.Fatal(err)
	}
	for _, img := range images.Images {
		for _, tag := range img.RepoTags {
			if !strings.HasPrefix(tag, ImageRepository+"/") {
				t.Errorf("node has image %s, not one of %s", tag, ImageRepository)
			}
		}
	}

	logUsage(t, n)

	// Binaries swapped mid-test, as an upgrade swaps them: another version provisioned (its
	// binaries and images), the kubelet switched to it and restarted by the supervisor; the
	// static Pods keep running and the node reports the kubelet it now runs. A 1.35 kubelet
	// under a 1.36 control plane is within the version skew Kubernetes supports.
	if err := n.Provision(ctx, testcluster.KubeVersion135); err != nil {
		t.Fatal(err)
	}
	if err := n.UseBinaries(testcluster.KubeVersion135, testcluster.KubeletComponent); err != nil {
		t.Fatal(err)
	}
	before := n.KubeletProcess()
	n.RestartKubelet()
	if err := poll(ctx, time.Second, func() error {
		if p := n.KubeletProcess(); p == nil || p == before {
			return fmt.Errorf("no new kubelet: %w", errNotYet)
		}
		node, err := client.CoreV1().Nodes().Get(ctx, "cp-1", metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("%v: %w", err, errNotYet)
		}
		if got := node.Status.NodeInfo.KubeletVersion; got != testcluster.KubeVersion135 {
			return fmt.Errorf("node reports kubelet %s: %w", got, errNotYet)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	if v := n.Version(testcluster.Kubeadm); v != testcluster.KubeVersion136 {
		t.Errorf("kubeadm switched to %s along with the kubelet", v)
	}
}

func TestThreeControlPlaneNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	c := startCluster(t, ctx)

	var nodes []*Node
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		n, err := c.AddNode(ctx, name, testcluster.KubeVersion136)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	start := time.Now()
	if err := nodes[0].Init(ctx); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].WaitControlPlane(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("cp-1: kubeadm init to a ready control plane took %s", time.Since(start).Round(time.Second))
	for _, n := range nodes[1:] {
		start := time.Now()
		if err := n.JoinControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
		if err := n.WaitControlPlane(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: kubeadm join --control-plane to a ready control plane took %s", n.Name, time.Since(start).Round(time.Second))
	}

	// Every API server sees all three nodes, and etcd has three members.
	for _, n := range nodes {
		out, err := n.Run(ctx, "kubectl", "--server", "https://"+n.IP.String()+":6443", "get", "nodes", "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Fields(string(out)); strings.Join(got, " ") != "node/cp-1 node/cp-2 node/cp-3" {
			t.Errorf("%s: kubectl get nodes = %q, want the three nodes", n.Name, got)
		}
	}
	for _, n := range nodes {
		if got := etcdMembers(t, ctx, c, n); strings.Join(got, " ") != "cp-1 cp-2 cp-3" {
			t.Errorf("%s: etcd members %q, want cp-1, cp-2 and cp-3", n.Name, got)
		}
	}
	for _, n := range nodes {
		logUsage(t, n)
	}
}

// etcdMembers asks the node's etcd for its members through etcd's JSON gateway, with kubeadm's
// health-check client certificate, and returns their names, sorted.
func etcdMembers(t *testing.T, ctx context.Context, c *Cluster, n *Node) []string {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(n.HostPath("/etc/kubernetes/pki/etcd/healthcheck-client.crt"), n.HostPath("/etc/kubernetes/pki/etcd/healthcheck-client.key"))
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(n.HostPath("/etc/kubernetes/pki/etcd/ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no certificate in the etcd CA file")
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext:     c.Network.DialContext,
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots},
	}}
	url := "https://" + n.IP.String() + ":2379/v3/cluster/member/list"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Members []struct {
			Name string `json:"name"`
		} `json:"members"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	var names []string
	for _, m := range list.Members {
		names = append(names, m.Name)
	}
	slices.Sort(names)
	return names
}
