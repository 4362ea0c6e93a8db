package gateway

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// pluginRequest is the request as Envoy hands it to a proxy-wasm filter: the
// pseudo-headers first, then every header field lower-cased, one pair per
// value, and the connection's attributes. Like Envoy's codec and connection
// manager, it first removes what belongs to the client's connection (the
// headers its Connection header nominates, and the hop-by-hop ones), drops
// the client's X-Real-Ip and Forwarded and appends the peer's address to
// X-Forwarded-For (use_remote_address): the gateway faces clients directly,
// so the peer is the only address it knows to be true. Whatever the plugin
// then sets is never subject to the client's Connection tokens.
func pluginRequest(r *http.Request) (*pooledRequest, error) {
	upgrade := upgradeType(r.Header) != ""
	nominated, err := nominatedHeaders(r.Header)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	p := requestPool.Get().(*pooledRequest)
	headers := append(p.Headers[:0],
		[2]string{":method", r.Method},
		[2]string{":path", requestTarget(r)},
		[2]string{":authority", r.Host},
		[2]string{":scheme", scheme},
	)
	// Go keeps the order of one field's values but not across fields; sorting
	// makes what the plugin sees deterministic.
	names := p.names[:0]
	for name := range r.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	var forwardedFor []string
	for _, name := range names {
		lower := lowerHeaderName(name)
		switch {
		case nominated[lower], lower == "x-real-ip", lower == "forwarded":
			continue
		case lower == "x-forwarded-for":
			forwardedFor = r.Header[name]
			continue
		case connectionHeaders[lower] && !(upgrade && (lower == "connection" || lower == "upgrade")):
			continue
		}
		for _, v := range r.Header[name] {
			headers = append(headers, [2]string{lower, v})
		}
	}
	clear(names)
	p.names = names[:0]
	if peer := peerIP(r.RemoteAddr); peer != "" {
		// One field, as Envoy keeps it: kube-apiserver reads only the first
		// X-Forwarded-For field.
		if len(forwardedFor) > 0 {
			peer = strings.Join(forwardedFor, ",") + "," + peer
		}
		headers = append(headers, [2]string{"x-forwarded-for", peer})
	}
	p.Request = wasmhost.Request{
		Headers:     headers,
		EndOfStream: r.ContentLength == 0,
		Properties:  properties(r, &p.tls),
	}
	return p, nil
}

// pooledRequest is a plugin request with the buffers it is built in, reused
// from one request to the next, and the reader of its body (offerBody).
type pooledRequest struct {
	wasmhost.Request
	tls   wasmhost.TLSProperties
	names []string
	body  pluginBody
}

var requestPool = sync.Pool{New: func() any { return new(pooledRequest) }}

// release returns the request to the pool once neither it nor the outcome
// of the plugin that saw it is used any more (the failure policy may forward
// the request's own headers, and a body the plugin read is held until the
// request is answered).
func (p *pooledRequest) release() {
	p.body.release()
	clear(p.Headers)
	p.Request = wasmhost.Request{Headers: p.Headers[:0]}
	p.tls = wasmhost.TLSProperties{}
	requestPool.Put(p)
}

// lowerHeaderName is name as Envoy stores it, lower-cased, without
// allocating for the fields Kubernetes clients send.
func lowerHeaderName(name string) string {
	if lower, ok := commonLowerNames[name]; ok {
		return lower
	}
	return strings.ToLower(name)
}

var commonLowerNames = func() map[string]string {
	m := map[string]string{}
	for _, lower := range []string{
		"accept", "accept-encoding", "accept-language", "audit-id", "authorization", "cache-control", "connection",
		"content-encoding", "content-length", "content-type", "cookie", "forwarded", "if-match", "if-modified-since",
		"if-none-match", "impersonate-group", "impersonate-uid", "impersonate-user", "keep-alive", "kubectl-command",
		"kubectl-session", "origin", "proxy-connection", "sec-websocket-extensions", "sec-websocket-key",
		"sec-websocket-protocol", "sec-websocket-version", "te", "trailer", "transfer-encoding", "upgrade",
		"user-agent", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip",
		"x-kubernetes-peer-proxied", "x-remote-group", "x-remote-uid", "x-remote-user", "x-stream-protocol-version",
	} {
		m[textproto.CanonicalMIMEHeaderKey(lower)] = lower
	}
	return m
}()

