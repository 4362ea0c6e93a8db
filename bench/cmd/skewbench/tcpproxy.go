package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// runTCPProxy is the hop node-local load balancers such as Talos KubePrism or
// k3s's agent load balancer add: a bare L4 proxy that copies bytes both ways,
// so TLS runs end to end between the client and the API server. It runs as
// its own process, as the other hops do.
func runTCPProxy(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("skewbench tcp-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "loopback host:port to accept on")
	backend := fs.String("backend", "", "loopback host:port of the API server")
	metricsListen := fs.String("metrics-listen", "", "loopback host:port serving the bytes this process allocated at /metrics (none when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	listenAddr, err := loopbackAddrPort("-listen", *listen)
	if err != nil {
		return err
	}
	backendAddr, err := loopbackAddrPort("-backend", *backend)
	if err != nil {
		return err
	}
	if backendAddr.Port() == 0 {
		return fmt.Errorf("-backend %s: a port is required", *backend)
	}
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(listenAddr))
	if err != nil {
		return err
	}
	if *metricsListen != "" {
		if err := serveAllocMetric(*metricsListen); err != nil {
			return err
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Fprintf(stderr, "tcp-proxy forwarding %s to %s\n", ln.Addr(), backendAddr)
	return serveTCPProxy(ctx, ln, backendAddr.String(), log.New(stderr, "tcp-proxy: ", log.LstdFlags))
}

// loopbackAddrPort parses addr, which must be a literal loopback IP and a
// port: the proxy neither accepts from nor connects to anything else.
func loopbackAddrPort(flagName, addr string) (netip.AddrPort, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || ap.Addr().Zone() != "" || !ap.Addr().Unmap().IsLoopback() {
		return netip.AddrPort{}, fmt.Errorf("%s %q: must be a loopback IP address and port", flagName, addr)
	}
	return ap, nil
}

// serveTCPProxy proxies every connection ln accepts to backend until ctx
// ends, then closes the listener and every connection and returns once all
// their copies have stopped.
func serveTCPProxy(ctx context.Context, ln *net.TCPListener, backend string, logger *log.Logger) error {
	stopListening := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopListening()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		client, err := ln.AcceptTCP()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		conns.Go(func() { proxyTCP(ctx, client, backend, logger) })
	}
}

// proxyTCP connects one accepted client to the backend and copies both ways.
// Each direction's end of stream is passed on as a half-close, so either side
// may finish sending and still read the other's answer; the pair closes once
// both directions have ended, at once if either fails, or when ctx ends.
func proxyTCP(ctx context.Context, client *net.TCPConn, backend string, logger *log.Logger) {
	defer client.Close()
	dialer := net.Dialer{Timeout: 5 * time.Second}
	conn, err := dialer.DialContext(ctx, "tcp", backend)
	if err != nil {
		logger.Printf("dial %s: %v", backend, err)
		return
	}
	upstream := conn.(*net.TCPConn)
	defer upstream.Close()
	closeBoth := func() {
		client.Close()
		upstream.Close()
	}
	stopOnCancel := context.AfterFunc(ctx, closeBoth)
	defer stopOnCancel()
	ended := make(chan error, 2)
	go func() { ended <- pipe(upstream, client) }()
	go func() { ended <- pipe(client, upstream) }()
	for range 2 {
		// A reset or a write to a gone peer is how clients normally leave, so
		// it is not logged; closing both unblocks the other direction's read.
		if err := <-ended; err != nil {
			closeBoth()
		}
	}
}

// pipe copies src to dst until src's end of stream, then half-closes dst.
// Between two TCP connections io.Copy splices in the kernel on Linux, as L4
// proxies do.
func pipe(dst, src *net.TCPConn) error {
	if _, err := io.Copy(dst, src); err != nil {
		return err
	}
	return dst.CloseWrite()
}
