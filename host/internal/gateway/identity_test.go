package gateway

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"fmt"
	"maps"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	x509request "k8s.io/apiserver/pkg/authentication/request/x509"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/skewgate/skewgate/host/internal/devpki"
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

// TestAssertedIdentityIsWhatTheX509AuthenticatorMakesOfTheCertificate: what
// the backend's request-header authenticator reads from the asserted headers is
// what kube-apiserver's own x509 authenticator makes of the client certificate
// (user, UID, groups, the credential id extra), over HTTP/2, over HTTP/1.1 and
// through the upgrade path. A certificate that authenticator refuses, or whose
// identity no header carries unchanged, is answered 401 and reaches no backend.
func TestAssertedIdentityIsWhatTheX509AuthenticatorMakesOfTheCertificate(t *testing.T) {
	o := newIdentityOracle(t)
	uidOID := asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}
	withUIDs := func(name pkix.Name, values ...any) pkix.Name {
		for _, v := range values {
			name.ExtraNames = append(name.ExtraNames, pkix.AttributeTypeAndValue{Type: uidOID, Value: v})
		}
		return name
	}
	jane := pkix.Name{CommonName: "jane", Organization: []string{"developers", "system:masters"}}
	for _, tc := range []struct {
		name    string
		subject pkix.Name
		refused bool
	}{
		{"common name and organizations", jane, false},
		{"common name alone", pkix.Name{CommonName: "jane"}, false},
		{"UID", withUIDs(jane, "3f1c6a2e-uid"), false},
		{"UID beyond ASCII", withUIDs(jane, "jürgen-ü"), false},
		{"UID as BMPString", withUIDs(jane, asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagBMPString, Bytes: []byte{0, 'j', 0, 0xfc}}), false},
		{"two UIDs", withUIDs(jane, "a", "b"), true},
		{"empty UID", withUIDs(jane, ""), true},
		{"space and tab inside values", withUIDs(pkix.Name{CommonName: "lab admin", Organization: []string{"on\tcall"}}, "u 1"), false},
		{"comma inside an organization", pkix.Name{CommonName: "jane", Organization: []string{"system:masters,developers"}}, false},
		{"common name beyond ASCII", pkix.Name{CommonName: "jürgen", Organization: []string{"équipe"}}, false},
		// HTTP/1.1 writers and parsers trim these, and the authenticator drops
		// an empty value: what kube-apiserver would read is not what it is sent.
		{"organization with a leading space", pkix.Name{CommonName: "mallory", Organization: []string{" system:masters"}}, true},
		{"common name with a trailing space", pkix.Name{CommonName: "lab-admin ", Organization: []string{"developers"}}, true},
		{"common name with a leading tab", pkix.Name{CommonName: "\tlab-admin"}, true},
		{"organization with a trailing tab", pkix.Name{CommonName: "jane", Organization: []string{"system:masters\t"}}, true},
		{"empty organization", pkix.Name{CommonName: "jane", Organization: []string{"developers", ""}}, true},
		{"UID with a leading space", withUIDs(jane, " 3f1c6a2e-uid"), true},
		{"common name with a line feed", pkix.Name{CommonName: "jane\nX-Remote-Group: system:masters"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if refused := o.check(t, tc.subject); refused != tc.refused {
				t.Errorf("refused %v, want %v", refused, tc.refused)
			}
		})
	}
}

// FuzzAssertedIdentity holds the oracle test's property for any subject: a
// common name, organizations separated by '|', and an optional UID attribute.
// Go encodes each as a UTF8String, which holds valid UTF-8 only.
func FuzzAssertedIdentity(f *testing.F) {
	f.Add("jane", "developers|system:masters", "", false)
	f.Add("mallory", " system:masters", "", false)
	f.Add("lab-admin ", "", "", false)
	f.Add("a\tb", "x|", "u 1", true)
	f.Add("jürgen", "a,b", "", true)
	o := newIdentityOracle(f)
	f.Fuzz(func(t *testing.T, commonName, organizations, uid string, withUID bool) {
		commonName, organizations, uid = validUTF8(commonName), validUTF8(organizations), validUTF8(uid)
		subject := pkix.Name{CommonName: commonName}
		if organizations != "" {
			subject.Organization = strings.Split(organizations, "|")
		}
		if withUID {
			subject.ExtraNames = []pkix.AttributeTypeAndValue{{Type: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 57683, 2}, Value: uid}}
		}
		o.check(t, subject)
	})
}

