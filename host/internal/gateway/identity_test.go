package gateway

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"net/http"
	"reflect"
	"slices"
	"testing"

	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
)

func TestFrontProxyCertificateIsPresentedOnlyForAssertedIdentities(t *testing.T) {
	for _, tc := range []struct {
		name         string
		mode         string
		route        string
		refusing     []string
		wantStatus   int
		wantCluster  string
		wantCertName string
	}{
		{"an asserted identity goes to the named server with the front-proxy certificate", "front-proxy", "kube-a+front-proxy", nil, 200, "kube-a", frontProxyClientName},
		{"a request routed without the suffix presents no certificate", "front-proxy", "kube-a", nil, 200, "kube-a", ""},
		{"a balanced request presents no certificate", "front-proxy", "", nil, 200, "", ""},
		{"a retry keeps the front-proxy certificate", "front-proxy", "kube-a+front-proxy", []string{"kube-a"}, 200, "kube-b", frontProxyClientName},
		{"a retry keeps going without a certificate", "front-proxy", "kube-a", []string{"kube-a"}, 200, "kube-b", ""},
		{"an unknown server is not reached", "front-proxy", "kube-z+front-proxy", nil, 503, "", ""},
		{"an assertion without a front-proxy certificate is refused", "passthrough", "kube-a+front-proxy", nil, 503, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{servers: retryServers(), identityMode: tc.mode, plugin: routeTo(tc.route), refusing: tc.refusing})
			for _, http2 := range []bool{false, true} {
				resp, body := do(t, h.client(nil, http2), "GET", h.front.URL+widgets, nil, nil)
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.wantStatus, body)
				}
				if tc.wantStatus != 200 {
					checkUnavailable(t, resp, body, 7)
					if n := h.totalHits(); n != 0 {
						t.Errorf("backends saw %d requests", n)
					}
					continue
				}
				e := decodeEcho(t, body)
				if tc.wantCluster != "" && e.Cluster != tc.wantCluster {
					t.Errorf("served by %s, want %s", e.Cluster, tc.wantCluster)
				}
				if e.ClientCert != tc.wantCertName {
					t.Errorf("the backend saw client certificate %q, want %q", e.ClientCert, tc.wantCertName)
				}
			}
		})
	}
}

func TestClientConnectionTokensNeverRemoveTheAssertedIdentity(t *testing.T) {
	h := newHarness(t, harnessConfig{identityMode: "front-proxy"})
	cert := mustClient(t, h.clientCA, pkix.Name{CommonName: "jane", Organization: []string{"developers", "system:masters"}})
	for _, nominated := range []string{"X-Remote-User", "X-Remote-Group", "X-Remote-User, X-Remote-Group"} {
		t.Run(nominated, func(t *testing.T) {
			// HTTP/2 has no Connection header; HTTP/1.1 is where it matters.
			resp, body := do(t, h.client(&cert, false), "GET", h.front.URL+newerOnly, http.Header{"Connection": {nominated}}, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			e := decodeEcho(t, body)
			if got := e.Headers["X-Remote-User"]; !slices.Equal(got, []string{"jane"}) {
				t.Errorf("X-Remote-User = %q, want the asserted [jane]", got)
			}
			if got := e.Headers["X-Remote-Group"]; !slices.Equal(got, []string{"developers", "system:masters"}) {
				t.Errorf("X-Remote-Group = %q, want the asserted groups", got)
			}
		})
	}
}

// What the backend's request-header authenticator reads from the asserted
// headers is what kube-apiserver's own x509 authenticator makes of the client
// certificate: user, UID, groups and the credential id extra. A certificate
// that authenticator refuses is answered 401 and reaches no backend.
func TestAssertedIdentityIsWhatTheX509AuthenticatorMakesOfTheCertificate(t *testing.T) {
	h := newHarness(t, harnessConfig{identityMode: "front-proxy"})
	// kube-apiserver's --requestheader-* flags as the test cluster sets them.
	fromHeaders, err := headerrequest.New([]string{"X-Remote-User"}, []string{"X-Remote-Uid"}, []string{"X-Remote-Group"}, []string{"X-Remote-Extra-"})
	if err != nil {
		t.Fatal(err)
	}
	uidOID := asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}
	withUIDs := func(values ...any) pkix.Name {
		name := pkix.Name{CommonName: "jane", Organization: []string{"developers", "system:masters"}}
		for _, v := range values {
			name.ExtraNames = append(name.ExtraNames, pkix.AttributeTypeAndValue{Type: uidOID, Value: v})
		}
		return name
	}
	for _, tc := range []struct {
		name    string
		subject pkix.Name
	}{
		{"common name and organizations", withUIDs()},
		{"UID", withUIDs("3f1c6a2e-uid")},
		{"UID beyond ASCII", withUIDs("jürgen-ü")},
		{"UID as BMPString", withUIDs(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagBMPString, Bytes: []byte{0, 'j', 0, 0xfc}})},
		{"two UIDs", withUIDs("a", "b")},
		{"empty UID", withUIDs("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cert := mustClient(t, h.clientCA, tc.subject)
			want, ok, wantErr := x509request.CommonNameUserConversion.User([]*x509.Certificate{cert.Leaf})
			before := h.totalHits()
			resp, body := do(t, h.client(&cert, true), "GET", h.front.URL+newerOnly, nil, nil)
			if wantErr != nil || !ok {
				if resp.StatusCode != http.StatusUnauthorized || h.totalHits() != before {
					t.Fatalf("status %d after %d backend requests, want 401 and none: kube-apiserver refuses it (%v): %s", resp.StatusCode, h.totalHits()-before, wantErr, body)
				}
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			asserted := &http.Request{Header: http.Header(decodeEcho(t, body).Headers)}
			got, ok, err := fromHeaders.AuthenticateRequest(asserted)
			if err != nil || !ok {
				t.Fatalf("the asserted headers %v authenticate nobody: %v", asserted.Header, err)
			}
			if !reflect.DeepEqual(got.User, want.User) {
				t.Errorf("asserted %+v\nx509 says %+v", got.User, want.User)
			}
		})
	}
}
