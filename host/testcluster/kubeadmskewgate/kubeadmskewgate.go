// Package kubeadmskewgate runs skewgate on real kubeadm nodes (host/testcluster/kubenode) exactly as
// host/deploy/kubeadm/README.md tells its users: every step is a `sh` block of that README, read
// from it and run as written, so that the README cannot drift from what works. It starts skewgate
// as the cluster's load balancer (the control-plane endpoint) and installs its node-local static
// Pod on control-plane nodes.
//
// Its functions take the deployment directory PrepareDeployment makes: host/deploy/kubeadm as a user
// has it after `make image`, the README among its files and the image as build/skewgate-image.tar.
package kubeadmskewgate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/ociimage"
	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// The README's sections whose `sh` blocks are run, by the start of their heading line.
const (
	LoadBalancerSection = "## Load balancer"
	InstallSection      = "## Install"
	RemoveSection       = "## Remove"
)

// README is the name of the README in the deployment directory.
const README = "README.md"

// deployFiles are the files of host/deploy/kubeadm a user works with.
var deployFiles = []string{README, "rbac.yaml", "skewgate.yaml", "point-components-at-skewgate.sh"}

// Deployment is host/deploy/kubeadm as a user has it after `make image`, in Dir: its files, the
// manifest pinning the image built from the skewgate binary and plugin given, and that image as
// build/skewgate-image.tar (also an OCI layout in build/image).
type Deployment struct {
	Dir string
	// Digest is the image's.
	Digest string
	// Size is the image's compressed size in bytes.
	Size int64
}

// PrepareDeployment copies the files of source (host/deploy/kubeadm) into dir, builds skewgate's
// image from binary and wasm as `make image` does, labelled with revision, and pins it in the copy
// of the manifest. log gets what `make image` prints.
func PrepareDeployment(ctx context.Context, source, dir, binary, wasm, revision string, log io.Writer) (Deployment, error) {
	if err := os.MkdirAll(filepath.Join(dir, "build"), 0o755); err != nil {
		return Deployment{}, err
	}
	for _, name := range deployFiles {
		if err := copyFile(filepath.Join(source, name), filepath.Join(dir, name), 0o644); err != nil {
			return Deployment{}, err
		}
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return Deployment{}, err
	}
	module, err := os.ReadFile(wasm)
	if err != nil {
		return Deployment{}, err
	}
	img, err := ociimage.ServerImage(bin, module, revision)
	if err != nil {
		return Deployment{}, err
	}
	digest, err := ociimage.Publish(ctx, img, ociimage.Publication{
		Layout:    filepath.Join(dir, "build", "image"),
		Archive:   filepath.Join(dir, "build", "skewgate-image.tar"),
		Manifests: []string{filepath.Join(dir, "skewgate.yaml")},
	}, log)
	if err != nil {
		return Deployment{}, err
	}
	size, err := ociimage.CompressedSize(img)
	if err != nil {
		return Deployment{}, err
	}
	return Deployment{Dir: dir, Digest: digest.String(), Size: size}, nil
}

// blockTimeout bounds one README block on a busy machine.
const blockTimeout = 5 * time.Minute

// ShellBlocks returns the ```sh blocks of the README's section whose heading line starts with
// heading, in order, each line without its indentation.
func ShellBlocks(readme, heading string) ([]string, error) {
	data, err := os.ReadFile(readme)
	if err != nil {
		return nil, err
	}
	var blocks []string
	var block []string
	inSection, inBlock := false, false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !inBlock && strings.HasPrefix(line, "## "):
			inSection = strings.HasPrefix(line, heading)
		case inSection && !inBlock && trimmed == "```sh":
			inBlock, block = true, nil
		case inBlock && trimmed == "```":
			inBlock = false
			blocks = append(blocks, strings.Join(block, "\n"))
		case inBlock:
			block = append(block, trimmed)
		}
	}
	if len(blocks) == 0 {
		return nil, fmt.Errorf("%s: no sh blocks under %q", readme, heading)
	}
	return blocks, nil
}

