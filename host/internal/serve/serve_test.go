package serve

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
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/devpki"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

const builtPlugin = "../../../build/skewgate.wasm"

// The identity modes as --identity-mode takes them.
const (
	frontProxyMode  = string(pluginconfig.IdentityFrontProxy)
	passthroughMode = string(pluginconfig.IdentityPassthrough)
)

// apiServer is a minimal kube-apiserver: health, version, its own discovery
// and resource requests, which it answers with its name.
type apiServer struct {
	spec  discoverytest.Server
	ready atomic.Bool
	// release holds requests to /slow until it is closed; slowEntered counts
	// them.
	release     chan struct{}
	slowEntered atomic.Int32
	// cluster is the name the controller gives the server.
	cluster string
	srv     *httptest.Server
	// rotated, once set, is the serving certificate of new connections.
	rotated atomic.Pointer[tls.Certificate]
	mu      sync.Mutex
	// clientCNs counts requests by their client certificate's common name.
	clientCNs map[string]int
	// asserted counts requests by "<client certificate CN> as <X-Remote-User>".
	asserted map[string]int
	// discoveryReads counts requests for /apis and /api by Authorization
	// header; "Bearer denied" is answered 403.
	discoveryReads map[string]int
}

func (s *apiServer) count(m map[string]int, key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return m[key]
}

func (s *apiServer) requestsFrom(clientCN string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.clientCNs[clientCN]
}

func (s *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cn := r.TLS.PeerCertificates[0].Subject.CommonName
		s.clientCNs[cn]++
		if user := r.Header.Get("X-Remote-User"); user != "" {
			s.asserted[cn+" as "+user]++
		}
	}
	authorization := r.Header.Get("Authorization")
	if (r.URL.Path == "/apis" || r.URL.Path == "/api") && authorization != "" {
		s.discoveryReads[authorization]++
	}
	s.mu.Unlock()
	if authorization == "Bearer denied" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"forbidden: User \"denied\" cannot get path \"`+r.URL.Path+`\"","reason":"Forbidden","code":403}`)
		return
	}
	switch r.URL.Path {
	case "/apis/authentication.k8s.io/v1/selfsubjectreviews":
		// One CA signs everything, so the x509 authenticator takes any
		// client certificate, the front-proxy one included, as its CN.
		if r.Header.Get("X-Remote-User") != "" || r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			http.Error(w, "unexpected review", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"kind":"SelfSubjectReview","apiVersion":"authentication.k8s.io/v1","status":{"userInfo":{"username":%q,"groups":["system:authenticated"]}}}`,
			r.TLS.PeerCertificates[0].Subject.CommonName)
	case "/readyz":
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	case "/version":
		fmt.Fprintf(w, `{"gitVersion":%q}`, s.spec.Version)
	case "/apis", "/api":
		w.Header().Set("Content-Type", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
		w.Write(discoverytest.GroupListJSON(s.spec.Groups, r.URL.Path == "/api"))
	case "/slow":
		s.slowEntered.Add(1)
		<-s.release
		io.WriteString(w, s.spec.Cluster)
	default:
		w.Header().Set("X-Served-By", s.spec.ID)
		io.WriteString(w, "{}")
	}
}

