package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/discovery"
)

// exchange is one proxied request: what the plugin decided and which backend
// is being tried. It lives in the request context, because the reverse proxy
// hands only the request to Rewrite and the transport; all of them run on the
// handler's goroutine.
type exchange struct {
	state   *state
	inbound *http.Request
	// target is the inbound request's target, parsed once (parseTarget).
	target  *discovery.Target
	headers [][2]string
	upgrade string
	// frontProxy: the plugin asserted the identity, so the request (and any
	// retry) presents the front-proxy client certificate.
	frontProxy bool
	// replayable: the body is empty or buffered, so the request can be sent
	// again as it was.
	replayable bool
	backend    *backend
	// body is the client's request body as it streams, nil when the request
	// has none.
	body *trackedBody
	// pluginRead is the body the plugin read to decide, nil when it did not:
	// a retry goes only where that decision could have sent it.
	pluginRead []byte
	// tried are the servers of state the request was sent to.
	tried discovery.ServerSet
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
	// A backend the previous snapshot retired is in no set; only the
	// state's servers are retry candidates anyway.
	if i := slices.Index(ex.state.servers, b); i >= 0 {
		ex.tried |= 1 << uint(i)
	}
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
// :authority and :method; the chosen backend's address. The client's
// Connection tokens were applied before the plugin ran (pluginRequest), so
// nothing the plugin set is removed by them.
func (g *Gateway) rewrite(pr *httputil.ProxyRequest) {
	ex := exchangeFrom(pr.In.Context())
	out := pr.Out
	f := outboundFields(ex.headers, g.opts.RoutingHeader)
	if f.method != "" {
		out.Method = f.method
	}
	if f.authority != "" {
		out.Host = f.authority
	}
	h, path := f.header, f.path
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

// requestFields are what an outbound request is made of: the :method, :path
// and :authority values and the header fields to send.
type requestFields struct {
	method, path, authority string
	header                  http.Header
}

// outboundFields splits a header map as the plugin left it (or as it made a
// call) into requestFields. Sent are all fields but the pseudo-headers,
// hop-by-hop fields, the ones Go sets from request fields (Host,
// Content-Length) and the gateway's own header named internal.
func outboundFields(pairs [][2]string, internal string) requestFields {
	f := requestFields{header: make(http.Header, len(pairs))}
	for _, kv := range pairs {
		switch name := kv[0]; {
		case name == ":method":
			f.method = kv[1]
		case name == ":path":
			f.path = kv[1]
		case name == ":authority":
			f.authority = kv[1]
		case strings.HasPrefix(name, ":"), name == internal, hopByHopHeaders[name], name == "host", name == "content-length":
		default:
			key := textproto.CanonicalMIMEHeaderKey(name)
			f.header[key] = append(f.header[key], kv[1])
		}
	}
	return f
}

// upgradeType is the protocol an HTTP/1.1 request asks to switch to, or "".
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// backendTransport sends the reverse proxy's requests to the exchange's
// backend with the exchange's credential.
type backendTransport struct{ g *Gateway }

// RoundTrip sends the request to the exchange's backend and sends it again to
// another capable healthy server while the answer proves the request was not
// processed: the backend could not be reached (which covers HTTP/2 streams
// refused by a GOAWAY: Go's transport sends those again on a new connection
// itself, and that dial fails once the server stopped listening), or it
// answered that it is shutting down; or a read lost its connection before
// any answer came (a server that died with it in flight). Only a replayable
// request is sent again; every retry keeps the credential the plugin chose.
func (t *backendTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	// One set of transports for every attempt, so that a rotation in between
	// cannot change the credential a retry presents.
	rt, err := t.g.transports.load().pick(ex.frontProxy, ex.upgrade != "")
	if err != nil {
		return nil, err
	}
	if err := checkOutbound(req); err != nil {
		return nil, err
	}
	for {
		sent := ex.current()
		resp, err := t.send(rt, req, ex, sent)
		why := ""
		switch {
		case req.Context().Err() != nil:
			if err != nil && context.Cause(req.Context()) == errRequestTimeout {
				t.g.metrics.upstreamError(sent.cluster, "timeout")
			}
			return resp, err
		case errors.Is(err, errServerTurnedUnhealthy):
			t.g.metrics.upstreamError(sent.cluster, "abandoned")
			why = "turned unhealthy before answering a read"
		case err != nil && ex.body != nil && ex.body.failed.Load():
			// The client's body broke off: the attempt says nothing of the
			// server, and the request cannot be sent whole anywhere.
			return nil, &clientBodyError{err: err}
		case err != nil:
			t.g.metrics.upstreamError(sent.cluster, errorKind(err))
			fromServer := serverFailed(err)
			if fromServer && t.g.opts.OnServerLost != nil {
				t.g.opts.OnServerLost(sent.cluster)
			}
			switch {
			case isConnectFailure(err):
				why = "unreachable"
			case fromServer && isSafeRead(req, ex):
				why = "lost the connection before answering a read"
			default:
				return nil, err
			}
		default:
			var draining bool
			if resp, draining = drainingAnswer(resp); !draining {
				return resp, nil
			}
			t.g.metrics.upstreamError(sent.cluster, "shutting_down")
			why = "shutting down"
		}
		var next *backend
		if ex.replayable {
			next = t.g.retryTarget(ex)
		}
		if next == nil {
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		t.g.metrics.retries.Inc()
		t.g.log.Info("API server "+why+"; sending the request to another one", "from", sent.cluster, "to", next.cluster,
			"method", req.Method, "path", req.URL.Path, "error", err)
		ex.setBackend(next)
		retry := req.Clone(req.Context())
		retry.URL.Host = next.address
		if req.GetBody != nil {
			if retry.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = retry
	}
}

// send is one attempt. A safe read can be abandoned while it waits for its
// answer, when its server turns unhealthy (backend.abandonReads): the error
// is then errServerTurnedUnhealthy.
func (t *backendTransport) send(rt http.RoundTripper, req *http.Request, ex *exchange, to *backend) (*http.Response, error) {
	if !isSafeRead(req, ex) || !ex.replayable {
		return rt.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	to.awaitAnswer(ex, cancel)
	resp, err := rt.RoundTrip(req.WithContext(ctx))
	to.answered(ex)
	if err != nil {
		cancel(nil)
		if context.Cause(ctx) == errServerTurnedUnhealthy && req.Context().Err() == nil {
			return nil, errServerTurnedUnhealthy
		}
		return nil, err
	}
	// The body is read under ctx; it is released once the body is closed.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases an attempt's context with its response body.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}

// isSafeRead reports a GET or HEAD that is not a protocol upgrade: reading
// it again from another server changes nothing, so losing the connection
// before its answer is no reason to fail it, whatever the server did.
func isSafeRead(req *http.Request, ex *exchange) bool {
	return (req.Method == http.MethodGet || req.Method == http.MethodHead) && ex.upgrade == ""
}

// What kube-apiserver answers, before doing anything else, to a request that
// arrives while it shuts down (k8s.io/apiserver's server filters): with
// --shutdown-send-retry-after, a 429 written by http.Error (WithRetryAfter);
// once the shutdown delay is over, a 503 Status (WithWaitGroup). Both carry
// Retry-After. Other 429s (priority and fairness) and 503s are the cluster's
// answer and go back to the client.
const (
	shutdownRetryAfterBody   = "The apiserver is shutting down, please try again later.\n"
	shutdownWaitGroupMessage = "apiserver is shutting down"
	// maxDrainingBody bounds what is read to recognise those answers.
	maxDrainingBody = 1 << 10
)

// drainingAnswer reports whether resp is a shutting-down server's refusal.
// The returned response reads as resp did.
func drainingAnswer(resp *http.Response) (*http.Response, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable ||
		resp.Header.Get("Retry-After") == "" {
		return resp, false
	}
	prefix, err := io.ReadAll(io.LimitReader(resp.Body, maxDrainingBody))
	resp.Body = &replayedBody{Reader: io.MultiReader(bytes.NewReader(prefix), resp.Body), Closer: resp.Body}
	if err != nil {
		return resp, false
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		return resp, string(prefix) == shutdownRetryAfterBody && resp.Header.Get("Content-Type") == "text/plain; charset=utf-8"
	}
	var st metav1.Status
	return resp, json.Unmarshal(prefix, &st) == nil && st.Kind == "Status" && st.Code == http.StatusServiceUnavailable &&
		st.Reason == metav1.StatusReasonServiceUnavailable && st.Message == shutdownWaitGroupMessage
}

// replayedBody reads a response body again from its start.
type replayedBody struct {
	io.Reader
	io.Closer
}

// retryTarget chooses a server the request could have been sent to had the
// servers it was sent to been down, or nil.
func (g *Gateway) retryTarget(ex *exchange) *backend {
	candidates := capableServers(ex.state.index, ex.inbound, ex.target, ex.pluginRead, ex.tried)
	if candidates == 0 {
		return nil
	}
	return ex.state.servers[candidates.Pick(g.roundRobin.Add(1)-1)]
}

// isConnectFailure reports an error that came before the request could be
// sent: the connection or its TLS handshake failed.
func isConnectFailure(err error) bool {
	var ce *connectError
	return errors.As(err, &ce)
}

// serverFailed reports an error only the API server, or the network to it,
// can have caused: the connection or its TLS handshake failed, the
// connection broke (end of stream, reset, a GOAWAY before closing) or the
// server reset the request's stream, while the request waited for its
// answer. Everything else (an error the outbound transport raises about the
// request itself, a failure of the client's body, a connection the gateway
// closed) is no evidence against the server, and must not be: anyone who can
// send a request could otherwise take healthy servers out of routing.
func serverFailed(err error) bool {
	var opErr *net.OpError
	var reset http2.StreamError
	switch {
	case isConnectFailure(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &opErr):
		return !opErr.Timeout() && !errors.Is(err, net.ErrClosed)
	case errors.As(err, &reset):
		// net/http's bundled HTTP/2 marks a reset the server sent this way.
		return reset.Cause != nil && reset.Cause.Error() == "received from peer"
	}
	// Go's HTTP/2 transport has no exported type for it.
	return strings.Contains(err.Error(), "server sent GOAWAY and closed the connection")
}

// clientBodyError is a request body that failed while it was sent upstream:
// the client cut it short, framed it wrongly, or sent less than it announced.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string { return "reading the request body: " + e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

// invalidOutboundError is a request the outbound transport would refuse
// before sending it; the gateway answers it 400 itself.
type invalidOutboundError struct{ why string }

func (e *invalidOutboundError) Error() string { return e.why }

// checkOutbound refuses what Go's transports refuse to send, with the same
// rules (httpguts), so that such a request is answered as the client's
// mistake and never counted against a server.
func checkOutbound(req *http.Request) error {
	if !httpguts.ValidHostHeader(req.Host) {
		return &invalidOutboundError{why: "the request's authority (Host) is not a valid host"}
	}
	for name, values := range req.Header {
		if !httpguts.ValidHeaderFieldName(name) {
			return &invalidOutboundError{why: "the request has an invalid header field name"}
		}
		for _, v := range values {
			if !httpguts.ValidHeaderFieldValue(v) {
				return &invalidOutboundError{why: "the request has an invalid value in header field " + name}
			}
		}
	}
	return nil
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

// statusRecorder remembers the status code written, when and by which
// backend, and lets the reverse proxy flush and hijack the underlying writer.
type statusRecorder struct {
	http.ResponseWriter
	sessions *sessions
	// body is the request body, when the request has one.
	body       *trackedBody
	status     int
	hijacked   bool
	clientGone bool
	// answered is when the response headers went out; upstream is the
	// backend the request was last sent to.
	answered time.Time
	upstream *backend
	// started is set with the final response header, for giveUpAtTimeout's
	// goroutine; bounded are the response's bounded writes, if any
	// (deadlines.go).
	started atomic.Bool
	bounded *responseWrites
}

func (r *statusRecorder) WriteHeader(code int) {
	final := r.status == 0 && code >= 200
	if final {
		r.status = code
		r.answered = time.Now()
		r.started.Store(true)
	}
	r.ResponseWriter.WriteHeader(code)
	if final {
		// Once the final header is written, reading the body no longer
		// sends a client waiting for it 100 Continue.
		r.abandonUnreadBody()
	}
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if stall := r.stallTimer(); stall != nil {
		stall.Reset(r.bounded.stallTimeout)
		defer stall.Stop()
	}
	return r.ResponseWriter.Write(b)
}

// abandonUnreadBody stops reading an HTTP/1.x request body that has not
// ended when the answer starts. Go's server reads what is left of such a body
// (up to 256 KiB) before it sends the response header, without a deadline,
// and whoever else reads it (the transport sending it upstream) blocks as
// long: a client that announces a body and stalls would hold the request, its
// in-flight place and its connection until it leaves. Past its read deadline
// the body is given up and the connection closed after the answer, as an
// HTTP/1.1 server must when a body is left unread.
func (r *statusRecorder) abandonUnreadBody() {
	if r.body == nil || !r.body.http1 || r.body.ended.Load() {
		return
	}
	rc := http.NewResponseController(r.ResponseWriter)
	_ = rc.SetReadDeadline(time.Now())
	// A read that was under way may have taken the body's last bytes, and
	// the server then watches the connection for the client leaving: that
	// read must not meet the expired deadline.
	if _, err := r.body.ReadCloser.Read(nil); err == io.EOF || errors.Is(err, http.ErrBodyReadAfterClose) {
		_ = rc.SetReadDeadline(time.Time{})
	}
}

// trackedBody is a request body that remembers whether it ended, and whether
// it ended in an error: the client's, never a server's.
type trackedBody struct {
	io.ReadCloser
	// http1: the body of an HTTP/1.x request, which abandonUnreadBody may
	// give up.
	http1         bool
	ended, failed atomic.Bool
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.ended.Store(true)
		if err != io.EOF {
			b.failed.Store(true)
		}
	}
	return n, err
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Hijack is called by the reverse proxy once a backend switched protocols;
// the session's connection is kept until it ends, so shutdown can end it.
func (r *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	r.hijacked = true
	r.answered = time.Now()
	return r.sessions.track(conn), rw, nil
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