func validUTF8(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// identityOracle compares what the API server behind the gateway would
// authenticate with what its x509 authenticator makes of the certificate
// itself, on each way an asserted identity travels.
type identityOracle struct {
	clientCA *devpki.CA
	// fromHeaders is kube-apiserver's request-header authenticator with the
	// --requestheader-* flags the test clusters use.
	fromHeaders authenticator.Request
	paths       []identityPath
}

// identityPath is one way from a client to the backend: the gateway, whether
// the client speaks HTTP/2, the headers it adds, and the protocol the backend
// must have been reached with.
type identityPath struct {
	name      string
	h         *harness
	http2     bool
	header    http.Header
	wantProto string
}

func newIdentityOracle(t testing.TB) *identityOracle {
	fromHeaders, err := headerrequest.New([]string{"X-Remote-User"}, []string{"X-Remote-Uid"}, []string{"X-Remote-Group"}, []string{"X-Remote-Extra-"})
	if err != nil {
		t.Fatal(err)
	}
	clientCA := mustCA(t, "client-ca")
	multiplexed := newHarness(t, harnessConfig{identityMode: "front-proxy", clientCA: clientCA})
	http1 := newHarness(t, harnessConfig{identityMode: "front-proxy", clientCA: clientCA, http1Backends: true})
	return &identityOracle{clientCA: clientCA, fromHeaders: fromHeaders, paths: []identityPath{
		{"HTTP/2", multiplexed, true, nil, "HTTP/2.0"},
		{"HTTP/1.1 backend", http1, true, nil, "HTTP/1.1"},
		// Upgrades travel over HTTP/1.1 whatever the backend offers.
		{"upgrade", multiplexed, false, http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, "HTTP/1.1"},
	}}
}

// check sends a request with a certificate for subject along every path and
// reports whether the gateway refused it. Go's x509 authenticator is the
// oracle for the identity, Go's HTTP/1.1 header writer and parser for what a
// header can carry: a certificate it refuses, or whose identity does not come
// back unchanged from headers, must be answered 401 before any backend sees
// it; every other one must reach the backend as exactly that identity.
func (o *identityOracle) check(t *testing.T, subject pkix.Name) (refused bool) {
	leaf, err := o.clientCA.Client(subject)
	if err != nil {
		t.Fatalf("issuing a certificate for %+v: %v", subject, err)
	}
	cert := leaf.TLSCertificate()
	want, ok, x509Err := x509request.CommonNameUserConversion.User([]*x509.Certificate{leaf.Cert})
	carried := ok && x509Err == nil && o.survivesHeaders(want.User)
	for _, p := range o.paths {
		client := p.h.unmanagedClient(&cert, p.http2)
		before := p.h.totalHits()
		resp, body := do(t, client, "GET", p.h.front.URL+newerOnly, p.header, nil)
		client.CloseIdleConnections()
		if !carried {
			switch {
			case resp.StatusCode == http.StatusOK:
				t.Errorf("%s: the backend authenticates %s; want kube-apiserver's 401 without a backend request, since x509 authenticates %s (error %v), which headers do not carry unchanged",
					p.name, describe(o.backendUser(t, p, body)), describe(userOf(want)), x509Err)
			case resp.StatusCode != http.StatusUnauthorized || string(body) != unauthorizedStatus || p.h.totalHits() != before:
				t.Errorf("%s: status %d after %d backend requests: %s; want kube-apiserver's 401 and none", p.name, resp.StatusCode, p.h.totalHits()-before, body)
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: status %d, want the backend's answer for %s: %s", p.name, resp.StatusCode, describe(want.User), body)
			continue
		}
		if got := o.backendUser(t, p, body); !sameUser(got, want.User) {
			t.Errorf("%s: the backend authenticates %s\nx509 says             %s", p.name, describe(got), describe(want.User))
		}
	}
	return !carried
}

// backendUser is whom the request-header authenticator finds in the headers
// the echo backend reports in body, received as p says.
func (o *identityOracle) backendUser(t *testing.T, p identityPath, body []byte) user.Info {
	t.Helper()
	e := decodeEcho(t, body)
	if e.Proto != p.wantProto || (p.header != nil && e.Headers["Upgrade"] == nil) {
		t.Fatalf("%s: the backend was reached over %s with Upgrade %q; want %s", p.name, e.Proto, e.Headers["Upgrade"], p.wantProto)
	}
	got, ok, err := o.fromHeaders.AuthenticateRequest(&http.Request{Header: http.Header(e.Headers)})
	if err != nil || !ok {
		t.Fatalf("%s: the asserted headers %v authenticate nobody: %v", p.name, e.Headers, err)
	}
	return got.User
}

// unauthorizedStatus is kube-apiserver's answer to a request no authenticator
// accepts.
const unauthorizedStatus = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`

// survivesHeaders reports whether u comes back unchanged from the
// request-header authenticator after its headers went through Go's HTTP/1.1
// header writer and parser, the ones between a Go proxy and kube-apiserver.
func (o *identityOracle) survivesHeaders(u user.Info) bool {
	h := http.Header{"X-Remote-User": {u.GetName()}}
	if u.GetUID() != "" {
		h["X-Remote-Uid"] = []string{u.GetUID()}
	}
	h["X-Remote-Group"] = u.GetGroups()
	for key, values := range u.GetExtra() {
		h["X-Remote-Extra-"+url.PathEscape(key)] = values
	}
	var wire bytes.Buffer
	if err := h.Write(&wire); err != nil {
		return false
	}
	wire.WriteString("\r\n")
	read, err := textproto.NewReader(bufio.NewReader(&wire)).ReadMIMEHeader()
	if err != nil {
		return false
	}
	got, ok, err := o.fromHeaders.AuthenticateRequest(&http.Request{Header: http.Header(read)})
	return err == nil && ok && sameUser(got.User, u)
}

// sameUser compares identities as authorization sees them: no groups and an
// empty list of groups are the same.
func sameUser(a, b user.Info) bool {
	return a.GetName() == b.GetName() && a.GetUID() == b.GetUID() && slices.Equal(a.GetGroups(), b.GetGroups()) &&
		maps.EqualFunc(a.GetExtra(), b.GetExtra(), slices.Equal)
}

// describe spells an identity so that whitespace and control characters show.
func describe(u user.Info) string {
	if u == nil {
		return "nobody"
	}
	return fmt.Sprintf("user %q uid %q groups %q extra %q", u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
}

func userOf(r *authenticator.Response) user.Info {
	if r == nil {
		return nil
	}
	return r.User
}