// RunBlocks runs each block in the node, in dir, as a user types it into a shell, and logs what it
// printed.
func RunBlocks(ctx context.Context, n *kubenode.Node, dir string, blocks []string, log testcluster.Logger) error {
	for _, block := range blocks {
		start := time.Now()
		blockCtx, cancel := context.WithTimeout(ctx, blockTimeout)
		out, err := n.Run(blockCtx, "sh", "-ec", "cd \"$1\"\n"+block, "sh", dir)
		cancel()
		if err != nil {
			return fmt.Errorf("node %s: README block failed after %s:\n%s\n%w\nkubelet:\n%s",
				n.Name, time.Since(start).Round(time.Second), block, err, n.LogTail("kubelet", 30))
		}
		log.Logf("node %s: README block (%s):\n%s\n%s", n.Name, time.Since(start).Round(100*time.Millisecond), block, out)
	}
	return nil
}

// InstallNodeLocal installs skewgate's node-local static Pod on the control-plane node n as the
// README's "Install" section says, from the deployment directory dir; once per node (its
// once-per-cluster step is idempotent).
func InstallNodeLocal(ctx context.Context, dir string, n *kubenode.Node, log testcluster.Logger) error {
	blocks, err := ShellBlocks(filepath.Join(dir, README), InstallSection)
	if err != nil {
		return err
	}
	return RunBlocks(ctx, n, dir, blocks, log)
}

// LoadBalancerMetricsAddress is where the load balancer serves /healthz, /readyz and /metrics in
// the bridge's network namespace: skewgate's default, which the README keeps.
const LoadBalancerMetricsAddress = "127.0.0.1:9090"

// loadBalancerFiles are the kubeadm certificates the README's load balancer reads from pki/.
var loadBalancerFiles = []string{"ca.crt", "apiserver.crt", "apiserver.key", "front-proxy-client.crt", "front-proxy-client.key"}

// LoadBalancer is skewgate serving the cluster's control-plane endpoint at the bridge's address, in
// front of the nodes' API servers, started with the README's command.
type LoadBalancer struct {
	// Process is skewgate's process.
	Process *testcluster.Process
	dir     string
	// operator reaches its operator endpoints, in the bridge's network namespace.
	operator *http.Client
}

