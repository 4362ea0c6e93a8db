package e2e

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// credentials are what a client presents: client certificates, request headers, and whether it
// speaks HTTP/1.1 only (HTTP/2 forbids connection-specific headers such as Connection).
type credentials struct {
	certs  []tls.Certificate
	header http.Header
	http1  bool
}

// reviewAnswer is an API server's answer to a SelfSubjectReview: the identity it authenticated,
// or the Status it refused with.
type reviewAnswer struct {
	Code   int
	User   userInfo
	Status apiStatus
}

func (a reviewAnswer) String() string {
	if a.Code == http.StatusCreated {
		return fmt.Sprintf("201 %+v", a.User)
	}
	return fmt.Sprintf("%d %s %q", a.Code, a.Status.Reason, a.Status.Message)
}

// credentialIDExtra is the extra that kube-apiserver's x509 authenticator adds, the certificate's
// SHA-256 fingerprint.
const credentialIDExtra = "authentication.kubernetes.io/credential-id"

// uidOID is the subject attribute kube-apiserver's x509 authenticator takes the user's UID from.
var uidOID = asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}

// withUIDs is subject with a UID attribute for each of uids.
func withUIDs(subject pkix.Name, uids ...string) pkix.Name {
	for _, uid := range uids {
		subject.ExtraNames = append(subject.ExtraNames, pkix.AttributeTypeAndValue{Type: uidOID, Value: uid})
	}
	return subject
}

// review posts a SelfSubjectReview and returns what the server answered.
func review(t *testing.T, client *http.Client, baseURL string, header http.Header) reviewAnswer {
	t.Helper()
	resp := mustDo(t, client, http.MethodPost, baseURL+"/apis/authentication.k8s.io/v1/selfsubjectreviews", header,
		[]byte(`{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`))
	a, err := parseReview(resp)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// parseReview reads the answer to a SelfSubjectReview: the review, or a Status.
func parseReview(resp response) (reviewAnswer, error) {
	a := reviewAnswer{Code: resp.status}
	if resp.status == http.StatusCreated {
		var r struct {
			Status struct {
				UserInfo userInfo `json:"userInfo"`
			} `json:"status"`
		}
		if err := json.Unmarshal(resp.body, &r); err != nil {
			return a, fmt.Errorf("decoding the SelfSubjectReview: %w: %s", err, resp.body)
		}
		a.User = r.Status.UserInfo
		if len(a.User.Extra) == 0 {
			a.User.Extra = nil
		}
		return a, nil
	}
	if err := json.Unmarshal(resp.body, &a.Status); err != nil || a.Status.Kind != "Status" {
		return a, fmt.Errorf("SelfSubjectReview answered %d without a Status body: %q", resp.status, resp.body)
	}
	return a, nil
}

// directClient talks to one API server of the cluster itself with c's credentials.
func directClient(cluster *testcluster.Cluster, c credentials) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs:      cluster.CAPool(),
		ServerName:   testcluster.ServingServerName,
		Certificates: c.certs,
		MinVersion:   tls.VersionTLS12,
	}, ForceAttemptHTTP2: !c.http1}
	if c.http1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return &http.Client{Timeout: 15 * time.Second, Transport: tr}
}

