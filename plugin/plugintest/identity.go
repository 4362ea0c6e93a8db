package plugintest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// FrontProxySuffix marks the cluster that carries the front-proxy client
// certificate, spelled out independently of discovery.FrontProxyClusterSuffix.
const FrontProxySuffix = "+front-proxy"

// The identity a certificate with the Kubernetes UID attribute asserts. Envoy
// prints that attribute, which OpenSSL has no name for, as its OID and '#' with
// the hex of its DER (here a UTF8String).
const (
	testUID            = "3f1c6a2e-uid"
	testSubjectWithUID = `CN=alice\2C jr,1.3.6.1.4.1.57683.2=#0C0C33663163366132652D756964,O=dev,O=system:masters`
	// credentialIDHeader is the x509 authenticator's credential-id extra as
	// kube-apiserver's request-header authenticator reads it back: the key
	// lower-cased and %-escaped.
	credentialIDHeader = "x-remote-extra-authentication.kubernetes.io%2fcredential-id"
)

// unauthorizedBody is kube-apiserver's answer to a request no authenticator
// accepts.
const unauthorizedBody = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`

// Hosts present the front-proxy certificate only on requests whose routing
// header ends in the suffix, so every request with an asserted identity must
// name its server, and no other request may carry the suffix.
func assertedRequestsNameTheirServersFrontProxyCluster(t *testing.T, h Harness) {
	frontProxy := Config(t, 1, map[string]any{"identityMode": "front-proxy"}, discoverytest.SkewedControlPlane())
	t.Run("asserted", func(t *testing.T) {
		p := start(t, h, StartOptions{Config: frontProxy, SubjectPeerCertificate: testSubject, SHA256PeerCertificateDigest: testDigest})
		seen := map[string]int{}
		for range 6 {
			res := p.Request("GET", "/api/v1/namespaces/default/pods")
			cluster, _ := res.Header(RoutingHeader)
			seen[cluster]++
			if !res.Forwarded || len(res.Values(RoutingHeader)) != 1 {
				t.Fatalf("forwarded %v with routing header %q; want exactly one", res.Forwarded, res.Values(RoutingHeader))
			}
		}
		if want := map[string]int{"kube-a" + FrontProxySuffix: 2, "kube-b" + FrontProxySuffix: 2, "kube-c" + FrontProxySuffix: 2}; !maps.Equal(seen, want) {
			t.Errorf("a resource every server serves went to %v; want %v", seen, want)
		}
		res := p.Request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
		if cluster, _ := res.Header(RoutingHeader); cluster != "kube-b"+FrontProxySuffix && cluster != "kube-c"+FrontProxySuffix {
			t.Errorf("re-routed request went to %q; want kube-b or kube-c with the suffix", cluster)
		}
		for _, path := range []string{"/apis/example.com/v1/widgets", "/api/v1/namespaces/%zz/pods", "/healthz"} {
			if cluster, _ := p.Request("GET", path).Header(RoutingHeader); !strings.HasSuffix(cluster, FrontProxySuffix) {
				t.Errorf("%s: routing header %q; an asserted request must name a front-proxy cluster", path, cluster)
			}
		}
	})
	t.Run("front-proxy mode without certificate", func(t *testing.T) {
		p := start(t, h, StartOptions{Config: frontProxy})
		checkNoFrontProxyCredential(t, p)
	})
	t.Run("passthrough with certificate", func(t *testing.T) {
		config := Config(t, 1, map[string]any{"identityMode": "passthrough"}, discoverytest.SkewedControlPlane())
		p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: testSubject, SHA256PeerCertificateDigest: testDigest})
		checkNoFrontProxyCredential(t, p)
	})
}

func checkNoFrontProxyCredential(t *testing.T, p Plugin) {
	t.Helper()
	for _, path := range []string{"/api/v1/pods", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "/healthz"} {
		res := p.Request("GET", path, [2]string{RoutingHeader, "kube-a" + FrontProxySuffix})
		if !res.Forwarded {
			t.Errorf("%s: not forwarded: %+v", path, res.Local)
		}
		if cluster, _ := res.Header(RoutingHeader); strings.HasSuffix(cluster, FrontProxySuffix) {
			t.Errorf("%s: routing header %q carries the front-proxy suffix without an asserted identity", path, cluster)
		}
		if got := res.Values("x-remote-user"); got != nil {
			t.Errorf("%s: asserted %q", path, got)
		}
	}
}

// The certificates kube-apiserver's x509 authenticator refuses (several UIDs,
// an empty one, one that is no string) and those the gateway cannot assert
// exactly (no common name; a value no header carries unchanged: empty, with
// leading or trailing whitespace, with control characters; no digest of the
// certificate to name it by) are all answered 401.
func unassertableClientCertificateIsRefusedWith401(t *testing.T, h Harness) {
	frontProxy := Config(t, 1, map[string]any{"identityMode": "front-proxy"}, discoverytest.SkewedControlPlane())
	const uid = "1.3.6.1.4.1.57683.2="
	for _, c := range []struct{ name, subject, digest string }{
		{"no common name", "O=no-common-name", testDigest},
		{"control character", `CN=evil\0Aline,O=system:masters`, testDigest},
		{"garbage", "garbage", testDigest},
		{"two UIDs", "CN=alice," + uid + "#0C0131," + uid + "#0C0132", testDigest},
		{"empty UID", "CN=alice," + uid + "#0C00", testDigest},
		{"UID that is no string", "CN=alice," + uid + "#020101", testDigest},
		{"UID that is no DER", "CN=alice," + uid + "#0C05", testDigest},
		// No header carries these unchanged: HTTP/1.1 trims the whitespace
		// (" system:masters" would arrive as system:masters), and the API
		// server's request-header authenticator drops an empty group.
		{"organization with a leading space", `CN=mallory,O=\ system:masters`, testDigest},
		{"common name with a trailing space", `CN=lab-admin\ ,O=dev`, testDigest},
		{"common name with a leading tab", `CN=\09lab-admin`, testDigest},
		{"empty organization", `CN=alice,O=dev,O=`, testDigest},
		{"UID with a trailing space", "CN=alice," + uid + "#0C0475696420", testDigest},
		{"no digest", testSubject, ""},
		{"upper-case digest", testSubject, strings.ToUpper(testDigest)},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, h, StartOptions{Config: frontProxy, SubjectPeerCertificate: c.subject, SHA256PeerCertificateDigest: c.digest, HTTPCalls: allow})
			for _, path := range []string{"/api/v1/pods", "/apis"} {
				res := p.Request("GET", path, [2]string{"accept", AcceptV2}, [2]string{"authorization", "Bearer abc"})
				if res.Forwarded || res.Local == nil || res.Local.Status != 401 {
					t.Fatalf("%s: forwarded %v, local %+v; want a local 401", path, res.Forwarded, res.Local)
				}
				if string(res.Local.Body) != unauthorizedBody || res.Local.Header("content-type") != "application/json" {
					t.Errorf("%s: body %s (%s); want kube-apiserver's Unauthorized Status", path, res.Local.Body, res.Local.Header("content-type"))
				}
				if len(res.HTTPCalls) != 0 {
					t.Errorf("%s: the refused request made calls %+v", path, res.HTTPCalls)
				}
			}
			if got := p.Counter(metricdef.PluginClientCertificatesRefused.Name); got != 2 {
				t.Errorf("refused-certificates counter %d; want 2", got)
			}
		})
	}
	t.Run("passthrough ignores a UID it could not assert", func(t *testing.T) {
		config := Config(t, 1, map[string]any{"identityMode": "passthrough"}, discoverytest.SkewedControlPlane())
		p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: "CN=alice," + uid + "#020101"})
		if res := p.Request("GET", "/api/v1/pods"); !res.Forwarded {
			t.Errorf("passthrough refused a request for its certificate: %+v", res.Local)
		}
	})
	t.Run("passthrough ignores certificates", func(t *testing.T) {
		config := Config(t, 1, map[string]any{"identityMode": "passthrough"}, discoverytest.SkewedControlPlane())
		p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: "O=no-common-name"})
		if res := p.Request("GET", "/api/v1/pods"); !res.Forwarded {
			t.Errorf("passthrough refused a request for its certificate: %+v", res.Local)
		}
	})
}

// A certificate is asserted as everything kube-apiserver's x509 authenticator
// makes of it, byte for byte: the UID from its Kubernetes UID attribute and the credential id
// extra naming it by digest, in the request-header authenticator's spelling;
// a client's own copies of those headers are gone.
func frontProxyAssertsTheCertificatesUIDAndCredentialID(t *testing.T, h Harness) {
	frontProxy := Config(t, 1, map[string]any{"identityMode": "front-proxy"}, discoverytest.SkewedControlPlane())
	for _, c := range []struct {
		name, subject, uid, user string
		groups                   []string
	}{
		{"UTF8String", testSubjectWithUID, testUID, "alice, jr", []string{"system:masters", "dev"}},
		{"BMPString in a multi-valued RDN", `1.3.6.1.4.1.57683.2=#1E0600FC002D0031+CN=alice\2C jr,O=dev,O=system:masters`, "ü-1", "alice, jr", []string{"system:masters", "dev"}},
		// Spaces and tabs inside a value reach the API server as they are.
		{"whitespace inside values", `CN=lab admin\09x,1.3.6.1.4.1.57683.2=#0C03752031,O=on call`, "u 1", "lab admin\tx", []string{"on call"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := start(t, h, StartOptions{Config: frontProxy, SubjectPeerCertificate: c.subject, SHA256PeerCertificateDigest: testDigest})
			res := p.Request("GET", "/api/v1/pods", [2]string{"x-remote-uid", "0"}, [2]string{credentialIDHeader, "X509SHA256=forged"})
			if !res.Forwarded {
				t.Fatalf("not forwarded: %+v", res.Local)
			}
			want := map[string][]string{
				"x-remote-user":    {c.user},
				"x-remote-uid":     {c.uid},
				"x-remote-group":   c.groups,
				credentialIDHeader: {"X509SHA256=" + testDigest},
			}
			got := map[string][]string{}
			for _, kv := range res.Headers {
				if strings.HasPrefix(strings.ToLower(kv[0]), "x-remote-") {
					got[kv[0]] = append(got[kv[0]], kv[1])
				}
			}
			if !maps.EqualFunc(got, want, slices.Equal) {
				t.Errorf("asserted %q; want %q", got, want)
			}
		})
	}
}

