// Package serve runs skewgate's standalone gateway: the controller polls the
// API servers, every new snapshot becomes the plugin configuration of the
// wazero-hosted VMs (and, optionally, an Envoy ECDS file and the xDS
// management server's resource), and the gateway proxies client traffic
// through the plugin. A second, plain-HTTP listener
// serves /metrics, /healthz, /readyz, /debug/snapshot, /debug/requests (the
// shapes of the requests received), the status page and, with profiling on,
// /debug/pprof/.
package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/certfile"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/gateway"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	"github.com/skewgate/skewgate/host/internal/xds"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

// Identity modes (--identity-mode), as the plugin configuration defines them.
const (
	IdentityPassthrough = string(pluginconfig.IdentityPassthrough)
	IdentityFrontProxy  = string(pluginconfig.IdentityFrontProxy)
)

// Defaults for Config fields left zero.
const (
	DefaultBindAddress = "0.0.0.0"
	// DefaultNodeLocalBindAddress is where node-local mode listens: only the
	// node's own components are its clients.
	DefaultNodeLocalBindAddress = "127.0.0.1"
	DefaultSecurePort           = 6443
	DefaultMetricsBindAddress   = "127.0.0.1:9090"
	DefaultShutdownTimeout      = 30 * time.Second
	// DefaultDiscoveryAuthorizationCache is how long an API server's answer
	// to whether a credential may read discovery is reused: as long as
	// kube-apiserver caches a token's successful authentication.
	DefaultDiscoveryAuthorizationCache = pluginconfig.DefaultDiscoveryAuthorizationCacheSeconds * time.Second
	// MaxDiscoveryAuthorizationCache is the longest the plugin accepts.
	MaxDiscoveryAuthorizationCache = pluginconfig.MaxDiscoveryAuthorizationCacheSeconds * time.Second
)

// maxHeaderBytes bounds a request's header block, Envoy's default
// max_request_headers_kb (net/http adds 4 KiB of slack for the request line).
const maxHeaderBytes = 60 << 10

