// Package demo shows, in one process, what skewgate fixes: three fake API
// servers of a rolling upgrade (v1.35.4, v1.36.3, and v1.36.3 with extra APIs)
// serving captured discovery documents over real TLS, a plain round-robin
// reverse proxy and skewgate in front of them, and a short scripted client
// that sends the same requests through both and counts the false 404s.
package demo

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/internal/serve"
)

// Options configure a demo run.
type Options struct {
	// Requests is the number of scripted requests sent through each proxy;
	// default 300.
	Requests int
	// ExitAfterReport stops everything once the report is printed instead of
	// waiting for ctx to end.
	ExitAfterReport bool
	// WasmPath is the plugin module; default serve.DefaultWasmPath().
	WasmPath string
	// Source provides the servers' discovery documents; default
	// FixtureSource(fixtures.FS).
	Source Source
	// GatewayAddress and MetricsAddress are where skewgate listens; default
	// 127.0.0.1 on free ports.
	GatewayAddress, MetricsAddress string
	// CompilationCacheDir keeps the compiled plugin between runs.
	CompilationCacheDir string
	// Out receives the report; Logger receives skewgate's logs.
	Out    io.Writer
	Logger *slog.Logger
}

// Source returns the discovery documents of a server of version (like
// "v1.36.3") with the default API set, or with extra APIs enabled.
type Source func(version string, extra bool) (Documents, error)

// member is one fake API server of the demo control plane.
type member struct {
	name, version string
	extra         bool
}

// members is the rolling upgrade the demo shows: one server still on 1.35,
// two upgraded to 1.36, one of which enables extra APIs.
var members = []member{
	{"kube-apiserver-1", "v1.35.4", false},
	{"kube-apiserver-2", "v1.36.3", false},
	{"kube-apiserver-3", "v1.36.3", true},
}

// Report is what the scripted client measured.
type Report struct {
	Plain, Skewgate Tally
	// Skewed lists the resources not every server serves, with how many do.
	Skewed []SkewedResource
	// StatusPageURL and GatewayURL are where skewgate can be looked at.
	StatusPageURL, GatewayURL string
	// MergedETag is the ETag of skewgate's merged /apis.
	MergedETag string
}

// SkewedResource is a resource only some servers serve.
type SkewedResource struct {
	Path             string
	ServedBy, Of     int
	GroupVersionOnly bool
}

// Tally counts one proxy's answers.
type Tally struct {
	Requests int
	// FalseNotFound counts 404s for APIs the control plane serves (every
	// scripted request is for one).
	FalseNotFound int
	// OtherErrors counts answers that are neither 2xx nor 404, and failed
	// requests.
	OtherErrors int
	// DiscoveryRequests and DiscoveryComplete count GET /apis answers and
	// those listing every group version some server serves.
	DiscoveryRequests, DiscoveryComplete int
}

// FalseNotFoundRate is FalseNotFound / Requests.
func (t Tally) FalseNotFoundRate() float64 {
	if t.Requests == 0 {
		return 0
	}
	return float64(t.FalseNotFound) / float64(t.Requests)
}

// Run starts the demo, prints the report to opts.Out and, unless
// ExitAfterReport, keeps everything running until ctx ends.
func Run(ctx context.Context, opts Options) (*Report, error) {
	if opts.Requests <= 0 {
		opts.Requests = 300
	}
	if opts.Out == nil {
		opts.Out = os.Stdout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if opts.Source == nil {
		opts.Source = FixtureSource(fixtures.FS)
	}
	if opts.GatewayAddress == "" {
		opts.GatewayAddress = "127.0.0.1:0"
	}
	if opts.MetricsAddress == "" {
		opts.MetricsAddress = "127.0.0.1:0"
	}
	if opts.WasmPath == "" {
		path, err := serve.DefaultWasmPath()
		if err != nil {
			return nil, err
		}
		opts.WasmPath = path
	}

	dir, err := os.MkdirTemp("", "skewgate-demo-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pki, err := newDemoPKI(dir)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var servers []*fakeAPIServer
	var urls []string
	pairs, err := fixtures.LoadSchemaSkew()
	if err != nil {
		return nil, err
	}
	var versions []string
	for _, m := range members {
		versions = append(versions, m.version)
	}
	fields := schemaFieldsOf(pairs, versions)
	for _, m := range members {
		docs, err := opts.Source(m.version, m.extra)
		if err != nil {
			return nil, err
		}
		s, err := newFakeAPIServer(m.name, m.version, docs, fields[m.version])
		if err != nil {
			return nil, err
		}
		address, err := listenTLS(ctx, "127.0.0.1:0", s, pki.apiServing)
		if err != nil {
			return nil, err
		}
		servers = append(servers, s)
		urls = append(urls, "https://"+address)
	}

	plainAddress, err := listenTLS(ctx, "127.0.0.1:0", roundRobinProxy(urls, pki), pki.gatewayServing)
	if err != nil {
		return nil, err
	}

	host, port, err := net.SplitHostPort(opts.GatewayAddress)
	if err != nil {
		return nil, fmt.Errorf("gateway address: %w", err)
	}
	var securePort int
	if _, err := fmt.Sscan(port, &securePort); err != nil {
		return nil, fmt.Errorf("gateway address: %w", err)
	}
	if securePort == 0 {
		// Ask the system for a free port.
		if securePort, err = freePort(host); err != nil {
			return nil, err
		}
	}
	cfg := serve.NewConfig()
	cfg.BindAddress = host
	cfg.SecurePort = securePort
	cfg.TLSCertFile = pki.files.gatewayCert
	cfg.TLSPrivateKeyFile = pki.files.gatewayKey
	cfg.PeerCAFile = pki.files.ca
	cfg.ProxyClientCertFile = pki.files.proxyClientCert
	cfg.ProxyClientKeyFile = pki.files.proxyClientKey
	cfg.APIServers = urls
	cfg.MetricsBindAddress = opts.MetricsAddress
	cfg.WasmPath = opts.WasmPath
	cfg.PollInterval = time.Second
	cfg.CompilationCacheDir = opts.CompilationCacheDir
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Logger = opts.Logger
	gw, err := serve.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := gw.Listen(); err != nil {
		return nil, err
	}
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx) }()
	defer func() {
		cancel()
		<-served
	}()
	if err := waitReady(ctx, gw, served); err != nil {
		return nil, err
	}

	report := &Report{
		GatewayURL:    "https://" + gw.GatewayAddr().String(),
		StatusPageURL: "http://" + gw.MetricsAddr().String() + "/",
	}
	script := newScript(servers, opts.Requests)
	report.Skewed = script.skewed
	client := pki.client()
	defer client.CloseIdleConnections()
	report.Plain = script.run(ctx, client, "https://"+plainAddress, nil)
	report.Skewgate = script.run(ctx, client, report.GatewayURL, &report.MergedETag)
	printReport(opts.Out, servers, urls, report, pki.files.ca)

	if !opts.ExitAfterReport {
		fmt.Fprintln(opts.Out, "\nEverything keeps running; press Ctrl-C to stop.")
		select {
		case <-ctx.Done():
		case err := <-served:
			served <- err
		}
	}
	return report, nil
}

