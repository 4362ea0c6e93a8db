// Package gateway is skewgate's standalone HTTPS gateway: every request runs
// through the proxy-wasm plugin on the wazero host, exactly as Envoy would run
// it, and is then answered locally, reset, or proxied to the API server the
// plugin chose (the routing header) or, when it chose none, to a healthy API
// server in round robin.
//
// Proxying streams request and response bodies, flushes every response write
// at once (watches), and carries protocol upgrades (exec, attach, port-forward)
// over HTTP/1.1. Backends are verified against the peer CA under one server
// name; never with verification switched off. The front-proxy client
// certificate is presented only for a request whose identity the plugin
// asserts, which it marks by routing to the server's cluster name with
// discovery.FrontProxyClusterSuffix; every other request reaches the API
// servers with the client's own credentials or none.
//
// A request that provably was not processed (the server could not be reached,
// or it answered that it is shutting down) is sent again to another healthy
// server able to serve it, whatever its method, when its body is empty or
// was buffered: bodies up to 1 MiB, within a budget in all and per client;
// so is a read (GET or HEAD) whose connection was lost before it was answered.
// Upstream's Mixed Version Proxy retries nothing. A body the plugin asks for
// (its request-headers callback pauses a request with a body) is read whole
// first, within the same budget and request timeout, with no plugin VM held
// meanwhile, and handed to the plugin's request-body callback; it is then
// sent from memory, so it too can be sent again. Such a body over 1 MiB is
// answered 413, as Envoy answers a body beyond its buffer. Everything else
// that fails is answered 503 with a Kubernetes Status body and Retry-After; a
// request that is not long-running and gets no response headers within
// RequestTimeout, or whose buffered body does not arrive within it, is
// answered 504, as kube-apiserver answers it. Requests beyond the in-flight
// limits, or finding no plugin VM in time, are answered 429 with Retry-After.
package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httputil"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http/httpguts"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	"github.com/skewgate/skewgate/plugin/config"
)

// Defaults for Options fields left zero.
const (
	DefaultPeerServerName = "kubernetes.default.svc"
	DefaultDialTimeout    = 5 * time.Second
	// DefaultRequestTimeout is kube-apiserver's --request-timeout default.
	DefaultRequestTimeout = 60 * time.Second
	// DefaultMaxRequestHeaders is Envoy's max_headers_count default.
	DefaultMaxRequestHeaders = 100
)

// maxReplayableBody is the largest request body buffered so that the request
// can be sent again; larger or unsized bodies stream and are never retried,
// and so do bodies beyond the buffer budget (Options.MaxBufferedRequestBytes).
const maxReplayableBody = 1 << 20

