package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// routeByTestHeader routes every request to the cluster its x-test-cluster
// header names.
func routeByTestHeader(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
	cluster, _ := header(req.Headers, "x-test-cluster")
	return routeTo(cluster)(ctx, req)
}

// streamingEcho answers a watch with the echo of its request, then, once
// released, one more event; anything else with the echo.
func streamingEcho(release <-chan struct{}) func(string) http.Handler {
	return func(cluster string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("watch") != "true" {
				echoHandler(cluster).ServeHTTP(w, r)
				return
			}
			report, _ := json.Marshal(echoOf(cluster, r))
			w.Write(append(report, '\n'))
			http.NewResponseController(w).Flush()
			select {
			case <-release:
				fmt.Fprintln(w, `{"type":"MODIFIED"}`)
			case <-r.Context().Done():
			}
		})
	}
}

// openWatch starts a watch through the gateway and returns its first line
// and a reader for the rest.
func openWatch(t *testing.T, h *harness, cluster string) (echoed, *bufio.Reader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", h.front.URL+commonPods+"?watch=true", nil)
	req.Header.Set("X-Test-Cluster", cluster)
	resp, err := h.client(nil, true).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadBytes('\n')
	if err != nil {
		t.Fatalf("status %d, first line %q: %v", resp.StatusCode, first, err)
	}
	return decodeEcho(t, first), lines
}

func expectEvent(t *testing.T, lines *bufio.Reader) {
	t.Helper()
	line, err := lines.ReadString('\n')
	if err != nil || !strings.Contains(line, "MODIFIED") {
		t.Fatalf("the watch was cut: %q, %v", line, err)
	}
}

func getVia(t *testing.T, h *harness, cluster string) (*http.Response, []byte) {
	t.Helper()
	return do(t, h.client(nil, true), "GET", h.front.URL+commonPods, http.Header{"X-Test-Cluster": {cluster}}, nil)
}

func twoServers() []discoverytest.Server {
	groups := map[string][]string{"/v1": {"pods"}}
	return []discoverytest.Server{
		{ID: "server-a", Cluster: "kube-a", Version: "v1.36.3", Healthy: true, Groups: groups},
		{ID: "server-b", Cluster: "kube-b", Version: "v1.36.3", Healthy: true, Groups: groups},
	}
}

func TestPeerCARotationKeepsOpenStreamsAndVerifiesNewConnections(t *testing.T) {
	oldCA, newCA := mustCA(t, "old-peer-ca"), mustCA(t, "new-peer-ca")
	// kube-a moves to a certificate of the new CA; kube-b keeps the old one.
	var servingA atomic.Pointer[tls.Certificate]
	oldA := mustServing(t, oldCA, DefaultPeerServerName, "127.0.0.1")
	servingA.Store(&oldA)
	serving := func(cluster string) *tls.Config {
		if cluster == "kube-a" {
			return &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return servingA.Load(), nil }}
		}
		return &tls.Config{Certificates: []tls.Certificate{mustServing(t, oldCA, DefaultPeerServerName, "127.0.0.1")}}
	}
	release := make(chan struct{})
	h := newHarness(t, harnessConfig{servers: twoServers(), peerCA: oldCA, serving: serving,
		plugin: pluginFunc(routeByTestHeader), handler: streamingEcho(release)})

	watch, lines := openWatch(t, h, "kube-a")
	if watch.Cluster != "kube-a" {
		t.Fatalf("watch served by %s", watch.Cluster)
	}
	// A connection to kube-b, idle in the pool before the rotation.
	if resp, body := getVia(t, h, "kube-b"); resp.StatusCode != http.StatusOK {
		t.Fatalf("before the rotation: status %d: %s", resp.StatusCode, body)
	}

	newA := mustServing(t, newCA, DefaultPeerServerName, "127.0.0.1")
	servingA.Store(&newA)
	h.gw.SetPeerRootCAs(newCA.Pool())
	close(release)

	expectEvent(t, lines)
	if resp, body := getVia(t, h, "kube-a"); resp.StatusCode != http.StatusOK {
		t.Errorf("kube-a with a certificate of the new CA: status %d: %s", resp.StatusCode, body)
	}
	// kube-b is refused on a new connection; the request moves to kube-a.
	if resp, body := getVia(t, h, "kube-b"); resp.StatusCode != http.StatusOK || decodeEcho(t, body).Cluster != "kube-a" {
		t.Errorf("status %d: %s", resp.StatusCode, body)
	}
	if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_upstream_errors_total{backend="kube-b",kind="tls"} 1`) {
		t.Errorf("kube-b's certificate of the old CA was not refused on a new connection:\n%s", m)
	}

	h.gw.SetPeerRootCAs(nil)
	if resp, body := getVia(t, h, "kube-a"); resp.StatusCode != http.StatusOK {
		t.Errorf("a nil pool replaced the peer CAs: status %d: %s", resp.StatusCode, body)
	}
}

func TestClientCertificateRotationKeepsOpenStreams(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, harnessConfig{servers: twoServers(), identityMode: "front-proxy",
		plugin: pluginFunc(routeByTestHeader), handler: streamingEcho(release)})

	first, lines := openWatch(t, h, "kube-a+front-proxy")
	if first.ClientCert != frontProxyClientName {
		t.Fatalf("the watch presented %q", first.ClientCert)
	}
	// Plain connections, idle in the pool, stay in use after the rotation.
	if resp, body := getVia(t, h, "kube-a"); resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	rotated := mustClient(t, h.peerCA, pkix.Name{CommonName: "front-proxy-client-2"})
	h.gw.SetClientCertificate(&rotated)
	close(release)

	expectEvent(t, lines)
	for _, tc := range []struct{ route, wantCert string }{
		{"kube-a+front-proxy", "front-proxy-client-2"},
		{"kube-b+front-proxy", "front-proxy-client-2"},
		{"kube-a", ""},
	} {
		resp, body := getVia(t, h, tc.route)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d: %s", tc.route, resp.StatusCode, body)
		}
		if e := decodeEcho(t, body); e.ClientCert != tc.wantCert {
			t.Errorf("%s presented %q, want %q", tc.route, e.ClientCert, tc.wantCert)
		}
	}

	h.gw.SetClientCertificate(nil)
	resp, body := getVia(t, h, "kube-a+front-proxy")
	checkUnavailable(t, resp, body, 7)
	if resp, body := getVia(t, h, "kube-a"); resp.StatusCode != http.StatusOK || decodeEcho(t, body).ClientCert != "" {
		t.Errorf("plain requests after removing the front-proxy certificate: status %d: %s", resp.StatusCode, body)
	}
}
