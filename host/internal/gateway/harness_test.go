package gateway

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	"github.com/skewgate/skewgate/plugin/config"
)

// builtPlugin is the module `make build` writes; the tests run it, so what
// is tested is what ships.
const builtPlugin = "../../../build/skewgate.wasm"

var (
	pluginOnce  sync.Once
	pluginBytes []byte
	pluginErr   error
	// compilationCache keeps wazero's compiled plugin across the tests of one
	// run; TestMain removes it unless keptCompilationCache named it.
	compilationCache string
)

// keptCompilationCache names a compilation cache that outlives the run:
// skewbench counts the instructions of a request through the gateway in a
// simulator, where compiling the plugin would take minutes, after a run
// outside it has filled the cache.
const keptCompilationCache = "SKEWGATE_TEST_COMPILATION_CACHE"

func TestMain(m *testing.M) {
	if kept := os.Getenv(keptCompilationCache); kept != "" {
		compilationCache = kept
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "skewgate-gateway-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	compilationCache = filepath.Join(dir, "wazero")
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func pluginWasm(t testing.TB) []byte {
	t.Helper()
	pluginOnce.Do(func() { pluginBytes, pluginErr = os.ReadFile(builtPlugin) })
	if pluginErr != nil {
		t.Fatalf("the built plugin is missing: run `make build` first (%v)", pluginErr)
	}
	return pluginBytes
}

var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// harnessConfig describes one gateway test setup.
type harnessConfig struct {
	// servers is the snapshot; default discoverytest.SkewedControlPlane().
	servers []discoverytest.Server
	// identityMode is the plugin's identityMode; default passthrough.
	identityMode string
	// refusing lists clusters whose address accepts no connection.
	refusing []string
	// foreignCA lists clusters whose serving certificate another CA signed.
	foreignCA []string
	// handler answers on every backend; default echo.
	handler func(cluster string) http.Handler
	// plugin replaces the built plugin.
	plugin PluginHost
	// peerCA signs the backends' serving certificates; default a new CA.
	peerCA *devpki.CA
	// clientCA signs the client certificates the gateway verifies; default a
	// new CA.
	clientCA *devpki.CA
	// http1Backends makes the standard backends offer HTTP/1.1 only, as an
	// upstream an Envoy cluster reaches over HTTP/1.1.
	http1Backends bool
	// serving, when set, is a backend's TLS configuration; default a serving
	// certificate from peerCA (foreignCA's for the clusters it lists).
	serving func(cluster string) *tls.Config
	// listen, when set for a cluster, provides its address instead of a
	// standard backend.
	listen map[string]func(h *harness) string
	// options adjusts the gateway's options.
	options func(*Options)
}

// harness is a gateway running the built plugin in front of one TLS backend
// per snapshot server.
type harness struct {
	t        testing.TB
	peerCA   *devpki.CA
	clientCA *devpki.CA
	gw       *Gateway
	host     *wasmhost.Host
	front    *httptest.Server
	// addresses are the backends' addresses by cluster.
	addresses map[string]string
	// hits counts requests per backend cluster.
	mu   sync.Mutex
	hits map[string]int
}

func newHarness(t testing.TB, cfg harnessConfig) *harness {
	t.Helper()
	if cfg.servers == nil {
		cfg.servers = discoverytest.SkewedControlPlane()
	}
	if cfg.identityMode == "" {
		cfg.identityMode = "passthrough"
	}
	if cfg.handler == nil {
		cfg.handler = echoHandler
	}
	if cfg.peerCA == nil {
		cfg.peerCA = mustCA(t, "peer-ca")
	}
	if cfg.clientCA == nil {
		cfg.clientCA = mustCA(t, "client-ca")
	}
	h := &harness{t: t, peerCA: cfg.peerCA, clientCA: cfg.clientCA, hits: map[string]int{}}
	foreign := mustCA(t, "foreign-ca")

	addresses := map[string]string{}
	for _, s := range cfg.servers {
		cluster := s.Cluster
		switch {
		case slices.Contains(cfg.refusing, cluster):
			addresses[cluster] = refusingAddress(t)
		case cfg.listen[cluster] != nil:
			addresses[cluster] = cfg.listen[cluster](h)
		default:
			ca := h.peerCA
			if slices.Contains(cfg.foreignCA, cluster) {
				ca = foreign
			}
			serving := &tls.Config{Certificates: []tls.Certificate{mustServing(t, ca, DefaultPeerServerName, "127.0.0.1")}}
			if cfg.serving != nil {
				serving = cfg.serving(cluster)
			}
			// Ask for a client certificate, so that the gateway's choice to
			// present one or not shows.
			serving.ClientAuth = tls.RequestClientCert
			inner := cfg.handler(cluster)
			backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.mu.Lock()
				h.hits[cluster]++
				h.mu.Unlock()
				inner.ServeHTTP(w, r)
			}))
			backend.EnableHTTP2 = true
			if cfg.http1Backends {
				serving.NextProtos = []string{"http/1.1"}
			}
			backend.TLS = serving
			backend.Config.ErrorLog = slog.NewLogLogger(quietLogger.Handler(), slog.LevelError)
			backend.StartTLS()
			t.Cleanup(backend.Close)
			addresses[cluster] = backend.Listener.Addr().String()
		}
	}

	plugin := cfg.plugin
	if plugin == nil {
		host, err := wasmhost.New(context.Background(), pluginWasm(t), wasmhost.Options{
			Instances:           1,
			CompilationCacheDir: compilationCache,
			PluginName:          "skewgate",
			RootID:              "skewgate",
			VMID:                "skewgate",
			PluginConfiguration: pluginConfig(t, cfg.identityMode, cfg.servers),
			// The plugin's calls go through the gateway, as in serve.
			HTTPCalls: gatewayCaller{h},
			Logger:    quietLogger,
		})
		if err != nil {
			t.Fatalf("starting the plugin: %v", err)
		}
		t.Cleanup(func() { _ = host.Close(context.Background()) })
		h.host = host
		plugin = host
	}

	opts := Options{Plugin: plugin, PeerRootCAs: h.peerCA.Pool(), RetryAfterSeconds: 7, Logger: quietLogger, DialTimeout: 2 * time.Second}
	if cfg.identityMode == "front-proxy" {
		cert := mustClient(t, h.peerCA, pkix.Name{CommonName: frontProxyClientName})
		opts.ClientCertificate = &cert
	}
	if cfg.options != nil {
		cfg.options(&opts)
	}
	gw, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.CloseIdleConnections)
	h.gw = gw
	h.addresses = addresses
	h.apply(cfg.servers, addresses)

	front := httptest.NewUnstartedServer(gw)
	front.EnableHTTP2 = true
	front.TLS = ServerTLSConfig(mustServing(t, h.peerCA, "127.0.0.1"), h.clientCA.Pool())
	front.Config.ErrorLog = slog.NewLogLogger(quietLogger.Handler(), slog.LevelError)
	front.StartTLS()
	t.Cleanup(front.Close)
	h.front = front
	return h
}

