package kubenode

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// APIServerPort is where every control-plane node's kube-apiserver listens.
const APIServerPort = 6443

// kubeadmTimeout is every timeout of kubeadm's that can be raised: on a busy 2-core machine
// several control planes start far slower than kubeadm's defaults expect.
const kubeadmTimeout = 8 * time.Minute

// skippedAddons are kubeadm's addon phases that need images not built here: CoreDNS is another
// project, and neither its Pods nor kube-proxy's would do anything without a pod network, which the
// nodes do not have (their static Pods use the host network).
var skippedAddons = []string{"addon/coredns", "addon/kube-proxy"}

var releasePattern = regexp.MustCompile(`^v1\.(\d+)\.\d+$`)

// minorVersion returns the minor version of a Kubernetes release "v1.Y.Z".
func minorVersion(version string) (int, error) {
	m := releasePattern.FindStringSubmatch(version)
	if m == nil {
		return 0, fmt.Errorf("version %q is not of the form v1.Y.Z", version)
	}
	return strconv.Atoi(m[1])
}

// kubeadmAPI is the kubeadm configuration API a kubeadm release reads: v1beta4 from 1.31
// (extra arguments as name/value lists, a timeouts section, disabled addons), v1beta3 before.
type kubeadmAPI struct {
	version string
	v1beta4 bool
	minor   int
}

func kubeadmAPIFor(kubernetesVersion string) (kubeadmAPI, error) {
	minor, err := minorVersion(kubernetesVersion)
	if err != nil {
		return kubeadmAPI{}, err
	}
	api := kubeadmAPI{version: "kubeadm.k8s.io/v1beta3", minor: minor}
	if minor >= 31 {
		api = kubeadmAPI{version: "kubeadm.k8s.io/v1beta4", v1beta4: true, minor: minor}
	}
	return api, nil
}

// args renders extra arguments in the API's form.
func (a kubeadmAPI) args(kv map[string]string) any {
	if !a.v1beta4 {
		return kv
	}
	var list []map[string]string
	for _, k := range slices.Sorted(maps.Keys(kv)) {
		list = append(list, map[string]string{"name": k, "value": kv[k]})
	}
	return list
}

func (a kubeadmAPI) timeouts() map[string]string {
	t := kubeadmTimeout.String()
	return map[string]string{
		"controlPlaneComponentHealthCheck": t,
		"kubeletHealthCheck":               t,
		"kubernetesAPICall":                t,
		"etcdAPICall":                      t,
		"tlsBootstrap":                     t,
		"discovery":                        t,
		"upgradeManifests":                 t,
	}
}

// nodeRegistration is what init and join say about the node itself. Its per-node kubelet flags
// (its address, its own cgroup root among the nodes sharing the machine's cgroups) go to the
// node's kubeadm-flags.env, which kubeadm upgrades leave as they are.
func (a kubeadmAPI) nodeRegistration(n nodeParams) map[string]any {
	reg := map[string]any{
		"name":             n.name,
		"criSocket":        containerdEndpoint,
		"imagePullPolicy":  "IfNotPresent",
		"kubeletExtraArgs": a.args(map[string]string{"node-ip": n.ip.String(), "cgroup-root": n.cgroupRoot}),
	}
	if len(n.ignorePreflightErrors) > 0 {
		reg["ignorePreflightErrors"] = n.ignorePreflightErrors
	}
	return reg
}

// clusterParams are the settings every node of a cluster shares, and the version of the kubeadm
// that reads them.
type clusterParams struct {
	kubernetesVersion string
	// endpoint is the control-plane endpoint's host name, resolved by every node's /etc/hosts.
	endpoint       string
	token          string
	certificateKey string
}

// nodeParams are one node's settings.
type nodeParams struct {
	name                  string
	ip                    netip.Addr
	cgroupRoot            string
	ignorePreflightErrors []string
}