// gatewayClient talks to the gateway with c's credentials.
func (g *skewgate) gatewayClient(c credentials) *http.Client {
	client := g.client(c.certs...)
	if c.http1 {
		tr := client.Transport.(*http.Transport)
		tr.ForceAttemptHTTP2 = false
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	return client
}

// newClientCertificate issues a client certificate of the cluster CA for subject.
func newClientCertificate(t *testing.T, cluster *testcluster.Cluster, subject pkix.Name) tls.Certificate {
	t.Helper()
	leaf, err := cluster.PKI().NewClient(subject)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.TLSCertificate()
}

// TestFrontProxyIdentityIsWhatTheAPIServerSeesDirectly sends SelfSubjectReviews with every kind
// of credential through a front-proxy gateway in front of a cluster whose client CA is also its
// request-header CA, where the front-proxy client certificate alone authenticates: each answer
// is the one the same request gets from an API server directly. A token is the token's user, no
// credentials are system:anonymous, a certificate is its CN, UID attribute, O groups and
// credential id, an invalid token is 401, and a Connection header naming the identity headers
// changes nothing. A certificate the gateway verified but cannot assert is refused with 401
// rather than forwarded, as the API server refuses one with several or an empty UID.
func TestFrontProxyIdentityIsWhatTheAPIServerSeesDirectly(t *testing.T) {
	cluster := sharedOneCA.get(t)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	pki := cluster.PKI()
	// Directly, the front-proxy client certificate without identity headers is a user of its own:
	// lent to a request the gateway does not assert, it would become that request's identity.
	if got := whoAmI(t, directClient(cluster, credentials{certs: []tls.Certificate{cluster.FrontProxyClientCertificate()}}), cluster.Server(skewedUpgraded).URL, nil); got.Username != testcluster.FrontProxyClientName {
		t.Fatalf("directly the front-proxy client certificate authenticates as %+v, want %s: the cluster does not share one CA", got, testcluster.FrontProxyClientName)
	}
	const personName = "skewgate-e2e-person"
	personSubject := pkix.Name{CommonName: personName, Organization: []string{"skewgate-e2e-team-a", "skewgate-e2e-team-b"}}
	person := newClientCertificate(t, cluster, personSubject)
	const personUID = "skewgate-e2e-uid-3f1c6a2e"
	personWithUID := newClientCertificate(t, cluster, withUIDs(personSubject, personUID))
	// Directly, a certificate is also its UID attribute and its credential id.
	if got := whoAmI(t, directClient(cluster, credentials{certs: []tls.Certificate{personWithUID}}), cluster.Server(skewedUpgraded).URL, nil); got.UID != personUID || len(got.Extra[credentialIDExtra]) != 1 {
		t.Fatalf("directly a certificate with UID %s authenticates as %+v: the cluster does not read UIDs from certificates", personUID, got)
	}
	admin := []tls.Certificate{pki.Admin}
	servers := len(cluster.Servers())

	t.Run("same answer as directly", func(t *testing.T) {
		const anonymous, unauthorized = "system:anonymous", "Unauthorized"
		for _, tc := range []struct {
			name string
			cred credentials
			// who is the user the direct answer names (or, for a refusal, its message): what
			// the cluster is expected to make of the credentials.
			who string
		}{
			{"bearer token", credentials{header: bearer(pki.UserToken)}, testcluster.UnprivilegedUser},
			{"admin bearer token", credentials{header: bearer(pki.AdminToken)}, testcluster.AdminUser},
			{"no credentials", credentials{}, anonymous},
			{"invalid bearer token", credentials{header: bearer("skewgate-e2e-not-a-token")}, unauthorized},
			{"client certificate", credentials{certs: []tls.Certificate{person}}, personName},
			{"client certificate with a UID", credentials{certs: []tls.Certificate{personWithUID}}, personName},
			{"admin client certificate", credentials{certs: admin}, testcluster.AdminUser},
			{"client certificate and a bearer token", credentials{certs: []tls.Certificate{person}, header: bearer(pki.UserToken)}, personName},
			{"client certificate and an invalid bearer token", credentials{certs: []tls.Certificate{person}, header: bearer("skewgate-e2e-not-a-token")}, personName},
			{"Connection: X-Remote-User", credentials{certs: admin, header: http.Header{"Connection": {"X-Remote-User"}}, http1: true}, testcluster.AdminUser},
			{"Connection: X-Remote-Group", credentials{certs: admin, header: http.Header{"Connection": {"X-Remote-Group"}}, http1: true}, testcluster.AdminUser},
			{"Connection naming every identity header", credentials{certs: []tls.Certificate{person}, header: http.Header{"Connection": {"X-Remote-User, X-Remote-Group, X-Remote-Extra-Scope"}}, http1: true}, personName},
		} {
			t.Run(tc.name, func(t *testing.T) {
				direct := directClient(cluster, tc.cred)
				defer direct.CloseIdleConnections()
				through := gw.gatewayClient(tc.cred)
				defer through.CloseIdleConnections()
				want := review(t, direct, cluster.Server(skewedUpgraded).URL, tc.cred.header)
				if want.User.Username != tc.who && !strings.Contains(want.Status.Message, tc.who) {
					t.Fatalf("directly the server answers %s, which does not name %s: the cluster is not set up as expected", want, tc.who)
				}
				// Every server may answer through the gateway; each must see the same identity.
				for range servers {
					if got := review(t, through, gw.URL, tc.cred.header); !reflect.DeepEqual(got, want) {
						t.Fatalf("through skewgate: %s\ndirectly:        %s", got, want)
					}
				}
				t.Logf("%s", want)
			})
		}
	})

	t.Run("verified certificate the gateway cannot assert is 401", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			subject pkix.Name
			// directly401 is set where the API server refuses the certificate itself.
			directly401 bool
		}{
			{"no common name", pkix.Name{Organization: []string{"system:masters"}}, false},
			{"control character in the common name", pkix.Name{CommonName: "skewgate-e2e\nsystem:admin", Organization: []string{"system:masters"}}, false},
			{"two UIDs", withUIDs(pkix.Name{CommonName: personName}, "skewgate-e2e-uid-1", "skewgate-e2e-uid-2"), true},
			{"empty UID", withUIDs(pkix.Name{CommonName: personName}, ""), true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cred := credentials{certs: []tls.Certificate{newClientCertificate(t, cluster, tc.subject)}}
				direct := directClient(cluster, cred)
				defer direct.CloseIdleConnections()
				through := gw.gatewayClient(cred)
				defer through.CloseIdleConnections()
				for range servers {
					got := review(t, through, gw.URL, nil)
					if got.Code != http.StatusUnauthorized || got.Status.Reason != "Unauthorized" || got.Status.Code != http.StatusUnauthorized {
						t.Fatalf("through skewgate: %s, want 401 Unauthorized", got)
					}
				}
				directly := review(t, direct, cluster.Server(skewedUpgraded).URL, nil)
				if tc.directly401 && directly.Code != http.StatusUnauthorized {
					t.Fatalf("directly the server answers %s, want 401: the cluster does not read UIDs from certificates", directly)
				}
				t.Logf("401 through skewgate; directly the server answers %s", directly)
			})
		}
	})
}