// Config is everything `skewgate serve` is told on its command line.
type Config struct {
	BindAddress string
	SecurePort  int
	// TLSCertFile and TLSPrivateKeyFile are the gateway's serving certificate.
	// These and the other certificate, key and CA files are read again every
	// certfile.DefaultInterval and their changes used without a restart.
	TLSCertFile, TLSPrivateKeyFile string
	// ClientCAFile verifies client certificates when clients present one.
	ClientCAFile string
	// PeerCAFile verifies the API servers; PeerServerName is the name checked.
	PeerCAFile, PeerServerName string
	// ProxyClientCertFile and ProxyClientKeyFile are the front-proxy client
	// certificate: the controller always identifies with it; the gateway
	// presents it only in front-proxy identity mode.
	ProxyClientCertFile, ProxyClientKeyFile string
	// Kubeconfig, when set, lets the controller discover API servers from the
	// cluster and, without a proxy client certificate, authenticate with it.
	Kubeconfig string
	// APIServers are static API server URLs (https://host:port).
	APIServers []string
	// LocalAPIServer, when set, is the node's own API server (node-local
	// mode): it takes every request it can serve while it is healthy.
	LocalAPIServer string
	IdentityMode   string
	// MetricsBindAddress is host:port for the plain-HTTP metrics and status
	// listener.
	MetricsBindAddress string
	// Profiling serves Go's profiles under /debug/pprof/ on the metrics
	// listener.
	Profiling bool
	// EnvoyECDSFile, when set, receives the plugin configuration of every
	// accepted snapshot as an Envoy ECDS resource, naming EnvoyWasmPath.
	EnvoyECDSFile, EnvoyWasmPath string
	// XDSBindAddress, when set, is host:port of the xDS management server
	// that serves the same resource to any number of Envoys over gRPC. It
	// needs EnvoyWasmPath, the module's path on the Envoy hosts.
	XDSBindAddress string
	// XDSTLSCertFile and XDSTLSPrivateKeyFile are its serving certificate;
	// default the gateway's. XDSClientCAFile, required, must have signed the
	// certificate every Envoy presents.
	XDSTLSCertFile, XDSTLSPrivateKeyFile, XDSClientCAFile string
	// XDSMaxStreams and XDSMaxStreamsPerClient bound the streams the
	// management server holds open, in all and per client certificate; zero
	// values take xds.DefaultMaxStreams and xds.DefaultMaxStreamsPerClient.
	XDSMaxStreams, XDSMaxStreamsPerClient int
	// EnvoyWasmSchemaVersion is the schema version the module the Envoys
	// load announces, when it is not the one WasmPath names
	// (checkModuleSchemas).
	EnvoyWasmSchemaVersion string
	// WasmPath is the plugin module.
	WasmPath string
	// RoutingHeader and RetryAfterSeconds go into the plugin configuration and
	// the gateway alike; zero values take the plugin's defaults.
	RoutingHeader     string
	RetryAfterSeconds int
	// DiscoveryAuthorizationCache is how long the plugin reuses an API
	// server's answer to whether a credential may read merged discovery, in
	// whole seconds up to MaxDiscoveryAuthorizationCache. Zero asks on every
	// request; the flag's default is DefaultDiscoveryAuthorizationCache.
	DiscoveryAuthorizationCache time.Duration
	// SchemaSkewRouting says which requests for a resource whose schemas
	// differ between the servers go only to the servers whose schema has
	// every field ("reads-and-writes" or "writes"); "" takes the plugin's
	// default.
	SchemaSkewRouting string
	PollInterval      time.Duration
	// ReadinessInterval is how often the API servers' /readyz is probed
	// between polls; default controller.DefaultReadinessInterval.
	ReadinessInterval time.Duration
	GracePeriod       time.Duration
	// PluginCallTimeout, when set, bounds one plugin callback: an overrunning
	// VM is closed and replaced. Zero leaves callbacks unbounded, as Envoy
	// does: interrupting compiled guest code makes every call 1.4–1.9 times as
	// costly.
	PluginCallTimeout time.Duration
	// RequestTimeout bounds a request that is not long-running
	// (kube-apiserver's --request-timeout), and every request's wait for its
	// buffered body; default gateway.DefaultRequestTimeout. A request waits
	// for a plugin VM at most a quarter of it, as kube-apiserver's priority
	// and fairness queues a request at most a quarter of its timeout.
	RequestTimeout time.Duration
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the requests
	// that are not long-running proxied at once (kube-apiserver's flags of
	// the same names); zero: no limit. The flags default to
	// gateway.DefaultMaxRequestsInFlight and
	// gateway.DefaultMaxMutatingRequestsInFlight.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// MaxBufferedRequestBytes and MaxBufferedRequestBytesPerClient bound the
	// request bodies held for retries, in all and per source address; default
	// gateway.DefaultMaxBufferedRequestBytes and
	// gateway.DefaultMaxBufferedRequestBytesPerClient.
	MaxBufferedRequestBytes, MaxBufferedRequestBytesPerClient int64
	// Instances is the number of plugin VMs; default GOMAXPROCS, and 1 in
	// node-local mode, whose clients are one node's control-plane components.
	Instances           int
	CompilationCacheDir string
	// ShutdownDelay is how long both listeners keep serving, with /readyz
	// failing, once shutdown begins, so that load balancers stop sending
	// before the gateway stops accepting (kube-apiserver's
	// --shutdown-delay-duration). ShutdownTimeout then bounds the drain.
	ShutdownDelay   time.Duration
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
}

// Server is a configured gateway; Listen binds it, Serve runs it.
type Server struct {
	cfg     Config
	log     *slog.Logger
	wasm    []byte
	ctrl    *controller.Controller
	gw      *gateway.Gateway
	plugins *pluginSlot
	// requests counts the shapes of the requests the gateway receives,
	// served at /debug/requests for `skewgate check --from-skewgate`.
	requests *gateway.RequestLog

	certificates *certfile.Watcher

	gatewayServer, metricsServer     *http.Server
	gatewayListener, metricsListener net.Listener
	// xds and xdsListener are nil without Config.XDSBindAddress.
	xds         *xds.Server
	xdsListener net.Listener

	applied atomic.Pointer[appliedSnapshot]
	ready   atomic.Bool
	// stopping is set once shutdown begins: /readyz fails from then on.
	stopping atomic.Bool
	counts   counters
}

// appliedSnapshot is a snapshot the plugin accepted.
type appliedSnapshot struct {
	raw        []byte
	snap       *discovery.Snapshot
	addresses  map[string]string
	acceptedAt time.Time
}

type counters struct {
	ecdsWrites, ecdsFailures, xdsFailures atomic.Uint64
}

