package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"strings"
	"time"
)

// exchange is one proxied request: what the plugin decided and which backend
// is being tried. It lives in the request context, because the reverse proxy
// hands only the request to Rewrite and the transport; all of them run on the
// handler's goroutine.
type exchange struct {
	state     *state
	inbound   *http.Request
	headers   [][2]string
	upgrade   string
	retryable bool
	retried   bool
	backend   *backend
}

type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// setBackend moves the request (and its in-flight count) to b.
func (ex *exchange) setBackend(b *backend) {
	if ex.backend != nil {
		ex.backend.inFlight.Add(-1)
	}
	ex.backend = b
	b.inFlight.Add(1)
}

func (ex *exchange) release() {
	if ex.backend != nil {
		ex.backend.inFlight.Add(-1)
		ex.backend = nil
	}
}

func (ex *exchange) current() *backend { return ex.backend }

// hopByHopHeaders belong to one connection (RFC 9110 7.6.1) and are never
// forwarded; upgrades get Connection and Upgrade back explicitly.
var hopByHopHeaders = map[string]bool{
	"connection":          true,
	"proxy-connection":    true,
	"keep-alive":          true,
	"proxy-authenticate":  true,
	"proxy-authorization": true,
	"te":                  true,
	"trailer":             true,
	"transfer-encoding":   true,
	"upgrade":             true,
}

// rewrite builds the outbound request from the plugin's output: its headers
// minus pseudo-headers, the internal routing header, hop-by-hop headers and
// the ones Go sets from request fields (host, content-length); its :path,
// :authority and :method; the chosen backend's address.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	ex := exchangeFrom(pr.In.Context())
	out := pr.Out
	nominated := connectionTokens(ex.headers)
	h := make(http.Header, len(ex.headers))
	path := ""
	for _, kv := range ex.headers {
		name := kv[0]
		switch {
		case name == ":path":
			path = kv[1]
		case name == ":authority":
			out.Host = kv[1]
		case name == ":method":
			out.Method = kv[1]
		case strings.HasPrefix(name, ":"),
			name == g.opts.RoutingHeader, hopByHopHeaders[name], nominated[name],
			name == "host", name == "content-length":
		default:
			key := textproto.CanonicalMIMEHeaderKey(name)
			h[key] = append(h[key], kv[1])
		}
	}
	if ex.upgrade != "" {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", ex.upgrade)
	}
	out.Header = h
	out.URL.Scheme = "https"
	out.URL.Host = ex.backend.address
	switch {
	case path == requestTarget(ex.inbound) || path == "":
		// Forward the query exactly as sent; the proxy's own copy is cleaned.
		out.URL.RawQuery = ex.inbound.URL.RawQuery
	default:
		if u, err := url.ParseRequestURI(path); err == nil {
			out.URL.Path, out.URL.RawPath, out.URL.RawQuery = u.Path, u.RawPath, u.RawQuery
		}
	}
}

// connectionTokens are the header names a Connection header nominates as
// hop-by-hop.
func connectionTokens(headers [][2]string) map[string]bool {
	var tokens map[string]bool
	for _, kv := range headers {
		if kv[0] != "connection" {
			continue
		}
		for _, t := range strings.Split(kv[1], ",") {
			if t = strings.ToLower(strings.TrimSpace(t)); t != "" {
				if tokens == nil {
					tokens = map[string]bool{}
				}
				tokens[t] = true
			}
		}
	}
	return tokens
}

// upgradeType is the protocol an HTTP/1.1 request asks to switch to, or "".
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
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

// backendTransport sends requests to the API servers: multiplexed for plain
// requests (HTTP/2 when the server offers it), HTTP/1.1 for upgrades, which
// HTTP/2 cannot carry. Both verify the server against the peer CA and name.
type backendTransport struct {
	g           *Gateway
	multiplexed *http.Transport
	http1       *http.Transport
}

func newBackendTransport(g *Gateway, o Options) *backendTransport {
	base := &tls.Config{
		RootCAs:    o.PeerRootCAs,
		ServerName: o.PeerServerName,
		MinVersion: tls.VersionTLS12,
	}
	if o.ClientCertificate != nil {
		base.Certificates = []tls.Certificate{*o.ClientCertificate}
	}
	dialer := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	newTransport := func(http2 bool) *http.Transport {
		cfg := base.Clone()
		protocols := &http.Protocols{}
		protocols.SetHTTP1(true)
		cfg.NextProtos = []string{"http/1.1"}
		if http2 {
			protocols.SetHTTP2(true)
			cfg.NextProtos = []string{"h2", "http/1.1"}
		}
		return &http.Transport{
			// API servers are addressed directly, never through an environment proxy.
			Proxy:           nil,
			TLSClientConfig: cfg,
			DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
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
	return &backendTransport{g: g, multiplexed: newTransport(true), http1: newTransport(false)}
}

func (t *backendTransport) closeIdleConnections() {
	t.multiplexed.CloseIdleConnections()
	t.http1.CloseIdleConnections()
}

// RoundTrip sends the request to the exchange's backend and, when that
// backend cannot be reached, once to another capable one.
func (t *backendTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	rt := t.multiplexed
	if ex.upgrade != "" {
		rt = t.http1
	}
	resp, err := rt.RoundTrip(req)
	if err == nil || req.Context().Err() != nil {
		return resp, err
	}
	failed := ex.current()
	t.g.metrics.upstreamError(failed.cluster, errorKind(err))
	var ce *connectError
	if !errors.As(err, &ce) || !ex.retryable || ex.retried {
		return nil, err
	}
	next := t.g.retryTarget(ex, failed)
	if next == nil {
		return nil, err
	}
	ex.retried = true
	ex.setBackend(next)
	t.g.metrics.retries.Add(1)
	t.g.log.Info("API server unreachable; retrying on another one", "from", failed.cluster, "to", next.cluster,
		"method", req.Method, "path", req.URL.Path, "error", err)
	retry := req.Clone(req.Context())
	retry.URL.Host = next.address
	resp, err = rt.RoundTrip(retry)
	if err != nil && req.Context().Err() == nil {
		t.g.metrics.upstreamError(next.cluster, errorKind(err))
	}
	return resp, err
}

func errorKind(err error) string {
	var ce *connectError
	var netErr net.Error
	switch {
	case errors.As(err, &ce) && ce.phase == "tls":
		return "tls"
	case errors.As(err, &ce):
		return "connect"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return "timeout"
	}
	return "transport"
}

// statusRecorder remembers the status code written, and lets the reverse
// proxy flush and hijack the underlying writer.
type statusRecorder struct {
	http.ResponseWriter
	status     int
	hijacked   bool
	clientGone bool
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 && code >= 200 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Hijack is called by the reverse proxy once a backend switched protocols.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.hijacked = true
	}
	return conn, rw, err
}

// code is the status code for metrics: 101 for a switched protocol, 499 (as
// nginx counts it) when the client left before an answer.
func (r *statusRecorder) code() int {
	switch {
	case r.hijacked:
		return http.StatusSwitchingProtocols
	case r.clientGone && r.status == 0:
		return 499
	case r.status == 0:
		return http.StatusOK
	}
	return r.status
}
