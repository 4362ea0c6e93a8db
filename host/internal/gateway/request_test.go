package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

func TestPluginSeesTheRequestAsEnvoyPresentsIt(t *testing.T) {
	ca := mustCA(t, "client-ca")
	client := mustClient(t, ca, pkix.Name{CommonName: "jane", Organization: []string{"dev"}})
	r := httptest.NewRequest("GET", "https://gateway.example/api/v1/namespaces/a%2Fb/pods?labelSelector=app%3Dweb&limit=1", nil)
	r.RequestURI = "/api/v1/namespaces/a%2Fb/pods?labelSelector=app%3Dweb&limit=1"
	r.Host = "gateway.example:6443"
	r.RemoteAddr = "192.0.2.7:51234"
	r.Header = http.Header{"Accept": {"application/json"}, "X-Multi": {"1", "2"}, "Authorization": {"Bearer t"}}
	r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 6443}))
	r.TLS = &tls.ConnectionState{
		Version:        tls.VersionTLS13,
		ServerName:     "gateway.example",
		VerifiedChains: [][]*x509.Certificate{{client.Leaf}},
	}
	got, err := pluginRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{
		{":method", "GET"},
		{":path", "/api/v1/namespaces/a%2Fb/pods?labelSelector=app%3Dweb&limit=1"},
		{":authority", "gateway.example:6443"},
		{":scheme", "https"},
		{"accept", "application/json"},
		{"authorization", "Bearer t"},
		{"x-multi", "1"},
		{"x-multi", "2"},
		{"x-forwarded-for", "192.0.2.7"},
	}
	if !slices.Equal(got.Headers, want) {
		t.Errorf("headers\n got %q\nwant %q", got.Headers, want)
	}
	if !got.EndOfStream {
		t.Error("a request without a body must end the stream with its headers")
	}
	p := got.Properties
	if p.SourceAddress != "192.0.2.7:51234" || p.SourcePort != 51234 || p.Destination.String() != "10.0.0.1:6443" {
		t.Errorf("addresses %+v", p)
	}
	if p.RequestProtocol != "HTTP/1.1" {
		t.Errorf("protocol %q", p.RequestProtocol)
	}
	// The digest is kube-apiserver's credential id of the certificate, so it
	// is that of the leaf's DER, spelled as Envoy spells it.
	leafDigest := sha256.Sum256(client.Leaf.Raw)
	wantTLS := wasmhost.TLSProperties{
		PeerCertificatePresented: true, SubjectPeerCertificate: "CN=jane,O=dev", Version: "TLSv1.3", RequestedServerName: "gateway.example",
		SHA256PeerCertificateDigest: hex.EncodeToString(leafDigest[:]),
	}
	if p.TLS == nil || *p.TLS != wantTLS {
		t.Errorf("TLS %+v, want %+v", p.TLS, wantTLS)
	}

	// A presented but unverified certificate is no identity.
	r.TLS = &tls.ConnectionState{Version: tls.VersionTLS12, PeerCertificates: []*x509.Certificate{client.Leaf}}
	if req, _ := pluginRequest(r); req.Properties.TLS.PeerCertificatePresented || req.Properties.TLS.SubjectPeerCertificate != "" || req.Properties.TLS.SHA256PeerCertificateDigest != "" {
		t.Errorf("unverified certificate reached the plugin: %+v", req.Properties.TLS)
	}
}