// New checks cfg, reads every file it names and prepares the controller and
// the gateway. Nothing listens yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	// client-go and apimachinery log through klog, which is process-wide:
	// their messages join the structured log instead of stderr.
	klog.SetSlogLogger(cfg.Logger.With("component", "client-go"))
	s := &Server{cfg: cfg, log: cfg.Logger, plugins: &pluginSlot{}}
	if !isLoopback(cfg.MetricsBindAddress) {
		s.log.Warn("--metrics-bind-address is not a loopback address: /metrics, /debug/snapshot (every API server's discovery) and the status page are served there in plain HTTP without authentication to anyone who can reach it",
			"metrics_bind_address", cfg.MetricsBindAddress)
	}
	if s.wasm, err = os.ReadFile(cfg.WasmPath); err != nil {
		return nil, fmt.Errorf("plugin module: %w (run `make build` to build it)", err)
	}
	if err := s.checkModuleSchemas(); err != nil {
		return nil, err
	}
	// Every certificate, key and CA file is followed: new handshakes use new
	// material, connections in flight keep theirs.
	s.certificates = certfile.NewWatcher(cfg.Logger.With("component", "certificates"), certfile.DefaultInterval)
	peerCA, err := s.certificates.CABundle("--peer-ca-file", cfg.PeerCAFile)
	if err != nil {
		return nil, err
	}
	serving, err := s.certificates.KeyPair("--tls-cert-file/--tls-private-key-file", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
	if err != nil {
		return nil, err
	}
	var clientCA *certfile.CABundle
	if cfg.ClientCAFile != "" {
		if clientCA, err = s.certificates.CABundle("--client-ca-file", cfg.ClientCAFile); err != nil {
			return nil, err
		}
	}
	var proxyClient *certfile.KeyPair
	if cfg.ProxyClientCertFile != "" {
		if proxyClient, err = s.certificates.KeyPair("--proxy-client-cert-file/--proxy-client-key-file", cfg.ProxyClientCertFile, cfg.ProxyClientKeyFile); err != nil {
			return nil, err
		}
	}
	s.requests = gateway.NewRequestLog(gateway.DefaultRequestShapes)
	gwOpts := gateway.Options{
		Plugin:            s.plugins,
		Requests:          s.requests,
		PeerRootCAs:       peerCA.Pool(),
		PeerServerName:    cfg.PeerServerName,
		RoutingHeader:     cfg.RoutingHeader,
		RetryAfterSeconds: cfg.RetryAfterSeconds,
		RequestTimeout:    cfg.RequestTimeout,
		Logger:            cfg.Logger,

		MaxRequestsInFlight:              cfg.MaxRequestsInFlight,
		MaxMutatingRequestsInFlight:      cfg.MaxMutatingRequestsInFlight,
		MaxBufferedRequestBytes:          cfg.MaxBufferedRequestBytes,
		MaxBufferedRequestBytesPerClient: cfg.MaxBufferedRequestBytesPerClient,
	}
	if cfg.IdentityMode == IdentityFrontProxy {
		gwOpts.ClientCertificate = proxyClient.Certificate()
	}
	if s.gw, err = gateway.New(gwOpts); err != nil {
		return nil, err
	}
	if cfg.XDSBindAddress != "" {
		if s.xds, err = s.newXDS(serving); err != nil {
			return nil, err
		}
	}
	peerCA.OnChange(func() { s.gw.SetPeerRootCAs(peerCA.Pool()) })
	if cfg.IdentityMode == IdentityFrontProxy {
		proxyClient.OnChange(func() { s.gw.SetClientCertificate(proxyClient.Certificate()) })
	}
	ctrlOpts := controller.Options{
		StaticServers:         cfg.APIServers,
		LocalServer:           cfg.LocalAPIServer,
		PeerCA:                peerCA,
		ServerName:            cfg.PeerServerName,
		FrontProxyCertificate: proxyClient,
		PollInterval:          cfg.PollInterval,
		ReadinessInterval:     cfg.ReadinessInterval,
		GracePeriod:           cfg.GracePeriod,
		// Only front-proxy mode presents the certificate for clients.
		CheckFrontProxyCertificate: cfg.IdentityMode == IdentityFrontProxy,
		OnSnapshot:                 s.onSnapshot,
		Logger:                     cfg.Logger.With("component", "controller"),
	}
	if cfg.Kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		ctrlOpts.RESTConfig = rc
	}
	if s.ctrl, err = controller.New(ctrlOpts); err != nil {
		return nil, err
	}
	s.gatewayServer = &http.Server{
		Handler:           s.gw,
		TLSConfig:         serverTLSConfig(serving, clientCA),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		// What one HTTP/2 connection can make the gateway hold:
		// kube-apiserver's 100 streams and 256 KiB window per stream, and
		// Go's 1 MiB window for the whole connection, so that a client's
		// unread request data never exceeds 1 MiB per connection.
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          100,
			MaxReceiveBufferPerStream:     256 << 10,
			MaxReceiveBufferPerConnection: 1 << 20,
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelInfo),
	}
	// The operator endpoints answer small GETs at once: a connection that
	// takes longer, or idles between scrapes, is closed.
	s.metricsServer = &http.Server{
		Handler:           s.metricsHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelInfo),
	}
	return s, nil
}