// Thousands of headers to strip cost one header-map write, not one scan of
// the map per header; what survives keeps its order, pseudo-headers first.
func headerFloodIsStrippedInOneHeaderMapWrite(t *testing.T, h Harness) {
	flood := [][2]string{{"user-agent", "kubectl/v1.36.3"}, {"x-remote-user", "system:admin"}, {RoutingHeader, "kube-a"}, {PeerProxied, "true"}}
	for i := range 2000 {
		flood = append(flood, [2]string{fmt.Sprintf("x-remote-extra-k%d", i), "v"})
	}
	flood = append(flood, [2]string{"authorization", "Bearer abc"}, [2]string{"accept", "application/json"})
	kept := []string{":method", ":path", ":authority", "user-agent", "authorization", "accept"}
	for _, mode := range []string{"passthrough", "front-proxy"} {
		t.Run(mode, func(t *testing.T) {
			config := Config(t, 1, map[string]any{"identityMode": mode}, discoverytest.SkewedControlPlane())
			p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: testSubject, SHA256PeerCertificateDigest: testDigest})
			for _, path := range []string{"/api/v1/pods", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"} {
				res := p.Request("GET", path, flood...)
				if !res.Forwarded {
					t.Fatalf("%s: not forwarded: %+v", path, res.Local)
				}
				var names []string
				for _, kv := range res.Headers {
					if slices.Contains(kept, kv[0]) {
						names = append(names, kv[0])
					}
					if strings.HasPrefix(kv[0], "x-remote-") && (mode == "passthrough" || kv[1] == "system:admin" || kv[1] == "v") {
						t.Fatalf("%s: forged %s: %s reached the backend", path, kv[0], kv[1])
					}
				}
				if !slices.Equal(names, kept) {
					t.Errorf("%s: kept headers %q; want %q in their order", path, names, kept)
				}
				routing := res.Values(RoutingHeader)
				if mode == "passthrough" && path == "/api/v1/pods" {
					if routing != nil {
						t.Errorf("%s: routing header %q; want the client's removed and none set", path, routing)
					}
				} else if len(routing) != 1 || routing[0] == "kube-a" {
					t.Errorf("%s: routing header %q; want exactly the plugin's choice", path, routing)
				}
				if mode == "front-proxy" && !slices.Equal(res.Values("x-remote-user"), []string{"alice, jr"}) {
					t.Errorf("%s: x-remote-user %q; want the certificate's [alice, jr]", path, res.Values("x-remote-user"))
				}
				if res.HeaderCalls != nil {
					if res.HeaderCalls["proxy_set_header_map_pairs"] != 1 || res.HeaderCalls["proxy_remove_header_map_value"] != 0 {
						t.Errorf("%s: header host calls %v; want one proxy_set_header_map_pairs and no removal", path, res.HeaderCalls)
					}
				}
			}
		})
	}
}

// A burst that fails every health probe at once must not make every request a
// 503: with no healthy server, the plugin routes as if all were healthy.
func noHealthyServerRoutesAsIfEveryServerWereHealthy(t *testing.T, h Harness) {
	servers := discoverytest.SkewedControlPlane()
	for i := range servers {
		servers[i].Healthy = false
	}
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, servers)})
	res := p.Request("POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies")
	if cluster, _ := res.Header(RoutingHeader); !res.Forwarded || (cluster != "kube-b" && cluster != "kube-c") {
		t.Errorf("skewed resource: forwarded %v to %q, local %+v; want kube-b or kube-c", res.Forwarded, cluster, res.Local)
	}
	res = p.Request("GET", "/apis/apps/v1/deployments")
	if _, ok := res.Header(RoutingHeader); !res.Forwarded || ok {
		t.Errorf("common resource: forwarded %v, local %+v; want the gateway's load balancing", res.Forwarded, res.Local)
	}
	if got := p.Counter(metricdef.PluginUnavailableResponses.Name); got != 0 {
		t.Errorf("unavailable counter %d; want 0", got)
	}
}