// gatewayCaller hands the plugin's HTTP calls to the harness's gateway, which
// exists only after the plugin host.
type gatewayCaller struct{ h *harness }

func (c gatewayCaller) HasCluster(cluster string) bool { return c.h.gw.HasCluster(cluster) }

func (c gatewayCaller) HTTPCall(ctx context.Context, call wasmhost.HTTPCall) (*wasmhost.HTTPCallResponse, error) {
	return c.h.gw.HTTPCall(ctx, call)
}

// apply routes with a snapshot of servers.
func (h *harness) apply(servers []discoverytest.Server, addresses map[string]string) {
	h.t.Helper()
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSON(1, servers))
	if err != nil {
		h.t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := apply(h.gw, Routing{Index: ix, Addresses: addresses}); err != nil {
		h.t.Fatal(err)
	}
}

// client returns an HTTP client trusting the gateway, whose connections close
// when the test ends; clientCert, when not nil, is presented. http2 false
// forces HTTP/1.1.
func (h *harness) client(clientCert *tls.Certificate, http2 bool) *http.Client {
	c := h.unmanagedClient(clientCert, http2)
	h.t.Cleanup(c.CloseIdleConnections)
	return c
}

// unmanagedClient is client for callers that close its connections
// themselves, such as fuzz iterations sharing one harness.
func (h *harness) unmanagedClient(clientCert *tls.Certificate, http2 bool) *http.Client {
	cfg := &tls.Config{RootCAs: h.peerCA.Pool(), MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(http2)
	tr := &http.Transport{TLSClientConfig: cfg, Protocols: protocols, ForceAttemptHTTP2: http2}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func (h *harness) hitsOf(cluster string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[cluster]
}

func (h *harness) totalHits() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, v := range h.hits {
		n += v
	}
	return n
}

// frontProxyClientName is the front-proxy client certificate's CN.
const frontProxyClientName = "front-proxy-client"

// echoed is what echoHandler reports about the request it received.
type echoed struct {
	Cluster string              `json:"cluster"`
	Method  string              `json:"method"`
	URI     string              `json:"uri"`
	Host    string              `json:"host"`
	Proto   string              `json:"proto"`
	Headers map[string][]string `json:"headers"`
	// ClientCert is the CN of the client certificate the gateway presented,
	// "" for none.
	ClientCert string `json:"clientCert"`
	Body       string `json:"body"`
}

func echoOf(cluster string, r *http.Request) echoed {
	e := echoed{Cluster: cluster, Method: r.Method, URI: r.RequestURI, Host: r.Host, Proto: r.Proto, Headers: r.Header}
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		e.ClientCert = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	return e
}

// echoHandler answers with what it received, so tests see exactly what the
// gateway forwarded.
func echoHandler(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := echoOf(cluster, r)
		body, _ := io.ReadAll(r.Body)
		e.Body = string(body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Access-Control-Allow-Origin", "https://console.example")
		_ = json.NewEncoder(w).Encode(e)
	})
}