// PluginHost runs a request's headers, and its body if the plugin asks for
// it (wasmhost.Request.Body), through the plugin; *wasmhost.Host is the
// implementation.
type PluginHost interface {
	HandleRequestHeaders(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome
}

// Options configure a Gateway. Plugin and PeerRootCAs are required.
type Options struct {
	Plugin PluginHost
	// PeerRootCAs verify the API servers' serving certificates (--peer-ca-file);
	// SetPeerRootCAs replaces them.
	PeerRootCAs *x509.CertPool
	// PeerServerName is the name verified in every API server's certificate;
	// default DefaultPeerServerName, as upstream verifies its peers.
	PeerServerName string
	// ClientCertificate is the front-proxy client certificate, presented only
	// on requests whose identity the plugin asserts; nil outside front-proxy
	// identity mode. SetClientCertificate replaces it.
	ClientCertificate *tls.Certificate
	// RoutingHeader is the header the plugin sets to the chosen server's
	// cluster name; it must equal the plugin configuration's routingHeader.
	RoutingHeader string
	// RetryAfterSeconds is announced in the gateway's own 503 and 429
	// answers.
	RetryAfterSeconds int
	// DialTimeout bounds connecting and the TLS handshake to an API server.
	DialTimeout time.Duration
	// RequestTimeout bounds a request that is not long-running, from its
	// arrival to the end of its response (kube-apiserver's --request-timeout);
	// without response headers by then it is answered 504. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// StalledStreamTimeout ends a long-running response (watch, log, exec,
	// attach, port-forward) whose client has taken none of the bytes written
	// to it for this long; a quiet stream with nothing to write is never
	// ended by it. Default DefaultStalledStreamTimeout.
	StalledStreamTimeout time.Duration
	// MaxRequestHeaders is the most header fields a request may carry; more
	// are answered 431 before the plugin runs. Default DefaultMaxRequestHeaders.
	MaxRequestHeaders int
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the requests
	// that are not long-running being proxied at once, read-only (verbs get,
	// list and watch) and mutating, as kube-apiserver's flags of those names
	// do; a request beyond them is answered 429 with Retry-After. A request
	// counts from when its buffered body is in hand until its answer ends.
	// Zero: no limit.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// MaxRequestsInFlightPerClient bounds the requests that are not
	// long-running of one source address, both kinds together, so that one
	// client cannot take every place of either limit; beyond it a request is
	// answered 429 with Retry-After. Zero: no limit.
	MaxRequestsInFlightPerClient int
	// MaxLongRunningRequests bounds the long-running requests (watch, log,
	// exec, attach, port-forward, proxy) being served at once, and
	// MaxLongRunningRequestsPerClient those of one source address; a request
	// beyond either is answered 429 with Retry-After. Zero: no limit.
	MaxLongRunningRequests, MaxLongRunningRequestsPerClient int
	// MaxConnections bounds the client connections open at once, and
	// MaxConnectionsPerClient those of one source address, where Listener
	// accepts them. Zero: no limit.
	MaxConnections, MaxConnectionsPerClient int
	// MaxBufferedRequestBytes bounds the request bodies held in memory so
	// that their requests can be sent again, or because the plugin reads
	// them; MaxBufferedRequestBytesPerClient bounds those of one source
	// address. A body beyond either streams, and its request is not retried;
	// one the plugin asks for is answered 429 with Retry-After. Defaults
	// DefaultMaxBufferedRequestBytes and DefaultMaxBufferedRequestBytesPerClient
	// (at most the total).
	MaxBufferedRequestBytes, MaxBufferedRequestBytesPerClient int64
	// Requests, when set, counts the shapes of the resource requests received.
	Requests *RequestLog
	// OnServerLost, when set, is told the cluster of an API server a
	// connection to which failed, or was lost before it answered, under a
	// request (not a time-out): the health owner's evidence between two of
	// its probes. It must not block.
	OnServerLost func(cluster string)
	Logger       *slog.Logger
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
		o.RoutingHeader = config.DefaultRoutingHeader
	}
	if o.RetryAfterSeconds <= 0 {
		o.RetryAfterSeconds = config.DefaultRetryAfterSeconds
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.StalledStreamTimeout <= 0 {
		o.StalledStreamTimeout = DefaultStalledStreamTimeout
	}
	if o.MaxRequestHeaders <= 0 {
		o.MaxRequestHeaders = DefaultMaxRequestHeaders
	}
	if o.MaxRequestsInFlight < 0 || o.MaxMutatingRequestsInFlight < 0 || o.MaxRequestsInFlightPerClient < 0 || o.MaxLongRunningRequests < 0 ||
		o.MaxLongRunningRequestsPerClient < 0 || o.MaxConnections < 0 || o.MaxConnectionsPerClient < 0 {
		return o, errors.New("gateway: request and connection limits must not be negative")
	}
	if o.MaxBufferedRequestBytes <= 0 {
		o.MaxBufferedRequestBytes = DefaultMaxBufferedRequestBytes
	}
	if o.MaxBufferedRequestBytesPerClient <= 0 {
		o.MaxBufferedRequestBytesPerClient = DefaultMaxBufferedRequestBytesPerClient
	}
	o.MaxBufferedRequestBytesPerClient = min(o.MaxBufferedRequestBytesPerClient, o.MaxBufferedRequestBytes)
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// Gateway is an http.Handler in front of the API servers.
type Gateway struct {
	opts Options
	log  *slog.Logger
	// proxy serves the requests that are not long-running, streamProxy the
	// long-running ones, with smaller copy buffers.
	proxy, streamProxy *httputil.ReverseProxy
	transports         *transportSource
	metrics            *metrics
	sessions           sessions

	readOnly, mutating inFlightLimit
	// bodies, inFlight, longRunning and connections bound what each client
	// holds (limits.go).
	bodies, inFlight, longRunning, connections *clientShares

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

// healthy reports whether b is one of s's healthy servers.
func (s *state) healthy(b *backend) bool {
	i := slices.Index(s.servers, b)
	return i >= 0 && s.index.Healthy().Has(i)
}

// backend is one API server.
type backend struct {
	cluster, address string
	inFlight         atomic.Int64
	// duration is the series of the requests it answers.
	duration prometheus.Observer

	// unanswered holds the cancel functions of the reads waiting for its
	// answer, by exchange (awaitAnswer).
	mu         sync.Mutex
	unanswered map[*exchange]context.CancelCauseFunc
}

// errServerTurnedUnhealthy is why a read waiting for an answer was
// abandoned: its server turned unhealthy meanwhile.
var errServerTurnedUnhealthy = errors.New("the API server turned unhealthy before it answered")

// awaitAnswer lets abandonReads cancel ex's read sent to b until answered,
// once the answer's headers are in.
func (b *backend) awaitAnswer(ex *exchange, cancel context.CancelCauseFunc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unanswered == nil {
		b.unanswered = map[*exchange]context.CancelCauseFunc{}
	}
	b.unanswered[ex] = cancel
}

func (b *backend) answered(ex *exchange) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.unanswered, ex)
}

// abandonReads cancels the reads waiting for b's answer, which are then
// sent to another server: a kube-apiserver whose etcd went away, as its
// node's etcd does when kubeadm upgrades it, holds reads until its own
// request timeout, and fails its readiness check meanwhile.
func (b *backend) abandonReads() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, cancel := range b.unanswered {
		cancel(errServerTurnedUnhealthy)
	}
	n := len(b.unanswered)
	clear(b.unanswered)
	return n
}

