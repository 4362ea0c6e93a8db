package kubenode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

var testCluster = clusterParams{
	kubernetesVersion: "v1.36.3",
	endpoint:          ControlPlaneEndpoint,
	token:             "abcdef.0123456789abcdef",
	certificateKey:    strings.Repeat("ab", 32),
}

var testNode = nodeParams{
	name:                  "cp-1",
	ip:                    netip.MustParseAddr("10.240.0.2"),
	cgroupRoot:            "/skewgate-abc123-cp-1",
	ignorePreflightErrors: []string{"SystemVerification"},
}

// documents splits rendered YAML documents and decodes each.
func documents(t *testing.T, rendered []byte) []map[string]any {
	t.Helper()
	var docs []map[string]any
	for _, d := range strings.Split(string(rendered), "---\n") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("%v in:\n%s", err, d)
		}
		docs = append(docs, m)
	}
	return docs
}

// field walks a decoded document along keys.
func field(t *testing.T, doc map[string]any, keys ...string) any {
	t.Helper()
	var v any = doc
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %v is not an object", strings.Join(keys, "."), v)
		}
		v = m[k]
	}
	return v
}

func TestInitConfigV1beta4CarriesTheMachineSettingsAndDisablesTheAddons(t *testing.T) {
	rendered, err := initConfig(testCluster, testNode)
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, rendered)
	if len(docs) != 3 {
		t.Fatalf("%d documents, want InitConfiguration, ClusterConfiguration, KubeletConfiguration:\n%s", len(docs), rendered)
	}
	init, cluster, kubelet := docs[0], docs[1], docs[2]
	for _, tc := range []struct {
		doc  map[string]any
		path []string
		want string
	}{
		{init, []string{"apiVersion"}, "kubeadm.k8s.io/v1beta4"},
		{init, []string{"kind"}, "InitConfiguration"},
		{init, []string{"certificateKey"}, testCluster.certificateKey},
		{init, []string{"localAPIEndpoint", "advertiseAddress"}, "10.240.0.2"},
		{init, []string{"nodeRegistration", "name"}, "cp-1"},
		{init, []string{"nodeRegistration", "criSocket"}, "unix:///run/containerd/containerd.sock"},
		{init, []string{"timeouts", "controlPlaneComponentHealthCheck"}, "8m0s"},
		{cluster, []string{"kind"}, "ClusterConfiguration"},
		{cluster, []string{"kubernetesVersion"}, "v1.36.3"},
		{cluster, []string{"controlPlaneEndpoint"}, ControlPlaneEndpoint + ":6443"},
		{cluster, []string{"imageRepository"}, ImageRepository},
		{kubelet, []string{"kind"}, "KubeletConfiguration"},
		{kubelet, []string{"cgroupDriver"}, "cgroupfs"},
		{kubelet, []string{"evictionHard", "nodefs.available"}, "0%"},
		{kubelet, []string{"evictionHard", "nodefs.inodesFree"}, "0%"},
		{kubelet, []string{"evictionHard", "imagefs.available"}, "0%"},
	} {
		if got := field(t, tc.doc, tc.path...); got != tc.want {
			t.Errorf("%s = %v, want %s", strings.Join(tc.path, "."), got, tc.want)
		}
	}
	if got := field(t, kubelet, "failCgroupV1"); got != false {
		t.Errorf("failCgroupV1 = %v, want false", got)
	}
	if got := fmt.Sprint(field(t, kubelet, "imageGCHighThresholdPercent")); got != "100" {
		t.Errorf("imageGCHighThresholdPercent = %s, want 100: the machine's disk must never make a node delete its images", got)
	}
	for _, addon := range []string{"dns", "proxy"} {
		if got := field(t, cluster, addon, "disabled"); got != true {
			t.Errorf("%s.disabled = %v, want true", addon, got)
		}
	}
	if got := field(t, init, "skipPhases"); !sameStrings(got, skippedAddons) {
		t.Errorf("skipPhases = %v, want %v", got, skippedAddons)
	}
	if got := field(t, init, "nodeRegistration", "ignorePreflightErrors"); !sameStrings(got, []string{"SystemVerification"}) {
		t.Errorf("ignorePreflightErrors = %v, want only SystemVerification", got)
	}
	wantArgs := []any{
		map[string]any{"name": "cgroup-root", "value": "/skewgate-abc123-cp-1"},
		map[string]any{"name": "node-ip", "value": "10.240.0.2"},
	}
	if got := field(t, init, "nodeRegistration", "kubeletExtraArgs"); !equalJSON(t, got, wantArgs) {
		t.Errorf("kubeletExtraArgs = %v, want %v", got, wantArgs)
	}
	token := field(t, init, "bootstrapTokens").([]any)[0].(map[string]any)["token"]
	if token != testCluster.token {
		t.Errorf("bootstrap token = %v, want %s", token, testCluster.token)
	}
}