// TestWhitespaceInASubjectNeverBecomesAnotherIdentity is the reproduction of a certificate whose
// organization is " system:masters" (a leading space) or whose common name is "lab-admin " (a
// trailing space). Directly, the API servers read those values as they are and forbid the user
// to list Secrets; an HTTP/1.1 hop trims a header's leading and trailing whitespace, so asserted
// over HTTP/1.1, as every upgrade request is, they became system:masters and lab-admin, who may.
// Through skewgate, in load-balancer and node-local mode, every way of sending the request gets
// kube-apiserver's 401 instead.
func TestWhitespaceInASubjectNeverBecomesAnotherIdentity(t *testing.T) {
	cluster := sharedSkewed.get(t)
	const labAdmin = "lab-admin"
	grantClusterAdmin(t, cluster, labAdmin)
	const secrets = "/api/v1/secrets"
	ways := []struct {
		name   string
		http1  bool
		header http.Header
	}{
		{"HTTP/2", false, nil},
		{"HTTP/1.1", true, nil},
		{"HTTP/1.1 upgrade", true, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}},
	}
	type impostor struct {
		name string
		cert tls.Certificate
		// user is who the API servers take the certificate for.
		user string
	}
	impostors := []impostor{
		{`O=" system:masters"`, newClientCertificate(t, cluster, pkix.Name{CommonName: "mallory", Organization: []string{" system:masters"}}), "mallory"},
		{`CN="lab-admin "`, newClientCertificate(t, cluster, pkix.Name{CommonName: labAdmin + " ", Organization: []string{"skewgate-e2e-team-a"}}), labAdmin + " "},
	}

	// What the trimmed identities may do is real: lab-admin and system:masters list every Secret,
	// asked as an upgrade request asks.
	for _, subject := range []pkix.Name{{CommonName: labAdmin}, {CommonName: "skewgate-e2e-master", Organization: []string{"system:masters"}}} {
		direct := directClient(cluster, credentials{certs: []tls.Certificate{newClientCertificate(t, cluster, subject)}, http1: true})
		eventually(t, fmt.Sprintf("%s may list Secrets on every server", subject), healthChangeTimeout, 200*time.Millisecond, func() error {
			for _, s := range cluster.Servers() {
				if resp, err := do(direct, http.MethodGet, s.URL+secrets, ways[2].header, nil); err != nil || resp.status != http.StatusOK {
					return fmt.Errorf("%s: HTTP %d (%v)", s.Name, resp.status, err)
				}
			}
			return nil
		})
		direct.CloseIdleConnections()
	}
	// Directly, every way of asking is forbidden to the impostors as they are.
	for _, im := range impostors {
		for _, way := range ways {
			direct := directClient(cluster, credentials{certs: []tls.Certificate{im.cert}, http1: way.http1})
			for _, s := range cluster.Servers() {
				if resp := mustDo(t, direct, http.MethodGet, s.URL+secrets, way.header, nil); !forbids(resp, im.user) {
					t.Fatalf("%s, %s, directly on %s: HTTP %d %s; want 403 for user %q", im.name, way.name, s.Name, resp.status, truncated(resp.body), im.user)
				}
			}
			direct.CloseIdleConnections()
		}
	}

	refusedThrough := func(t *testing.T, url string, client func(credentials) *http.Client) {
		for _, im := range impostors {
			for _, way := range ways {
				c := client(credentials{certs: []tls.Certificate{im.cert}, http1: way.http1})
				// Through the load balancer, every server gets its turn.
				for range cluster.Servers() {
					resp := mustDo(t, c, http.MethodGet, url+secrets, way.header, nil)
					var status apiStatus
					if resp.status != http.StatusUnauthorized || json.Unmarshal(resp.body, &status) != nil || status.Reason != "Unauthorized" || status.Code != http.StatusUnauthorized {
						t.Errorf("%s, %s, through skewgate: HTTP %d %s; want 401 Unauthorized", im.name, way.name, resp.status, truncated(resp.body))
						break
					}
				}
				c.CloseIdleConnections()
			}
		}
		t.Logf("%d impostors, each asking over HTTP/2, HTTP/1.1 and the upgrade path: 401 through skewgate, 403 directly", len(impostors))
	}
	t.Run("load balancer", func(t *testing.T) {
		g := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
		g.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
		refusedThrough(t, g.URL, g.gatewayClient)
	})
	t.Run("node-local next to the old server", func(t *testing.T) {
		g := newKubeadmNode(t, cluster, skewedOld).startNodeLocalSkewgate(t)
		// Node-local skewgate serves the node's own serving certificate, which directClient trusts.
		refusedThrough(t, g.URL, func(c credentials) *http.Client { return directClient(cluster, c) })
	})
}

