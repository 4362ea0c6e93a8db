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
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// builtPlugin is the module `make build` writes; the tests run it, so what
// is tested is what ships.
const builtPlugin = "../../../build/skewgate.wasm"

var (
	pluginOnce  sync.Once
	pluginBytes []byte
	pluginErr   error
	// compilationCache keeps wazero's compiled plugin across the tests of one
	// run; TestMain removes it.
	compilationCache string
)

func TestMain(m *testing.M) {
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
	h := &harness{t: t, peerCA: mustCA(t, "peer-ca"), clientCA: mustCA(t, "client-ca"), hits: map[string]int{}}
	foreign := mustCA(t, "foreign-ca")

	addresses := map[string]string{}
	for _, s := range cfg.servers {
		cluster := s.Cluster
		switch {
		case slices.Contains(cfg.refusing, cluster):
			addresses[cluster] = refusingAddress(t)
		default:
			ca := h.peerCA
			if slices.Contains(cfg.foreignCA, cluster) {
				ca = foreign
			}
			inner := cfg.handler(cluster)
			backend := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				h.mu.Lock()
				h.hits[cluster]++
				h.mu.Unlock()
				inner.ServeHTTP(w, r)
			}))
			backend.EnableHTTP2 = true
			backend.TLS = &tls.Config{Certificates: []tls.Certificate{mustServing(t, ca, DefaultPeerServerName, "127.0.0.1")}}
			backend.Config.ErrorLog = slog.NewLogLogger(quietLogger.Handler(), slog.LevelError)
			backend.StartTLS()
			t.Cleanup(backend.Close)
			addresses[cluster] = backend.Listener.Addr().String()
		}
	}

	config := pluginConfig(t, cfg.identityMode, cfg.servers)
	host, err := wasmhost.New(context.Background(), pluginWasm(t), wasmhost.Options{
		Instances:           1,
		CompilationCacheDir: compilationCache,
		PluginName:          "skewgate",
		RootID:              "skewgate",
		VMID:                "skewgate",
		PluginConfiguration: config,
		Logger:              quietLogger,
	})
	if err != nil {
		t.Fatalf("starting the plugin: %v", err)
	}
	t.Cleanup(func() { _ = host.Close(context.Background()) })
	h.host = host

	opts := Options{Plugin: host, PeerRootCAs: h.peerCA.Pool(), RetryAfterSeconds: 7, Logger: quietLogger, DialTimeout: 2 * time.Second}
	if cfg.identityMode == "front-proxy" {
		proxyClient, err := h.peerCA.Client(pkix.Name{CommonName: "front-proxy-client"})
		if err != nil {
			t.Fatal(err)
		}
		cert := proxyClient.TLSCertificate()
		opts.ClientCertificate = &cert
	}
	gw, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.CloseIdleConnections)
	h.gw = gw
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
	if err := h.gw.Apply(Routing{Index: ix, Addresses: addresses}, nil); err != nil {
		h.t.Fatal(err)
	}
}

// client returns an HTTP client trusting the gateway; clientCert, when not
// nil, is presented. http2 false forces HTTP/1.1.
func (h *harness) client(clientCert *tls.Certificate, http2 bool) *http.Client {
	cfg := &tls.Config{RootCAs: h.peerCA.Pool(), MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(http2)
	tr := &http.Transport{TLSClientConfig: cfg, Protocols: protocols, ForceAttemptHTTP2: http2}
	h.t.Cleanup(tr.CloseIdleConnections)
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

// echoed is what echoHandler reports about the request it received.
type echoed struct {
	Cluster string              `json:"cluster"`
	Method  string              `json:"method"`
	URI     string              `json:"uri"`
	Host    string              `json:"host"`
	Proto   string              `json:"proto"`
	Headers map[string][]string `json:"headers"`
}

// echoHandler answers with what it received, so tests see exactly what the
// gateway forwarded.
func echoHandler(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Access-Control-Allow-Origin", "https://console.example")
		_ = json.NewEncoder(w).Encode(echoed{cluster, r.Method, r.RequestURI, r.Host, r.Proto, r.Header})
	})
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
		"routingHeader":     DefaultRoutingHeader,
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := l.Addr().String()
	l.Close()
	return address
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