func TestInitConfigV1beta3ForKubeadmBefore131(t *testing.T) {
	params := testCluster
	params.kubernetesVersion = "v1.30.14"
	rendered, err := initConfig(params, testNode)
	if err != nil {
		t.Fatal(err)
	}
	docs := documents(t, rendered)
	init, cluster, kubelet := docs[0], docs[1], docs[2]
	if got := field(t, init, "apiVersion"); got != "kubeadm.k8s.io/v1beta3" {
		t.Errorf("apiVersion = %v, want kubeadm.k8s.io/v1beta3", got)
	}
	wantArgs := map[string]any{"cgroup-root": "/skewgate-abc123-cp-1", "node-ip": "10.240.0.2"}
	if got := field(t, init, "nodeRegistration", "kubeletExtraArgs"); !equalJSON(t, got, wantArgs) {
		t.Errorf("kubeletExtraArgs = %v, want the map %v", got, wantArgs)
	}
	if got := field(t, cluster, "apiServer", "timeoutForControlPlane"); got != "8m0s" {
		t.Errorf("apiServer.timeoutForControlPlane = %v, want 8m0s", got)
	}
	// v1beta3 knows none of these; kubeadm would reject them.
	for _, absent := range []struct {
		doc  map[string]any
		name string
	}{{init, "timeouts"}, {cluster, "dns"}, {cluster, "proxy"}, {kubelet, "failCgroupV1"}} {
		if v, ok := absent.doc[absent.name]; ok {
			t.Errorf("%s = %v; the v1.30 APIs have no such field", absent.name, v)
		}
	}
}

func TestJoinConfigPinsTheCAAndJoinsAsControlPlane(t *testing.T) {
	node := testNode
	node.name, node.ip = "cp-2", netip.MustParseAddr("10.240.0.3")
	for _, version := range []string{"v1.36.3", "v1.30.14"} {
		t.Run(version, func(t *testing.T) {
			params := testCluster
			params.kubernetesVersion = version
			rendered, err := joinConfig(params, node, "sha256:00ff")
			if err != nil {
				t.Fatal(err)
			}
			docs := documents(t, rendered)
			if len(docs) != 1 {
				t.Fatalf("%d documents, want one JoinConfiguration", len(docs))
			}
			join := docs[0]
			for _, tc := range []struct {
				path []string
				want string
			}{
				{[]string{"kind"}, "JoinConfiguration"},
				{[]string{"discovery", "bootstrapToken", "apiServerEndpoint"}, ControlPlaneEndpoint + ":6443"},
				{[]string{"discovery", "bootstrapToken", "token"}, testCluster.token},
				{[]string{"controlPlane", "localAPIEndpoint", "advertiseAddress"}, "10.240.0.3"},
				{[]string{"controlPlane", "certificateKey"}, testCluster.certificateKey},
				{[]string{"nodeRegistration", "name"}, "cp-2"},
			} {
				if got := field(t, join, tc.path...); got != tc.want {
					t.Errorf("%s = %v, want %s", strings.Join(tc.path, "."), got, tc.want)
				}
			}
			if got := field(t, join, "discovery", "bootstrapToken", "caCertHashes"); !sameStrings(got, []string{"sha256:00ff"}) {
				t.Errorf("caCertHashes = %v", got)
			}
			if version == "v1.30.14" {
				if got := field(t, join, "discovery", "timeout"); got != "8m0s" {
					t.Errorf("discovery.timeout = %v, want 8m0s", got)
				}
			} else if got := field(t, join, "timeouts", "discovery"); got != "8m0s" {
				t.Errorf("timeouts.discovery = %v, want 8m0s", got)
			}
		})
	}
}

func TestKubeadmAPIRejectsVersionsItCannotPlace(t *testing.T) {
	for _, v := range []string{"1.36.3", "v2.0.0", "v1.36", "latest"} {
		if _, err := initConfig(clusterParams{kubernetesVersion: v}, testNode); err == nil {
			t.Errorf("initConfig accepted version %q", v)
		}
	}
}

func TestBootstrapTokenAndCertificateKeyHaveKubeadmsFormat(t *testing.T) {
	tokenPattern := regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	seen := map[string]bool{}
	for range 100 {
		tok := newBootstrapToken()
		if !tokenPattern.MatchString(tok) {
			t.Fatalf("token %q does not match %s", tok, tokenPattern)
		}
		seen[tok] = true
	}
	if len(seen) != 100 {
		t.Errorf("%d distinct tokens of 100", len(seen))
	}
	if key := newCertificateKey(); !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(key) {
		t.Errorf("certificate key %q is not 32 bytes of hex", key)
	}
}

func TestCACertHashIsTheSHA256OfTheSubjectPublicKeyInfo(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kubernetes"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	got, err := caCertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	if want := "sha256:" + hex.EncodeToString(sum[:]); got != want {
		t.Errorf("caCertHash = %s, want %s", got, want)
	}
	if _, err := caCertHash([]byte("not a certificate")); err == nil {
		t.Error("caCertHash accepted garbage")
	}
}

func sameStrings(got any, want []string) bool {
	list, ok := got.([]any)
	if !ok || len(list) != len(want) {
		return false
	}
	for i, v := range list {
		if v != want[i] {
			return false
		}
	}
	return true
}

func equalJSON(t *testing.T, got, want any) bool {
	t.Helper()
	a, err := yaml.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	return string(a) == string(b)
}
