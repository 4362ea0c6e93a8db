// Package gateway is skewgate's standalone HTTPS gateway: every request runs
// through the proxy-wasm plugin on the wazero host, exactly as Envoy would run
// it, and is then answered locally, reset, or proxied to the API server the
// plugin chose (the routing header) or, when it chose none, to a healthy API
// server in round robin.
//
// Proxying streams request and response bodies, flushes every response write
// at once (watches), and carries protocol upgrades (exec, attach, port-forward)
// over HTTP/1.1. Backends are verified against the peer CA under one server
// name; never with verification switched off.
//
// A connection failure (dial or TLS handshake, so no byte of the request was
// sent) is retried once on another healthy server able to serve the request,
// if the request is idempotent (GET, HEAD, OPTIONS, PUT, DELETE: RFC 9110) and
// has an empty body, which is the only kind of body that can be sent again.
// Upstream's Mixed Version Proxy retries nothing. Everything else that fails
// is answered 503 with a Kubernetes Status body and Retry-After.
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// Defaults for Options fields left zero.
const (
	DefaultRoutingHeader     = "x-skewgate-upstream"
	DefaultPeerServerName    = "kubernetes.default.svc"
	DefaultRetryAfterSeconds = 5
	DefaultDialTimeout       = 5 * time.Second
)

