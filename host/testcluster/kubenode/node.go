package kubenode

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// nodeMounts are the directories and files a node has of its own, bound over the machine's: the
// node path, and the name of its source in the node's directory. The kubelet writes
// /var/lib/kubelet/device-plugins, /var/log/pods and /var/log/containers, and the flex-volume
// directory under /usr/libexec/kubernetes, whatever its configuration says; static Pods keep
// caches under /var/cache (skewgate's compiled plugin).
var nodeMounts = []struct {
	inside, source string
	file           bool
}{
	{"/etc/kubernetes", "etc-kubernetes", false},
	{"/var/lib/kubelet", "var-lib-kubelet", false},
	{"/var/lib/etcd", "var-lib-etcd", false},
	{"/var/log", "var-log", false},
	{"/var/cache", "var-cache", false},
	{"/usr/libexec/kubernetes", "usr-libexec-kubernetes", false},
	{"/etc/hosts", "hosts", true},
	{"/etc/resolv.conf", "resolv.conf", true},
}

// resolvConf sends every lookup to a name server on the node's loopback, where none listens, so
// that a name /etc/hosts does not know fails at once and on the node.
const resolvConf = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"

// Node is one machine of the cluster: its namespaces, containerd, and a kubelet supervised as
// systemd would. Its Kubernetes binaries (kubelet, kubeadm, kubectl) are those of one version at a
// time, switched with UseBinaries.
type Node struct {
	Name string
	// IP is the node's address on the network.
	IP netip.Addr
	// CgroupRoot is the kubelet's cgroupRoot, the node's own among the machine's cgroups.
	CgroupRoot string

	cluster *Cluster
	dir     string
	holder  *holder
	env     []string

	mu         sync.Mutex
	versions   map[testcluster.Component]string
	provisions map[string]map[testcluster.Binary]string
	containerd *testcluster.Process
	kubelet    *kubeletSupervisor
	closed     bool
}

// nodeNamePattern is a host name label: a node name is its host name.
var nodeNamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// AddNode starts a node running Kubernetes version's binaries, with containerd up and every image
// kubeadm version needs imported, and its kubelet supervisor waiting for kubeadm. It builds what
// is missing from the binary cache first.
func (c *Cluster) AddNode(ctx context.Context, name, version string) (_ *Node, err error) {
	if !nodeNamePattern.MatchString(name) {
		return nil, fmt.Errorf("node name %q is not a valid host name label", name)
	}
	c.mu.Lock()
	if c.names[name] {
		c.mu.Unlock()
		return nil, fmt.Errorf("node %s exists", name)
	}
	c.names[name] = true
	c.mu.Unlock()
	paths, err := testcluster.EnsureBinaries(ctx, c.log, NodeBinaries(version))
	if err != nil {
		return nil, err
	}

	start := time.Now()
	n := &Node{
		Name:       name,
		CgroupRoot: c.CgroupPrefix() + name,
		cluster:    c,
		dir:        filepath.Join(c.dir, name),
		versions:   map[testcluster.Component]string{},
		provisions: map[string]map[testcluster.Binary]string{version: paths},
	}
	n.env = []string{
		"PATH=" + filepath.Join(n.dir, "bin") + ":" + strings.TrimPrefix(hostEnv[0], "PATH="),
		"HOME=" + filepath.Join(n.dir, "home"),
		"KUBECONFIG=/etc/kubernetes/admin.conf",
		"CONTAINERD_ADDRESS=" + containerdSocket,
		"CONTAINERD_NAMESPACE=" + containerdNamespace,
		"CRI_CONFIG_FILE=" + filepath.Join(n.dir, "crictl.yaml"),
	}
	if err := n.makeDirs(paths, version); err != nil {
		return nil, err
	}
	if n.holder, err = startHolder(ctx, name, filepath.Join(n.dir, "logs", "namespaces.log"), c.pause,
		mountNamespace, networkNamespace, utsNamespace); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownTimeout)
			defer cancel()
			err = errors.Join(err, n.close(ctx))
		}
	}()
	if err := n.setUpNamespaces(ctx); err != nil {
		return nil, err
	}
	if n.IP, err = c.Network.attach(ctx, name, n.holder); err != nil {
		return nil, err
	}
	for _, other := range c.Nodes() {
		if err := other.writeHosts(); err != nil {
			return nil, err
		}
	}
	if err := createCgroup(n.CgroupRoot); err != nil {
		return nil, fmt.Errorf("node %s: cgroup root: %w", name, err)
	}

	refs, err := n.kubeadmImages(ctx, paths[testcluster.Binary{Component: testcluster.Kubeadm, Version: version}], version)
	if err != nil {
		return nil, err
	}
	sandbox := ""
	for _, ref := range refs {
		if strings.HasPrefix(ref, ImageRepository+"/pause:") {
			sandbox = ref
		}
	}
	if sandbox == "" {
		return nil, fmt.Errorf("kubeadm %s names no pause image: %v", version, refs)
	}
	if err := n.startContainerd(ctx, sandbox); err != nil {
		return nil, err
	}
	if err := n.importImages(ctx, version, refs, paths); err != nil {
		return nil, err
	}
	n.kubelet = startKubeletSupervisor(n, c.log)
	c.log.Logf("node %s (%s, %s) up in %s", name, n.IP, version, time.Since(start).Round(time.Millisecond))
	return n, nil
}

