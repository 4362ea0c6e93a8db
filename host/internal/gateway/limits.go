package gateway

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/skewgate/skewgate/discovery"
)

// Defaults of the request body buffer budget (Options.MaxBufferedRequestBytes
// and MaxBufferedRequestBytesPerClient).
const (
	DefaultMaxBufferedRequestBytes          = 64 << 20
	DefaultMaxBufferedRequestBytesPerClient = 8 << 20
)

// Defaults of the in-flight limits, kube-apiserver's --max-requests-inflight
// and --max-mutating-requests-inflight.
const (
	DefaultMaxRequestsInFlight         = 400
	DefaultMaxMutatingRequestsInFlight = 200
)

// inFlightLimit counts the requests of one kind being proxied; a limit of 0
// admits every request.
type inFlightLimit struct {
	limit int64
	n     atomic.Int64
}

func (l *inFlightLimit) acquire() bool {
	if l.limit == 0 {
		l.n.Add(1)
		return true
	}
	if l.n.Add(1) > l.limit {
		l.n.Add(-1)
		return false
	}
	return true
}

func (l *inFlightLimit) release() { l.n.Add(-1) }

// Defaults of the bounds on long-running requests and connections, sized
// for a 5,000-node cluster whose kubelets and kube-proxies all come through
// one gateway: a node's kubelet holds about 10 watches of its own and one per
// ConfigMap and Secret its Pods mount, kube-proxy 3, a CNI agent a few (about
// 30 a node in all, 150,000 for the cluster), on 3 to 5 HTTP/2 connections a
// node (20,000). A single address gets room for a node with 110 Pods each
// mounting several objects, and for the control-plane components of a node
// that reach a node-local gateway from loopback.
const (
	// DefaultMaxRequestsInFlightPerClient is a quarter of
	// DefaultMaxRequestsInFlight: one address cannot take every read-only
	// place, nor half the mutating ones.
	DefaultMaxRequestsInFlightPerClient    = 100
	DefaultMaxLongRunningRequests          = 200_000
	DefaultMaxLongRunningRequestsPerClient = 1_000
	DefaultMaxConnections                  = 30_000
	DefaultMaxConnectionsPerClient         = 200
)

// clientShares bounds what is held in all and for each client, which is the
// connection's source address, the only one the gateway knows to be true. A
// client behind a shared proxy address gets one share for all of them. A
// bound of 0 is no bound.
type clientShares struct {
	total, perClient int64
	// overTotal and overShare say why a reservation was refused; they label
	// the metric that counts refusals.
	overTotal, overShare string

	mu       sync.Mutex
	held     int64
	byClient map[string]int64
}

func newClientShares(total, perClient int64, overTotal, overShare string) *clientShares {
	return &clientShares{total: total, perClient: perClient, overTotal: overTotal, overShare: overShare, byClient: map[string]int64{}}
}

// reserve takes n for client, or says why it cannot.
func (b *clientShares) reserve(client string, n int64) (ok bool, why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.perClient > 0 && b.byClient[client]+n > b.perClient:
		return false, b.overShare
	case b.total > 0 && b.held+n > b.total:
		return false, b.overTotal
	}
	b.held += n
	b.byClient[client] += n
	return true, ""
}

func (b *clientShares) release(client string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held -= n
	if left := b.byClient[client] - n; left > 0 {
		b.byClient[client] = left
	} else {
		delete(b.byClient, client)
	}
}

func (b *clientShares) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.held
}

// Why a body is streamed instead of buffered, a long-running request
// refused, a connection closed at once; the values label
// skewgate_gateway_unbuffered_request_bodies_total,
// skewgate_gateway_rejected_requests_total and
// skewgate_gateway_refused_connections_total.
const (
	unbufferedBudget            = "budget"
	unbufferedClientShare       = "client_share"
	overMaxInFlightPerClient    = "max_requests_inflight_per_client"
	overMaxLongRunning          = "max_long_running_requests"
	overMaxLongRunningPerClient = "max_long_running_requests_per_client"
	overMaxConnections          = "max_connections"
	overMaxConnectionsPerClient = "max_connections_per_client"
)

// Listener accepts the gateway's client connections within the connection
// bounds (Options.MaxConnections and MaxConnectionsPerClient): a connection
// beyond them is closed as soon as it is accepted, before its TLS handshake,
// and counted. It never holds a connection it will not serve.
func (g *Gateway) Listener(l net.Listener) net.Listener {
	return &boundedListener{Listener: l, g: g}
}

type boundedListener struct {
	net.Listener
	g *Gateway
}

func (l *boundedListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client := peerIP(conn.RemoteAddr().String())
		if ok, why := l.g.connections.reserve(client, 1); !ok {
			l.g.metrics.refusedConnections.WithLabelValues(why).Inc()
			_ = conn.Close()
			continue
		}
		return &boundedConn{Conn: conn, release: func() { l.g.connections.release(client, 1) }}, nil
	}
}

// boundedConn gives its place back once, when closed.
type boundedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *boundedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// admission is what a request holds of the gateway's bounds while it is
// served.
type admission struct {
	client string
	// limit is the in-flight limit of its kind, nil for a long-running one;
	// shares the per-client count it is in.
	limit  *inFlightLimit
	shares *clientShares
}

func (a admission) release() {
	if a.limit != nil {
		a.limit.release()
	}
	a.shares.release(a.client, 1)
}

// admit counts a request of client against the bounds of its class, or
// answers it 429 with Retry-After and reports false: a long-running one
// against MaxLongRunningRequests and the client's share of it, another
// against the in-flight limit of its kind and the client's in-flight share.
func (g *Gateway) admit(w http.ResponseWriter, client string, class discovery.RequestClass) (admission, bool) {
	if class.LongRunning {
		if ok, why := g.longRunning.reserve(client, 1); !ok {
			g.refuse(w, why, "long-running requests (watches, logs, exec sessions)")
			return admission{}, false
		}
		return admission{client: client, shares: g.longRunning}, true
	}
	limit, kind, reason := &g.readOnly, "read-only requests", "max_requests_inflight"
	if class.Mutating {
		limit, kind, reason = &g.mutating, "mutating requests", "max_mutating_requests_inflight"
	}
	if ok, why := g.inFlight.reserve(client, 1); !ok {
		g.refuse(w, why, "requests")
		return admission{}, false
	}
	if !limit.acquire() {
		g.inFlight.release(client, 1)
		g.refuse(w, reason, kind)
		return admission{}, false
	}
	return admission{client: client, limit: limit, shares: g.inFlight}, true
}

// refuse answers 429 for the bound why names, and counts it.
func (g *Gateway) refuse(w http.ResponseWriter, why, what string) {
	g.metrics.rejected.WithLabelValues(why).Inc()
	scope := "in all"
	if strings.HasSuffix(why, "_per_client") {
		scope = "for this client address"
	}
	g.writeTooManyRequests(w, "Too many requests: the gateway is serving as many "+what+" "+scope+" as it may at once, please try again later.")
}

// writeTooManyRequests answers 429 with Retry-After, as kube-apiserver's
// max-in-flight filter does, and with a Status body a client can decode.
func (g *Gateway) writeTooManyRequests(w http.ResponseWriter, message string) {
	w.Header().Set("Retry-After", fmt.Sprint(g.opts.RetryAfterSeconds))
	writeStatus(w, &apierrors.NewTooManyRequests(message, g.opts.RetryAfterSeconds).ErrStatus)
}
