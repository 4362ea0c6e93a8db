package serve

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/devpki"
)

func TestCertificateFilesAreFollowedWithoutCuttingOpenConnections(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	f.cfg.ClientCAFile = filepath.Join(dir, "client-ca.crt")
	if err := os.WriteFile(f.cfg.ClientCAFile, f.ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	s := f.startServer(t)

	ops := "http://" + s.MetricsAddr().String()
	plain := &http.Client{Timeout: 10 * time.Second}
	gateway := "https://" + s.GatewayAddr().String()
	// client makes each request on a new connection, presenting clientCert
	// when given.
	client := func(clientCert *devpki.Leaf) *http.Client {
		transport := f.gatewayTransport()
		transport.DisableKeepAlives = true
		if clientCert != nil {
			// Presented whatever CAs the gateway names as acceptable.
			cert := clientCert.TLSCertificate()
			transport.TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
		}
		// The slow request lasts the whole test.
		return &http.Client{Timeout: 2 * time.Minute, Transport: transport}
	}
	request := func(path string, clientCert *devpki.Leaf) (*http.Response, error) {
		resp, err := client(clientCert).Get(gateway + path)
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	reloads := func(files string, n int) {
		t.Helper()
		eventuallyMetric(t, s, `skewgate_certificate_reloads_total{files="`+files+`"} `+string(rune('0'+n)))
	}
	const configmaps = "/api/v1/namespaces/x/configmaps"

	// A watch-like request stays open through every rotation.
	slow := f.slowRequest(t, client(nil), gateway)

	t.Run("serving certificate", func(t *testing.T) {
		f.writeLeaf(t, mustLeaf(t)(f.ca.Serving("skewgate-rotated", "127.0.0.1")), "gateway")
		reloads("--tls-cert-file/--tls-private-key-file", 1)
		resp, err := request(configmaps, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "skewgate-rotated" {
			t.Errorf("a new connection is served with %s, want skewgate-rotated", cn)
		}
	})

	t.Run("client CA", func(t *testing.T) {
		next, err := devpki.NewCA("next-client-ca")
		if err != nil {
			t.Fatal(err)
		}
		old := mustLeaf(t)(f.ca.Client(pkix.Name{CommonName: "old-client"}))
		fresh := mustLeaf(t)(next.Client(pkix.Name{CommonName: "new-client"}))
		if _, err := request(configmaps, fresh); err == nil {
			t.Fatal("a certificate from a CA the client CA file does not hold was accepted")
		}
		if err := os.WriteFile(f.cfg.ClientCAFile, next.CertPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		reloads("--client-ca-file", 1)
		if resp, err := request(configmaps, fresh); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("a certificate from the new client CA: %v", err)
		}
		if _, err := request(configmaps, old); err == nil {
			t.Error("a certificate from the replaced client CA is still accepted")
		}
	})

	t.Run("peer CA", func(t *testing.T) {
		next, err := devpki.NewCA("next-serving-ca")
		if err != nil {
			t.Fatal(err)
		}
		bundle := append(f.ca.CertPEM(), next.CertPEM()...)
		if err := os.WriteFile(f.cfg.PeerCAFile, bundle, 0o600); err != nil {
			t.Fatal(err)
		}
		reloads("--peer-ca-file", 1)
		// The servers switch to certificates from the new CA and drop their
		// connections, all but the one holding the slow request.
		cert := mustLeaf(t)(next.Serving("kube-apiserver", "kubernetes.default.svc", "127.0.0.1")).TLSCertificate()
		var switched []*apiServer
		for _, srv := range f.servers {
			if srv.slowEntered.Load() == 0 {
				srv.rotated.Store(&cert)
				srv.srv.CloseClientConnections()
				switched = append(switched, srv)
			}
		}
		servedBy := map[string]int{}
		for range 9 {
			resp, err := request(configmaps, nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("through the gateway to servers with certificates from the new peer CA: %v %v", resp, err)
			}
			servedBy[resp.Header.Get("X-Served-By")]++
		}
		for _, srv := range switched {
			if servedBy[srv.spec.ID] == 0 {
				t.Errorf("%s, now with a certificate from the new peer CA, served none of the requests (%v)", srv.spec.ID, servedBy)
			}
		}
		// The controller verifies them too.
		for _, srv := range switched {
			probes := srv.requestsFrom("front-proxy-client")
			eventually(t, "more probes", func() bool { return srv.requestsFrom("front-proxy-client") > probes+3 })
		}
		if _, _, m := get(t, plain, ops+"/metrics"); strings.Contains(m, `reason="tls"`) {
			t.Errorf("the controller refused a server certificate from the new peer CA:\n%s", m)
		}
	})

	t.Run("front-proxy client certificate", func(t *testing.T) {
		f.writeLeaf(t, mustLeaf(t)(f.ca.Client(pkix.Name{CommonName: "front-proxy-client-2"})), "proxy")
		reloads("--proxy-client-cert-file/--proxy-client-key-file", 1)
		eventually(t, "the controller presenting the new certificate", func() bool {
			for _, srv := range f.servers {
				if srv.requestsFrom("front-proxy-client-2") == 0 {
					return false
				}
			}
			return true
		})
	})

	t.Run("bad serving certificate", func(t *testing.T) {
		if err := os.WriteFile(f.cfg.TLSCertFile, []byte("not a certificate"), 0o600); err != nil {
			t.Fatal(err)
		}
		eventuallyMetric(t, s, `skewgate_certificate_reload_failures_total{files="--tls-cert-file/--tls-private-key-file"} 1`)
		resp, err := request(configmaps, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cn := resp.TLS.PeerCertificates[0].Subject.CommonName; cn != "skewgate-rotated" {
			t.Errorf("after a bad file, new connections are served with %s, want the last good skewgate-rotated", cn)
		}
	})

	f.release()
	if code := <-slow; code != http.StatusOK {
		t.Errorf("the request open through the rotations: status %d, want 200", code)
	}
}

func TestFrontProxyCertificateFileIsFollowedForAssertedIdentities(t *testing.T) {
	f := newFixture(t)
	f.cfg.IdentityMode = frontProxyMode
	f.cfg.ClientCAFile = f.cfg.PeerCAFile
	s := f.startServer(t)
	transport := f.gatewayTransport()
	transport.TLSClientConfig.Certificates = []tls.Certificate{mustLeaf(t)(f.ca.Client(pkix.Name{CommonName: "alice"})).TLSCertificate()}
	client := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	asserted := func(proxyCN string) int {
		n := 0
		for _, srv := range f.servers {
			n += srv.count(srv.asserted, proxyCN+" as alice")
		}
		return n
	}

	if code, _, body := get(t, client, "https://"+s.GatewayAddr().String()+"/api/v1/namespaces/x/configmaps"); code != http.StatusOK || asserted("front-proxy-client") != 1 {
		t.Fatalf("alice's request: %d %s, asserted with the front-proxy certificate %d times", code, body, asserted("front-proxy-client"))
	}
	f.writeLeaf(t, mustLeaf(t)(f.ca.Client(pkix.Name{CommonName: "front-proxy-client-2"})), "proxy")
	eventuallyMetric(t, s, `skewgate_certificate_reloads_total{files="--proxy-client-cert-file/--proxy-client-key-file"} 1`)
	// New connections present the new certificate.
	for _, srv := range f.servers {
		srv.srv.CloseClientConnections()
	}
	if code, _, body := get(t, client, "https://"+s.GatewayAddr().String()+"/api/v1/namespaces/x/configmaps"); code != http.StatusOK || asserted("front-proxy-client-2") != 1 {
		t.Errorf("alice's request after the rotation: %d %s, asserted with the new certificate %d times", code, body, asserted("front-proxy-client-2"))
	}
}
