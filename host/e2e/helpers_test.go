package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// clusterStartTimeout covers building missing Kubernetes binaries (minutes on a cold Go cache)
// as well as starting the servers.
const clusterStartTimeout = 20 * time.Minute

// Server indexes of a skewed cluster: a rolling upgrade from 1.35 to 1.36 half done, with no
// mixed version proxy anywhere.
const (
	skewedOld       = 0 // 1.35 without the mixed version proxy
	skewedUpgraded  = 1 // 1.36 with the default API set
	skewedWithExtra = 2 // 1.36 that also serves coordination.k8s.io/v1alpha2
)

// skewedSpec is the skewed cluster; prefix names its servers (and so fixes their server IDs).
func skewedSpec(prefix string) testcluster.Spec {
	return testcluster.Spec{Servers: []testcluster.ServerSpec{
		skewedOld:       {Name: prefix + "-1-35", Version: testcluster.KubeVersion135},
		skewedUpgraded:  {Name: prefix + "-1-36", Version: testcluster.KubeVersion136},
		skewedWithExtra: {Name: prefix + "-1-36-extra", Version: testcluster.KubeVersion136, RuntimeConfig: []string{"coordination.k8s.io/v1alpha2=true"}},
	}}
}

// skewedResource is a resource missing from some servers of the skewed cluster (see
// fixtures/manifest.json "skew"), with the servers that serve it.
type skewedResource struct {
	path     string
	servedBy []int
}

var skewedResources = []skewedResource{
	{"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", []int{skewedUpgraded, skewedWithExtra}},
	{"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicybindings", []int{skewedUpgraded, skewedWithExtra}},
	{"/apis/coordination.k8s.io/v1alpha2/leasecandidates", []int{skewedWithExtra}},
}

// skewedTrafficRounds is how many times each scenario that measures false 404s requests each
// skewed resource per server of the cluster.
const skewedTrafficRounds = 4

// requireSkew checks, against each server directly, that exactly the servers listed in
// skewedResources serve each resource: the cluster really is skewed.
func requireSkew(t *testing.T, cluster *testcluster.Cluster) {
	t.Helper()
	direct := directAdminClient(cluster)
	defer direct.CloseIdleConnections()
	for _, r := range skewedResources {
		for i, s := range cluster.Servers() {
			want := http.StatusNotFound
			if slices.Contains(r.servedBy, i) {
				want = http.StatusOK
			}
			if resp := mustDo(t, direct, http.MethodGet, s.URL+r.path, nil, nil); resp.status != want {
				t.Fatalf("direct GET %s on %s (%s) = %d, want %d: the cluster is not skewed as expected", r.path, s.Name, s.Version, resp.status, want)
			}
		}
	}
}

// directAdminClient talks to the API servers themselves as the admin client certificate.
func directAdminClient(cluster *testcluster.Cluster) *http.Client {
	return &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: cluster.AdminTLSConfig()}}
}

// sharedCluster is a cluster that several scenarios use in turn (tests run one at a time), so
// that they all see the same servers; it starts on first use and TestMain closes it. A scenario
// that stops or restarts one of its servers must leave it running as it found it.
type sharedCluster struct {
	spec    testcluster.Spec
	log     testLog
	once    sync.Once
	cluster *testcluster.Cluster
	err     error
}

// sharedSkewed is the skewed cluster of the baseline and of the scenarios that only read from it
// or restart a server in place.
var sharedSkewed = &sharedCluster{spec: skewedSpec("baseline")}

// sharedOneCA is the skewed cluster set up as several installers do, with one CA as client CA,
// request-header CA and peer CA: the front-proxy client certificate alone authenticates there,
// so a gateway that presents it where it asserts no identity lends clients its own. Its servers
// keep an audit log of the requests auditPolicy selects.
var sharedOneCA = &sharedCluster{spec: func() testcluster.Spec {
	spec := skewedSpec("oneca")
	spec.OneCA = true
	spec.AuditPolicy = auditPolicy
	return spec
}()}