// PluginHost runs a request's headers through the plugin; *wasmhost.Host is
// the implementation.
type PluginHost interface {
	HandleRequestHeaders(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome
}

// Options configure a Gateway. Plugin and PeerRootCAs are required.
type Options struct {
	Plugin PluginHost
	// PeerRootCAs verify the API servers' serving certificates (--peer-ca-file).
	PeerRootCAs *x509.CertPool
	// PeerServerName is the name verified in every API server's certificate;
	// default DefaultPeerServerName, as upstream verifies its peers.
	PeerServerName string
	// ClientCertificate is presented to the API servers: the front-proxy client
	// certificate in front-proxy identity mode, nil otherwise.
	ClientCertificate *tls.Certificate
	// RoutingHeader is the header the plugin sets to the chosen server's
	// cluster name; it must equal the plugin configuration's routingHeader.
	RoutingHeader string
	// RetryAfterSeconds is announced in the gateway's own 503 answers.
	RetryAfterSeconds int
	// DialTimeout bounds connecting and the TLS handshake to an API server.
	DialTimeout time.Duration
	Logger      *slog.Logger
}

func (o Options) complete() (Options, error) {
	if o.Plugin == nil {
		return o, errors.New("gateway: Plugin is required")
	}
	if o.PeerRootCAs == nil {
		return o, errors.New("gateway: PeerRootCAs is required: the CA that signs the API servers' serving certificates")
	}
	if o.PeerServerName == "" {
		o.PeerServerName = DefaultPeerServerName
	}
	if o.RoutingHeader == "" {
		o.RoutingHeader = DefaultRoutingHeader
	}
	if o.RetryAfterSeconds <= 0 {
		o.RetryAfterSeconds = DefaultRetryAfterSeconds
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Gateway is an http.Handler in front of the API servers.
type Gateway struct {
	opts      Options
	log       *slog.Logger
	proxy     *httputil.ReverseProxy
	transport *backendTransport
	metrics   *metrics

	applyMu    sync.Mutex
	state      atomic.Pointer[state]
	roundRobin atomic.Uint64
}

// Routing is what the gateway routes with: one snapshot's index and where
// each of its clusters lives.
type Routing struct {
	Index *discovery.Index
	// Addresses maps every cluster name of the snapshot to host:port.
	Addresses map[string]string
}

// state is one applied Routing. It is never modified once published.
type state struct {
	index *discovery.Index
	// servers parallels index.Servers(), so ServerSet bits index it.
	servers []*backend
	// byCluster resolves the routing header; retired holds the previous
	// snapshot's backends that left, because a request decided against the
	// previous plugin configuration may still name one.
	byCluster map[string]*backend
	retired   map[string]*backend
}

func (s *state) lookup(cluster string) *backend {
	if b := s.byCluster[cluster]; b != nil {
		return b
	}
	return s.retired[cluster]
}

// backend is one API server.
type backend struct {
	cluster, address string
	inFlight         atomic.Int64
}

// copyBuffers recycles the buffers responses are copied through: without a
// pool the reverse proxy allocates (and clears) 32 KiB per response.
var copyBuffers = bufferPool{sync.Pool{New: func() any { return new([32 << 10]byte) }}}

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return p.pool.Get().(*[32 << 10]byte)[:] }
func (p *bufferPool) Put(b []byte) { p.pool.Put((*[32 << 10]byte)(b)) }

// New builds a Gateway; it answers 503 until the first Apply.
func New(opts Options) (*Gateway, error) {
	o, err := opts.complete()
	if err != nil {
		return nil, err
	}
	g := &Gateway{opts: o, log: o.Logger, metrics: newMetrics()}
	g.transport = newBackendTransport(g, o)
	g.proxy = &httputil.ReverseProxy{
		Rewrite:       g.rewrite,
		Transport:     g.transport,
		FlushInterval: -1,
		BufferPool:    &copyBuffers,
		ErrorHandler:  g.upstreamFailed,
		ErrorLog:      slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	return g, nil
}

// Apply makes rt current. configure, when not nil, is called once the
// clusters of rt can be resolved but before rt replaces the current routing:
// it pushes the matching configuration to the plugin. If it fails, the
// previous routing stays and its error is returned.
func (g *Gateway) Apply(rt Routing, configure func() error) error {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	old := g.state.Load()
	next, err := g.build(rt, old)
	if err != nil {
		return err
	}
	if configure != nil {
		if old != nil {
			// While the plugin switches, it may name clusters of either snapshot.
			staged := &state{index: old.index, servers: old.servers, byCluster: old.byCluster, retired: maps.Clone(next.byCluster)}
			maps.Copy(staged.retired, old.retired)
			g.state.Store(staged)
		}
		if err := configure(); err != nil {
			g.state.Store(old)
			return err
		}
	}
	if old != nil {
		next.retired = map[string]*backend{}
		for cluster, b := range old.byCluster {
			if next.byCluster[cluster] == nil {
				next.retired[cluster] = b
			}
		}
	}
	g.state.Store(next)
	g.metrics.generation.Store(rt.Index.Snapshot().Generation)
	return nil
}

// build checks rt and creates its backends, keeping the backend objects (and
// their in-flight counts) of clusters that did not move.
func (g *Gateway) build(rt Routing, old *state) (*state, error) {
	if rt.Index == nil {
		return nil, errors.New("gateway: routing without an index")
	}
	servers := rt.Index.Servers()
	next := &state{index: rt.Index, servers: make([]*backend, len(servers)), byCluster: make(map[string]*backend, len(servers))}
	for i, srv := range servers {
		address := rt.Addresses[srv.Cluster]
		if address == "" {
			return nil, fmt.Errorf("gateway: no address for cluster %q of server %s", srv.Cluster, srv.ID)
		}
		b := (*backend)(nil)
		if old != nil {
			if prev := old.lookup(srv.Cluster); prev != nil && prev.address == address {
				b = prev
			}
		}
		if b == nil {
			b = &backend{cluster: srv.Cluster, address: address}
		}
		next.servers[i] = b
		next.byCluster[srv.Cluster] = b
	}
	return next, nil
}

// Index is the index of the current routing, nil before the first Apply.
func (g *Gateway) Index() *discovery.Index {
	if s := g.state.Load(); s != nil {
		return s.index
	}
	return nil
}

// CloseIdleConnections closes idle connections to the API servers.
func (g *Gateway) CloseIdleConnections() { g.transport.closeIdleConnections() }

// pickBalanced chooses a server in round robin over the healthy ones; when
// none is healthy it uses all of them, as Envoy's panic threshold does, since
// a real server's answer beats a certain 503.
func (g *Gateway) pickBalanced(s *state) *backend {
	set := s.index.Healthy()
	if set == 0 {
		set = s.index.All()
	}
	return s.servers[set.Pick(g.roundRobin.Add(1)-1)]
}

// retryTarget chooses another healthy server able to serve the request after
// failed could not be reached, or nil.
func (g *Gateway) retryTarget(ex *exchange, failed *backend) *backend {
	s := ex.state
	candidates := capableServers(s.index, ex.inbound) & s.index.Healthy()
	for i, b := range s.servers {
		if b == failed {
			candidates &^= discovery.ServerSet(1) << uint(i)
		}
	}
	if candidates == 0 {
		return nil
	}
	return s.servers[candidates.Pick(g.roundRobin.Add(1)-1)]
}

// capableServers is the set of servers that could answer the request as the
// cluster would; every server when any of them answers the same.
func capableServers(ix *discovery.Index, r *http.Request) discovery.ServerSet {
	path, _, ok := discovery.SplitRequestTarget(requestTarget(r))
	if !ok {
		return ix.All()
	}
	if set := ix.Capable(&discovery.Request{Method: r.Method, Path: path}); set != 0 {
		return set
	}
	return ix.All()
}

// ServeHTTP runs the request through the plugin and carries out its verdict.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := &statusRecorder{ResponseWriter: w}
	verdict := "none"
	defer func() { g.metrics.request(verdict, rec.code()) }()

	s := g.state.Load()
	if s == nil {
		g.writeUnavailable(rec, "the gateway has no discovery snapshot yet")
		return
	}
	out := g.opts.Plugin.HandleRequestHeaders(r.Context(), pluginRequest(r))
	verdict = out.Verdict.String()
	if out.Failed != nil {
		g.metrics.pluginFailures.Add(1)
		g.log.Error("the plugin could not process a request", "method", r.Method, "path", r.URL.Path, "error", out.Failed)
	}
	switch out.Verdict {
	case wasmhost.Respond:
		g.writeLocalResponse(rec, out)
	case wasmhost.Reset:
		// Envoy resets the stream; Go's server aborts the response (RST_STREAM
		// on HTTP/2, closed connection on HTTP/1.1).
		panic(http.ErrAbortHandler)
	default:
		g.forward(rec, r, s, out.Headers)
	}
}

// forward proxies the request with the plugin's headers to the backend it
// chose, or to one in round robin.
func (g *Gateway) forward(w *statusRecorder, r *http.Request, s *state, headers [][2]string) {
	var target *backend
	if cluster, ok := header(headers, g.opts.RoutingHeader); ok {
		if target = s.lookup(cluster); target == nil {
			g.log.Error("the plugin routed to an unknown cluster", "cluster", cluster)
			g.writeUnavailable(w, "no API server is known as "+strconv.Quote(cluster))
			return
		}
	} else {
		target = g.pickBalanced(s)
	}
	ex := &exchange{
		state:     s,
		inbound:   r,
		headers:   headers,
		upgrade:   upgradeType(r.Header),
		retryable: isRetryable(r),
	}
	ex.setBackend(target)
	defer ex.release()
	g.proxy.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex)))
}