// connectionHeaders are the hop-by-hop fields Envoy's connection manager
// removes before the filters run; Connection and Upgrade stay on upgrades.
var connectionHeaders = map[string]bool{
	"connection":        true,
	"keep-alive":        true,
	"proxy-connection":  true,
	"transfer-encoding": true,
	"upgrade":           true,
}

// maxNominatedHeaders is Envoy's limit on Connection tokens: ten or more and
// the request is refused.
const maxNominatedHeaders = 10

// nominatedHeaders are the header fields the client's Connection header names
// as belonging to its connection (RFC 9110 7.6.1), lower-cased, with Envoy's
// rules (Utility::sanitizeConnectionHeader): the connection options close,
// keep-alive, upgrade and http2-settings name no field; nominating an
// X-Forwarded-* field (which would hide where a request came from) or a
// pseudo-header, or ten tokens or more, is an invalid request.
func nominatedHeaders(h http.Header) (map[string]bool, error) {
	var nominated map[string]bool
	tokens := 0
	for _, v := range h["Connection"] {
		for t := range strings.SplitSeq(v, ",") {
			t = strings.ToLower(strings.TrimSpace(t))
			if t == "" {
				continue
			}
			if tokens++; tokens >= maxNominatedHeaders {
				return nil, errors.New("the Connection header nominates too many header fields")
			}
			switch t {
			case "close", "keep-alive", "upgrade", "http2-settings", "connection":
				continue
			case "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto":
				return nil, errors.New("the Connection header must not nominate " + t)
			}
			if strings.HasPrefix(t, ":") {
				return nil, errors.New("the Connection header must not nominate a pseudo-header")
			}
			if nominated == nil {
				nominated = map[string]bool{}
			}
			nominated[t] = true
		}
	}
	return nominated, nil
}

// peerIP is the address part of the connection's remote address.
func peerIP(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}

// headerFields counts the request's header fields, one per value, as Envoy's
// max_headers_count counts them.
func headerFields(h http.Header) int {
	n := 0
	for _, v := range h {
		n += len(v)
	}
	return n
}

// parseTarget parses a request's target, once a request: the in-flight
// classification, the request log and the retry set all read what it
// returns (the plugin, which decides alone in Envoy, parses its own copy). A
// variable, so that a test can count the calls.
var parseTarget = discovery.ParseTarget

// requestTarget is the request URI as the client sent it (path and query),
// in origin form.
func requestTarget(r *http.Request) string {
	if strings.HasPrefix(r.RequestURI, "/") {
		return r.RequestURI
	}
	return r.URL.RequestURI()
}

// properties are the request's attributes; a TLS session's are written to t.
func properties(r *http.Request, t *wasmhost.TLSProperties) wasmhost.Properties {
	p := wasmhost.Properties{RequestProtocol: protocolName(r)}
	p.SourceAddress, p.SourcePort = splitAddress(r.RemoteAddr)
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		p.Destination = local
	}
	if r.TLS != nil {
		tlsProperties(r.TLS, t)
		p.TLS = t
	}
	return p
}

// tlsProperties writes to t the downstream TLS session's attributes. Only a certificate the
// gateway verified counts: its leaf becomes subject_peer_certificate and
// sha256_peer_certificate_digest (lower-case hex, as Envoy spells it).
func tlsProperties(cs *tls.ConnectionState, t *wasmhost.TLSProperties) {
	*t = wasmhost.TLSProperties{
		Version:             tlsVersionName(cs.Version),
		RequestedServerName: cs.ServerName,
	}
	if len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
		leaf := cs.VerifiedChains[0][0]
		if subject, err := subjectRFC2253(leaf.RawSubject); err == nil {
			digest := sha256.Sum256(leaf.Raw)
			t.PeerCertificatePresented = true
			t.SubjectPeerCertificate = subject
			t.SHA256PeerCertificateDigest = hex.EncodeToString(digest[:])
		}
	}
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
