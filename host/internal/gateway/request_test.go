package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

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
	got := pluginRequest(r)
	want := [][2]string{
		{":method", "GET"},
		{":path", "/api/v1/namespaces/a%2Fb/pods?labelSelector=app%3Dweb&limit=1"},
		{":authority", "gateway.example:6443"},
		{":scheme", "https"},
		{"accept", "application/json"},
		{"authorization", "Bearer t"},
		{"x-multi", "1"},
		{"x-multi", "2"},
	}
	if !slices.Equal(got.Headers, want) {
		t.Errorf("headers\n got %q\nwant %q", got.Headers, want)
	}
	if !got.EndOfStream {
		t.Error("a request without a body must end the stream with its headers")
	}
	p := got.Properties
	if p.SourceAddress != "192.0.2.7:51234" || p.SourcePort != 51234 || p.DestinationAddress != "10.0.0.1:6443" || p.DestinationPort != 6443 {
		t.Errorf("addresses %+v", p)
	}
	if p.RequestProtocol != "HTTP/1.1" {
		t.Errorf("protocol %q", p.RequestProtocol)
	}
	wantTLS := wasmhost.TLSProperties{PeerCertificatePresented: true, SubjectPeerCertificate: "CN=jane,O=dev", Version: "TLSv1.3", RequestedServerName: "gateway.example"}
	if p.TLS == nil || *p.TLS != wantTLS {
		t.Errorf("TLS %+v, want %+v", p.TLS, wantTLS)
	}

	// A presented but unverified certificate is no identity.
	r.TLS = &tls.ConnectionState{Version: tls.VersionTLS12, PeerCertificates: []*x509.Certificate{client.Leaf}}
	if p := pluginRequest(r).Properties.TLS; p.PeerCertificatePresented || p.SubjectPeerCertificate != "" {
		t.Errorf("unverified certificate reached the plugin: %+v", p)
	}
}
