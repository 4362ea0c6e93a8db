package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/host/testcluster"
)

// The kubeadm deployment of node-local skewgate, as users apply it.
var (
	deployDir             = filepath.Join(repoRoot, "host", "deploy", "kubeadm")
	nodeLocalManifest     = filepath.Join(deployDir, "skewgate.yaml")
	rbacManifest          = filepath.Join(deployDir, "rbac.yaml")
	pointComponentsScript = filepath.Join(deployDir, "point-components-at-skewgate.sh")
)

// skewgateControllerUser is the user of skewgate.conf; rbac.yaml grants it what the controller
// reads.
const skewgateControllerUser = "system:skewgate-controller"

// manifestLocalAPIServer is the manifest's --local-apiserver once $(NODE_IP) is the test
// servers' address: kube-apiserver's port on a kubeadm node.
const manifestLocalAPIServer = "https://127.0.0.1:6443"

// kubeadmNode stands for a kubeadm control-plane node next to one server of the test cluster:
// the files skewgate's manifest names, and the components' kubeconfigs.
type kubeadmNode struct {
	cluster *testcluster.Cluster
	local   testcluster.Server
	// dir stands for /etc/kubernetes.
	dir string
	// files maps every node path the manifest names to its test counterpart.
	files map[string]string
	// kubectl is the real kubectl the deployment steps run.
	kubectl string
}

