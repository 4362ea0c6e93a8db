package rehearsal

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// connectTimeout bounds the connection to an API server, as HAProxy's `timeout connect` does.
const connectTimeout = 5 * time.Second

// TCPBalancer is the control-plane endpoint of kubeadm's high-availability guide: HAProxy with
// `mode tcp` and `balance roundrobin`, checking each API server's /healthz. It takes the next
// healthy server for each connection and passes the bytes through, TLS and all. A client keeps
// its server for as long as it keeps its connection, and client-go carries every request of a
// client over one HTTP/2 connection: a 1.31 kubelet whose connection lands on a 1.30 server has
// its Service list refused on every retry (kubernetes/kubernetes#127316) until the connection
// ends. Connections stay open when their server turns unhealthy, as HAProxy's do by default.
type TCPBalancer struct {
	*pool
	ln    net.Listener
	dial  dialFunc
	log   testcluster.Logger
	relay sync.WaitGroup

	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// StartTCPBalancer serves on the bridge's address at the API server port, in front of the nodes'
// API servers, checking them with the cluster CA read from pkiNode once kubeadm has written it.
// Close stops it.
func StartTCPBalancer(network *kubenode.Network, pkiNode *kubenode.Node, nodes []*kubenode.Node, log testcluster.Logger) (*TCPBalancer, error) {
	ln, err := network.Listen(kubenode.APIServerPort)
	if err != nil {
		return nil, err
	}
	return serveTCP(ln, network.DialContext, nodeURLs(nodes), pkiNode.HostPath, log), nil
}

// serveTCP balances the connections ln accepts over backends, reached with dial and checked
// with the cluster CA found at hostPath("/etc/kubernetes/pki/ca.crt").
func serveTCP(ln net.Listener, dial dialFunc, backends []*url.URL, hostPath func(string) string, log testcluster.Logger) *TCPBalancer {
	b := &TCPBalancer{pool: newPool(backends), ln: ln, dial: dial, log: log, open: make(map[net.Conn]struct{})}
	b.checkAll(backendTransport(&lazyPKI{hostPath: hostPath}, dial, false))
	b.relay.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			b.relay.Go(func() { b.serve(client) })
		}
	})
	return b
}

// serve joins client to the next healthy API server until either side ends; with none healthy it
// closes the connection, as HAProxy does.
func (b *TCPBalancer) serve(client net.Conn) {
	if !b.track(client) {
		client.Close()
		return
	}
	defer b.untrack(client)
	be := b.pick()
	if be == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	server, err := b.dial(ctx, "tcp", be.url.Host)
	cancel()
	if err != nil {
		b.log.Logf("tcp balancer: %v", err)
		return
	}
	if !b.track(server) {
		server.Close()
		return
	}
	defer b.untrack(server)
	ended := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		ended <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	// TLS has no half-close: once one side is done, so is the exchange.
	<-ended
	client.Close()
	server.Close()
	<-ended
}

// track records c as open, so that Close can end it; false once the balancer is closed.
func (b *TCPBalancer) track(c net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		return false
	}
	b.open[c] = struct{}{}
	return true
}

func (b *TCPBalancer) untrack(c net.Conn) {
	c.Close()
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, c)
}

// Close stops accepting, ends every open connection and stops health checking.
func (b *TCPBalancer) Close() error {
	close(b.done)
	err := b.ln.Close()
	b.mu.Lock()
	for c := range b.open {
		c.Close()
	}
	b.open = nil
	b.mu.Unlock()
	b.relay.Wait()
	return err
}