// StartLoadBalancer starts skewgate as the load balancer of the README's "Load balancer" section in
// front of nodes, before the first of them initialises the cluster: it points
// kubenode.ControlPlaneEndpoint at the bridge's address, runs the section's first block (the
// certificates) on nodes[0] with the configuration its kubeadm init will use, copies the
// certificates the README names, and runs the second block (skewgate serve) in the bridge's
// network namespace with skewgate from binary, the plugin from wasm and CP1, CP2, … the nodes'
// addresses. It returns once skewgate answers /healthz. The first node's kubeadm init then reuses
// the certificates. Close it before the cluster.
func StartLoadBalancer(ctx context.Context, dir, binary, wasm string, c *kubenode.Cluster, nodes []*kubenode.Node, log testcluster.Logger) (_ *LoadBalancer, err error) {
	blocks, err := ShellBlocks(filepath.Join(dir, README), LoadBalancerSection)
	if err != nil {
		return nil, err
	}
	if len(blocks) != 2 {
		return nil, fmt.Errorf("%s: %d sh blocks under %q, want 2: the certificates, then skewgate serve", README, len(blocks), LoadBalancerSection)
	}
	if err := c.SetControlPlaneEndpoint(c.Network.BridgeAddress()); err != nil {
		return nil, err
	}
	lbDir, err := os.MkdirTemp("", "skewgate-lb-")
	if err != nil {
		return nil, err
	}
	lb := &LoadBalancer{dir: lbDir, operator: &http.Client{Transport: &http.Transport{DialContext: c.Network.DialContext}, Timeout: 5 * time.Second}}
	defer func() {
		if err != nil {
			err = errors.Join(err, lb.Close())
		}
	}()

	first := nodes[0]
	config, err := first.InitConfiguration()
	if err != nil {
		return nil, err
	}
	certsDir := filepath.Join(lbDir, "first-node")
	if err := os.Mkdir(certsDir, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(certsDir, "kubeadm.yaml"), config, 0o600); err != nil {
		return nil, err
	}
	if err := RunBlocks(ctx, first, certsDir, blocks[:1], log); err != nil {
		return nil, err
	}

	if err := os.Mkdir(filepath.Join(lbDir, "pki"), 0o700); err != nil {
		return nil, err
	}
	for _, name := range loadBalancerFiles {
		if err := copyFile(first.HostPath("/etc/kubernetes/pki/"+name), filepath.Join(lbDir, "pki", name), 0o600); err != nil {
			return nil, err
		}
	}
	if err := copyFile(wasm, filepath.Join(lbDir, "skewgate.wasm"), 0o644); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(lbDir, "bin"), 0o755); err != nil {
		return nil, err
	}
	if err := os.Symlink(binary, filepath.Join(lbDir, "bin", "skewgate")); err != nil {
		return nil, err
	}
	env := []string{"PATH=" + filepath.Join(lbDir, "bin") + ":/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + lbDir}
	for i, n := range nodes {
		env = append(env, "CP"+strconv.Itoa(i+1)+"="+n.IP.String())
	}
	// exec: the process is skewgate itself, which its signals reach.
	lb.Process, err = c.Network.Start("skewgate-lb", filepath.Join(lbDir, "skewgate.log"), env,
		"sh", "-ec", "cd \"$1\"\nexec "+blocks[1], "sh", lbDir)
	if err != nil {
		return nil, err
	}
	if err := lb.waitHealthy(ctx); err != nil {
		return nil, err
	}
	log.Logf("skewgate serves the control-plane endpoint %s at %s, in front of %d API servers", kubenode.ControlPlaneEndpoint, c.Network.BridgeAddress(), len(nodes))
	return lb, nil
}

// waitHealthy waits until skewgate answers /healthz.
func (lb *LoadBalancer) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if exited, err := lb.Process.Exited(); exited {
			return fmt.Errorf("the load balancer exited: %v\n%s", err, lb.Process.LogTail(30))
		}
		if _, err := lb.get(ctx, "/healthz"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the load balancer does not answer /healthz: %w\n%s", ctx.Err(), lb.Process.LogTail(30))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Routes says whether the load balancer counts n's API server healthy in the snapshot it routes by
// (/debug/snapshot), where a server given by --apiserver is named by its address.
func (lb *LoadBalancer) Routes(ctx context.Context, n *kubenode.Node) (bool, error) {
	body, err := lb.Snapshot(ctx)
	if err != nil {
		return false, err
	}
	var snapshot struct {
		Servers []struct {
			Cluster string `json:"cluster"`
			Healthy bool   `json:"healthy"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(body, &snapshot); err != nil {
		return false, err
	}
	name := controller.ClusterName(net.JoinHostPort(n.IP.String(), strconv.Itoa(kubenode.APIServerPort)))
	for _, s := range snapshot.Servers {
		if s.Cluster == name {
			return s.Healthy, nil
		}
	}
	return false, fmt.Errorf("node %s's API server (%s) is not in the load balancer's snapshot", n.Name, name)
}

// Snapshot is the snapshot the load balancer routes by, as /debug/snapshot serves it.
func (lb *LoadBalancer) Snapshot(ctx context.Context) ([]byte, error) {
	return lb.get(ctx, "/debug/snapshot")
}

// get fetches path from the operator endpoints, requiring 200.
func (lb *LoadBalancer) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+LoadBalancerMetricsAddress+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := lb.operator.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return body, nil
}

// Close stops skewgate and removes its directory.
func (lb *LoadBalancer) Close() error {
	if lb.Process != nil {
		lb.Process.Stop(10 * time.Second)
	}
	return os.RemoveAll(lb.dir)
}

func copyFile(from, to string, mode os.FileMode) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, data, mode)
}