// pluginFunc stands in for the plugin where a test needs a verdict of its
// choosing.
type pluginFunc func(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome

func (f pluginFunc) HandleRequestHeaders(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
	return f(ctx, req)
}

// routeTo forwards every request unchanged to cluster; "" leaves it to the
// gateway's balancing.
func routeTo(cluster string) pluginFunc {
	return func(_ context.Context, req *wasmhost.Request) wasmhost.Outcome {
		headers := slices.Clone(req.Headers)
		if cluster != "" {
			headers = append(headers, [2]string{config.DefaultRoutingHeader, cluster})
		}
		return wasmhost.Outcome{Verdict: wasmhost.Forward, Headers: headers}
	}
}

// do sends a request and returns the response with its body read.
func do(t testing.TB, client *http.Client, method, url string, header http.Header, body io.Reader) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func decodeEcho(t testing.TB, body []byte) echoed {
	t.Helper()
	var e echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("backend answer %q: %v", body, err)
	}
	return e
}

func pluginConfig(t testing.TB, identityMode string, servers []discoverytest.Server) []byte {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"routingHeader":     config.DefaultRoutingHeader,
		"retryAfterSeconds": 7,
		"identityMode":      identityMode,
		"snapshot":          discoverytest.SnapshotJSON(1, servers),
	})
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func mustCA(t testing.TB, name string) *devpki.CA {
	t.Helper()
	ca, err := devpki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustServing(t testing.TB, ca *devpki.CA, hosts ...string) tls.Certificate {
	t.Helper()
	leaf, err := ca.Serving(hosts[0], hosts...)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.TLSCertificate()
}

func mustClient(t testing.TB, ca *devpki.CA, subject pkix.Name) tls.Certificate {
	t.Helper()
	leaf, err := ca.Client(subject)
	if err != nil {
		t.Fatal(err)
	}
	return leaf.TLSCertificate()
}

// refusingAddress is a loopback address nothing listens on.
func refusingAddress(t testing.TB) string {
	t.Helper()
	// A socket bound but never listening: connections to its port are
	// refused, and, unlike a closed listener's port, the port cannot be
	// handed to a backend started after it.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	bound, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(bound.(*syscall.SockaddrInet4).Port))
}

// withHealth returns servers with the named clusters marked unhealthy.
func withHealth(servers []discoverytest.Server, unhealthy ...string) []discoverytest.Server {
	out := make([]discoverytest.Server, len(servers))
	for i, s := range servers {
		s.Healthy = !slices.Contains(unhealthy, s.Cluster)
		out[i] = s
	}
	return out
}

// apply makes rt current, as serve does once the plugin accepted rt's
// configuration.
func apply(g *Gateway, rt Routing) error {
	staged, err := g.Stage(rt)
	if err != nil {
		return err
	}
	staged.Commit()
	return nil
}

// currentIndex is the index of the current routing, nil before the first one.
func currentIndex(g *Gateway) *discovery.Index {
	if s := g.state.Load(); s != nil {
		return s.index
	}
	return nil
}