// copyBuffers recycles the buffers responses are copied through: without a
// pool the reverse proxy allocates (and clears) 32 KiB per response.
// streamBuffers are those of long-running responses, which hold theirs for
// as long as they are open, waiting for the next event most of the time: 4
// KiB, so that 1,000 open watches hold 4 MiB of buffers rather than 32. An
// event larger than that is copied and flushed in several writes.
var (
	copyBuffers   = &bufferPool{sync.Pool{New: func() any { return new([32 << 10]byte) }}}
	streamBuffers = &streamBufferPool{sync.Pool{New: func() any { return new([4 << 10]byte) }}}
)

type bufferPool struct{ pool sync.Pool }

func (p *bufferPool) Get() []byte  { return p.pool.Get().(*[32 << 10]byte)[:] }
func (p *bufferPool) Put(b []byte) { p.pool.Put((*[32 << 10]byte)(b)) }

type streamBufferPool struct{ pool sync.Pool }

func (p *streamBufferPool) Get() []byte  { return p.pool.Get().(*[4 << 10]byte)[:] }
func (p *streamBufferPool) Put(b []byte) { p.pool.Put((*[4 << 10]byte)(b)) }

// New builds a Gateway; it answers 503 until a routing is first applied or
// committed.
func New(opts Options) (*Gateway, error) {
	o, err := opts.complete()
	if err != nil {
		return nil, err
	}
	g := &Gateway{
		opts: o, log: o.Logger, metrics: newMetrics(),
		bodies:      newClientShares(o.MaxBufferedRequestBytes, o.MaxBufferedRequestBytesPerClient, unbufferedBudget, unbufferedClientShare),
		inFlight:    newClientShares(0, int64(o.MaxRequestsInFlightPerClient), "", overMaxInFlightPerClient),
		longRunning: newClientShares(int64(o.MaxLongRunningRequests), int64(o.MaxLongRunningRequestsPerClient), overMaxLongRunning, overMaxLongRunningPerClient),
		connections: newClientShares(int64(o.MaxConnections), int64(o.MaxConnectionsPerClient), overMaxConnections, overMaxConnectionsPerClient),
	}
	g.readOnly.limit, g.mutating.limit = int64(o.MaxRequestsInFlight), int64(o.MaxMutatingRequestsInFlight)
	g.transports = newTransportSource(o)
	g.sessions.stallTimeout = o.StalledStreamTimeout
	g.proxy = &httputil.ReverseProxy{
		Rewrite:       g.rewrite,
		Transport:     &backendTransport{g},
		FlushInterval: -1,
		BufferPool:    copyBuffers,
		ErrorHandler:  g.upstreamFailed,
		ErrorLog:      slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	streams := *g.proxy
	streams.BufferPool = streamBuffers
	g.streamProxy = &streams
	return g, nil
}

// Staged is a routing built by Stage and not yet current.
type Staged struct {
	g         *Gateway
	old, next *state
}

// Stage checks rt and creates its backends. Until Commit or Abort, requests
// may name the clusters of the current routing and of rt, because the plugin
// switching to rt's snapshot names either: the caller configures the plugin in
// between and commits once it accepted, or aborts and the previous routing
// stays. One routing is staged at a time; Stage waits for the previous one's
// Commit or Abort.
func (g *Gateway) Stage(rt Routing) (*Staged, error) {
	g.applyMu.Lock()
	old := g.state.Load()
	next, err := g.build(rt, old)
	if err != nil {
		g.metrics.forgetUpstreams(old)
		g.applyMu.Unlock()
		return nil, err
	}
	if old != nil {
		both := &state{index: old.index, servers: old.servers, byCluster: old.byCluster, retired: maps.Clone(next.byCluster)}
		maps.Copy(both.retired, old.retired)
		g.state.Store(both)
	}
	return &Staged{g: g, old: old, next: next}, nil
}

// Commit makes the staged routing current; the clusters it dropped stay
// resolvable for the requests still naming them.
func (s *Staged) Commit() {
	g := s.g
	defer g.applyMu.Unlock()
	if s.old != nil {
		s.next.retired = map[string]*backend{}
		for cluster, b := range s.old.byCluster {
			if s.next.byCluster[cluster] == nil {
				s.next.retired[cluster] = b
			}
		}
	}
	g.state.Store(s.next)
	g.metrics.forgetUpstreams(s.next)
	if s.old == nil || s.next.index.Healthy() == 0 {
		// With no healthy server there is nowhere better to wait.
		return
	}
	for i, b := range s.next.servers {
		if !s.next.index.Healthy().Has(i) && s.old.healthy(b) {
			if n := b.abandonReads(); n > 0 {
				g.log.Info("API server turned unhealthy; sending the reads it has not answered to another one", "cluster", b.cluster, "reads", n)
			}
		}
	}
}

// Abort keeps the routing that was current before Stage.
func (s *Staged) Abort() {
	g := s.g
	defer g.applyMu.Unlock()
	g.state.Store(s.old)
	g.metrics.forgetUpstreams(s.old)
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
			b = &backend{cluster: srv.Cluster, address: address, duration: g.metrics.upstream(srv.Cluster)}
		}
		next.servers[i] = b
		next.byCluster[srv.Cluster] = b
	}
	return next, nil
}

