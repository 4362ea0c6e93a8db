package kubenode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// ControlPlaneEndpoint is the host name of the cluster's control-plane endpoint (kubeadm's
// controlPlaneEndpoint). Every node's /etc/hosts resolves it, to the first control-plane node
// unless SetControlPlaneEndpoint says otherwise; the .invalid domain resolves nowhere else.
const ControlPlaneEndpoint = "control-plane.skewgate.invalid"

// teardownTimeout bounds the teardown of a cluster, or of a node that failed to start.
const teardownTimeout = 5 * time.Minute

// pausePackage is the static pause program: every node's sandbox image, and the process holding
// each node's namespaces.
const pausePackage = "github.com/skewgate/skewgate/host/testcluster/cmd/pause"

// Cluster is a Network and the Nodes on it, sharing a bootstrap token, an uploaded-certificates
// key and a control-plane endpoint. Its methods are safe for concurrent use.
type Cluster struct {
	// Network is the bridge the nodes are on; its DialContext reaches them.
	Network *Network

	log testcluster.Logger
	dir string
	// id makes the cluster's cgroup names its own on a machine shared with other runs.
	id       string
	pause    string
	cgroupV1 bool
	params   clusterParams

	mu sync.Mutex
	// names are the names of the nodes added or being added.
	names      map[string]bool
	nodes      []*Node
	initNode   *Node
	endpointIP netip.Addr
	images     map[string]*imageSet
	closed     bool
}

// imageSet is one Kubernetes version's images, written once per cluster and imported into each
// node that runs or is upgraded to that version.
type imageSet struct {
	once    sync.Once
	tarball string
	refs    []string
	err     error
}

// New builds the pause program and starts the network. Nodes are added with AddNode; Close tears
// everything down. It needs root.
func New(ctx context.Context, log testcluster.Logger) (_ *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("real nodes need root: namespaces, mounts, cgroups")
	}
	v1, err := cgroupV1()
	if err != nil {
		return nil, err
	}
	if err := ensureInotifyInstances(log); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "skewgate-nodes-")
	if err != nil {
		return nil, err
	}
	var id [3]byte
	rand.Read(id[:])
	c := &Cluster{
		log:      log,
		dir:      dir,
		id:       hex.EncodeToString(id[:]),
		pause:    filepath.Join(dir, "pause"),
		cgroupV1: v1,
		params:   clusterParams{endpoint: ControlPlaneEndpoint, token: newBootstrapToken(), certificateKey: newCertificateKey()},
		images:   map[string]*imageSet{},
		names:    map[string]bool{},
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", c.pause, pausePackage)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w: %s", pausePackage, err, out)
	}
	if c.Network, err = startNetwork(ctx, dir, c.pause); err != nil {
		return nil, err
	}
	return c, nil
}

// inotifyInstancesPath is the machine's limit on inotify instances per user. Every node's
// kubelet, kube-apiserver, kube-controller-manager, kube-scheduler and containerd run as root
// and hold some (two three-node clusters side by side hold about 106, measured), so the nodes of
// every cluster on the machine share the one limit, whose default is 128; a kubelet that cannot
// get one does not start ("Failed to start cAdvisor inotify_init: too many open files",
// kubernetes/kubernetes#58081).
const inotifyInstancesPath = "/proc/sys/fs/inotify/max_user_instances"

// minInotifyInstances leaves room for several clusters and whatever else the machine runs: the
// value kind's documentation recommends for several clusters on one machine.
const minInotifyInstances = 512

// ensureInotifyInstances raises the machine's inotify instance limit to minInotifyInstances if
// it is lower; it never lowers it.
func ensureInotifyInstances(log testcluster.Logger) error {
	raw, err := os.ReadFile(inotifyInstancesPath)
	if err != nil {
		return err
	}
	limit, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return fmt.Errorf("%s: %w", inotifyInstancesPath, err)
	}
	if limit >= minInotifyInstances {
		return nil
	}
	if err := os.WriteFile(inotifyInstancesPath, []byte(strconv.Itoa(minInotifyInstances)), 0o644); err != nil {
		return fmt.Errorf("raising %s from %d to %d: %w", inotifyInstancesPath, limit, minInotifyInstances, err)
	}
	log.Logf("raised fs.inotify.max_user_instances from %d to %d for the nodes' kubelets and control planes", limit, minInotifyInstances)
	return nil
}

// Nodes returns the cluster's nodes in the order they were added.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Namespaces lists every namespace the cluster created: the network's and each node's.
func (c *Cluster) Namespaces() []Namespace {
	out := slices.Clone(c.Network.Namespaces())
	for _, n := range c.Nodes() {
		out = append(out, n.holder.namespaces...)
	}
	return out
}

// CgroupPrefix starts the name of every cgroup root the cluster's kubelets use.
func (c *Cluster) CgroupPrefix() string { return "/skewgate-" + c.id + "-" }