// newXDS prepares the management server, serving with the gateway's
// certificate unless it has one of its own.
func (s *Server) newXDS(gatewayServing *certfile.KeyPair) (*xds.Server, error) {
	serving := gatewayServing
	if s.cfg.XDSTLSCertFile != "" {
		var err error
		if serving, err = s.certificates.KeyPair("--xds-tls-cert-file/--xds-tls-private-key-file", s.cfg.XDSTLSCertFile, s.cfg.XDSTLSPrivateKeyFile); err != nil {
			return nil, err
		}
	}
	clientCA, err := s.certificates.CABundle("--xds-client-ca-file", s.cfg.XDSClientCAFile)
	if err != nil {
		return nil, err
	}
	return xds.New(xds.Options{Certificate: serving.Certificate, ClientCAs: clientCA.Pool,
		MaxStreams: s.cfg.XDSMaxStreams, MaxStreamsPerClient: s.cfg.XDSMaxStreamsPerClient, Logger: s.log.With("component", "xds")})
}

func (c Config) complete() (Config, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var errs []error
	switch {
	case c.BindAddress == "" && c.LocalAPIServer != "":
		c.BindAddress = DefaultNodeLocalBindAddress
	case c.BindAddress == "":
		c.BindAddress = DefaultBindAddress
	case c.LocalAPIServer != "":
		if ip, err := netip.ParseAddr(c.BindAddress); err != nil || !ip.IsLoopback() {
			errs = append(errs, fmt.Errorf("--bind-address %s: node-local mode (--local-apiserver) listens on a loopback address only", c.BindAddress))
		}
	}
	if c.Instances == 0 && c.LocalAPIServer != "" {
		c.Instances = 1
	}
	if c.SecurePort == 0 {
		c.SecurePort = DefaultSecurePort
	}
	if c.SecurePort < 0 || c.SecurePort > 65535 {
		return c, fmt.Errorf("--secure-port %d: must be 0 to 65535", c.SecurePort)
	}
	if c.MetricsBindAddress == "" {
		c.MetricsBindAddress = DefaultMetricsBindAddress
	}
	if _, _, err := net.SplitHostPort(c.MetricsBindAddress); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-bind-address %q: must be host:port: %w", c.MetricsBindAddress, err))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--poll-interval", c.PollInterval},
		{"--readiness-interval", c.ReadinessInterval},
		{"--grace-period", c.GracePeriod},
		{"--plugin-call-timeout", c.PluginCallTimeout},
		{"--request-timeout", c.RequestTimeout},
		{"--discovery-authorization-cache", c.DiscoveryAuthorizationCache},
		{"--shutdown-delay-duration", c.ShutdownDelay},
		{"--shutdown-timeout", c.ShutdownTimeout},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.flag, d.value))
		}
	}
	if d := c.DiscoveryAuthorizationCache; d > MaxDiscoveryAuthorizationCache || d%time.Second != 0 {
		errs = append(errs, fmt.Errorf("--discovery-authorization-cache %v: must be whole seconds, at most %v", d, MaxDiscoveryAuthorizationCache))
	}
	if c.PeerServerName == "" {
		c.PeerServerName = gateway.DefaultPeerServerName
	}
	if c.RoutingHeader == "" {
		c.RoutingHeader = pluginconfig.DefaultRoutingHeader
	}
	if err := pluginconfig.CheckRoutingHeader(c.RoutingHeader); err != nil {
		errs = append(errs, fmt.Errorf("--routing-header %q: %w", c.RoutingHeader, err))
	}
	if c.RetryAfterSeconds == 0 {
		c.RetryAfterSeconds = pluginconfig.DefaultRetryAfterSeconds
	}
	if err := pluginconfig.CheckRetryAfterSeconds(int64(c.RetryAfterSeconds)); err != nil {
		errs = append(errs, fmt.Errorf("--retry-after-seconds %d: %w", c.RetryAfterSeconds, err))
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = gateway.DefaultRequestTimeout
	}
	errs = append(errs, c.checkLimits()...)
	if c.IdentityMode == "" {
		c.IdentityMode = string(pluginconfig.DefaultIdentityMode)
	}
	if c.SchemaSkewRouting == "" {
		c.SchemaSkewRouting = string(pluginconfig.DefaultSchemaSkewRouting)
	}
	if err := pluginconfig.CheckSchemaSkewRouting(pluginconfig.SchemaSkewRouting(c.SchemaSkewRouting)); err != nil {
		errs = append(errs, fmt.Errorf("--schema-skew-routing %q: %w", c.SchemaSkewRouting, err))
	}
	if c.TLSCertFile == "" || c.TLSPrivateKeyFile == "" {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file are required"))
	}
	if c.PeerCAFile == "" {
		errs = append(errs, errors.New("--peer-ca-file is required: the CA that signs the API servers' serving certificates"))
	}
	if len(c.APIServers) == 0 && c.LocalAPIServer == "" && c.Kubeconfig == "" {
		errs = append(errs, errors.New("no API servers: give --apiserver (repeatable), --local-apiserver or --kubeconfig"))
	}
	if _, _, err := controller.ParseServers(c.APIServers, c.LocalAPIServer); err != nil {
		errs = append(errs, APIServerFlagError(err))
	}
	if (c.ProxyClientCertFile == "") != (c.ProxyClientKeyFile == "") {
		errs = append(errs, errors.New("--proxy-client-cert-file and --proxy-client-key-file go together"))
	}
	switch c.IdentityMode {
	case IdentityPassthrough:
	case IdentityFrontProxy:
		if c.ProxyClientCertFile == "" {
			errs = append(errs, errors.New("--identity-mode=front-proxy needs --proxy-client-cert-file and --proxy-client-key-file"))
		}
		if c.ClientCAFile == "" {
			errs = append(errs, errors.New("--identity-mode=front-proxy needs --client-ca-file: asserted identities come from verified client certificates"))
		}
	default:
		errs = append(errs, fmt.Errorf("--identity-mode %q: %w", c.IdentityMode, pluginconfig.CheckIdentityMode(pluginconfig.IdentityMode(c.IdentityMode))))
	}
	// Front-proxy mode has asked for the certificate already.
	if c.ProxyClientCertFile == "" && c.Kubeconfig == "" && c.IdentityMode != IdentityFrontProxy {
		errs = append(errs, errors.New("no credentials for the API servers: give --proxy-client-cert-file and --proxy-client-key-file, or --kubeconfig"))
	}
	if c.WasmPath == "" {
		path, err := DefaultWasmPath()
		if err != nil {
			errs = append(errs, err)
		}
		c.WasmPath = path
	}
	errs = append(errs, c.checkXDS()...)
	if c.EnvoyECDSFile != "" && c.EnvoyWasmPath == "" {
		abs, err := filepath.Abs(c.WasmPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("--wasm: %w", err))
		}
		c.EnvoyWasmPath = abs
	}
	if c.EnvoyWasmPath != "" {
		if err := envoyconfig.CheckWasmPath(c.EnvoyWasmPath); err != nil {
			errs = append(errs, fmt.Errorf("--envoy-wasm-path: %w", err))
		}
	}
	return c, errors.Join(errs...)
}