type fixture struct {
	// ca signs every certificate.
	ca *devpki.CA
	// dir holds the configuration's files.
	dir     string
	servers []*apiServer
	cfg     Config
	release func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if _, err := os.Stat(builtPlugin); err != nil {
		t.Fatalf("the built plugin is missing: run `make build` first (%v)", err)
	}
	// A node-local Server limits the process's Go memory and sets the
	// collector's target once ready; the tests after it run without either.
	memoryLimit := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(memoryLimit) })
	gcPercent := debug.SetGCPercent(100)
	debug.SetGCPercent(gcPercent)
	t.Cleanup(func() { debug.SetGCPercent(gcPercent) })
	dir := t.TempDir()
	ca, err := devpki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteFile(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	apiCert := mustLeaf(t)(ca.Serving("kube-apiserver", "kubernetes.default.svc", "127.0.0.1"))
	release := make(chan struct{})
	var once sync.Once
	f := &fixture{ca: ca, dir: dir, release: func() { once.Do(func() { close(release) }) }}
	gatewayCert, gatewayKey := f.writeLeaf(t, mustLeaf(t)(ca.Serving("skewgate", "127.0.0.1")), "gateway")
	proxyCert, proxyKey := f.writeLeaf(t, mustLeaf(t)(ca.Client(pkix.Name{CommonName: "front-proxy-client"})), "proxy")
	t.Cleanup(f.release)
	var urls []string
	for _, spec := range discoverytest.SkewedControlPlane() {
		s := &apiServer{spec: spec, release: release, clientCNs: map[string]int{}, asserted: map[string]int{}, discoveryReads: map[string]int{}}
		s.ready.Store(true)
		srv := httptest.NewUnstartedServer(s)
		srv.TLS = &tls.Config{
			Certificates:   []tls.Certificate{apiCert.TLSCertificate()},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.rotated.Load(), nil },
			// Client certificates are recorded, not verified.
			ClientAuth: tls.RequestClientCert,
		}
		srv.EnableHTTP2 = true
		srv.StartTLS()
		t.Cleanup(srv.Close)
		s.cluster = controller.ClusterName(srv.Listener.Addr().String())
		s.srv = srv
		f.servers = append(f.servers, s)
		urls = append(urls, srv.URL)
	}
	f.cfg = NewConfig()
	f.cfg.BindAddress = "127.0.0.1"
	f.cfg.SecurePort = freePort(t)
	f.cfg.TLSCertFile = gatewayCert
	f.cfg.TLSPrivateKeyFile = gatewayKey
	f.cfg.PeerCAFile = caFile
	f.cfg.ProxyClientCertFile = proxyCert
	f.cfg.ProxyClientKeyFile = proxyKey
	f.cfg.APIServers = urls
	f.cfg.MetricsBindAddress = "127.0.0.1:0"
	f.cfg.WasmPath = builtPlugin
	f.cfg.EnvoyECDSFile = filepath.Join(dir, "skewgate.yaml")
	f.cfg.PollInterval = 100 * time.Millisecond
	f.cfg.Instances = 1
	f.cfg.CompilationCacheDir = filepath.Join(dir, "wazero")
	f.cfg.ShutdownTimeout = 10 * time.Second
	// The tests read /debug/snapshot and /debug/requests.
	f.cfg.DebugHandlers = true
	f.cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return f
}

// writeLeaf writes leaf as the certificate and key files named name,
// replacing what they held: "gateway" are --tls-cert-file and
// --tls-private-key-file, "proxy" --proxy-client-cert-file and
// --proxy-client-key-file.
func (f *fixture) writeLeaf(t *testing.T, leaf *devpki.Leaf, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := leaf.WriteFiles(f.dir, name)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// serve runs a Server for f.cfg until cancel is called; served then
// receives Serve's result.
func (f *fixture) serve(t *testing.T) (s *Server, cancel context.CancelFunc, served <-chan error) {
	t.Helper()
	s, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- s.Serve(ctx) }()
	return s, cancel, result
}

// startServer serves f.cfg until the test ends and returns once the server
// is ready; the test fails if Serve then returns an error.
func (f *fixture) startServer(t *testing.T) *Server {
	t.Helper()
	s, cancel, served := f.serve(t)
	t.Cleanup(func() {
		cancel()
		// Requests the API servers hold would keep the gateway draining.
		f.release()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	eventually(t, "ready", s.Ready)
	return s
}

// gatewayTransport trusts the CA of the gateway's serving certificate.
func (f *fixture) gatewayTransport() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool()}}
}

// gatewayClient is a client of the gateway.
func (f *fixture) gatewayClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: f.gatewayTransport()}
}

