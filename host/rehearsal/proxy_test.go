package rehearsal

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"io"
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

	"github.com/skewgate/skewgate/host/internal/devpki"
)

func mustCA(t *testing.T, name string) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustClient(t *testing.T, ca *devpki.CA, subject pkix.Name) tls.Certificate {
	t.Helper()
	l, err := ca.Client(subject)
	if err != nil {
		t.Fatal(err)
	}
	return l.TLSCertificate()
}

// seen is what a backend received of one request.
type seen struct {
	backend       int
	user          string
	groups        []string
	clientCertCN  string
	authorization string
}

// kubeadmPKI writes the certificates the endpoints read where kubeadm writes them, under the
// returned directory: the cluster CA, the API server's serving certificate (for 127.0.0.1) and the
// front-proxy client certificate.
func kubeadmPKI(t *testing.T) (dir string, ca *devpki.CA, serving *devpki.Leaf) {
	t.Helper()
	ca, frontProxyCA := mustCA(t, "kubernetes"), mustCA(t, "front-proxy-ca")
	dir = t.TempDir()
	write := func(name string, data []byte) {
		path := filepath.Join(dir, "etc/kubernetes/pki", name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeLeaf := func(name string, l *devpki.Leaf, err error) {
		if err != nil {
			t.Fatal(err)
		}
		key, err := l.KeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		write(name+".crt", l.CertPEM())
		write(name+".key", key)
	}
	write("ca.crt", ca.CertPEM())
	serving, err := ca.Serving("kube-apiserver", "127.0.0.1")
	writeLeaf("apiserver", serving, err)
	frontProxy, err := frontProxyCA.Client(pkix.Name{CommonName: "front-proxy-client"})
	writeLeaf("front-proxy-client", frontProxy, err)
	return dir, ca, serving
}

// backendsWithOneDown starts n TLS servers with serving's certificate, each answering with
// handler(its index), and returns their URLs with a server that is down after the first.
func backendsWithOneDown(t *testing.T, n int, serving *devpki.Leaf, handler func(i int) http.HandlerFunc) []*url.URL {
	t.Helper()
	var backends []*url.URL
	for i := range n {
		srv := httptest.NewUnstartedServer(handler(i))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{serving.TLSCertificate()}, ClientAuth: tls.RequestClientCert}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		backends = append(backends, u)
		if i == 0 {
			// A server that is down between the others: never healthy, never chosen.
			down, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			backends = append(backends, &url.URL{Scheme: "https", Host: down.Addr().String()})
			down.Close()
		}
	}
	return backends
}

// awaitHealthy waits until every backend but the down one (index 1) is healthy.
func awaitHealthy(t *testing.T, p *pool) {
	t.Helper()
	deadline := time.Now().Add(3 * healthInterval * healthRise)
	for i, b := range p.backends {
		for i != 1 && !b.healthy.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("backend %d never became healthy", i)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func TestRoundRobinProxyTakesHealthyServersInTurnAndAssertsVerifiedClientIdentities(t *testing.T) {
	pki, ca, serving := kubeadmPKI(t)
	strangerCA := mustCA(t, "stranger")
	var mu sync.Mutex
	var requests []seen
	backends := backendsWithOneDown(t, 2, serving, func(i int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
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
		}
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := serveRoundRobin(ln, (&net.Dialer{}).DialContext, backends, func(path string) string { return filepath.Join(pki, path) }, t)
	t.Cleanup(func() { p.Close() })
	awaitHealthy(t, p.pool)

	roots := ca.Pool()
	alice := mustClient(t, ca, pkix.Name{CommonName: "alice", Organization: []string{"team", "system:authenticated"}})
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
	stranger := mustClient(t, strangerCA, pkix.Name{CommonName: "mallory"})
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