// CloseIdleConnections closes idle connections to the API servers.
func (g *Gateway) CloseIdleConnections() { g.transports.closeIdleConnections() }

// SetPeerRootCAs makes new connections to the API servers verify against
// roots; requests and watches in flight keep their connections. A nil pool is
// refused (the previous roots stay): it would mean the system roots.
func (g *Gateway) SetPeerRootCAs(roots *x509.CertPool) {
	if roots == nil {
		g.log.Error("refusing to verify the API servers against no CA; the previous peer CAs stay")
		return
	}
	g.transports.setRoots(roots)
}

// SetClientCertificate makes new front-proxy connections present cert; nil
// removes the front-proxy credential, and requests asserting an identity are
// then refused. Requests and watches in flight keep their connections.
func (g *Gateway) SetClientCertificate(cert *tls.Certificate) {
	if cert != nil {
		c := *cert
		cert = &c
	}
	g.transports.setClientCertificate(cert)
}

// pickBalanced chooses a server in round robin over the routable ones
// (discovery's Routable: the healthy ones, or all while none is).
func (g *Gateway) pickBalanced(s *state) *backend {
	return s.servers[s.index.Routable().Pick(g.roundRobin.Add(1)-1)]
}

// capableServers is the set of servers the plugin's decision could send the
// request to with the servers in tried left out (discovery's Capable), with
// the body the plugin read (nil if none), which its decision depended on;
// for a request target the plugin cannot read, which it forwards, every
// routable server but those.
func capableServers(ix *discovery.Index, r *http.Request, target *discovery.Target, pluginRead []byte, tried discovery.ServerSet) discovery.ServerSet {
	if !target.Valid {
		return ix.Routable() &^ tried
	}
	return ix.Capable(&discovery.Request{
		Method: r.Method, Path: target.Path, Query: target.RawQuery,
		Accept: r.Header.Get("Accept"), IfNoneMatch: r.Header.Get("If-None-Match"),
		ContentType: r.Header.Get("Content-Type"), ContentLength: r.ContentLength, Body: pluginRead,
	}, tried)
}