// initConfig renders the configuration of kubeadm init on the first control-plane node.
func initConfig(c clusterParams, n nodeParams) ([]byte, error) {
	api, err := kubeadmAPIFor(c.kubernetesVersion)
	if err != nil {
		return nil, err
	}
	endpoint := c.endpoint + ":" + strconv.Itoa(APIServerPort)
	init := map[string]any{
		"apiVersion": api.version,
		"kind":       "InitConfiguration",
		"bootstrapTokens": []map[string]any{{
			"token":  c.token,
			"ttl":    "24h0m0s",
			"usages": []string{"signing", "authentication"},
			"groups": []string{"system:bootstrappers:kubeadm:default-node-token"},
		}},
		"certificateKey":   c.certificateKey,
		"localAPIEndpoint": map[string]any{"advertiseAddress": n.ip.String(), "bindPort": APIServerPort},
		"nodeRegistration": api.nodeRegistration(n),
		"skipPhases":       skippedAddons,
	}
	cluster := map[string]any{
		"apiVersion":           api.version,
		"kind":                 "ClusterConfiguration",
		"kubernetesVersion":    c.kubernetesVersion,
		"controlPlaneEndpoint": endpoint,
		"imageRepository":      ImageRepository,
		"apiServer":            map[string]any{"certSANs": []string{c.endpoint}},
	}
	if api.v1beta4 {
		init["timeouts"] = api.timeouts()
		// Recorded in the cluster's kubeadm configuration, so that joining control-plane nodes
		// do not look for the addons' images either.
		cluster["dns"] = map[string]any{"disabled": true}
		cluster["proxy"] = map[string]any{"disabled": true}
	} else {
		cluster["apiServer"].(map[string]any)["timeoutForControlPlane"] = kubeadmTimeout.String()
	}
	kubelet := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// No systemd here; kubeadm's default driver is systemd's.
		"cgroupDriver": "cgroupfs",
		// The nodes' filesystems are the machine's, so how full it is says nothing of a node: at
		// the kubelet's default 85 % its image garbage collection deletes the images imported for
		// an upgrade before they are used (the static Pod then waits in ImagePullBackOff, as no
		// image can be pulled here), and eviction would evict the workloads. As kind sets it.
		"imageGCHighThresholdPercent": 100,
		"evictionHard":                map[string]string{"nodefs.available": "0%", "nodefs.inodesFree": "0%", "imagefs.available": "0%"},
	}
	if api.minor >= 31 {
		// The field exists from 1.31; from 1.35 the kubelet refuses cgroup v1 unless it is false.
		kubelet["failCgroupV1"] = false
	}
	return yamlDocuments(init, cluster, kubelet)
}

// joinConfig renders the configuration of kubeadm join --control-plane. caCertHash pins the
// cluster CA the bootstrap token's discovery must find.
func joinConfig(c clusterParams, n nodeParams, caCertHash string) ([]byte, error) {
	api, err := kubeadmAPIFor(c.kubernetesVersion)
	if err != nil {
		return nil, err
	}
	discovery := map[string]any{
		"bootstrapToken": map[string]any{
			"apiServerEndpoint": c.endpoint + ":" + strconv.Itoa(APIServerPort),
			"token":             c.token,
			"caCertHashes":      []string{caCertHash},
		},
	}
	join := map[string]any{
		"apiVersion":       api.version,
		"kind":             "JoinConfiguration",
		"discovery":        discovery,
		"nodeRegistration": api.nodeRegistration(n),
		"controlPlane": map[string]any{
			"localAPIEndpoint": map[string]any{"advertiseAddress": n.ip.String(), "bindPort": APIServerPort},
			"certificateKey":   c.certificateKey,
		},
	}
	if api.v1beta4 {
		join["timeouts"] = api.timeouts()
	} else {
		discovery["timeout"] = kubeadmTimeout.String()
	}
	return yamlDocuments(join)
}

func yamlDocuments(docs ...map[string]any) ([]byte, error) {
	var out []byte
	for i, d := range docs {
		b, err := yaml.Marshal(d)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

// newBootstrapToken returns a random bootstrap token, "[a-z0-9]{6}.[a-z0-9]{16}".
func newBootstrapToken() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 22)
	for i := range b {
		b[i] = alphabet[int(randomByte())%len(alphabet)]
	}
	return string(b[:6]) + "." + string(b[6:])
}

// randomByte returns a byte with no bias towards any value below 252, the largest multiple of 36
// a byte holds.
func randomByte() byte {
	var b [1]byte
	for {
		rand.Read(b[:])
		if b[0] < 252 {
			return b[0]
		}
	}
}

// newCertificateKey returns a random key for kubeadm's uploaded certificates: 32 bytes, hex.
func newCertificateKey() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// caCertHash is kubeadm's discovery hash of a CA certificate: "sha256:" and the hex SHA-256 of its
// DER SubjectPublicKeyInfo.
func caCertHash(caPEM []byte) (string, error) {
	block, _ := pem.Decode(caPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", errors.New("no PEM certificate in the CA file")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}