// grantClusterAdmin binds user to the cluster-admin role until the test ends.
func grantClusterAdmin(t *testing.T, cluster *testcluster.Cluster, user string) {
	t.Helper()
	admin := directAdminClient(cluster)
	defer admin.CloseIdleConnections()
	name := "skewgate-e2e-cluster-admin-" + user
	binding := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":%q},`+
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},`+
		`"subjects":[{"apiGroup":"rbac.authorization.k8s.io","kind":"User","name":%q}]}`, name, user)
	const bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
	base := cluster.Server(skewedUpgraded).URL
	if resp := mustDo(t, admin, http.MethodPost, base+bindings, nil, []byte(binding)); resp.status != http.StatusCreated {
		t.Fatalf("creating ClusterRoleBinding %s: HTTP %d: %s", name, resp.status, resp.body)
	}
	t.Cleanup(func() {
		admin := directAdminClient(cluster)
		defer admin.CloseIdleConnections()
		if resp, err := do(admin, http.MethodDelete, base+bindings+"/"+name, nil, nil); err != nil || resp.status != http.StatusOK {
			t.Errorf("deleting ClusterRoleBinding %s: HTTP %d (%v): %s", name, resp.status, err, resp.body)
		}
	})
}

// truncated is the start of a response body, for messages.
func truncated(body []byte) string {
	const limit = 300
	if len(body) > limit {
		return string(body[:limit]) + "..."
	}
	return string(body)
}
