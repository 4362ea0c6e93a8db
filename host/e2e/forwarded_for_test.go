package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/skewgate/skewgate/host/testcluster"
)

const (
	// forwardedClientIP is the loopback address the client connects from, so that the API
	// servers can tell it from the gateway's own 127.0.0.1.
	forwardedClientIP = "127.0.0.2"
	gatewayIP         = "127.0.0.1"
	auditEventTimeout = 30 * time.Second
)

// TestForwardedForKeepsTheClientsClaimAndAppendsItsAddress sends requests with and without
// forged client-address headers through a front-proxy gateway from 127.0.0.2, and reads the
// source IPs the API server that served each recorded in its audit log: a client's own
// X-Forwarded-For is kept (it may carry proxies in front of the gateway) but the address the
// request really came from follows it, so no client can make its requests look as if they came
// from elsewhere; an X-Real-Ip no proxy vouched for is not passed on.
func TestForwardedForKeepsTheClientsClaimAndAppendsItsAddress(t *testing.T) {
	cluster := sharedOneCA.get(t)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(forwardedClientIP)}, Timeout: 10 * time.Second}
	through := gw.adminClient()
	through.Transport.(*http.Transport).DialContext = dialer.DialContext
	defer through.CloseIdleConnections()
	direct := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: cluster.AdminTLSConfig(), DialContext: dialer.DialContext}}
	defer direct.CloseIdleConnections()
	target := "/api/v1/namespaces/default/configmaps/" + auditedConfigMap

	for _, tc := range []struct {
		name   string
		header http.Header
		want   []string
	}{
		{"no X-Forwarded-For", nil, []string{forwardedClientIP, gatewayIP}},
		{"forged X-Forwarded-For", http.Header{"X-Forwarded-For": {"203.0.113.7"}}, []string{"203.0.113.7", forwardedClientIP, gatewayIP}},
		{"forged chain of proxies", http.Header{"X-Forwarded-For": {"203.0.113.7, 198.51.100.9"}}, []string{"203.0.113.7", "198.51.100.9", forwardedClientIP, gatewayIP}},
		{"forged X-Real-Ip", http.Header{"X-Real-Ip": {"198.51.100.1"}}, []string{forwardedClientIP, gatewayIP}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			directly := auditedSourceIPs(t, cluster, direct, cluster.Server(skewedUpgraded).URL+target, tc.header)
			if directly[len(directly)-1] != forwardedClientIP {
				t.Fatalf("directly the server recorded source IPs %v, not ending in the client's %s: the audit log cannot tell the client from the gateway", directly, forwardedClientIP)
			}
			got := auditedSourceIPs(t, cluster, through, gw.URL+target, tc.header)
			if !slices.Equal(got, tc.want) {
				t.Errorf("through skewgate the server recorded source IPs %v, want %v (directly: %v)", got, tc.want, directly)
			}
			t.Logf("source IPs through skewgate %v, directly %v", got, directly)
		})
	}
}

// auditedSourceIPs GETs url with header and a unique user agent, and returns the source IPs of
// the audit event some server wrote for that request.
func auditedSourceIPs(t *testing.T, cluster *testcluster.Cluster, client *http.Client, url string, header http.Header) []string {
	t.Helper()
	nonce := make([]byte, 8)
	_, _ = rand.Read(nonce)
	agent := "skewgate-e2e-audit/" + hex.EncodeToString(nonce)
	h := http.Header{"User-Agent": {agent}}
	for k, v := range header {
		h[k] = v
	}
	if resp := mustDo(t, client, http.MethodGet, url, h, nil); resp.status != http.StatusNotFound && resp.status != http.StatusOK {
		t.Fatalf("GET %s = %d, want an answer from the API server: %s", url, resp.status, resp.body)
	}
	var ips []string
	eventually(t, "an audit event for "+agent, auditEventTimeout, 100*time.Millisecond, func() error {
		for i := range cluster.Servers() {
			ev, err := findAuditEvent(cluster.AuditLog(i), agent)
			if err != nil {
				return err
			}
			if ev != nil {
				ips = ev.SourceIPs
				return nil
			}
		}
		return errors.New("no server logged it yet")
	})
	return ips
}

// findAuditEvent returns the ResponseComplete event of the request with userAgent in the audit
// log at path, or nil.
func findAuditEvent(path, userAgent string) (*auditv1.Event, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lines := bufio.NewScanner(bytes.NewReader(data))
	lines.Buffer(nil, 1<<20)
	for lines.Scan() {
		if !bytes.Contains(lines.Bytes(), []byte(userAgent)) {
			continue
		}
		var ev auditv1.Event
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if ev.UserAgent == userAgent && ev.Stage == auditv1.StageResponseComplete {
			return &ev, nil
		}
	}
	return nil, lines.Err()
}