// checkLimits checks the in-flight limits and the body buffer budget, and
// fills in the budget's defaults.
func (c *Config) checkLimits() []error {
	var errs []error
	for _, l := range []struct {
		flag  string
		value int
	}{
		{"--max-requests-inflight", c.MaxRequestsInFlight},
		{"--max-mutating-requests-inflight", c.MaxMutatingRequestsInFlight},
	} {
		if l.value < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative (0: no limit)", l.flag, l.value))
		}
	}
	if c.MaxBufferedRequestBytes == 0 {
		c.MaxBufferedRequestBytes = gateway.DefaultMaxBufferedRequestBytes
	}
	if c.MaxBufferedRequestBytesPerClient == 0 {
		c.MaxBufferedRequestBytesPerClient = min(gateway.DefaultMaxBufferedRequestBytesPerClient, c.MaxBufferedRequestBytes)
	}
	switch {
	case c.MaxBufferedRequestBytes < 0:
		errs = append(errs, fmt.Errorf("--max-buffered-request-bytes %d: must be positive", c.MaxBufferedRequestBytes))
	case c.MaxBufferedRequestBytesPerClient < 0 || c.MaxBufferedRequestBytesPerClient > c.MaxBufferedRequestBytes:
		errs = append(errs, fmt.Errorf("--max-buffered-request-bytes-per-client %d: must be positive and at most --max-buffered-request-bytes (%d)",
			c.MaxBufferedRequestBytesPerClient, c.MaxBufferedRequestBytes))
	}
	return errs
}

// checkXDS checks the management server's flags.
func (c Config) checkXDS() []error {
	if c.XDSBindAddress == "" {
		if c.XDSTLSCertFile != "" || c.XDSTLSPrivateKeyFile != "" || c.XDSClientCAFile != "" {
			return []error{errors.New("--xds-tls-cert-file, --xds-tls-private-key-file and --xds-client-ca-file need --xds-bind-address")}
		}
		return nil
	}
	var errs []error
	if _, port, err := net.SplitHostPort(c.XDSBindAddress); err != nil {
		errs = append(errs, fmt.Errorf("--xds-bind-address %q: must be host:port: %w", c.XDSBindAddress, err))
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("--xds-bind-address %q: port must be 0 to 65535", c.XDSBindAddress))
	}
	if (c.XDSTLSCertFile == "") != (c.XDSTLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--xds-tls-cert-file and --xds-tls-private-key-file go together"))
	}
	for _, limit := range []struct {
		flag  string
		value int
	}{{"--xds-max-streams", c.XDSMaxStreams}, {"--xds-max-streams-per-client", c.XDSMaxStreamsPerClient}} {
		if limit.value < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative", limit.flag, limit.value))
		}
	}
	if c.XDSClientCAFile == "" {
		errs = append(errs, errors.New("--xds-bind-address needs --xds-client-ca-file: only Envoys presenting a certificate it signed may read the configuration, which describes every API server"))
	}
	// The controller's own module path means nothing on the Envoy hosts.
	if c.EnvoyWasmPath == "" {
		errs = append(errs, errors.New("--xds-bind-address needs --envoy-wasm-path: the plugin module's path on the Envoy hosts"))
	}
	return errs
}

