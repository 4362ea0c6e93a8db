package e2e

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"testing"
)

// TestMergedDiscoveryIsAnsweredOnlyToClientsTheAPIServersAnswer asks a front-proxy gateway for the
// merged /apis and /api (aggregated discovery, which skewgate answers itself) with each kind of
// credential, on the one-CA cluster: a client the API servers refuse gets the very refusal an API
// server gives directly (403 for system:anonymous, 401 for an invalid token), with or without a
// validator that would otherwise earn it a 304; an authenticated client gets the merged document,
// which holds every resource some server serves.
func TestMergedDiscoveryIsAnsweredOnlyToClientsTheAPIServersAnswer(t *testing.T) {
	cluster := sharedOneCA.get(t)
	requireSkew(t, cluster)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	pki := cluster.PKI()
	admin := directAdminClient(cluster)
	defer admin.CloseIdleConnections()
	servers := cluster.Servers()

	for _, path := range []string{"/apis", "/api"} {
		t.Run(path, func(t *testing.T) {
			// What the cluster serves under path: the union of every server's own document.
			union := resourceSet{}
			for _, s := range servers {
				union.addDocument(t, getDiscovery(t, admin, s.URL+path, acceptNoPeer).body)
			}
			adminThrough := gw.adminClient()
			defer adminThrough.CloseIdleConnections()
			etag := getDiscovery(t, adminThrough, gw.URL+path, acceptAggregated).header.Get("ETag")
			if etag == "" {
				t.Fatalf("skewgate's %s carries no ETag", path)
			}

			t.Run("refused as directly", func(t *testing.T) {
				for _, tc := range []struct {
					name   string
					header http.Header
				}{
					{"no credentials", nil},
					{"invalid bearer token", bearer("skewgate-e2e-not-a-token")},
				} {
					for _, validator := range []string{"", etag} {
						name := tc.name
						if validator != "" {
							name += " and the merged document's ETag"
						}
						t.Run(name, func(t *testing.T) {
							header := http.Header{"Accept": {acceptAggregated}}
							for k, v := range tc.header {
								header[k] = v
							}
							if validator != "" {
								header.Set("If-None-Match", validator)
							}
							direct := directClient(cluster, credentials{})
							defer direct.CloseIdleConnections()
							through := gw.client()
							defer through.CloseIdleConnections()
							want := discoveryRefusal(t, "directly", mustDo(t, direct, http.MethodGet, servers[skewedUpgraded].URL+path, header, nil))
							for range len(servers) {
								resp := mustDo(t, through, http.MethodGet, gw.URL+path, header, nil)
								if got := discoveryRefusal(t, "through skewgate", resp); got != want {
									t.Fatalf("through skewgate: %d %+v\ndirectly:        %d %+v", resp.status, got, want.Code, want)
								}
							}
							t.Logf("%d %s %q", want.Code, want.Reason, want.Message)
						})
					}
				}
			})

			t.Run("merged document for authenticated clients", func(t *testing.T) {
				for _, tc := range []struct {
					name string
					cred credentials
				}{
					{"bearer token", credentials{header: bearer(pki.UserToken)}},
					{"admin client certificate", credentials{certs: []tls.Certificate{pki.Admin}}},
				} {
					t.Run(tc.name, func(t *testing.T) {
						client := gw.gatewayClient(tc.cred)
						defer client.CloseIdleConnections()
						header := http.Header{"Accept": {acceptAggregated}}
						for k, v := range tc.cred.header {
							header[k] = v
						}
						resp := mustDo(t, client, http.MethodGet, gw.URL+path, header, nil)
						if resp.status != http.StatusOK || resp.header.Get("Content-Type") != acceptAggregated {
							t.Fatalf("GET %s = %d (%s): %s", path, resp.status, resp.header.Get("Content-Type"), resp.body)
						}
						got := resourceSet{}
						if err := got.parse(resp.body); err != nil {
							t.Fatal(err)
						}
						if err := union.sameAs(got); err != nil {
							t.Errorf("merged %s %v", path, err)
						}
						if got := resp.header.Get("ETag"); got != etag {
							t.Errorf("merged %s has ETag %s, the admin's had %s", path, got, etag)
						}
						header.Set("If-None-Match", etag)
						if resp := mustDo(t, client, http.MethodGet, gw.URL+path, header, nil); resp.status != http.StatusNotModified {
							t.Errorf("revalidating %s = %d, want 304: %s", path, resp.status, resp.body)
						}
					})
				}
			})
		})
	}
}

// discoveryRefusal is the Status of a 401 or 403; any other answer fails the test.
func discoveryRefusal(t *testing.T, where string, resp response) apiStatus {
	t.Helper()
	if resp.status != http.StatusUnauthorized && resp.status != http.StatusForbidden {
		t.Fatalf("%s: answered %d (%d bytes), want 401 or 403", where, resp.status, len(resp.body))
	}
	var status apiStatus
	if err := json.Unmarshal(resp.body, &status); err != nil || status.Kind != "Status" || status.Code != resp.status {
		t.Fatalf("%s: %d without a matching Status body: %q", where, resp.status, resp.body)
	}
	return status
}