// auditedConfigMap is the only object the one-CA cluster's servers audit requests for, so the
// audit log stays small and a scenario finds its own requests there.
const auditedConfigMap = "skewgate-e2e-audited"

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["` + auditedConfigMap + `"]
- level: None
`

func (s *sharedCluster) get(t *testing.T) *testcluster.Cluster {
	t.Helper()
	s.log.attach(t)
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
		defer cancel()
		s.cluster, s.err = testcluster.Start(ctx, &s.log, s.spec)
	})
	if s.err != nil {
		t.Fatalf("starting the shared cluster: %v", s.err)
	}
	return s.cluster
}

func closeSharedClusters() {
	for _, s := range []*sharedCluster{sharedSkewed, sharedOneCA, sharedFieldSkew, sharedWorkloadSkew} {
		if c := s.cluster; c != nil {
			if err := c.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "e2e: closing a shared cluster:", err)
			}
		}
	}
}

// testLog sends a shared cluster's messages to the test using it, or to stderr between tests:
// a *testing.T must not be logged to once its test has finished.
type testLog struct {
	mu sync.Mutex
	t  *testing.T
}

func (l *testLog) attach(t *testing.T) {
	l.mu.Lock()
	l.t = t
	l.mu.Unlock()
	t.Cleanup(func() {
		l.mu.Lock()
		l.t = nil
		l.mu.Unlock()
	})
}

func (l *testLog) Logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.t != nil {
		l.t.Helper()
		l.t.Logf(format, args...)
		return
	}
	fmt.Fprintf(os.Stderr, "testcluster: "+format+"\n", args...)
}

// besideOtherScenariosWithOwnClusters lets a scenario that starts a cluster of its own and touches
// no shared one run beside the others like it, once every other scenario has run: they mostly
// wait for kubeadm, kubelets and restarting servers, and `go test` runs at most GOMAXPROCS of
// them at once (two on a 2-core machine).
func besideOtherScenariosWithOwnClusters(t *testing.T) {
	t.Parallel()
}

// startCluster starts a cluster owned by one test.
func startCluster(t *testing.T, spec testcluster.Spec) *testcluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	cluster, err := testcluster.Start(ctx, t, spec)
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := cluster.Close(); err != nil {
			t.Errorf("closing the cluster: %v", err)
		}
	})
	return cluster
}

// response is a fully read HTTP response.
type response struct {
	status int
	header http.Header
	body   []byte
}

func do(client *http.Client, method, url string, header http.Header, body []byte) (response, error) {
	return doContext(context.Background(), client, method, url, header, body)
}

func doContext(ctx context.Context, client *http.Client, method, url string, header http.Header, body []byte) (response, error) {
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, reader)
	if err != nil {
		return response{}, err
	}
	for name, values := range header {
		req.Header[name] = slices.Clone(values)
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading the body: %w", method, url, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}, nil
}

func mustDo(t *testing.T, client *http.Client, method, url string, header http.Header, body []byte) response {
	t.Helper()
	resp, err := do(client, method, url, header, body)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func bearer(token string) http.Header {
	return http.Header{"Authorization": {"Bearer " + token}}
}

// apiStatus is the part of a metav1.Status the scenarios look at.
type apiStatus struct {
	Kind    string `json:"kind"`
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
	Details struct {
		RetryAfterSeconds int `json:"retryAfterSeconds"`
	} `json:"details"`
}

// userInfo is what a SelfSubjectReview reports.
type userInfo struct {
	Username string              `json:"username"`
	UID      string              `json:"uid"`
	Groups   []string            `json:"groups"`
	Extra    map[string][]string `json:"extra"`
}

// whoAmI posts a SelfSubjectReview and returns the identity the API server authenticated.
func whoAmI(t *testing.T, client *http.Client, baseURL string, header http.Header) userInfo {
	t.Helper()
	resp := mustDo(t, client, http.MethodPost, baseURL+"/apis/authentication.k8s.io/v1/selfsubjectreviews", header,
		[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	if resp.status != http.StatusCreated {
		t.Fatalf("SelfSubjectReview: HTTP %d: %s", resp.status, resp.body)
	}
	var review struct {
		Status struct {
			UserInfo userInfo `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(resp.body, &review); err != nil {
		t.Fatalf("decoding the SelfSubjectReview: %v", err)
	}
	return review.Status.UserInfo
}

// writeCertificate writes a certificate and its private key as PEM files in dir.
func writeCertificate(t *testing.T, dir, name string, cert tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatalf("encoding the %s key: %v", name, err)
	}
	var certPEM []byte
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	return certFile, keyFile
}

// writeCA writes a CA certificate as a PEM file in dir.
func writeCA(t *testing.T, dir, name string, ca *x509.Certificate) string {
	t.Helper()
	path := filepath.Join(dir, name+".crt")
	writeFile(t, path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw}))
	return path
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// eventually polls check every interval until it returns nil or timeout passes, then fails the
// test with the last error.
func eventually(t *testing.T, what string, timeout, interval time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true after %s: %v", what, timeout, err)
		}
		time.Sleep(interval)
	}
}
