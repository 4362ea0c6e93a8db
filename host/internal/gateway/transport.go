package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// errNoFrontProxyCertificate: the plugin asserted an identity, but the
// gateway has no front-proxy client certificate to vouch for it with.
var errNoFrontProxyCertificate = errors.New("the request asserts an identity but no front-proxy client certificate is configured")

// transports are the HTTP clients of one set of TLS material. Each credential
// has its own connections, so a connection that presented the front-proxy
// certificate never carries a request whose identity the gateway does not
// assert.
type transports struct {
	plain *transportPair
	// frontProxy presents the front-proxy client certificate; nil without one.
	frontProxy *transportPair
}

// transportPair is multiplexed for plain requests (HTTP/2 when the server
// offers it) and HTTP/1.1 for upgrades, which HTTP/2 cannot carry.
type transportPair struct {
	multiplexed, http1 *http.Transport
}

func (p *transportPair) closeIdleConnections() {
	if p != nil {
		p.multiplexed.CloseIdleConnections()
		p.http1.CloseIdleConnections()
	}
}

// pick is the transport for a request with the credential frontProxy names.
func (ts *transports) pick(frontProxy, upgrade bool) (*http.Transport, error) {
	pair := ts.plain
	if frontProxy {
		if pair = ts.frontProxy; pair == nil {
			return nil, errNoFrontProxyCertificate
		}
	}
	if upgrade {
		return pair.http1, nil
	}
	return pair.multiplexed, nil
}

// tlsMaterial is what backend connections are verified and authenticated
// with; rotations replace it.
type tlsMaterial struct {
	roots *x509.CertPool
	cert  *tls.Certificate
}

// transportSource holds the current transports. A rotation builds new ones
// and switches to them at once: new requests dial with the new material,
// requests and watches in flight keep their connections, and the previous
// transports' idle connections are closed (the rest close when their last
// stream ends and the idle timeout passes).
type transportSource struct {
	serverName  string
	dialTimeout time.Duration

	mu       sync.Mutex // serialises rotations
	material tlsMaterial
	current  atomic.Pointer[transports]
}

func newTransportSource(o Options) *transportSource {
	src := &transportSource{serverName: o.PeerServerName, dialTimeout: o.DialTimeout}
	src.material = tlsMaterial{roots: o.PeerRootCAs, cert: o.ClientCertificate}
	src.current.Store(&transports{plain: src.newPair(nil), frontProxy: src.frontProxyPair(o.ClientCertificate)})
	return src
}

func (src *transportSource) load() *transports { return src.current.Load() }

func (src *transportSource) setRoots(roots *x509.CertPool) {
	src.mu.Lock()
	defer src.mu.Unlock()
	src.material.roots = roots
	old := src.current.Load()
	src.current.Store(&transports{plain: src.newPair(nil), frontProxy: src.frontProxyPair(src.material.cert)})
	old.plain.closeIdleConnections()
	old.frontProxy.closeIdleConnections()
}

func (src *transportSource) setClientCertificate(cert *tls.Certificate) {
	src.mu.Lock()
	defer src.mu.Unlock()
	src.material.cert = cert
	old := src.current.Load()
	// Plain connections carry no certificate, so they stay.
	src.current.Store(&transports{plain: old.plain, frontProxy: src.frontProxyPair(cert)})
	old.frontProxy.closeIdleConnections()
}

func (src *transportSource) closeIdleConnections() {
	ts := src.current.Load()
	ts.plain.closeIdleConnections()
	ts.frontProxy.closeIdleConnections()
}

// frontProxyPair presents cert; nil without one.
func (src *transportSource) frontProxyPair(cert *tls.Certificate) *transportPair {
	if cert == nil {
		return nil
	}
	return src.newPair(cert)
}

// newPair builds transports verifying against the current roots and
// presenting cert, or no certificate when it is nil. Callers hold mu or own
// src exclusively.
func (src *transportSource) newPair(cert *tls.Certificate) *transportPair {
	base := &tls.Config{
		RootCAs:    src.material.roots,
		ServerName: src.serverName,
		MinVersion: tls.VersionTLS12,
	}
	if cert != nil {
		base.Certificates = []tls.Certificate{*cert}
	}
	return &transportPair{multiplexed: src.newTransport(base, true), http1: src.newTransport(base, false)}
}

func (src *transportSource) newTransport(base *tls.Config, http2 bool) *http.Transport {
	cfg := base.Clone()
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	cfg.NextProtos = []string{"http/1.1"}
	if http2 {
		protocols.SetHTTP2(true)
		cfg.NextProtos = []string{"h2", "http/1.1"}
	}
	dialer := &net.Dialer{Timeout: src.dialTimeout, KeepAlive: 30 * time.Second}
	dialTimeout := src.dialTimeout
	return &http.Transport{
		// API servers are addressed directly, never through an environment proxy.
		Proxy:           nil,
		TLSClientConfig: cfg,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			ctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			raw, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, &connectError{phase: "dial", err: err}
			}
			conn := tls.Client(raw, cfg)
			if err := conn.HandshakeContext(ctx); err != nil {
				_ = raw.Close()
				return nil, &connectError{phase: "tls", err: err}
			}
			return conn, nil
		},
		Protocols:             protocols,
		HTTP2:                 &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// connectError is a failure to reach a backend: no byte of the request was
// sent, so sending it elsewhere is safe.
type connectError struct {
	phase string // "dial" or "tls"
	err   error
}

func (e *connectError) Error() string {
	if e.phase == "tls" {
		return "TLS handshake: " + e.err.Error()
	}
	return e.err.Error()
}

func (e *connectError) Unwrap() error { return e.err }
