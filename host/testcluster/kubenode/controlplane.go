package kubenode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/skewgate/skewgate/host/testcluster"
)

// ControlPlaneComponents are the static Pods kubeadm runs on every control-plane node.
var ControlPlaneComponents = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// Init runs kubeadm init on the node, making it the cluster's first control-plane node at the
// node's kubeadm version, with the control-plane endpoint resolving to it unless
// SetControlPlaneEndpoint named another address first. Certificates are uploaded for joins.
func (n *Node) Init(ctx context.Context) error {
	c := n.cluster
	c.mu.Lock()
	if c.initNode != nil {
		c.mu.Unlock()
		return fmt.Errorf("node %s initialised the cluster already", c.initNode.Name)
	}
	c.initNode = n
	endpointSet := c.endpointIP.IsValid()
	c.mu.Unlock()
	if !endpointSet {
		if err := c.SetControlPlaneEndpoint(n.IP); err != nil {
			return err
		}
	}
	config, err := n.InitConfiguration()
	if err != nil {
		return err
	}
	return n.kubeadm(ctx, "init", config, "init", "--upload-certs")
}

// InitConfiguration is the kubeadm configuration Init runs kubeadm init with on the node: for the
// steps a user takes with the same file before init, such as `kubeadm init phase certs all`,
// whose certificates init then reuses.
func (n *Node) InitConfiguration() ([]byte, error) {
	c := n.cluster
	c.mu.Lock()
	params := c.params
	c.mu.Unlock()
	params.kubernetesVersion = n.Version(testcluster.Kubeadm)
	return initConfig(params, n.params())
}

// JoinControlPlane runs kubeadm join --control-plane on the node, with the bootstrap token and
// certificate key of the cluster's first control-plane node, and the cluster CA's hash pinned.
func (n *Node) JoinControlPlane(ctx context.Context) error {
	c := n.cluster
	c.mu.Lock()
	first, params := c.initNode, c.params
	c.mu.Unlock()
	if first == nil {
		return errors.New("no node has initialised the cluster")
	}
	// The configuration is in the API of the joining node's kubeadm.
	params.kubernetesVersion = n.Version(testcluster.Kubeadm)
	ca, err := os.ReadFile(first.HostPath("/etc/kubernetes/pki/ca.crt"))
	if err != nil {
		return err
	}
	hash, err := caCertHash(ca)
	if err != nil {
		return err
	}
	config, err := joinConfig(params, n.params(), hash)
	if err != nil {
		return err
	}
	return n.kubeadm(ctx, "join", config, "join")
}

func (n *Node) params() nodeParams {
	p := nodeParams{name: n.Name, ip: n.IP, cgroupRoot: n.CgroupRoot}
	if n.cluster.cgroupV1 {
		// The kernel-configuration check fails on cgroup v1, which the kubelet runs on here with
		// failCgroupV1 false; only that check is skipped.
		p.ignorePreflightErrors = []string{"SystemVerification"}
	}
	if minor, err := minorVersion(n.Version(testcluster.Kubeadm)); err == nil && minor < 31 {
		// kubeadm before 1.31 cannot record disabled addons (v1beta3), so a joining node's
		// preflight looks for the CoreDNS and kube-proxy images, which are not built here.
		p.ignorePreflightErrors = append(p.ignorePreflightErrors, "ImagePull")
	}
	return p
}

// kubeadm writes config into the node's kubeadm directory and runs kubeadm with it, logging to
// logs/kubeadm-<step>.log.
func (n *Node) kubeadm(ctx context.Context, step string, config []byte, args ...string) error {
	file := filepath.Join(n.dir, "kubeadm", step+".yaml")
	if err := os.WriteFile(file, config, 0o600); err != nil {
		return err
	}
	logFile, err := os.Create(n.logPath("kubeadm-" + step))
	if err != nil {
		return err
	}
	defer logFile.Close()
	cmd := n.Command(ctx, append(append([]string{"kubeadm"}, args...), "--config", file, "--v=1")...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start).Round(time.Second)
	if err != nil {
		return fmt.Errorf("node %s: kubeadm %s failed after %s: %w\n%s\nkubelet:\n%s",
			n.Name, step, took, err, n.LogTail("kubeadm-"+step, 30), n.LogTail("kubelet", 20))
	}
	n.cluster.log.Logf("node %s: kubeadm %s took %s", n.Name, step, took)
	return nil
}

// AdminConfig returns a client configuration with kubeadm's admin credentials that talks to this
// node's own API server, through the network.
func (n *Node) AdminConfig() (*rest.Config, error) {
	data, err := os.ReadFile(n.HostPath("/etc/kubernetes/admin.conf"))
	if err != nil {
		return nil, err
	}
	config, err := clientcmd.RESTConfigFromKubeConfig(data)
	if err != nil {
		return nil, err
	}
	config.Host = "https://" + n.IP.String() + ":" + strconv.Itoa(APIServerPort)
	config.Dial = n.cluster.Network.DialContext
	return config, nil
}

// WaitControlPlane waits until the node's API server answers /readyz and every static Pod of
// ControlPlaneComponents on the node is Running and Ready.
func (n *Node) WaitControlPlane(ctx context.Context) error {
	config, err := n.AdminConfig()
	if err != nil {
		return err
	}
	config.Timeout = 15 * time.Second
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	return poll(ctx, time.Second, func() error {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return fmt.Errorf("node %s: /readyz: %v: %s: %w", n.Name, err, body, errNotYet)
		}
		pods, err := client.CoreV1().Pods(metav1.NamespaceSystem).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return fmt.Errorf("node %s: listing its pods: %v: %w", n.Name, err, errNotYet)
		}
		var notReady []string
		for _, component := range ControlPlaneComponents {
			name := component + "-" + n.Name
			i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool { return p.Name == name })
			if i < 0 {
				notReady = append(notReady, name+" (no pod)")
			} else if p := pods.Items[i]; !podReady(p) {
				notReady = append(notReady, name+" ("+string(p.Status.Phase)+")")
			}
		}
		if len(notReady) > 0 {
			return fmt.Errorf("node %s: %s: %w", n.Name, strings.Join(notReady, ", "), errNotYet)
		}
		return nil
	})
}

func podReady(p corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
