package rehearsal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// Health checking as kubeadm's high-availability guide configures HAProxy in front of the API
// servers (httpchk, rise 2, fall 2), checked more often than its 10 s so that the baseline
// notices a server going away as soon as a careful operator's load balancer would.
const (
	healthInterval = 2 * time.Second
	healthTimeout  = 2 * time.Second
	healthRise     = 2
	healthFall     = 2
)

// RoundRobinProxy is the control-plane endpoint users have today: an L7 proxy that sends each
// request to the next healthy API server in turn, knowing nothing about which server serves
// what. It terminates TLS with the API server's certificate (its SANs include the endpoint's
// name), verifies client certificates against the cluster CA and passes their identity on as
// the API servers' front proxy (X-Remote-User, X-Remote-Group with kubeadm's front-proxy client
// certificate); requests without a client certificate (bootstrap and service-account tokens,
// anonymous discovery of cluster-info) go on with their own credentials. It verifies every API
// server against the cluster CA.
type RoundRobinProxy struct {
	*pool
	server *http.Server
}

// pool is the API servers behind an endpoint, each health-checked, taken in turn.
type pool struct {
	backends []*backend
	next     atomic.Uint64
	done     chan struct{}
}

type backend struct {
	url     *url.URL
	healthy atomic.Bool
}

func newPool(urls []*url.URL) *pool {
	p := &pool{done: make(chan struct{})}
	for _, u := range urls {
		p.backends = append(p.backends, &backend{url: u})
	}
	return p
}

// nodeURLs are the addresses of the nodes' API servers.
func nodeURLs(nodes []*kubenode.Node) []*url.URL {
	var urls []*url.URL
	for _, n := range nodes {
		urls = append(urls, &url.URL{Scheme: "https", Host: fmt.Sprintf("%s:%d", n.IP, kubenode.APIServerPort)})
	}
	return urls
}

// assertedKey marks a request going on with an identity the proxy asserts; noBackendKey one that
// has no healthy server to go to.
type (
	assertedKey  struct{}
	noBackendKey struct{}
)

// StartRoundRobinProxy serves on the bridge's address at the API server port, in front of the
// nodes' API servers, reading the cluster's certificates from pkiNode once kubeadm has written
// them. Close stops it.
func StartRoundRobinProxy(network *kubenode.Network, pkiNode *kubenode.Node, nodes []*kubenode.Node, log testcluster.Logger) (*RoundRobinProxy, error) {
	ln, err := network.Listen(kubenode.APIServerPort)
	if err != nil {
		return nil, err
	}
	return serveRoundRobin(ln, network.DialContext, nodeURLs(nodes), pkiNode.HostPath, log), nil
}

// dialFunc connects to a backend.
type dialFunc func(ctx context.Context, network, address string) (net.Conn, error)

// serveRoundRobin serves the proxy on ln in front of backends, reached with dial, with the
// kubeadm certificates found at hostPath("/etc/kubernetes/pki/…").
func serveRoundRobin(ln net.Listener, dial dialFunc, backends []*url.URL, hostPath func(string) string, log testcluster.Logger) *RoundRobinProxy {
	p := &RoundRobinProxy{pool: newPool(backends)}
	pki := &lazyPKI{hostPath: hostPath}
	plain := backendTransport(pki, dial, false)
	asserting := backendTransport(pki, dial, true)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			b := p.pick()
			if b == nil {
				// The transport fails the request, and ReverseProxy answers 502.
				pr.SetURL(p.backends[0].url)
				pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), noBackendKey{}, true))
				return
			}
			pr.SetURL(b.url)
			pr.Out.Host = pr.In.Host
			for name := range pr.Out.Header {
				if strings.HasPrefix(strings.ToLower(name), "x-remote-") {
					pr.Out.Header.Del(name)
				}
			}
			if pr.In.TLS != nil && len(pr.In.TLS.PeerCertificates) > 0 {
				cert := pr.In.TLS.PeerCertificates[0]
				pr.Out.Header.Set("X-Remote-User", cert.Subject.CommonName)
				for _, o := range cert.Subject.Organization {
					pr.Out.Header.Add("X-Remote-Group", o)
				}
				pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), assertedKey{}, true))
			}
		},
		Transport: roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			if r.Context().Value(noBackendKey{}) != nil {
				return nil, errors.New("no healthy API server")
			}
			if r.Context().Value(assertedKey{}) != nil {
				return asserting.RoundTrip(r)
			}
			return plain.RoundTrip(r)
		}),
		FlushInterval: -1,
		ErrorLog:      log2(log),
	}
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	p.server = &http.Server{
		Handler:   proxy,
		Protocols: protocols,
		// Per connection, because the cluster's certificates exist only once kubeadm init has
		// written them.
		TLSConfig:         &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return pki.serverConfig() }},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log2(log),
	}
	go p.server.ServeTLS(ln, "", "")
	p.checkAll(plain)
	return p
}