// SetControlPlaneEndpoint makes ControlPlaneEndpoint resolve to ip on every node and in the
// network's DialContext: the first control-plane node by default, or a load balancer in front.
func (c *Cluster) SetControlPlaneEndpoint(ip netip.Addr) error {
	c.mu.Lock()
	c.endpointIP = ip
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()
	c.Network.setName(ControlPlaneEndpoint, ip)
	var errs []error
	for _, n := range nodes {
		errs = append(errs, n.writeHosts())
	}
	return errors.Join(errs...)
}

// hostsFile is every node's /etc/hosts: loopback, every node, and the control-plane endpoint.
func (c *Cluster) hostsFile() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	b.WriteString("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
	for _, n := range c.nodes {
		if n.IP.IsValid() {
			fmt.Fprintf(&b, "%s\t%s\n", n.IP, n.Name)
		}
	}
	if c.endpointIP.IsValid() {
		fmt.Fprintf(&b, "%s\t%s\n", c.endpointIP, ControlPlaneEndpoint)
	}
	return []byte(b.String())
}

// NodeBinaries is every binary a node of Kubernetes version runs or puts into images, for
// `make test-binaries` and the tests that build them first.
func NodeBinaries(version string) []testcluster.Binary {
	var bins []testcluster.Binary
	for _, c := range []testcluster.Component{
		testcluster.KubeletComponent, testcluster.Kubeadm, testcluster.Kubectl,
		testcluster.KubeAPIServer, testcluster.KubeControllerManager, testcluster.KubeScheduler,
	} {
		bins = append(bins, testcluster.Binary{Component: c, Version: version})
	}
	return append(bins,
		testcluster.Binary{Component: testcluster.Etcd, Version: testcluster.EtcdVersion},
		testcluster.Binary{Component: testcluster.Containerd, Version: testcluster.ContainerdVersion},
		testcluster.Binary{Component: testcluster.ContainerdShim, Version: testcluster.ContainerdVersion},
		testcluster.Binary{Component: testcluster.Ctr, Version: testcluster.ContainerdVersion},
		testcluster.Binary{Component: testcluster.Crictl, Version: testcluster.CrictlVersion},
	)
}

// imagesFor returns the tarball of version's images, writing it on first use. refs are the images
// kubeadm names for version; each must be one this package can build.
func (c *Cluster) imagesFor(version string, refs []string, paths map[testcluster.Binary]string) (*imageSet, error) {
	c.mu.Lock()
	set := c.images[version]
	if set == nil {
		set = &imageSet{}
		c.images[version] = set
	}
	c.mu.Unlock()
	set.once.Do(func() {
		var specs []imageSpec
		for _, ref := range refs {
			spec, err := imageFor(ref, version, c.pause, paths)
			if err != nil {
				set.err = err
				return
			}
			specs = append(specs, spec)
		}
		set.tarball = filepath.Join(c.dir, "images-"+version+".tar")
		start := time.Now()
		set.err = writeImages(set.tarball, specs)
		set.refs = refs
		c.log.Logf("wrote the images of %s (%s) in %s", version, strings.Join(refs, ", "), time.Since(start).Round(time.Millisecond))
	})
	return set, set.err
}

// imageFor says which binary becomes the image ref, by the image's name.
func imageFor(ref, version, pause string, paths map[testcluster.Binary]string) (imageSpec, error) {
	repo, _, _ := strings.Cut(ref, ":")
	if path.Dir(repo) != ImageRepository {
		return imageSpec{}, fmt.Errorf("image %s is not in %s", ref, ImageRepository)
	}
	command := path.Base(repo)
	var binary string
	switch command {
	case "pause":
		binary = pause
	case "etcd":
		binary = paths[testcluster.Binary{Component: testcluster.Etcd, Version: testcluster.EtcdVersion}]
	case string(testcluster.KubeAPIServer), string(testcluster.KubeControllerManager), string(testcluster.KubeScheduler):
		binary = paths[testcluster.Binary{Component: testcluster.Component(command), Version: version}]
	default:
		return imageSpec{}, fmt.Errorf("no binary for image %s", ref)
	}
	return imageSpec{ref: ref, binary: binary, command: command}, nil
}

// kubeadmImages lists the images kubeadm version uses with the addons skipped: the control-plane
// components, etcd, pause.
func kubeadmImages(list []byte) []string {
	var refs []string
	for _, line := range strings.Fields(string(list)) {
		name := path.Base(strings.SplitN(line, ":", 2)[0])
		if name == "coredns" || name == "kube-proxy" {
			continue
		}
		refs = append(refs, line)
	}
	return refs
}

// Close tears down every node, newest first, then the network, and removes the cluster's
// directory. It returns every failure; a teardown failure means something may be left behind.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	nodes := slices.Clone(c.nodes)
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), teardownTimeout)
	defer cancel()
	var errs []error
	for _, n := range slices.Backward(nodes) {
		errs = append(errs, n.close(ctx))
	}
	c.Network.close()
	if err := errors.Join(errs...); err != nil {
		c.log.Logf("teardown failed; keeping %s for inspection", c.dir)
		return err
	}
	return os.RemoveAll(c.dir)
}