// isRetryable: an idempotent method (RFC 9110) with nothing in the body, so
// the request can be sent again as it was.
func isRetryable(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete:
		return r.ContentLength == 0
	}
	return false
}

// writeLocalResponse sends the plugin's own reply (merged discovery, 304,
// 503), or the failure policy's.
func (g *Gateway) writeLocalResponse(w *statusRecorder, out wasmhost.Outcome) {
	resp := out.Response
	if out.Failed != nil && len(resp.Body) == 0 && resp.Status == http.StatusServiceUnavailable {
		// Envoy's fail-closed reply has no body; clients get a Status they can
		// decode and a retry hint instead.
		g.writeUnavailable(w, "the request filter failed; retry shortly")
		return
	}
	h := w.Header()
	for _, kv := range resp.Headers {
		h.Add(kv[0], kv[1])
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(int(resp.Status))
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

// writeUnavailable answers 503 with a Kubernetes Status body and Retry-After.
func (g *Gateway) writeUnavailable(w http.ResponseWriter, message string) {
	body := discovery.ServiceUnavailableStatus(message, "", "", g.opts.RetryAfterSeconds)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Retry-After", strconv.Itoa(g.opts.RetryAfterSeconds))
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}

// upstreamFailed is the reverse proxy's error handler: the request could not
// be delivered (after any retry), or the answer could not be read.
func (g *Gateway) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeFrom(r.Context())
	if r.Context().Err() != nil {
		// The client went away; there is nobody to answer.
		if rec, ok := w.(*statusRecorder); ok {
			rec.clientGone = true
		}
		return
	}
	cluster := ""
	if b := ex.current(); b != nil {
		cluster = b.cluster
	}
	g.log.Warn("API server unreachable", "cluster", cluster, "method", ex.inbound.Method, "path", ex.inbound.URL.Path, "error", err)
	// The cause (addresses, certificate details) stays in the log.
	g.writeUnavailable(w, "the API server "+cluster+" could not be reached; retry shortly")
}

func header(headers [][2]string, name string) (string, bool) {
	for _, kv := range headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// ServerTLSConfig is the gateway's listener configuration: TLS 1.2 or newer,
// HTTP/2 and HTTP/1.1, and, with clientCAs, client certificates verified when
// presented (kube-apiserver's --client-ca-file behaviour); only a verified
// certificate can become an identity.
func ServerTLSConfig(serving tls.Certificate, clientCAs *x509.CertPool) *tls.Config {
	cfg := &tls.Config{
		Certificates: []tls.Certificate{serving},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
	if clientCAs != nil {
		cfg.ClientCAs = clientCAs
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	}
	return cfg
}