// errRequestTimeout is the cause of a request's context when RequestTimeout
// passed.
var errRequestTimeout = errors.New("the request did not complete within the request timeout")

// ServeHTTP runs the request through the plugin and carries out its verdict.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	target := parseTarget(r.Method, requestTarget(r))
	rec := &statusRecorder{ResponseWriter: w, sessions: &g.sessions}
	verdict := verdictNone
	defer func() {
		g.metrics.request(verdict, rec, arrived)
		if g.opts.Requests != nil {
			// Once answered: only an API server's answer says the request
			// was authenticated and authorized (RequestLog).
			status := rec.status
			if rec.hijacked {
				status = http.StatusSwitchingProtocols
			}
			g.opts.Requests.RecordAnswered(&target, r.Header.Get("User-Agent"), status)
		}
	}()
	defer rec.endWrites()
	if r.ProtoMajor == 1 {
		clearConnectionWriteDeadline(w)
	}
	if r.ContentLength != 0 {
		rec.body = &trackedBody{ReadCloser: r.Body, http1: r.ProtoMajor == 1}
		r.Body = rec.body
	}

	s := g.state.Load()
	if s == nil {
		g.writeUnavailable(rec, "the gateway has no discovery snapshot yet")
		return
	}
	if n := headerFields(r.Header); n > g.opts.MaxRequestHeaders {
		// Envoy's codec refuses these before any filter runs.
		writeStatus(rec, &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    http.StatusRequestHeaderFieldsTooLarge,
			Reason:  metav1.StatusReasonBadRequest,
			Message: fmt.Sprintf("Request Header Fields Too Large: the request has %d header fields, at most %d are allowed", n, g.opts.MaxRequestHeaders),
		})
		return
	}
	if !httpguts.ValidHostHeader(r.Host) {
		// Envoy's codec refuses an invalid authority before any filter runs.
		writeStatus(rec, &apierrors.NewBadRequest("the request's authority (Host) is not a valid host").ErrStatus)
		return
	}
	req, err := pluginRequest(r)
	if err != nil {
		writeStatus(rec, &apierrors.NewBadRequest(err.Error()).ErrStatus)
		return
	}
	defer req.release()
	req.offerBody(g, rec, r, arrived)
	out := g.opts.Plugin.HandleRequestHeaders(r.Context(), &req.Request)
	verdict = out.Verdict
	if out.BodyFailed != nil {
		// Before the context: a body read that fails on an HTTP/1.x
		// connection ends it, a read deadline too.
		g.answerBodyFailure(rec, r, out.BodyFailed)
		return
	}
	if r.Context().Err() != nil {
		// The client left while the plugin ran or its call was pending: there
		// is nobody to answer, and the plugin did not fail.
		rec.clientGone = true
		return
	}
	if out.Verdict == wasmhost.Respond && errors.Is(out.Failed, wasmhost.ErrNoInstance) {
		// Every VM stayed busy for as long as a request may queue for one:
		// the gateway is overloaded, and the client is to come back.
		g.metrics.rejected.WithLabelValues("plugin_busy").Inc()
		g.writeTooManyRequests(rec, "Too many requests: no plugin VM became free in time, please try again later.")
		return
	}
	if out.Failed != nil {
		g.metrics.pluginFailures.Inc()
		g.log.Error("the plugin could not process a request", "method", r.Method, "path", r.URL.Path, "error", out.Failed)
	}
	switch out.Verdict {
	case wasmhost.Respond:
		g.writeLocalResponse(rec, r, out)
	case wasmhost.Reset:
		// Envoy resets the stream; Go's server aborts the response (RST_STREAM
		// on HTTP/2, closed connection on HTTP/1.1).
		panic(http.ErrAbortHandler)
	default:
		if req.body.read {
			// The client's body is consumed; what the plugin read goes in its
			// place.
			replayable(r, out.Body)
		}
		var read []byte
		if req.body.read {
			read = out.Body
		}
		g.forward(rec, r, &target, s, out.Headers, read, arrived)
	}
}

// resolve finds the backend a routing header value names: a cluster, or a
// cluster with discovery.FrontProxyClusterSuffix for a request whose identity
// the plugin asserts (frontProxy).
func (g *Gateway) resolve(s *state, cluster string) (b *backend, frontProxy bool, err error) {
	name, frontProxy := strings.CutSuffix(cluster, discovery.FrontProxyClusterSuffix)
	if b = s.lookup(name); b == nil {
		return nil, false, fmt.Errorf("no API server is known as %q", cluster)
	}
	if frontProxy && g.transports.load().frontProxy == nil {
		return nil, false, errNoFrontProxyCertificate
	}
	return b, frontProxy, nil
}

