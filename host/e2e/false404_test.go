package e2e

import (
	"crypto/tls"
	"net/http"
	"path"
	"slices"
	"testing"

	"github.com/skewgate/skewgate/host/testcluster"
)

// TestNoFalse404ThroughSkewgate sends the baseline's traffic, on the same skewed cluster,
// through `skewgate serve` instead of a round-robin proxy: every request for a resource that
// some server serves succeeds, whether the client authenticates with a client certificate (which
// a front-proxy gateway asserts to the servers as X-Remote-User) or with a bearer token (which
// either kind of gateway passes through).
func TestNoFalse404ThroughSkewgate(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	frontProxy := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	passthrough := startSkewgate(t, cluster, gatewayConfig{identityMode: passthroughIdentity})
	for _, gw := range []*skewgate{frontProxy, passthrough} {
		gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	}

	backends := len(cluster.Servers())
	total, notFound := 0, 0
	for _, tc := range []struct {
		name   string
		gw     *skewgate
		certs  []tls.Certificate
		header http.Header
	}{
		{"front-proxy gateway with the admin client certificate", frontProxy, []tls.Certificate{cluster.PKI().Admin}, nil},
		{"front-proxy gateway with the admin token", frontProxy, nil, bearer(cluster.PKI().AdminToken)},
		{"passthrough gateway with the admin token", passthrough, nil, bearer(cluster.PKI().AdminToken)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.gw.client(tc.certs...)
			defer client.CloseIdleConnections()
			// The servers see the identity of the client, not of the gateway or its controller.
			if got := whoAmI(t, client, tc.gw.URL, tc.header); got.Username != testcluster.AdminUser || !slices.Contains(got.Groups, "system:masters") {
				t.Fatalf("through skewgate the servers authenticated %+v, want %s in system:masters", got, testcluster.AdminUser)
			}
			for _, r := range skewedResources {
				t.Run(path.Base(r.path), func(t *testing.T) {
					for range skewedTrafficRounds * backends {
						resp := mustDo(t, client, http.MethodGet, tc.gw.URL+r.path, tc.header, nil)
						total++
						if resp.status == http.StatusNotFound {
							notFound++
						}
						if resp.status != http.StatusOK {
							t.Errorf("GET %s through skewgate = %d, want 200: %s", r.path, resp.status, resp.body)
						}
					}
				})
			}
		})
	}
	t.Logf("skewgate over %d servers answered %d of %d requests for served resources with 404 (%.0f%%)",
		backends, notFound, total, 100*float64(notFound)/float64(total))
	if notFound != 0 {
		t.Errorf("%d false 404s through skewgate, want none", notFound)
	}
}