// log2 adapts the test's logger to the standard library's.
func log2(l testcluster.Logger) *log.Logger {
	return log.New(logWriter{l}, "round-robin proxy: ", 0)
}

type logWriter struct{ l testcluster.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.l.Logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// pick returns the next healthy backend in turn, or nil if none is.
func (p *pool) pick() *backend {
	for range p.backends {
		b := p.backends[(p.next.Add(1)-1)%uint64(len(p.backends))]
		if b.healthy.Load() {
			return b
		}
	}
	return nil
}

// backendTransport reaches the API servers with dial, verified against the cluster CA, with the
// front-proxy client certificate if asserting.
func backendTransport(pki *lazyPKI, dial dialFunc, asserting bool) *http.Transport {
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	return &http.Transport{
		Protocols: protocols,
		// Per connection, because the CA and the front-proxy certificate appear only once
		// kubeadm init has written them.
		DialTLSContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			cfg, err := pki.clientConfig(address, asserting)
			if err != nil {
				return nil, err
			}
			conn, err := dial(ctx, network, address)
			if err != nil {
				return nil, err
			}
			tc := tls.Client(conn, cfg)
			if err := tc.HandshakeContext(ctx); err != nil {
				conn.Close()
				return nil, err
			}
			return tc, nil
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
	}
}

// checkAll health-checks every backend through t until the pool closes.
func (p *pool) checkAll(t *http.Transport) {
	for _, b := range p.backends {
		go p.check(b, t)
	}
}

// check marks b healthy after healthRise answers of /healthz in a row and unhealthy after
// healthFall failures in a row, until the pool closes.
func (p *pool) check(b *backend, t *http.Transport) {
	client := &http.Client{Transport: t, Timeout: healthTimeout}
	var ok, failed int
	tick := time.NewTicker(healthInterval)
	defer tick.Stop()
	for {
		resp, err := client.Get(b.url.String() + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		if err == nil && resp.StatusCode == http.StatusOK {
			ok, failed = ok+1, 0
			if ok >= healthRise {
				b.healthy.Store(true)
			}
		} else {
			ok, failed = 0, failed+1
			if failed >= healthFall {
				b.healthy.Store(false)
			}
		}
		select {
		case <-p.done:
			return
		case <-tick.C:
		}
	}
}

// Close stops serving and health checking.
func (p *RoundRobinProxy) Close() error {
	close(p.done)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.server.Shutdown(ctx)
}

// lazyPKI reads the cluster's certificates from a control-plane node once kubeadm has written
// them, and keeps them: the CA does not change during an upgrade, and the certificates kubeadm
// renews stay valid.
type lazyPKI struct {
	hostPath func(string) string

	mu         sync.Mutex
	ca         *x509.CertPool
	cert       *tls.Certificate
	frontProxy *tls.Certificate
}

func (l *lazyPKI) load() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.frontProxy != nil {
		return nil
	}
	caPEM, err := os.ReadFile(l.hostPath("/etc/kubernetes/pki/ca.crt"))
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no certificate in the cluster CA file")
	}
	cert, err := tls.LoadX509KeyPair(l.hostPath("/etc/kubernetes/pki/apiserver.crt"), l.hostPath("/etc/kubernetes/pki/apiserver.key"))
	if err != nil {
		return err
	}
	fp, err := tls.LoadX509KeyPair(l.hostPath("/etc/kubernetes/pki/front-proxy-client.crt"), l.hostPath("/etc/kubernetes/pki/front-proxy-client.key"))
	if err != nil {
		return err
	}
	l.ca, l.cert, l.frontProxy = pool, &cert, &fp
	return nil
}

// nextProtos offers HTTP/2 and HTTP/1.1 on both sides, as the API servers do.
var nextProtos = []string{"h2", "http/1.1"}

// serverConfig serves the API server's certificate and verifies the client certificates given
// against the cluster CA.
func (l *lazyPKI) serverConfig() (*tls.Config, error) {
	if err := l.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12, NextProtos: nextProtos,
		Certificates: []tls.Certificate{*l.cert},
		ClientCAs:    l.ca, ClientAuth: tls.VerifyClientCertIfGiven,
	}, nil
}

// clientConfig reaches the API server at address, verified against the cluster CA for the address
// dialled, presenting the front-proxy client certificate if asserting.
func (l *lazyPKI) clientConfig(address string, asserting bool) (*tls.Config, error) {
	if err := l.load(); err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos, RootCAs: l.ca, ServerName: host}
	if asserting {
		cfg.Certificates = []tls.Certificate{*l.frontProxy}
	}
	return cfg, nil
}