// DefaultWasmPath finds the plugin module when --wasm is not given: next to
// the executable, then where `make build` puts it relative to bin/skewgate
// (../build/skewgate.wasm), then build/skewgate.wasm under the working
// directory (go run from the repository root).
func DefaultWasmPath() (string, error) {
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		candidates = append(candidates, filepath.Join(dir, "skewgate.wasm"), filepath.Join(dir, "..", "build", "skewgate.wasm"))
	}
	candidates = append(candidates, filepath.Join("build", "skewgate.wasm"))
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("the plugin module was not found (looked at %v): run `make build` or give --wasm", candidates)
}

// isLoopback reports whether a host:port listens on the loopback interface
// only; a host name other than localhost may resolve to anything.
func isLoopback(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Listen binds the gateway, metrics and xDS listeners.
func (s *Server) Listen() error {
	var err error
	gatewayAddress := net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.SecurePort))
	if s.gatewayListener, err = net.Listen("tcp", gatewayAddress); err != nil {
		return fmt.Errorf("gateway listener: %w", err)
	}
	if s.metricsListener, err = net.Listen("tcp", s.cfg.MetricsBindAddress); err != nil {
		s.gatewayListener.Close()
		return fmt.Errorf("metrics listener: %w", err)
	}
	if s.xds != nil {
		if s.xdsListener, err = net.Listen("tcp", s.cfg.XDSBindAddress); err != nil {
			s.gatewayListener.Close()
			s.metricsListener.Close()
			return fmt.Errorf("xDS listener: %w", err)
		}
	}
	return nil
}

// GatewayAddr and MetricsAddr are the bound addresses, after Listen.
func (s *Server) GatewayAddr() net.Addr { return s.gatewayListener.Addr() }
func (s *Server) MetricsAddr() net.Addr { return s.metricsListener.Addr() }

// XDSAddr is the bound xDS address, after Listen, or nil without one.
func (s *Server) XDSAddr() net.Addr {
	if s.xdsListener == nil {
		return nil
	}
	return s.xdsListener.Addr()
}

// Ready reports whether a snapshot was accepted by the plugin VMs and
// shutdown has not begun.
func (s *Server) Ready() bool { return s.ready.Load() && !s.stopping.Load() }