func waitReady(ctx context.Context, gw *serve.Server, served chan error) error {
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !gw.Ready() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-served:
			served <- err
			return fmt.Errorf("skewgate stopped before it was ready: %w", err)
		case <-deadline.C:
			return errors.New("skewgate did not accept a snapshot within 2 minutes")
		case <-tick.C:
		}
	}
	return nil
}

// listenTLS serves h over TLS on address until ctx ends and returns the bound
// address.
func listenTLS(ctx context.Context, address string, h http.Handler, cert tls.Certificate) (string, error) {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return "", err
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return l.Addr().String(), nil
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// roundRobinProxy is the load balancer skewgate replaces: it spreads requests
// over the servers in turn, knowing nothing about what each one serves.
func roundRobinProxy(urls []string, pki *demoPKI) http.Handler {
	targets := make([]*url.URL, len(urls))
	for i, u := range urls {
		targets[i], _ = url.Parse(u)
	}
	var next atomic.Uint64
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[(next.Add(1)-1)%uint64(len(targets))])
			pr.Out.Host = pr.In.Host
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: pki.ca.Pool(), ServerName: "kubernetes.default.svc", MinVersion: tls.VersionTLS12,
		}},
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
	}
}

// demoPKI is one CA for everything: API servers, the gateways and the
// controller's front-proxy client certificate.
type demoPKI struct {
	ca                         *devpki.CA
	apiServing, gatewayServing tls.Certificate
	files                      struct {
		ca, gatewayCert, gatewayKey, proxyClientCert, proxyClientKey string
	}
}

func newDemoPKI(dir string) (*demoPKI, error) {
	p := &demoPKI{}
	var err error
	if p.ca, err = devpki.NewCA("skewgate-demo-ca"); err != nil {
		return nil, err
	}
	apiServing, err := p.ca.Serving("kube-apiserver", "kubernetes.default.svc", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	gatewayServing, err := p.ca.Serving("skewgate", "127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	proxyClient, err := p.ca.Client(pkix.Name{CommonName: "front-proxy-client"})
	if err != nil {
		return nil, err
	}
	p.apiServing, p.gatewayServing = apiServing.TLSCertificate(), gatewayServing.TLSCertificate()
	if p.files.ca, err = p.ca.WriteFile(dir, "ca"); err != nil {
		return nil, err
	}
	if p.files.gatewayCert, p.files.gatewayKey, err = gatewayServing.WriteFiles(dir, "skewgate"); err != nil {
		return nil, err
	}
	if p.files.proxyClientCert, p.files.proxyClientKey, err = proxyClient.WriteFiles(dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *demoPKI) client() *http.Client {
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: p.ca.Pool(), MinVersion: tls.VersionTLS12},
			Protocols:       protocols,
		},
	}
}

// FixtureSource reads the documents captured from real API servers:
// <version without v>/{default,extra}/{apis,api}.json in fsys, which is
// fixtures.FS (embedded in the binary) unless the operator points elsewhere.
func FixtureSource(fsys fs.FS) Source {
	return func(version string, extra bool) (Documents, error) {
		profile := "default"
		if extra {
			profile = "extra"
		}
		base := path.Join(strings.TrimPrefix(version, "v"), profile)
		var docs Documents
		var err error
		if docs.APIs, err = fs.ReadFile(fsys, path.Join(base, "apis.json")); err != nil {
			return docs, fmt.Errorf("discovery fixtures: %w", err)
		}
		if docs.API, err = fs.ReadFile(fsys, path.Join(base, "api.json")); err != nil {
			return docs, fmt.Errorf("discovery fixtures: %w", err)
		}
		return docs, nil
	}
}
