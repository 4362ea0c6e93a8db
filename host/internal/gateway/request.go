package gateway

import (
	"crypto/tls"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// pluginRequest is the request as Envoy hands it to a proxy-wasm filter: the
// pseudo-headers first, then every header field lower-cased, one pair per
// value, and the connection's attributes.
func pluginRequest(r *http.Request) *wasmhost.Request {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	headers := make([][2]string, 0, 4+len(r.Header)+2)
	headers = append(headers,
		[2]string{":method", r.Method},
		[2]string{":path", requestTarget(r)},
		[2]string{":authority", r.Host},
		[2]string{":scheme", scheme},
	)
	// Go keeps the order of one field's values but not across fields; sorting
	// makes what the plugin sees deterministic.
	names := make([]string, 0, len(r.Header))
	for name := range r.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		lower := strings.ToLower(name)
		for _, v := range r.Header[name] {
			headers = append(headers, [2]string{lower, v})
		}
	}
	return &wasmhost.Request{
		Headers:     headers,
		EndOfStream: r.ContentLength == 0,
		Properties:  properties(r),
	}
}

// requestTarget is the request URI as the client sent it (path and query),
// in origin form.
func requestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

func properties(r *http.Request) wasmhost.Properties {
	p := wasmhost.Properties{RequestProtocol: protocolName(r)}
	p.SourceAddress, p.SourcePort = splitAddress(r.RemoteAddr)
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		p.DestinationAddress, p.DestinationPort = splitAddress(local.String())
	}
	if r.TLS != nil {
		p.TLS = tlsProperties(r.TLS)
	}
	return p
}

// tlsProperties describe the downstream TLS session. Only a certificate the
// gateway verified counts: its leaf becomes subject_peer_certificate.
func tlsProperties(cs *tls.ConnectionState) *wasmhost.TLSProperties {
	t := &wasmhost.TLSProperties{
		Version:             tlsVersionName(cs.Version),
		RequestedServerName: cs.ServerName,
	}
	if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		if subject, err := subjectRFC2253(cs.VerifiedChains[0][0].RawSubject); err == nil {
			t.PeerCertificatePresented = true
			t.SubjectPeerCertificate = subject
		}
	}
	return t
}

// tlsVersionName spells the version as Envoy's connection.tls_version does.
func tlsVersionName(v uint16) string {
	switch v {
	case tls.VersionTLS12:
		return "TLSv1.2"
	case tls.VersionTLS13:
		return "TLSv1.3"
	case tls.VersionTLS11:
		return "TLSv1.1"
	case tls.VersionTLS10:
		return "TLSv1"
	}
	return ""
}

func protocolName(r *http.Request) string {
	switch {
	case r.ProtoMajor == 2:
		return "HTTP/2"
	case r.ProtoMajor == 3:
		return "HTTP/3"
	case r.ProtoMajor == 1 && r.ProtoMinor == 0:
		return "HTTP/1.0"
	}
	return "HTTP/1.1"
}

func splitAddress(address string) (string, int64) {
	_, port, err := net.SplitHostPort(address)
	if err != nil {
		return address, 0
	}
	n, _ := strconv.ParseInt(port, 10, 64)
	return address, n
}
