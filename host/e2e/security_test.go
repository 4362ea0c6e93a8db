package e2e

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/testcluster"
)

// TestSecurityThroughSkewgate attacks the gateway the way a client or a rogue backend could:
// identity headers a client forges never become an identity at the real API servers, a forged
// x-kubernetes-peer-proxied header does not switch re-routing off, a client certificate from an
// unknown CA is refused, and an "API server" whose serving certificate comes from another CA is
// never talked to beyond the failed handshake.
func TestSecurityThroughSkewgate(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	otherCA, err := devpki.NewCA("skewgate-e2e-other-ca")
	if err != nil {
		t.Fatal(err)
	}
	rogue := startRogueAPIServer(t, otherCA)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity, extraAPIServers: []string{rogue.server.URL}})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	// A few polls, so the controller tried the rogue backend more than once.
	eventually(t, "the controller tries the rogue backend", healthChangeTimeout, 100*time.Millisecond, func() error {
		if n := rogue.handshakes.Load(); n < 3 {
			return fmt.Errorf("%d TLS handshakes so far", n)
		}
		return nil
	})

	admin := gw.adminClient()
	defer admin.CloseIdleConnections()
	anonymous := gw.client()
	defer anonymous.CloseIdleConnections()
	servers := len(cluster.Servers())
	mapPath := skewedResources[0].path

	t.Run("forged identity headers without credentials are anonymous", func(t *testing.T) {
		forged := http.Header{
			"X-Remote-User":        {"system:admin"},
			"X-Remote-Group":       {"system:masters"},
			"X-Remote-Extra-Scope": {"everything"},
		}
		// The gateway presents the front-proxy certificate, with which these very headers are
		// an identity: only stripping them keeps a client from becoming system:admin.
		frontProxy := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      cluster.CAPool(),
			ServerName:   testcluster.ServingServerName,
			Certificates: []tls.Certificate{cluster.FrontProxyClientCertificate()},
			MinVersion:   tls.VersionTLS12,
		}}}
		defer frontProxy.CloseIdleConnections()
		if got := whoAmI(t, frontProxy, cluster.Server(skewedUpgraded).URL, forged); got.Username != "system:admin" {
			t.Fatalf("directly with the front-proxy certificate the headers authenticate %+v, want system:admin", got)
		}
		for _, path := range []string{"/api/v1/namespaces", mapPath} {
			for range servers {
				resp := mustDo(t, anonymous, http.MethodGet, gw.URL+path, forged, nil)
				switch {
				case resp.status == http.StatusUnauthorized:
				case resp.status == http.StatusForbidden && forbids(resp, "system:anonymous"):
				default:
					t.Fatalf("GET %s with forged X-Remote-User and no credentials = %d: %s; want 401, or 403 for system:anonymous", path, resp.status, resp.body)
				}
			}
		}
	})

	t.Run("forged identity headers do not replace credentials", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			client *http.Client
			header http.Header
			want   string
		}{
			{"unprivileged token", anonymous, bearer(cluster.PKI().UserToken), testcluster.UnprivilegedUser},
			{"admin client certificate", admin, nil, testcluster.AdminUser},
		} {
			t.Run(tc.name, func(t *testing.T) {
				header := http.Header{
					"X-Remote-User":        {"system:admin"},
					"X-Remote-Group":       {"forged-group"},
					"X-Remote-Extra-Scope": {"everything"},
				}
				for name, values := range tc.header {
					header[name] = values
				}
				for range servers {
					got := whoAmI(t, tc.client, gw.URL, header)
					if got.Username != tc.want || slices.Contains(got.Groups, "forged-group") || got.Extra["scope"] != nil {
						t.Fatalf("authenticated as %+v, want %s without the forged group or extra", got, tc.want)
					}
				}
			})
		}
	})

	t.Run("client certificate from another CA is refused", func(t *testing.T) {
		forgedCert, err := otherCA.Client(pkix.Name{CommonName: "system:admin", Organization: []string{"system:masters"}})
		if err != nil {
			t.Fatal(err)
		}
		// Go's client would hold back a certificate the gateway's CA list does not name; an
		// attacker sends it anyway.
		presented := forgedCert.TLSCertificate()
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: gw.ca.Pool(),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return &presented, nil
			},
			MinVersion: tls.VersionTLS12,
		}}}
		defer client.CloseIdleConnections()
		resp, err := do(client, http.MethodGet, gw.URL+"/api/v1/namespaces", nil, nil)
		if err == nil {
			t.Fatalf("a client certificate from an unknown CA was accepted: HTTP %d: %s", resp.status, resp.body)
		}
		t.Logf("refused as expected: %v", err)
	})

	t.Run("forged peer-proxied header does not stop re-routing", func(t *testing.T) {
		forged := http.Header{"X-Kubernetes-Peer-Proxied": {"true"}}
		for _, r := range skewedResources {
			for range skewedTrafficRounds * servers {
				if resp := mustDo(t, admin, http.MethodGet, gw.URL+r.path, forged, nil); resp.status != http.StatusOK {
					t.Fatalf("GET %s with a forged x-kubernetes-peer-proxied = %d, want 200: %s", r.path, resp.status, resp.body)
				}
			}
		}
	})

	t.Run("backend with a certificate from another CA is never used", func(t *testing.T) {
		for range skewedTrafficRounds * (servers + 1) {
			for _, path := range []string{"/api/v1/namespaces/default", mapPath} {
				if resp := mustDo(t, admin, http.MethodGet, gw.URL+path, nil, nil); resp.status != http.StatusOK {
					t.Fatalf("GET %s through skewgate = %d, want 200 from a real server: %s", path, resp.status, resp.body)
				}
			}
		}
		v, err := gw.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		if s, in := v.server(rogue.server.URL); in && s.Healthy {
			t.Errorf("the rogue backend is healthy in snapshot generation %d: %+v", v.Generation, s)
		}
		if n := rogue.requests.Load(); n != 0 {
			t.Errorf("the rogue backend received %d requests", n)
		}
		t.Logf("skewgate refused the rogue backend's certificate in %d handshakes and sent it no request", rogue.handshakes.Load())
	})
}

