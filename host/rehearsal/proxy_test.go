package rehearsal

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testCA signs the certificates of one test, as kubeadm's CAs do.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// issue returns a certificate and key signed by ca, PEM-encoded.
func (ca *testCA) issue(t *testing.T, subject pkix.Name, usage x509.ExtKeyUsage, ips ...net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: subject, IPAddresses: ips,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

func (ca *testCA) pem() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw})
}

// seen is what a backend received of one request.
type seen struct {
	backend       int
	user          string
	groups        []string
	clientCertCN  string
	authorization string
}

func TestRoundRobinProxyTakesHealthyServersInTurnAndAssertsVerifiedClientIdentities(t *testing.T) {
	ca := newTestCA(t, "kubernetes")
	frontProxyCA := newTestCA(t, "front-proxy-ca")
	loopback := net.IPv4(127, 0, 0, 1)
	pki := t.TempDir()
	write := func(name string, data []byte) {
		path := filepath.Join(pki, "etc/kubernetes/pki", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("ca.crt", ca.pem())
	servingCert, servingKey := ca.issue(t, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth, loopback)
	write("apiserver.crt", servingCert)
	write("apiserver.key", servingKey)
	fpCert, fpKey := frontProxyCA.issue(t, pkix.Name{CommonName: "front-proxy-client"}, x509.ExtKeyUsageClientAuth)
	write("front-proxy-client.crt", fpCert)
	write("front-proxy-client.key", fpKey)

	var mu sync.Mutex
	var requests []seen
	serving, err := tls.X509KeyPair(servingCert, servingKey)
	if err != nil {
		t.Fatal(err)
	}
	var backends []*url.URL
	for i := range 2 {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				return
			}
			s := seen{backend: i, user: r.Header.Get("X-Remote-User"), groups: r.Header.Values("X-Remote-Group"),
				authorization: r.Header.Get("Authorization")}
			if len(r.TLS.PeerCertificates) > 0 {
				s.clientCertCN = r.TLS.PeerCertificates[0].Subject.CommonName
			}
			mu.Lock()
			requests = append(requests, s)
			mu.Unlock()
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientAuth: tls.RequestClientCert}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		backends = append(backends, u)
		if i == 0 {
			// A server that is down between the two: never healthy, never chosen.
			down, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			backends = append(backends, &url.URL{Scheme: "https", Host: down.Addr().String()})
			down.Close()
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := serveRoundRobin(ln, (&net.Dialer{}).DialContext, backends, func(path string) string { return filepath.Join(pki, path) }, t)
	t.Cleanup(func() { p.Close() })
	deadline := time.Now().Add(3 * healthInterval * healthRise)
	for !p.backends[0].healthy.Load() || !p.backends[2].healthy.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the live backends never became healthy")
		}
		time.Sleep(50 * time.Millisecond)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	aliceCert, aliceKey := ca.issue(t, pkix.Name{CommonName: "alice", Organization: []string{"team", "system:authenticated"}}, x509.ExtKeyUsageClientAuth)
	alice, err := tls.X509KeyPair(aliceCert, aliceKey)
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
	}
	send := func(c *http.Client, header, value string) {
		req, err := http.NewRequest(http.MethodGet, "https://"+ln.Addr().String()+"/api/v1/namespaces", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(header, value)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	withCert := client(alice)
	for range 4 {
		send(withCert, "X-Remote-User", "mallory")
	}
	send(client(), "Authorization", "Bearer bootstrap-token")

	// A client certificate of another CA does not get through the handshake.
	strangerCA := newTestCA(t, "stranger")
	strangerCert, strangerKey := strangerCA.issue(t, pkix.Name{CommonName: "mallory"}, x509.ExtKeyUsageClientAuth)
	stranger, err := tls.X509KeyPair(strangerCert, strangerKey)
	if err != nil {
		t.Fatal(err)
	}
	// Presented whatever CAs the proxy names as acceptable, as a client trying its luck would.
	insistent := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }}}}
	if resp, err := insistent.Get("https://" + ln.Addr().String() + "/api"); err == nil {
		resp.Body.Close()
		t.Error("a client certificate of an unknown CA was accepted")
	}

	mu.Lock()
	defer mu.Unlock()
	if len(requests) != 5 {
		t.Fatalf("backends saw %d requests, want 5: %+v", len(requests), requests)
	}
	var order []int
	for _, s := range requests {
		order = append(order, s.backend)
	}
	if !slices.Equal(order[:4], []int{0, 1, 0, 1}) {
		t.Errorf("backends in order %v, want the two healthy ones in turn", order[:4])
	}
	for _, s := range requests[:4] {
		if s.user != "alice" || strings.Join(s.groups, ",") != "team,system:authenticated" || s.clientCertCN != "front-proxy-client" {
			t.Errorf("with a client certificate the backend saw user %q, groups %q, client certificate %q; want alice, team and system:authenticated, front-proxy-client",
				s.user, s.groups, s.clientCertCN)
		}
	}
	if last := requests[4]; last.user != "" || last.clientCertCN != "" || last.authorization != "Bearer bootstrap-token" {
		t.Errorf("without a client certificate the backend saw user %q, client certificate %q, authorization %q; want the client's own credentials only",
			last.user, last.clientCertCN, last.authorization)
	}
}