// forward proxies the request with the plugin's headers to the backend it
// chose, or to one in round robin; buffered says that the body is already in
// memory (the plugin read it), so the request can be sent again as it is.
func (g *Gateway) forward(w *statusRecorder, r *http.Request, target *discovery.Target, s *state, headers [][2]string, pluginRead []byte, arrived time.Time) {
	upgrade := upgradeType(r.Header)
	class := target.Class(r.Method, upgrade != "")
	ex := &exchange{
		state:      s,
		inbound:    r,
		target:     target,
		headers:    headers,
		upgrade:    upgrade,
		replayable: r.ContentLength == 0 || pluginRead != nil,
		body:       w.body,
		pluginRead: pluginRead,
	}
	to := (*backend)(nil)
	if cluster, ok := header(headers, g.opts.RoutingHeader); ok {
		var err error
		if to, ex.frontProxy, err = g.resolve(s, cluster); err != nil {
			g.log.Error("the plugin's routing cannot be carried out", "cluster", cluster, "error", err)
			g.writeUnavailable(w, err.Error())
			return
		}
	} else {
		to = g.pickBalanced(s)
	}
	if !ex.replayable && r.ContentLength > 0 && r.ContentLength <= maxReplayableBody {
		client := peerIP(r.RemoteAddr)
		if ok, why := g.bodies.reserve(client, r.ContentLength); !ok {
			g.metrics.unbufferedBodies.WithLabelValues(why).Inc()
		} else {
			defer g.bodies.release(client, r.ContentLength)
			if !g.bufferBody(w, r, ex, arrived) {
				return
			}
		}
	}
	// Counted from here, once a buffered body is in hand: its wait is
	// bounded by the buffer budget and the client's share, so a client
	// stalling its bodies cannot take the places of others.
	admitted, ok := g.admit(w, peerIP(r.RemoteAddr), class)
	if !ok {
		return
	}
	defer admitted.release()
	ex.setBackend(to)
	defer ex.release()
	defer func() { w.upstream = ex.current() }()
	ctx := context.WithValue(r.Context(), exchangeKey{}, ex)
	if !class.LongRunning {
		// Like kube-apiserver's timeout filter, the deadline covers the whole
		// response: a short request's body stopping past it is cut.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, arrived.Add(g.opts.RequestTimeout), errRequestTimeout)
		defer cancel()
		// Deferred after cancel, so run before it: the normal end of the
		// request does not count as its time running out.
		stop := w.giveUpAtTimeout(ctx)
		defer stop()
	} else {
		w.watchForStalls(g.opts.StalledStreamTimeout)
	}
	proxy := g.proxy
	if class.LongRunning {
		proxy = g.streamProxy
	}
	proxy.ServeHTTP(w, r.WithContext(ctx))
}

// bufferBody reads a small body whole, so that the request can be sent again
// if it provably never reached a server; false means the request was
// answered. The caller reserved the bytes from the buffer budget. Every
// request's body, long-running or not, must arrive within the request
// timeout, so a client that announces a body and stalls holds its share of
// the budget no longer than that, and is then answered 504.
func (g *Gateway) bufferBody(w *statusRecorder, r *http.Request, ex *exchange, arrived time.Time) bool {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(arrived.Add(g.opts.RequestTimeout))
	body, err := readBody(r.Body, r.ContentLength)
	if err == nil {
		// Only a body read whole may lift the deadline: after an answer the
		// server drains what is left of the body, which must not wait.
		_ = rc.SetReadDeadline(time.Time{})
	}
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeRequestTimeout(w)
		return false
	case r.Context().Err() != nil:
		w.clientGone = true
		return false
	case err != nil:
		writeStatus(w, &apierrors.NewBadRequest("the request body ended before its Content-Length").ErrStatus)
		return false
	}
	replayable(r, body)
	ex.replayable = true
	return true
}