func newKubeadmNode(t *testing.T, cluster *testcluster.Cluster, local int) *kubeadmNode {
	t.Helper()
	n := &kubeadmNode{cluster: cluster, local: cluster.Server(local), dir: t.TempDir(), kubectl: ensureKubectl(t)}
	f := cluster.PKI().Files
	n.files = map[string]string{
		"/etc/kubernetes/pki/apiserver.crt":          f.ServingCert,
		"/etc/kubernetes/pki/apiserver.key":          f.ServingKey,
		"/etc/kubernetes/pki/ca.crt":                 f.CACert,
		"/etc/kubernetes/pki/front-proxy-client.crt": f.FrontProxyClientCert,
		"/etc/kubernetes/pki/front-proxy-client.key": f.FrontProxyClientKey,
		"/etc/kubernetes/skewgate.conf":              filepath.Join(n.dir, "skewgate.conf"),
		"/var/cache/skewgate":                        skewgateBuild.compileCache,
	}
	// kubeadm's component kubeconfigs name the node's own server; skewgate.conf is made the same
	// way (`kubeadm kubeconfig user`).
	for name, user := range map[string]string{
		"controller-manager.conf": testcluster.ControllerManagerUser,
		"scheduler.conf":          "system:kube-scheduler",
		"skewgate.conf":           skewgateControllerUser,
	} {
		if err := cluster.WriteComponentKubeconfig(filepath.Join(n.dir, name), user, n.local.URL, f.CACert, testcluster.ServingServerName); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// kubeconfig is the path of one of the node's kubeconfigs (controller-manager.conf, ...).
func (n *kubeadmNode) kubeconfig(name string) string { return filepath.Join(n.dir, name) }

// runKubectl runs the real kubectl as the cluster admin against the node's server.
func (n *kubeadmNode) runKubectl(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, n.kubectl, append([]string{"--kubeconfig=" + n.cluster.AdminKubeconfig(), "--context=" + n.local.Name}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// applyRBAC applies rbac.yaml, for real: the controller's informers only sync if it grants
// enough.
func (n *kubeadmNode) applyRBAC(t *testing.T) {
	t.Helper()
	n.runKubectl(t, "apply", "--server-side", "-f", rbacManifest)
}

// pointComponentsAt runs point-components-at-skewgate.sh on the node's kubeconfigs, with the
// real kubectl, for a skewgate on gatewayPort.
func (n *kubeadmNode) pointComponentsAt(t *testing.T, gatewayPort int) {
	t.Helper()
	// The script runs `kubectl`: the pinned one, whatever else the machine has.
	bin := t.TempDir()
	if err := os.Symlink(n.kubectl, filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", pointComponentsScript)
	cmd.Env = append(os.Environ(),
		"KUBERNETES_DIR="+n.dir,
		"SKEWGATE_PORT="+strconv.Itoa(gatewayPort),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", pointComponentsScript, err, out)
	}
	for _, conf := range []string{"controller-manager.conf", "scheduler.conf"} {
		cfg, err := clientcmd.LoadFromFile(n.kubeconfig(conf))
		if err != nil {
			t.Fatal(err)
		}
		cl := cfg.Clusters["kubernetes"]
		if want := "https://127.0.0.1:" + strconv.Itoa(gatewayPort); cl == nil || cl.Server != want || cl.TLSServerName != "kubernetes" {
			t.Fatalf("%s after the script: cluster %+v; want server %s verified as kubernetes", conf, cl, want)
		}
		if len(cfg.AuthInfos) != 1 {
			t.Fatalf("%s after the script: %d users; want its one client certificate kept", conf, len(cfg.AuthInfos))
		}
	}
}

func readManifestPod(t *testing.T) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile(nodeLocalManifest)
	if err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		t.Fatalf("%s: %v", nodeLocalManifest, err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%s: %d containers; want skewgate alone", nodeLocalManifest, len(pod.Spec.Containers))
	}
	return &pod
}

// imageFiles are the paths the manifest names inside skewgate's image, with their test
// counterparts.
var imageFiles = map[string]*string{"/usr/local/lib/skewgate/skewgate.wasm": &skewgateBuild.wasm}

var envReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// manifestCommand is the manifest's command line as the kubelet would run it on the node, with
// what a test machine has elsewhere replaced: each file by the test's counterpart (every node
// path must be mounted into the container), the node's address and kube-apiserver port by the
// local test server's, and the two listening ports by free ones.
func (n *kubeadmNode) manifestCommand(t *testing.T, gatewayPort, metricsPort int) []string {
	t.Helper()
	container := readManifestPod(t).Spec.Containers[0]
	env := map[string]string{}
	for _, e := range container.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "status.hostIP" {
			t.Fatalf("manifest env %s: only the node's address (status.hostIP) is known to the test", e.Name)
		}
		env[e.Name] = "127.0.0.1"
	}
	mounted := func(path string) bool {
		return slices.ContainsFunc(container.VolumeMounts, func(m corev1.VolumeMount) bool {
			return path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
		})
	}
	if len(container.Command) < 2 || container.Command[0] != "skewgate" || container.Command[1] != "serve" || len(container.Args) != 0 {
		t.Fatalf("manifest command %q; want skewgate serve and its flags", container.Command)
	}
	argv := []string{skewgateBuild.binary, "serve"}
	for _, arg := range container.Command[2:] {
		arg = envReference.ReplaceAllStringFunc(arg, func(ref string) string {
			v, ok := env[envReference.FindStringSubmatch(ref)[1]]
			if !ok {
				t.Fatalf("manifest argument %q refers to an undefined variable", arg)
			}
			return v
		})
		name, value, _ := strings.Cut(arg, "=")
		switch {
		case name == "--local-apiserver":
			if value != manifestLocalAPIServer {
				t.Fatalf("manifest --local-apiserver %q; want the node's kube-apiserver, %s", value, manifestLocalAPIServer)
			}
			value = n.local.URL
		case name == "--secure-port":
			value = strconv.Itoa(gatewayPort)
		case name == "--metrics-bind-address":
			value = "127.0.0.1:" + strconv.Itoa(metricsPort)
		case imageFiles[value] != nil:
			value = *imageFiles[value]
		case strings.HasPrefix(value, "/"):
			if !mounted(value) {
				t.Fatalf("manifest %s names %s, which no volume mounts into the container", name, value)
			}
			if value = n.files[value]; value == "" {
				t.Fatalf("manifest %s names %s, which the test has no counterpart for", name, arg)
			}
		}
		argv = append(argv, name+"="+value)
	}
	// The scenarios read the snapshot, which the manifest does not serve.
	argv = append(argv, "--debug-handlers")
	// The test servers share 127.0.0.1 and announce no endpoints, so the controller cannot
	// discover the peers from the cluster as it does on kubeadm nodes; they are listed instead.
	for _, s := range n.cluster.Servers() {
		if s.URL != n.local.URL {
			argv = append(argv, "--apiserver="+s.URL)
		}
	}
	return argv
}

// startNodeLocalSkewgate runs skewgate next to the node's server with the manifest's own
// command line, after applying rbac.yaml.
func (n *kubeadmNode) startNodeLocalSkewgate(t *testing.T) *skewgate {
	t.Helper()
	requireSkewgate(t)
	n.applyRBAC(t)
	g := &skewgate{cluster: n.cluster, logPath: filepath.Join(t.TempDir(), "skewgate.log")}
	g.launch(t, func(gatewayPort, metricsPort int) []string { return n.manifestCommand(t, gatewayPort, metricsPort) })
	t.Logf("node-local skewgate next to %s (%s) at %s, ready %s after start", n.local.Name, n.local.Version, g.URL, g.readyAfter.Round(time.Millisecond))
	return g
}

// residentMemory is the gateway process's resident set size (VmRSS) in bytes.
func (g *skewgate) residentMemory(t *testing.T) int64 {
	t.Helper()
	m, err := g.proc.ResidentMemory()
	if err != nil {
		t.Fatal(err)
	}
	return m.VmRSS
}

// The manifests are what a user applies; the API server must accept them as they are.
func TestKubeadmManifestsAreAcceptedByTheAPIServer(t *testing.T) {
	cluster := sharedSkewed.get(t)
	n := newKubeadmNode(t, cluster, skewedOld)
	pod := readManifestPod(t)
	container := pod.Spec.Containers[0]
	for _, probe := range []*corev1.Probe{container.StartupProbe, container.LivenessProbe, container.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Host != "127.0.0.1" || !slices.Contains(container.Command, "--metrics-bind-address=127.0.0.1:"+probe.HTTPGet.Port.String()) {
			t.Errorf("probe %+v does not ask the metrics listener the manifest configures", probe)
		}
	}
	// A real cluster has the namespace's default service account, which Pod admission needs.
	if out, err := exec.Command(n.kubectl, "--kubeconfig="+cluster.AdminKubeconfig(), "create", "serviceaccount", "default", "-n", "kube-system").CombinedOutput(); err != nil &&
		!strings.Contains(string(out), "AlreadyExists") {
		t.Fatalf("creating kube-system/default: %v\n%s", err, out)
	}
	if out := n.runKubectl(t, "apply", "--dry-run=server", "-f", nodeLocalManifest); !strings.Contains(out, "pod/skewgate created (server dry run)") {
		t.Errorf("server-side dry run of %s: %s", nodeLocalManifest, out)
	}
	if out := n.runKubectl(t, "apply", "--dry-run=server", "-f", rbacManifest); strings.Count(out, "(server dry run)") != 6 {
		t.Errorf("server-side dry run of %s: %s", rbacManifest, out)
	}
}