// Serve runs the controller and both listeners until ctx is done, then shuts
// down as kube-apiserver does: /readyz fails at once, both listeners keep
// serving for Config.ShutdownDelay, then they stop accepting and in-flight
// requests drain for at most Config.ShutdownTimeout, after which the rest
// (long-running watches, exec and port-forward sessions) are cut. Every
// listener is closed when Serve returns. Listen must have been called.
func (s *Server) Serve(ctx context.Context) error {
	if s.gatewayListener == nil {
		return errors.New("serve: Listen was not called")
	}
	// Routing stays current until the gateway has drained.
	ctrlCtx, stopController := context.WithCancel(context.WithoutCancel(ctx))
	defer stopController()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() {
		if err := s.gatewayServer.ServeTLS(s.gatewayListener, "", ""); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("gateway listener: %w", err)
		}
	})
	wg.Go(func() {
		if err := s.metricsServer.Serve(s.metricsListener); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("metrics listener: %w", err)
		}
	})
	if s.xds != nil {
		wg.Go(func() {
			if err := s.xds.Serve(s.xdsListener); err != nil {
				errs <- fmt.Errorf("xDS listener: %w", err)
			}
		})
	}
	controllerDone := make(chan struct{})
	go func() {
		defer close(controllerDone)
		_ = s.ctrl.Run(ctrlCtx)
	}()
	certificatesDone := make(chan struct{})
	go func() {
		defer close(certificatesDone)
		_ = s.certificates.Run(ctrlCtx)
	}()
	s.log.Info("skewgate serving", "gateway", s.gatewayListener.Addr().String(), "metrics", s.metricsListener.Addr().String(),
		"xds", s.XDSAddr(), "identity_mode", s.cfg.IdentityMode, "wasm", s.cfg.WasmPath)

	var runErr error
	select {
	case <-ctx.Done():
		s.stopping.Store(true)
		if delay := s.cfg.ShutdownDelay; delay > 0 {
			s.log.Info("shutting down: /readyz fails; still serving for the shutdown delay", "delay", delay)
			// A client on a kept-alive connection never meets the load
			// balancer again: answering with Connection: close (HTTP/1.1) and
			// GOAWAY once idle (HTTP/2) makes it reconnect through it.
			s.gatewayServer.SetKeepAlivesEnabled(false)
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case runErr = <-errs:
				timer.Stop()
			}
		}
	case runErr = <-errs:
	}
	s.stopping.Store(true)
	s.log.Info("shutting down: draining in-flight requests", "timeout", s.cfg.ShutdownTimeout)
	drainCtx, drainCancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer drainCancel()
	// The listeners close together, so that a process started in this one's
	// place can bind every port while it drains. xDS streams never end on
	// their own: they are closed, and each Envoy keeps its configuration while
	// it reconnects.
	if s.xds != nil {
		s.xds.Stop()
	}
	var drain sync.WaitGroup
	for name, srv := range map[string]*http.Server{"gateway": s.gatewayServer, "metrics": s.metricsServer} {
		drain.Go(func() {
			if err := srv.Shutdown(drainCtx); err != nil {
				s.log.Warn("in-flight requests did not finish in time; closing them", "listener", name, "error", err)
				_ = srv.Close()
			}
		})
	}
	// exec, attach and port-forward sessions left http.Server when they
	// switched protocols; they get the same time, then are ended.
	drain.Go(func() {
		if n := s.gw.DrainSessions(drainCtx); n > 0 {
			s.log.Warn("switched-protocol sessions did not end in time; closing them", "sessions", n)
		}
	})
	drain.Wait()
	wg.Wait()
	stopController()
	<-controllerDone
	<-certificatesDone
	s.gw.CloseIdleConnections()
	if host := s.plugins.host.Load(); host != nil {
		_ = host.Close(context.Background())
	}
	return runErr
}

// Run is Listen and Serve.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// onSnapshot is the controller's hand-over: the snapshot becomes the
// gateway's and every VM's, or, if the plugin rejects it, the controller keeps
// the previous one current and offers this one again on its next poll; it
// counts the refusal (skewgate_controller_publish_errors_total).
func (s *Server) onSnapshot(ctx context.Context, p controller.Published) error {
	return s.apply(ctx, p.Raw, p.Snapshot, p.Addresses)
}

// apply turns a snapshot into the plugin configuration, has every VM accept
// it (starting the VMs on the first one), switches the gateway's routing,
// writes the ECDS file and publishes it over xDS.
func (s *Server) apply(ctx context.Context, raw []byte, snap *discovery.Snapshot, addresses map[string]string) error {
	config, err := s.pluginConfig(raw)
	if err != nil {
		return err
	}
	ix, err := discovery.NewIndexWith(snap, s.pluginOptions().IndexOptions())
	if err != nil {
		return err
	}
	configure := func() error {
		if host := s.plugins.host.Load(); host != nil {
			return host.Configure(ctx, config)
		}
		host, err := wasmhost.New(ctx, s.wasm, wasmhost.Options{
			Instances:           s.cfg.Instances,
			CompilationCacheDir: s.cfg.CompilationCacheDir,
			PluginName:          envoyconfig.FilterName,
			RootID:              envoyconfig.FilterName,
			VMID:                envoyconfig.FilterName,
			PluginConfiguration: config,
			CallTimeout:         s.cfg.PluginCallTimeout,
			PoolTimeout:         pluginQueueTimeout(s.cfg.RequestTimeout),
			// The plugin asks the API servers, through the gateway's
			// clusters, whether a client may read merged discovery.
			HTTPCalls: s.gw,
			Logger:    s.log.With("component", "plugin"),
		})
		if err != nil {
			return err
		}
		s.plugins.host.Store(host)
		// Compiling the module churns through about a hundred MiB that the
		// idle gateway would otherwise keep resident for minutes; the live
		// heap afterwards is a fraction of that.
		debug.FreeOSMemory()
		return nil
	}
	staged, err := s.gw.Stage(gateway.Routing{Index: ix, Addresses: addresses})
	if err != nil {
		return err
	}
	if err := configure(); err != nil {
		staged.Abort()
		return err
	}
	staged.Commit()
	s.applied.Store(&appliedSnapshot{raw: raw, snap: snap, addresses: addresses, acceptedAt: time.Now()})
	s.log.Info("snapshot applied", "generation", snap.Generation, "servers", len(snap.Servers))
	if s.cfg.EnvoyECDSFile != "" {
		s.writeECDS(config, snap.Generation)
	}
	if s.xds != nil {
		s.publishXDS(config, snap)
	}
	s.ready.Store(true)
	return nil
}