// readBody reads a body of n bytes. Memory grows with the bytes that arrive,
// not with what the header announces, and the buffer ends at n bytes exactly.
func readBody(r io.Reader, n int64) ([]byte, error) {
	const first = 64 << 10
	body := make([]byte, 0, min(n, first))
	for int64(len(body)) < n {
		if len(body) == cap(body) {
			body = append(make([]byte, 0, min(n, 2*int64(cap(body)))), body...)
		}
		k, err := r.Read(body[len(body):cap(body)])
		body = body[:len(body)+k]
		switch {
		case err == io.EOF && int64(len(body)) < n:
			return nil, io.ErrUnexpectedEOF
		case err != nil && err != io.EOF:
			return nil, err
		}
	}
	return body, nil
}

// writeLocalResponse sends the plugin's own reply (merged discovery, 304,
// 503), or the failure policy's. A reply to HEAD announces the body's length
// and sends no body, as Envoy's local replies do.
func (g *Gateway) writeLocalResponse(w *statusRecorder, r *http.Request, out wasmhost.Outcome) {
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
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(g.opts.RequestTimeout))
	w.WriteHeader(int(resp.Status))
	if len(resp.Body) > 0 && r.Method != http.MethodHead {
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
	boundAnswer(w)
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(body)
}

// writeRequestTimeout answers 504 as kube-apiserver's timeout filter does.
func writeRequestTimeout(w http.ResponseWriter) {
	writeStatus(w, &apierrors.NewTimeoutError("request did not complete within the allotted timeout", 0).ErrStatus)
}

// writeStatus answers with a Kubernetes Status, as kube-apiserver writes its
// errors.
func writeStatus(w http.ResponseWriter, st *metav1.Status) {
	st.Kind, st.APIVersion = "Status", "v1"
	body, _ := json.Marshal(st)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	boundAnswer(w)
	w.WriteHeader(int(st.Code))
	_, _ = w.Write(body)
}

// upstreamFailed is the reverse proxy's error handler: the request could not
// be delivered (after any retry), no answer came within the request timeout,
// or the answer could not be read.
func (g *Gateway) upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	ex := exchangeFrom(r.Context())
	cluster := ""
	if b := ex.current(); b != nil {
		cluster = b.cluster
	}
	switch {
	case context.Cause(r.Context()) == errRequestTimeout:
		g.log.Warn("API server did not answer within the request timeout", "cluster", cluster, "method", ex.inbound.Method,
			"path", ex.inbound.URL.Path, "timeout", g.opts.RequestTimeout)
		writeRequestTimeout(w)
		return
	case r.Context().Err() != nil:
		// The client went away; there is nobody to answer.
		if rec, ok := w.(*statusRecorder); ok {
			rec.clientGone = true
		}
		return
	}
	var invalid *invalidOutboundError
	var bodyErr *clientBodyError
	switch {
	case errors.As(err, &invalid):
		writeStatus(w, &apierrors.NewBadRequest(invalid.why).ErrStatus)
		return
	case errors.As(err, &bodyErr):
		g.log.Info("the client's request body broke off while it was sent to the API server", "cluster", cluster,
			"method", ex.inbound.Method, "path", ex.inbound.URL.Path, "error", err)
		writeStatus(w, &apierrors.NewBadRequest("the request body could not be read to its end").ErrStatus)
		return
	}
	// The cause (addresses, certificate details) stays in the log.
	if isConnectFailure(err) {
		g.log.Warn("API server unreachable", "cluster", cluster, "method", ex.inbound.Method, "path", ex.inbound.URL.Path, "error", err)
		g.writeUnavailable(w, "the API server "+cluster+" could not be reached; retry shortly")
		return
	}
	// A read changed nothing, so asking again is safe, and Retry-After tells
	// the client when.
	if isSafeRead(r, ex) {
		g.log.Warn("API server connection lost before it answered a read", "cluster", cluster, "method", ex.inbound.Method, "path", ex.inbound.URL.Path, "error", err)
		g.writeUnavailable(w, "the connection to the API server "+cluster+" was lost before it answered; retry shortly")
		return
	}
	// Without Retry-After, which client-go would take as leave to send the
	// write again by itself: as for kube-apiserver's own timeouts, whether to
	// do it again is for the client to decide after reading the state.
	g.log.Warn("API server connection lost before it answered", "cluster", cluster, "method", ex.inbound.Method, "path", ex.inbound.URL.Path, "error", err)
	writeStatus(w, &metav1.Status{Status: metav1.StatusFailure, Reason: metav1.StatusReasonServiceUnavailable, Code: http.StatusServiceUnavailable,
		Message: "the connection to the API server " + cluster + " was lost before it answered; the request may have been carried out"})
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