// forbids reports whether resp is a 403 Status refusing user.
func forbids(resp response, user string) bool {
	var status apiStatus
	return resp.status == http.StatusForbidden && json.Unmarshal(resp.body, &status) == nil &&
		status.Reason == "Forbidden" && strings.Contains(status.Message, `User "`+user+`"`)
}

// rogueAPIServer answers every request with 200, so any request it receives would be noticed.
// Its serving certificate is valid for the name and address skewgate checks, but issued by a CA
// skewgate does not trust.
type rogueAPIServer struct {
	server     *httptest.Server
	handshakes atomic.Int64
	requests   atomic.Int64
}

func startRogueAPIServer(t *testing.T, ca *devpki.CA) *rogueAPIServer {
	t.Helper()
	cert, err := ca.Serving("kube-apiserver", testcluster.ServingServerName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	r := &rogueAPIServer{}
	r.server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}))
	r.server.TLS = &tls.Config{
		Certificates: []tls.Certificate{cert.TLSCertificate()},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			r.handshakes.Add(1)
			return nil, nil
		},
	}
	// Refused handshakes are the expected outcome, not news.
	r.server.Config.ErrorLog = log.New(discardHandshakeErrors{}, "", 0)
	r.server.StartTLS()
	t.Cleanup(r.server.Close)
	return r
}

type discardHandshakeErrors struct{}

func (discardHandshakeErrors) Write(p []byte) (int, error) {
	if !strings.Contains(string(p), "TLS handshake error") {
		log.Printf("rogue API server: %s", p)
	}
	return len(p), nil
}