// makeDirs lays out the node's directory: the sources of its mounts, the directory of its
// binaries on PATH, its logs.
func (n *Node) makeDirs(paths map[testcluster.Binary]string, version string) error {
	for _, d := range []string{"bin", "home", "logs", "kubeadm", "containerd", "cni/bin", "cni/net.d"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, m := range nodeMounts {
		source := filepath.Join(n.dir, m.source)
		if m.file {
			if err := os.WriteFile(source, nil, 0o644); err != nil {
				return err
			}
			continue
		}
		if err := os.Mkdir(source, 0o755); err != nil {
			return err
		}
		// The mount point itself is on the machine: an empty directory that the node's bind
		// mount covers, so nothing is ever written to it.
		if err := os.MkdirAll(m.inside, 0o755); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(n.dir, "resolv.conf"), []byte(resolvConf), 0o644); err != nil {
		return err
	}
	crictl := "runtime-endpoint: " + containerdEndpoint + "\nimage-endpoint: " + containerdEndpoint + "\ntimeout: 60\n"
	if err := os.WriteFile(filepath.Join(n.dir, "crictl.yaml"), []byte(crictl), 0o644); err != nil {
		return err
	}
	for _, b := range []testcluster.Binary{
		{Component: testcluster.Containerd, Version: testcluster.ContainerdVersion},
		{Component: testcluster.ContainerdShim, Version: testcluster.ContainerdVersion},
		{Component: testcluster.Ctr, Version: testcluster.ContainerdVersion},
		{Component: testcluster.Crictl, Version: testcluster.CrictlVersion},
	} {
		if err := n.link(b.Component, paths[b]); err != nil {
			return err
		}
	}
	for _, c := range switchable {
		if err := n.link(c, paths[testcluster.Binary{Component: c, Version: version}]); err != nil {
			return err
		}
		n.versions[c] = version
	}
	return nil
}

// switchable are the binaries a node runs from its PATH at one Kubernetes version.
var switchable = []testcluster.Component{testcluster.KubeletComponent, testcluster.Kubeadm, testcluster.Kubectl}

// link points the node's command c at binary, replacing the previous link in one rename.
func (n *Node) link(c testcluster.Component, binary string) error {
	dst := filepath.Join(n.dir, "bin", string(c))
	tmp := dst + ".new"
	os.Remove(tmp)
	if err := os.Symlink(binary, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// setUpNamespaces gives the node its host name, its own /run and its bind mounts, and lets it
// forward IPv4, which kubeadm's preflight requires.
func (n *Node) setUpNamespaces(ctx context.Context) error {
	script := []string{
		`set -e`,
		`hostname "$1"`,
		`mount -t tmpfs -o mode=0755 tmpfs /run`,
	}
	for _, m := range nodeMounts {
		script = append(script, fmt.Sprintf(`mount --bind "$2/%s" %s`, m.source, m.inside))
	}
	script = append(script, `echo 1 > /proc/sys/net/ipv4/ip_forward`)
	argv := n.holder.enter(hostEnv, "sh", "-c", strings.Join(script, "\n"), "sh", n.Name, n.dir)
	if _, err := runCommand(ctx, argv); err != nil {
		return fmt.Errorf("node %s: setting up its namespaces: %w", n.Name, err)
	}
	return nil
}

func (n *Node) writeHosts() error {
	// Written in place: a rename would leave the bind mount on the old file.
	return os.WriteFile(filepath.Join(n.dir, "hosts"), n.cluster.hostsFile(), 0o644)
}

// kubeadmImages asks kubeadm, run on the node, which images Kubernetes version uses.
func (n *Node) kubeadmImages(ctx context.Context, kubeadm, version string) ([]string, error) {
	out, err := n.Run(ctx, kubeadm, "config", "images", "list", "--kubernetes-version", version, "--image-repository", ImageRepository)
	if err != nil {
		return nil, err
	}
	return kubeadmImages(out), nil
}

func (n *Node) startContainerd(ctx context.Context, sandboxImage string) error {
	config := filepath.Join(n.dir, "containerd.toml")
	body := containerdConfig(filepath.Join(n.dir, "containerd"), filepath.Join(n.dir, "image-verifiers"), filepath.Join(n.dir, "cni"), sandboxImage)
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		return err
	}
	proc, err := n.Start("containerd", "containerd", "--config", config)
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = proc
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return poll(ctx, 100*time.Millisecond, func() error {
		if exited, err := proc.Exited(); exited {
			return fmt.Errorf("node %s: containerd exited: %v\n%s", n.Name, err, proc.LogTail(20))
		}
		if _, err := n.Run(ctx, "ctr", "version"); err != nil {
			return fmt.Errorf("node %s: containerd does not answer: %w: %w", n.Name, err, errNotYet)
		}
		return nil
	})
}

// importImages imports version's images into the node's containerd and checks that each is there.
func (n *Node) importImages(ctx context.Context, version string, refs []string, paths map[testcluster.Binary]string) error {
	set, err := n.cluster.imagesFor(version, refs, paths)
	if err != nil {
		return err
	}
	start := time.Now()
	if _, err := n.Run(ctx, "ctr", "images", "import", set.tarball); err != nil {
		return err
	}
	out, err := n.Run(ctx, "ctr", "images", "list", "--quiet")
	if err != nil {
		return err
	}
	present := strings.Fields(string(out))
	for _, ref := range set.refs {
		if !slices.Contains(present, ref) {
			return fmt.Errorf("node %s: image %s missing after the import; present: %v", n.Name, ref, present)
		}
	}
	n.cluster.log.Logf("node %s: imported %d images of %s in %s", n.Name, len(set.refs), version, time.Since(start).Round(time.Millisecond))
	return nil
}

// Version returns the version of the node's binary c (kubelet, kubeadm, kubectl).
func (n *Node) Version(c testcluster.Component) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.versions[c]
}

// Provision makes Kubernetes version available on the node without switching to it: its binaries
// built or found in the cache, its images imported into the node's containerd, as an upgrade needs
// before kubeadm upgrade runs.
func (n *Node) Provision(ctx context.Context, version string) error {
	n.mu.Lock()
	_, done := n.provisions[version]
	n.mu.Unlock()
	if done {
		return nil
	}
	paths, err := testcluster.EnsureBinaries(ctx, n.cluster.log, NodeBinaries(version))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.provisions[version] = paths
	n.mu.Unlock()
	refs, err := n.kubeadmImages(ctx, paths[testcluster.Binary{Component: testcluster.Kubeadm, Version: version}], version)
	if err != nil {
		return err
	}
	return n.importImages(ctx, version, refs, paths)
}

func (n *Node) binaryPath(c testcluster.Component, version string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.provisions[version][testcluster.Binary{Component: c, Version: version}]
}

// UseBinaries switches the node's commands (kubelet, kubeadm, kubectl) to those of version, which
// Provision must have made available; a running kubelet keeps running the old binary until
// RestartKubelet.
func (n *Node) UseBinaries(version string, commands ...testcluster.Component) error {
	for _, c := range commands {
		if !slices.Contains(switchable, c) {
			return fmt.Errorf("node %s runs no switchable %s", n.Name, c)
		}
		binary := n.binaryPath(c, version)
		if binary == "" {
			return fmt.Errorf("node %s: %s is not provisioned", n.Name, version)
		}
		if err := n.link(c, binary); err != nil {
			return err
		}
		n.mu.Lock()
		n.versions[c] = version
		n.mu.Unlock()
	}
	return nil
}

// RestartKubelet stops the running kubelet; the supervisor starts it again with the current
// binary, configuration and flags, as `systemctl restart kubelet` would.
func (n *Node) RestartKubelet() { n.kubelet.restart() }

// KubeletProcess returns the running kubelet, or nil between a stop and the next start.
func (n *Node) KubeletProcess() *testcluster.Process { return n.kubelet.current() }

// Command returns argv to run inside the node, with the node's environment: its PATH first (its
// kubelet, kubeadm, kubectl, crictl, ctr), KUBECONFIG the admin's, crictl and ctr pointed at its
// containerd.
func (n *Node) Command(ctx context.Context, argv ...string) *exec.Cmd {
	full := n.holder.enter(n.env, argv...)
	cmd := exec.CommandContext(ctx, full[0], full[1:]...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// Run runs argv inside the node and returns its standard output; an error carries the end of its
// output.
func (n *Node) Run(ctx context.Context, argv ...string) ([]byte, error) {
	return runCommand(ctx, n.holder.enter(n.env, argv...))
}

// Start starts a long-running process inside the node, logging to the node's logs/<name>.log.
func (n *Node) Start(name string, argv ...string) (*testcluster.Process, error) {
	return testcluster.StartProcess(n.Name+"/"+name, n.logPath(name), n.holder.enter(n.env, argv...))
}

func (n *Node) logPath(name string) string { return filepath.Join(n.dir, "logs", name+".log") }

// LogTail returns the last lines of the log of the node's process name ("kubelet", "containerd",
// "kubeadm-init", "kubeadm-join").
func (n *Node) LogTail(name string, lines int) string {
	data, err := os.ReadFile(n.logPath(name))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return testcluster.LastLines(data, lines)
}

// HostPath returns where the node's file path is on the machine: its own directories are in the
// node's directory; the rest of its file system is the machine's, except /run, reached through
// its namespace holder.
func (n *Node) HostPath(path string) string {
	for _, m := range nodeMounts {
		if path == m.inside {
			return filepath.Join(n.dir, m.source)
		}
		if rest, ok := strings.CutPrefix(path, m.inside+"/"); ok && !m.file {
			return filepath.Join(n.dir, m.source, rest)
		}
	}
	return filepath.Join("/proc", strconv.Itoa(n.holder.proc.PID()), "root", path)
}

// Namespaces are the node's mount, network and UTS namespaces.
func (n *Node) Namespaces() []Namespace { return n.holder.namespaces }

// removePods removes every pod sandbox and container. A container the stopped kubelet was still
// starting cannot be removed until containerd has finished starting it, which takes moments, so
// that refusal is waited out.
func (n *Node) removePods(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return poll(ctx, 500*time.Millisecond, func() error {
		_, err := n.Run(ctx, "crictl", "rmp", "--all", "--force")
		if err != nil && strings.Contains(err.Error(), "is in starting state") {
			return fmt.Errorf("%v: %w", err, errNotYet)
		}
		return err
	})
}

// close tears the node down in order: the kubelet, so that nothing restarts the Pods; every pod
// sandbox and container; containerd; any process still in the node's namespaces; the namespaces;
// the node's cgroups.
func (n *Node) close(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	containerd := n.containerd
	n.mu.Unlock()

	start := time.Now()
	var errs []error
	if n.kubelet != nil {
		n.kubelet.stop()
	}
	if containerd != nil {
		if exited, _ := containerd.Exited(); !exited {
			if err := n.removePods(ctx); err != nil {
				errs = append(errs, fmt.Errorf("node %s: removing its pods: %w", n.Name, err))
			}
		}
		containerd.Stop(20 * time.Second)
	}
	// Nothing but the holder should be left; whatever is outlived the steps meant to end it. While
	// the holder keeps the namespaces alive, their inode numbers name only them.
	killed, err := killAll(ctx, n.holder.namespaces, n.holder.proc.PID())
	if len(killed) > 0 {
		n.cluster.log.Logf("node %s: killed what outlived the teardown: %v", n.Name, killed)
	}
	errs = append(errs, err)
	n.holder.stop()
	errs = append(errs, removeCgroup(ctx, n.CgroupRoot))
	n.cluster.log.Logf("node %s torn down in %s", n.Name, time.Since(start).Round(time.Millisecond))
	return errors.Join(errs...)
}