func TestClientConnectionTokensApplyToTheClientsHeadersOnly(t *testing.T) {
	for _, tc := range []struct {
		name       string
		header     http.Header
		wantErr    bool
		wantHeader [][2]string
	}{
		{
			name:       "nominated fields and the hop-by-hop ones are gone before the plugin runs",
			header:     http.Header{"Connection": {"X-Remote-User, keep-alive"}, "X-Remote-User": {"forged"}, "Keep-Alive": {"timeout=5"}, "Accept": {"a"}},
			wantHeader: [][2]string{{"accept", "a"}},
		},
		{
			name:       "connection options nominate nothing",
			header:     http.Header{"Connection": {"close, Connection"}, "Close": {"kept"}},
			wantHeader: [][2]string{{"close", "kept"}},
		},
		{
			name:       "an upgrade keeps Connection and Upgrade",
			header:     http.Header{"Connection": {"Upgrade, X-Hop"}, "Upgrade": {"websocket"}, "X-Hop": {"gone"}},
			wantHeader: [][2]string{{"connection", "Upgrade, X-Hop"}, {"upgrade", "websocket"}},
		},
		{name: "nominating X-Forwarded-For is refused", header: http.Header{"Connection": {"x-forwarded-for"}}, wantErr: true},
		{name: "nominating a pseudo-header is refused", header: http.Header{"Connection": {":path"}}, wantErr: true},
		{name: "ten tokens are refused", header: http.Header{"Connection": {"a,b,c,d,e", "f,g,h,i,j"}}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "https://gateway/api", nil)
			r.Header = tc.header
			got, err := pluginRequest(r)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("accepted: %q", got.Headers)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := append([][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "gateway"}, {":scheme", "https"}}, tc.wantHeader...)
			want = append(want, [2]string{"x-forwarded-for", "192.0.2.1"})
			if !slices.Equal(got.Headers, want) {
				t.Errorf("headers\n got %q\nwant %q", got.Headers, want)
			}
		})
	}
}

func TestClientForwardingHeadersAreReplacedByThePeerAddress(t *testing.T) {
	r := httptest.NewRequest("GET", "https://gateway/api", nil)
	r.RemoteAddr = "[2001:db8::7]:40000"
	r.Header = http.Header{
		"X-Forwarded-For": {"203.0.113.9, 10.0.0.1", "198.51.100.2"},
		"X-Real-Ip":       {"203.0.113.10"},
		"Forwarded":       {"for=203.0.113.11"},
	}
	got, err := pluginRequest(r)
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]string{{":method", "GET"}, {":path", "/api"}, {":authority", "gateway"}, {":scheme", "https"},
		{"x-forwarded-for", "203.0.113.9, 10.0.0.1,198.51.100.2,2001:db8::7"}}
	if !slices.Equal(got.Headers, want) {
		t.Errorf("headers\n got %q\nwant %q", got.Headers, want)
	}
}

// A request's target is parsed once on the gateway's side, however many of
// its parts read it: the request log, the in-flight classification, and the
// retry that looks for another capable server (the plugin, which decides
// alone in Envoy, parses its own copy).
func TestARequestTargetIsParsedOnce(t *testing.T) {
	var parses atomic.Int64
	counting := func(method, target string) discovery.Target {
		parses.Add(1)
		return discovery.ParseTarget(method, target)
	}
	previous := parseTarget
	parseTarget = counting
	t.Cleanup(func() { parseTarget = previous })
	h := newHarness(t, harnessConfig{servers: retryServers(), refusing: []string{"kube-a"}, plugin: routeTo("kube-a"),
		options: func(o *Options) { o.Requests = NewRequestLog(0, 0) }})
	recorded := func() (n uint64) {
		for _, shape := range h.gw.opts.Requests.Shapes().Shapes {
			n += shape.Count
		}
		return n
	}
	for i, tc := range []struct{ name, method, target string }{
		{"a list with a field selector, retried on another server", "GET", widgets + "?fieldSelector=metadata.name%3Dw"},
		{"a watch, retried", "GET", widgets + "?watch=1"},
		{"a create, retried", "POST", widgets},
	} {
		parses.Store(0)
		var body io.Reader
		if tc.method == "POST" {
			body = strings.NewReader(`{"kind":"Widget"}`)
		}
		resp, got := do(t, h.client(nil, true), tc.method, h.front.URL+tc.target, nil, body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.name, resp.StatusCode, got)
		}
		waitUntil(t, "the request to be recorded", func() bool { return recorded() == uint64(i+1) })
		if n := parses.Load(); n != 1 {
			t.Errorf("%s: the target was parsed %d times, want once", tc.name, n)
		}
	}
}
