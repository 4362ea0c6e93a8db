package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/bench/internal/loadgen"
)

// runPlainProxy is the baseline hop: a bare httputil.ReverseProxy with TLS on
// both sides and no plugin, spreading requests over the API servers in turn
// as skewgate's gateway does when nothing needs re-routing. It runs as its own
// process, as skewgate serve does, so both get the same runtime to themselves.
func runPlainProxy(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("skewbench plain-proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "loopback host:port to serve on")
	certFile := fs.String("tls-cert-file", "", "serving certificate")
	keyFile := fs.String("tls-private-key-file", "", "serving key")
	caFile := fs.String("peer-ca-file", "", "CA that verifies the API servers")
	serverName := fs.String("peer-server-name", "kubernetes.default.svc", "name verified in the API servers' certificates")
	metricsListen := fs.String("metrics-listen", "", "loopback host:port serving the bytes this process allocated at /metrics (none when empty)")
	var backends repeated
	fs.Var(&backends, "backend", "API server URL https://127.0.0.1:port (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	handler, err := newPlainProxy(backends, *caFile, *serverName)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if ap, err := net.ResolveTCPAddr("tcp", *listen); err != nil || !ap.IP.IsLoopback() {
		return fmt.Errorf("-listen %s: must be a loopback address", *listen)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	if *metricsListen != "" {
		if err := serveAllocMetric(*metricsListen); err != nil {
			return err
		}
	}
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	srv := &http.Server{
		Handler:           handler,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          log.New(stderr, "plain-proxy: ", log.LstdFlags),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	fmt.Fprintf(stderr, "plain-proxy serving on %s\n", ln.Addr())
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newPlainProxy builds the round-robin reverse proxy: HTTP/2 to the backends
// when they offer it, verified against the CA, streaming responses at once
// (FlushInterval -1), like skewgate's gateway.
func newPlainProxy(backends []string, caFile, serverName string) (http.Handler, error) {
	if len(backends) == 0 {
		return nil, errors.New("no -backend")
	}
	var targets []*url.URL
	for _, b := range backends {
		u, err := loadgen.ParseTarget(b)
		if err != nil {
			return nil, fmt.Errorf("-backend: %w", err)
		}
		targets = append(targets, u)
	}
	roots, err := loadgen.ReadCAFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("-peer-ca-file: %w", err)
	}
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	transport := &http.Transport{
		Proxy:               nil,
		TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12},
		Protocols:           protocols,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}
	var next atomic.Uint64
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[(next.Add(1)-1)%uint64(len(targets))])
			pr.Out.Host = pr.In.Host
		},
		Transport:     transport,
		FlushInterval: -1,
	}, nil
}