// pluginConfig is the plugin configuration for a snapshot. A client's
// x-kubernetes-peer-proxied header is never trusted: the gateway faces
// clients directly.
func (s *Server) pluginConfig(rawSnapshot []byte) ([]byte, error) {
	return s.pluginOptions().Marshal(rawSnapshot)
}

// pluginOptions are the plugin's options; the gateway's retry set indexes
// each snapshot with the same routing choices.
func (s *Server) pluginOptions() pluginconfig.Options {
	return pluginconfig.Options{
		RoutingHeader:                      s.cfg.RoutingHeader,
		RetryAfterSeconds:                  s.cfg.RetryAfterSeconds,
		IdentityMode:                       pluginconfig.IdentityMode(s.cfg.IdentityMode),
		DiscoveryAuthorizationCacheSeconds: int(s.cfg.DiscoveryAuthorizationCache / time.Second),
		SchemaSkewRouting:                  pluginconfig.SchemaSkewRouting(s.cfg.SchemaSkewRouting),
	}
}

// APIServerFlagError names the flag, --apiserver or --local-apiserver, of an
// error controller.ParseServers returned.
func APIServerFlagError(err error) error {
	var bad *controller.ServerURLError
	switch {
	case errors.As(err, &bad) && bad.Local:
		return fmt.Errorf("--local-apiserver %q: %w", bad.URL, bad.Err)
	case bad != nil:
		return fmt.Errorf("--apiserver %q: %w", bad.URL, bad.Err)
	}
	return fmt.Errorf("--apiserver: %w", err)
}

func (s *Server) writeECDS(config []byte, generation uint64) {
	resource, err := envoyconfig.RenderECDSResource(config, s.cfg.EnvoyWasmPath, strconv.FormatUint(generation, 10))
	if err == nil {
		err = envoyconfig.WriteECDSFile(s.cfg.EnvoyECDSFile, resource)
	}
	if err != nil {
		s.counts.ecdsFailures.Add(1)
		s.log.Error("writing the Envoy ECDS file failed", "file", s.cfg.EnvoyECDSFile, "generation", generation, "error", err)
		return
	}
	s.counts.ecdsWrites.Add(1)
}

// publishXDS hands the management server the resource the ECDS file holds.
// Only snapshots the plugin VMs accepted get here.
func (s *Server) publishXDS(config []byte, snap *discovery.Snapshot) {
	version, err := s.xdsVersion(snap)
	var doc []byte
	if err == nil {
		doc, err = envoyconfig.RenderExtensionConfig(config, s.cfg.EnvoyWasmPath)
	}
	var ext *corev3.TypedExtensionConfig
	if err == nil {
		ext, err = xds.ParseExtensionConfig(doc)
	}
	if err == nil {
		err = s.xds.Publish(ext, version)
	}
	if err != nil {
		s.counts.xdsFailures.Add(1)
		s.log.Error("publishing the plugin configuration over xDS failed", "generation", snap.Generation, "error", err)
	}
}

// xdsVersion names a snapshot's resource by what decides the plugin's
// behaviour: the resource rendered with the snapshot numbered 1. The
// generation counts this controller's snapshots since it started, so it
// differs between replicas and across a restart for the same discovery, and
// the plugin only reports it.
func (s *Server) xdsVersion(snap *discovery.Snapshot) (string, error) {
	unnumbered := *snap
	unnumbered.Generation = 1
	config, err := s.pluginConfig(unnumbered.AppendJSON(nil))
	if err != nil {
		return "", err
	}
	doc, err := envoyconfig.RenderExtensionConfig(config, s.cfg.EnvoyWasmPath)
	if err != nil {
		return "", err
	}
	return xds.Version(doc), nil
}

// pluginQueueTimeout is how long a request waits for a free plugin VM before
// it is answered 429: a quarter of the request timeout, as long as
// kube-apiserver's priority and fairness lets a request queue.
func pluginQueueTimeout(requestTimeout time.Duration) time.Duration { return requestTimeout / 4 }

// pluginSlot is the gateway's plugin: the VMs exist only once the first
// snapshot gives them a configuration. The gateway answers 503 itself until
// then, so the empty slot is never asked.
type pluginSlot struct {
	host atomic.Pointer[wasmhost.Host]
}

var errNoPlugin = errors.New("the plugin has not been started")

func (p *pluginSlot) HandleRequestHeaders(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
	host := p.host.Load()
	if host == nil {
		return wasmhost.Outcome{Verdict: wasmhost.Respond, Response: &wasmhost.LocalResponse{Status: http.StatusServiceUnavailable}, Failed: errNoPlugin}
	}
	return host.HandleRequestHeaders(ctx, req)
}