// slowRequest sends GET /slow, which the API servers hold until f.release,
// to gateway with client and returns once it has arrived; the channel then
// receives its status, 0 for no response.
func (f *fixture) slowRequest(t *testing.T, client *http.Client, gateway string) <-chan int {
	t.Helper()
	slow := make(chan int, 1)
	go func() {
		resp, err := client.Get(gateway + "/slow")
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	eventually(t, "the slow request to arrive", func() bool {
		n := int32(0)
		for _, srv := range f.servers {
			n += srv.slowEntered.Load()
		}
		return n == 1
	})
	return slow
}

func mustLeaf(t *testing.T) func(*devpki.Leaf, error) *devpki.Leaf {
	return func(l *devpki.Leaf, err error) *devpki.Leaf {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// eventuallyMetric waits until the operator listener's /metrics holds want.
func eventuallyMetric(t *testing.T, s *Server, want string) {
	t.Helper()
	plain := &http.Client{Timeout: 10 * time.Second}
	eventually(t, "/metrics with "+want, func() bool {
		_, _, metrics := get(t, plain, "http://"+s.MetricsAddr().String()+"/metrics")
		return strings.Contains(metrics, want)
	})
}

func get(t *testing.T, client *http.Client, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

func TestServeFollowsSnapshotsAndDrainsOnShutdown(t *testing.T) {
	f := newFixture(t)
	s, cancel, served := f.serve(t)
	defer cancel()

	ops := "http://" + s.MetricsAddr().String()
	plain := &http.Client{Timeout: 10 * time.Second}
	client := f.gatewayClient()
	gateway := "https://" + s.GatewayAddr().String()

	if code, _, _ := get(t, plain, ops+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz %d", code)
	}
	eventually(t, "/readyz", func() bool { code, _, _ := get(t, plain, ops+"/readyz"); return code == http.StatusOK })

	// Only kube-c serves leasecandidates.
	code, header, _ := get(t, client, gateway+"/apis/coordination.k8s.io/v1alpha2/namespaces/x/leasecandidates")
	if code != http.StatusOK || header.Get("X-Served-By") != f.servers[2].spec.ID {
		t.Errorf("leasecandidates: %d from %q, want 200 from %s", code, header.Get("X-Served-By"), f.servers[2].spec.ID)
	}

	_, _, raw := get(t, plain, ops+"/debug/snapshot")
	snap, err := discovery.ParseSnapshot([]byte(raw))
	if err != nil || len(snap.Servers) != 3 {
		t.Fatalf("/debug/snapshot: %v", err)
	}
	ecds, err := os.ReadFile(f.cfg.EnvoyECDSFile)
	wasmPath, _ := filepath.Abs(builtPlugin)
	if err != nil || !strings.Contains(string(ecds), fmt.Sprintf("version_info: '%d'", snap.Generation)) ||
		!strings.Contains(string(ecds), "filename: "+wasmPath+"\n") {
		t.Errorf("ECDS file (%v):\n%s", err, ecds)
	}
	// The gateway counts a request once its handler returns, which can be just
	// after the client has the response.
	for _, want := range []string{"skewgate_gateway_requests_total{", "skewgate_wasm_configurations_applied_total", "skewgate_controller_snapshot_generation", "skewgate_ready 1", "skewgate_ecds_writes_total 1"} {
		eventuallyMetric(t, s, want)
	}
	if _, _, page := get(t, plain, ops+"/"); !strings.Contains(page, `class="skewed"`) {
		t.Error("status page shows no skewed API")
	} else if !strings.Contains(page, "<td>--apiserver</td></tr>") || !strings.Contains(page, "<h2>Membership</h2>") {
		t.Error("status page does not say where the API servers come from")
	}

	// kube-c stops being ready: the next snapshot marks it unhealthy and the
	// resource only it serves is answered 503, not sent elsewhere.
	first := snap.Generation
	f.servers[2].ready.Store(false)
	eventually(t, "a snapshot with kube-c unhealthy", func() bool {
		_, _, raw := get(t, plain, ops+"/debug/snapshot")
		snap, err := discovery.ParseSnapshot([]byte(raw))
		if err != nil || snap.Generation <= first {
			return false
		}
		for _, srv := range snap.Servers {
			if srv.Cluster == f.servers[2].cluster {
				return !srv.Healthy
			}
		}
		return false
	})
	code, header, body := get(t, client, gateway+"/apis/coordination.k8s.io/v1alpha2/namespaces/x/leasecandidates")
	var status struct{ Reason string }
	if code != http.StatusServiceUnavailable || header.Get("Retry-After") == "" || json.Unmarshal([]byte(body), &status) != nil || status.Reason != "ServiceUnavailable" {
		t.Errorf("with kube-c down: %d %q %s", code, header.Get("Retry-After"), body)
	}

	// Shutdown waits for the request in flight.
	slow := f.slowRequest(t, client, gateway)
	cancel()
	eventually(t, "the gateway to stop accepting connections", func() bool {
		conn, err := net.Dial("tcp", s.GatewayAddr().String())
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	f.release()
	if code := <-slow; code != http.StatusOK {
		t.Errorf("in-flight request during shutdown: status %d, want 200", code)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestConfigMistakesNameTheFlag(t *testing.T) {
	base := NewConfig()
	base.TLSCertFile, base.TLSPrivateKeyFile, base.PeerCAFile = "c", "k", "ca"
	base.APIServers, base.Kubeconfig, base.WasmPath = []string{"https://10.0.0.1:6443"}, "kubeconfig", "x.wasm"
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"no serving certificate", func(c *Config) { c.TLSCertFile = "" }, "--tls-cert-file"},
		{"no peer CA", func(c *Config) { c.PeerCAFile = "" }, "--peer-ca-file"},
		{"no API servers", func(c *Config) { c.APIServers, c.Kubeconfig = nil, "" }, "--apiserver"},
		{"no credentials", func(c *Config) { c.Kubeconfig = "" }, "no credentials for the API servers: give --proxy-client-cert-file and --proxy-client-key-file, or --kubeconfig"},
		{"plain-http API server", func(c *Config) { c.APIServers = []string{"http://10.0.0.1:6443"} }, `--apiserver "http://10.0.0.1:6443": must be an https:// URL`},
		{"API server host that is no DNS name", func(c *Config) { c.APIServers = []string{"https://kube_a:6443"} }, `--apiserver "https://kube_a:6443": host "kube_a" is neither an IP address nor a DNS name`},
		{"API server listed twice", func(c *Config) { c.APIServers = append(c.APIServers, "https://10.0.0.1:6443/") }, `--apiserver "https://10.0.0.1:6443/": listed twice`},
		{"local API server with a path", func(c *Config) { c.LocalAPIServer, c.BindAddress = "https://10.0.0.2:6443/api", "127.0.0.1" },
			`--local-apiserver "https://10.0.0.2:6443/api": must be https://host:port with nothing after the port`},
		{"negative retry after", func(c *Config) { c.RetryAfterSeconds = -1 }, "--retry-after-seconds -1: must be an integer from 1 to 3600"},
		{"retry after over an hour", func(c *Config) { c.RetryAfterSeconds = 3601 }, "--retry-after-seconds 3601: must be an integer from 1 to 3600"},
		{"upper-case routing header", func(c *Config) { c.RoutingHeader = "X-Upper" }, `--routing-header "X-Upper": not a lower-case HTTP header name`},
		{"identity header as routing header", func(c *Config) { c.RoutingHeader = "x-remote-user" }, `--routing-header "x-remote-user": reserved by the plugin`},
		{"misspelt identity mode", func(c *Config) { c.IdentityMode = "frontproxy" }, `--identity-mode "frontproxy": must be "passthrough" or "front-proxy"`},
		{"front-proxy without proxy certificate", func(c *Config) { c.IdentityMode = frontProxyMode; c.ClientCAFile = "x" }, "--proxy-client-cert-file"},
		{"front-proxy without client CA", func(c *Config) {
			c.IdentityMode = frontProxyMode
			c.ProxyClientCertFile, c.ProxyClientKeyFile = "p", "k"
		}, "--client-ca-file"},
		{"unknown identity mode", func(c *Config) { c.IdentityMode = "trust-me" }, "--identity-mode"},
		{"half a proxy key pair", func(c *Config) { c.ProxyClientCertFile = "p" }, "--proxy-client-key-file"},
		{"missing module", func(c *Config) {}, "--wasm: open x.wasm"},
		{"node-local on a public address", func(c *Config) { c.LocalAPIServer, c.BindAddress = "https://10.0.0.1:6443", "0.0.0.0" }, "--bind-address 0.0.0.0: node-local mode"},
		{"node-local with a host name", func(c *Config) { c.LocalAPIServer, c.BindAddress = "https://10.0.0.1:6443", "localhost" }, "--bind-address localhost: node-local mode"},
		{"metrics address without a port", func(c *Config) { c.MetricsBindAddress = "127.0.0.1" }, "--metrics-bind-address"},
		{"negative poll interval", func(c *Config) { c.PollInterval = -time.Second }, "--poll-interval"},
		{"negative readiness interval", func(c *Config) { c.ReadinessInterval = -time.Second }, "--readiness-interval"},
		{"negative grace period", func(c *Config) { c.GracePeriod = -time.Second }, "--grace-period"},
		{"unknown membership", func(c *Config) { c.Membership = "static" }, `--apiserver-membership "static": must be cluster or listed`},
		{"listed membership without a list", func(c *Config) { c.Membership, c.APIServers = "listed", nil },
			`--apiserver-membership "listed": no server is listed to be the members`},
		{"fractional authorization cache", func(c *Config) { c.DiscoveryAuthorizationCache = 1500 * time.Millisecond }, "--discovery-authorization-cache 1.5s: must be whole seconds"},
		{"authorization cache too long", func(c *Config) { c.DiscoveryAuthorizationCache = 10 * time.Minute }, "--discovery-authorization-cache 10m0s: must be whole seconds, at most 5m0s"},
		{"negative request timeout", func(c *Config) { c.RequestTimeout = -time.Second }, "--request-timeout"},
		{"negative plugin call timeout", func(c *Config) { c.PluginCallTimeout = -time.Second }, "--plugin-call-timeout"},
		{"negative shutdown delay", func(c *Config) { c.ShutdownDelay = -time.Second }, "--shutdown-delay-duration"},
		{"negative shutdown timeout", func(c *Config) { c.ShutdownTimeout = -time.Second }, "--shutdown-timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.modify(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
