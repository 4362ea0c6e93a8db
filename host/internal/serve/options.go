package serve

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/gateway"
	"github.com/skewgate/skewgate/host/internal/shell"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

// Defaults of the options only serve has.
const (
	DefaultMetricsBindAddress = "127.0.0.1:9090"
	DefaultShutdownTimeout    = 30 * time.Second
)

// Config is everything `skewgate serve` is told on its command line: NewConfig
// holds the defaults, AddFlags registers every field as its flag, and New
// validates it, naming the flag of every mistake. The embedded option groups
// are the ones other commands share (package cmdline).
type Config struct {
	// ServingOptions are the gateway's listener. The certificate, key and CA
	// files of every group are read again every certfile.DefaultInterval and
	// their changes used without a restart.
	cmdline.ServingOptions
	// Options are the API servers, the controller's and the plugin's: the
	// plugin options go into the plugin configuration and the gateway alike.
	shell.Options

	// LocalAPIServer, when set, is the node's own API server (node-local
	// mode): it takes every request it can serve while it is healthy.
	LocalAPIServer string
	// MetricsBindAddress is host:port for the plain-HTTP metrics and status
	// listener.
	MetricsBindAddress string
	// Profiling serves Go's profiles under /debug/pprof/ on the metrics
	// listener.
	Profiling bool
	// DebugHandlers serves /debug/snapshot (every API server's discovery)
	// and /debug/requests (the shapes of the requests received, which
	// `skewgate check --from-skewgate` reads) on the metrics listener, which
	// asks nobody for credentials.
	DebugHandlers bool
	// RequestLogWindow is how long /debug/requests keeps a request shape
	// after its last request.
	RequestLogWindow time.Duration
	// EnvoyECDSFile, when set, receives the plugin configuration of every
	// accepted snapshot as an Envoy ECDS resource, naming EnvoyWasmPath.
	EnvoyECDSFile, EnvoyWasmPath string
	// EnvoyWasmSchemaVersion is the schema version the module the Envoys
	// load announces, when it is not the one WasmPath names
	// (checkModuleSchemas).
	EnvoyWasmSchemaVersion string
	// WasmPath is the plugin module; empty: DefaultWasmPath.
	WasmPath string
	// PluginCallTimeout, when set, bounds one plugin callback: an overrunning
	// VM is closed and replaced. Zero leaves callbacks unbounded, as Envoy
	// does: interrupting compiled guest code makes every call 1.4–1.9 times as
	// costly.
	PluginCallTimeout time.Duration
	// RequestTimeout bounds a request that is not long-running
	// (kube-apiserver's --request-timeout), and every request's wait for its
	// buffered body. A request waits for a plugin VM at most a quarter of
	// it, as kube-apiserver's priority and fairness queues a request at most
	// a quarter of its timeout.
	RequestTimeout time.Duration
	// MaxRequestsInFlight and MaxMutatingRequestsInFlight bound the requests
	// that are not long-running proxied at once (kube-apiserver's flags of
	// the same names); zero: no limit.
	MaxRequestsInFlight, MaxMutatingRequestsInFlight int
	// MaxRequestsInFlightPerClient bounds those of one source address.
	MaxRequestsInFlightPerClient int
	// MaxLongRunningRequests and MaxLongRunningRequestsPerClient bound the
	// long-running requests served at once, in all and per source address;
	// MaxConnections and MaxConnectionsPerClient the client connections.
	// Zero: no limit.
	MaxLongRunningRequests, MaxLongRunningRequestsPerClient int
	MaxConnections, MaxConnectionsPerClient                 int
	// StalledStreamTimeout ends a long-running response whose client has
	// read none of what is waiting for it for this long.
	StalledStreamTimeout time.Duration
	// MaxBufferedRequestBytes and MaxBufferedRequestBytesPerClient bound the
	// request bodies held for retries, in all and per source address.
	MaxBufferedRequestBytes, MaxBufferedRequestBytesPerClient int64
	// Instances is the number of plugin VMs; zero: GOMAXPROCS, and 1 in
	// node-local mode, whose clients are one node's control-plane components.
	Instances           int
	CompilationCacheDir string
	// GoMemoryLimitBytes, when set, is the Go runtime's soft memory limit
	// (runtime/debug.SetMemoryLimit) from the moment the plugin is compiled:
	// compiling churns through about a hundred MiB, which a limit from the
	// start would turn into back-to-back collections. A GOMEMLIMIT in the
	// environment wins. Zero: no limit (RATIONALE.md says why that is
	// the default).
	GoMemoryLimitBytes int64
	// ShutdownDelay is how long both listeners keep serving, with /readyz
	// failing, once shutdown begins, so that load balancers stop sending
	// before the gateway stops accepting (kube-apiserver's
	// --shutdown-delay-duration). ShutdownTimeout then bounds the drain.
	ShutdownDelay   time.Duration
	ShutdownTimeout time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NewConfig is the configuration of `skewgate serve` without flags.
func NewConfig() Config {
	return Config{
		ServingOptions: cmdline.NewServingOptions(),
		Options:        shell.NewOptions(),

		MetricsBindAddress:               DefaultMetricsBindAddress,
		RequestTimeout:                   gateway.DefaultRequestTimeout,
		MaxRequestsInFlight:              gateway.DefaultMaxRequestsInFlight,
		MaxMutatingRequestsInFlight:      gateway.DefaultMaxMutatingRequestsInFlight,
		MaxRequestsInFlightPerClient:     gateway.DefaultMaxRequestsInFlightPerClient,
		MaxLongRunningRequests:           gateway.DefaultMaxLongRunningRequests,
		MaxLongRunningRequestsPerClient:  gateway.DefaultMaxLongRunningRequestsPerClient,
		MaxConnections:                   gateway.DefaultMaxConnections,
		MaxConnectionsPerClient:          gateway.DefaultMaxConnectionsPerClient,
		StalledStreamTimeout:             gateway.DefaultStalledStreamTimeout,
		MaxBufferedRequestBytes:          gateway.DefaultMaxBufferedRequestBytes,
		MaxBufferedRequestBytesPerClient: gateway.DefaultMaxBufferedRequestBytesPerClient,
		ShutdownTimeout:                  DefaultShutdownTimeout,
		RequestLogWindow:                 gateway.DefaultRequestLogWindow,
	}
}

// AddFlags registers every field but Logger as its flag, defaulting to its
// current value. Flag names follow kube-apiserver's where the meaning is the
// same.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.ServingOptions.AddFlags(fs)
	c.Options.AddFlags(fs)
	fs.StringVar(&c.LocalAPIServer, "local-apiserver", c.LocalAPIServer, "node-local mode: URL of this node's own API server, which takes every request it can serve while it is healthy")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "host:port for /metrics, /healthz, /readyz, the status page and, with --debug-handlers, /debug/snapshot and /debug/requests (plain HTTP)")
	fs.BoolVar(&c.Profiling, "profiling", c.Profiling, "serve Go's CPU, heap, allocation and goroutine profiles under /debug/pprof/ on the metrics listener")
	fs.BoolVar(&c.DebugHandlers, DebugHandlersFlag, c.DebugHandlers, "serve /debug/snapshot (every API server's discovery) and /debug/requests (the shapes of the requests received, for skewgate check --from-skewgate) on the metrics listener, which asks nobody for credentials")
	fs.DurationVar(&c.RequestLogWindow, "request-log-window", c.RequestLogWindow, "how long /debug/requests keeps the shape of a request after the last request of that shape")
	fs.StringVar(&c.EnvoyECDSFile, "envoy-ecds-file", c.EnvoyECDSFile, "also write every accepted plugin configuration to this Envoy ECDS file (atomically)")
	fs.StringVar(&c.EnvoyWasmPath, "envoy-wasm-path", c.EnvoyWasmPath, "plugin module path Envoy loads, written into the ECDS file (default: the absolute --wasm path)")
	fs.StringVar(&c.EnvoyWasmSchemaVersion, "envoy-wasm-schema-version", c.EnvoyWasmSchemaVersion, "schema version MAJOR.MINOR the plugin module of the Envoy reading --envoy-ecds-file announces (its skewgate_schema_version_MAJOR_MINOR export), when it is another build than --wasm; the controller refuses to start when that module would refuse its configurations")
	fs.StringVar(&c.WasmPath, "wasm", c.WasmPath, "plugin module (default: skewgate.wasm next to the binary, ../build/skewgate.wasm from it, or build/skewgate.wasm)")
	fs.IntVar(&c.Instances, "instances", c.Instances, "plugin VM instances (default: GOMAXPROCS; 1 in node-local mode)")
	fs.StringVar(&c.CompilationCacheDir, "compilation-cache-dir", c.CompilationCacheDir, "directory caching the compiled plugin across restarts")
	fs.DurationVar(&c.RequestTimeout, "request-timeout", c.RequestTimeout, "longest a request that is not long-running (not a watch, exec, attach, port-forward, proxy or log) may take, and any request's buffered body may take to arrive; later it is answered 504. A request waits for a plugin VM at most a quarter of it, then is answered 429")
	fs.IntVar(&c.MaxRequestsInFlight, "max-requests-inflight", c.MaxRequestsInFlight, "most read-only requests (get, list) that are not long-running proxied at once; more are answered 429 with Retry-After (0: no limit)")
	fs.IntVar(&c.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", c.MaxMutatingRequestsInFlight, "most mutating requests that are not long-running proxied at once; more are answered 429 with Retry-After (0: no limit)")
	fs.IntVar(&c.MaxRequestsInFlightPerClient, "max-requests-inflight-per-client", c.MaxRequestsInFlightPerClient, "most requests that are not long-running, read-only and mutating together, one client (source address) may have proxied at once; more are answered 429 with Retry-After (0: no limit; set 0 when clients reach skewgate through one translated address)")
	fs.IntVar(&c.MaxLongRunningRequests, "max-long-running-requests", c.MaxLongRunningRequests, "most long-running requests (watch, log, exec, attach, port-forward, proxy) served at once; more are answered 429 with Retry-After (0: no limit). The default carries a 5,000-node cluster's kubelets and kube-proxies")
	fs.IntVar(&c.MaxLongRunningRequestsPerClient, "max-long-running-requests-per-client", c.MaxLongRunningRequestsPerClient, "most long-running requests one client (source address) may have served at once; more are answered 429 with Retry-After (0: no limit; set 0 when clients reach skewgate through one translated address)")
	fs.IntVar(&c.MaxConnections, "max-connections", c.MaxConnections, "most client connections open at once; more are closed as soon as they are accepted (0: no limit)")
	fs.IntVar(&c.MaxConnectionsPerClient, "max-connections-per-client", c.MaxConnectionsPerClient, "most client connections one client (source address) may hold open at once; more are closed as soon as they are accepted (0: no limit; set 0 when clients reach skewgate through one translated address)")
	fs.DurationVar(&c.StalledStreamTimeout, "stalled-stream-timeout", c.StalledStreamTimeout, "how long a long-running response (watch, log, exec) may wait for its client to read what was written to it before it is ended; a quiet stream with nothing to write is never ended by it")
	fs.Int64Var(&c.MaxBufferedRequestBytes, "max-buffered-request-bytes", c.MaxBufferedRequestBytes, "most bytes of request bodies (each at most 1 MiB) held in memory so that their requests can be retried on another API server; beyond it bodies stream and are not retried")
	fs.Int64Var(&c.MaxBufferedRequestBytesPerClient, "max-buffered-request-bytes-per-client", c.MaxBufferedRequestBytesPerClient, "the share of --max-buffered-request-bytes one client (source address) may hold")
	fs.DurationVar(&c.PluginCallTimeout, "plugin-call-timeout", c.PluginCallTimeout, "longest a plugin callback may run; an overrunning plugin VM is replaced. 0: unbounded, as in Envoy (a bound makes every callback interruptible, which makes it 1.4–1.9 times as costly)")
	fs.Int64Var(&c.GoMemoryLimitBytes, "go-memory-limit-bytes", c.GoMemoryLimitBytes, "soft limit of the Go runtime's memory (as GOMEMLIMIT), set once the plugin is compiled, so that compiling stays fast; a GOMEMLIMIT in the environment wins (GOMEMLIMIT=off: no limit) (default: none)")
	fs.DurationVar(&c.ShutdownDelay, "shutdown-delay-duration", c.ShutdownDelay, "after SIGTERM, how long /readyz fails while both listeners keep serving, so that load balancers move away before the gateway stops accepting")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "how long in-flight requests may finish once the listeners stop accepting; longer ones (watches) are then cut")
}

// complete fills in the defaults that depend on other fields, then validates.
func (c Config) complete() (Config, error) {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	nodeLocal := c.LocalAPIServer != ""
	var errs []error
	switch {
	case c.BindAddress == "" && nodeLocal:
		c.BindAddress = cmdline.DefaultNodeLocalBindAddress
	case c.BindAddress == "":
		c.BindAddress = cmdline.DefaultBindAddress
	case nodeLocal:
		if ip, err := netip.ParseAddr(c.BindAddress); err != nil || !ip.IsLoopback() {
			errs = append(errs, fmt.Errorf("--bind-address %s: node-local mode (--local-apiserver) listens on a loopback address only", c.BindAddress))
		}
	}
	if c.Instances == 0 && nodeLocal {
		c.Instances = 1
	}
	if c.WasmPath == "" {
		path, err := DefaultWasmPath()
		if err != nil {
			errs = append(errs, err)
		}
		c.WasmPath = path
	}
	if c.EnvoyECDSFile != "" && c.EnvoyWasmPath == "" {
		abs, err := filepath.Abs(c.WasmPath)
		if err != nil {
			errs = append(errs, fmt.Errorf("--wasm: %w", err))
		}
		c.EnvoyWasmPath = abs
	}
	return c, errors.Join(append(errs, c.validate()...)...)
}

// validate reports every mistake, naming its flag.
func (c *Config) validate() []error {
	errs := c.ServingOptions.Validate(&c.PluginOptions)
	errs = append(errs, c.Options.Validate(c.LocalAPIServer)...)
	if _, _, err := net.SplitHostPort(c.MetricsBindAddress); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-bind-address %q: must be host:port: %w", c.MetricsBindAddress, err))
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--plugin-call-timeout", c.PluginCallTimeout},
		{"--request-timeout", c.RequestTimeout},
		{"--shutdown-delay-duration", c.ShutdownDelay},
		{"--shutdown-timeout", c.ShutdownTimeout},
	} {
		if d.value < 0 {
			errs = append(errs, fmt.Errorf("%s %v: must not be negative", d.flag, d.value))
		}
	}
	if c.StalledStreamTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--stalled-stream-timeout %v: must be positive", c.StalledStreamTimeout))
	}
	if c.RequestLogWindow <= 0 {
		errs = append(errs, fmt.Errorf("--request-log-window %v: must be positive", c.RequestLogWindow))
	}
	if c.GoMemoryLimitBytes < 0 {
		errs = append(errs, fmt.Errorf("--go-memory-limit-bytes %d: must not be negative (0: none)", c.GoMemoryLimitBytes))
	}
	if c.Instances < 0 {
		errs = append(errs, fmt.Errorf("--instances %d: must not be negative (0: GOMAXPROCS)", c.Instances))
	}
	if c.CompilationCacheDir != "" {
		if info, err := os.Stat(c.CompilationCacheDir); err == nil && !info.IsDir() {
			errs = append(errs, fmt.Errorf("--compilation-cache-dir %s: not a directory", c.CompilationCacheDir))
		}
	}
	errs = append(errs, c.checkLimits()...)
	errs = append(errs, c.checkEnvoy()...)
	files := append(c.ServingOptions.Files(), c.Options.Files()...)
	files = append(files, cmdline.FileFlag{Flag: "wasm", Path: c.WasmPath})
	return append(errs, cmdline.CheckReadable(files)...)
}

// applyTo sets what the flags decide of the gateway's options: the plugin's
// routing header and Retry-After, which the gateway uses alike, the
// timeouts and the limits.
func (c *Config) applyTo(opts *gateway.Options) {
	opts.PeerServerName = c.PeerServerName
	opts.RoutingHeader = c.RoutingHeader
	opts.RetryAfterSeconds = c.RetryAfterSeconds
	opts.RequestTimeout = c.RequestTimeout
	opts.StalledStreamTimeout = c.StalledStreamTimeout
	opts.MaxRequestsInFlight = c.MaxRequestsInFlight
	opts.MaxMutatingRequestsInFlight = c.MaxMutatingRequestsInFlight
	opts.MaxRequestsInFlightPerClient = c.MaxRequestsInFlightPerClient
	opts.MaxLongRunningRequests = c.MaxLongRunningRequests
	opts.MaxLongRunningRequestsPerClient = c.MaxLongRunningRequestsPerClient
	opts.MaxConnections = c.MaxConnections
	opts.MaxConnectionsPerClient = c.MaxConnectionsPerClient
	opts.MaxBufferedRequestBytes = c.MaxBufferedRequestBytes
	opts.MaxBufferedRequestBytesPerClient = c.MaxBufferedRequestBytesPerClient
}

// checkLimits checks the request and connection limits and the body buffer
// budget.
func (c *Config) checkLimits() []error {
	var errs []error
	for _, l := range []struct {
		flag  string
		value int
	}{
		{"--max-requests-inflight", c.MaxRequestsInFlight},
		{"--max-mutating-requests-inflight", c.MaxMutatingRequestsInFlight},
		{"--max-requests-inflight-per-client", c.MaxRequestsInFlightPerClient},
		{"--max-long-running-requests", c.MaxLongRunningRequests},
		{"--max-long-running-requests-per-client", c.MaxLongRunningRequestsPerClient},
		{"--max-connections", c.MaxConnections},
		{"--max-connections-per-client", c.MaxConnectionsPerClient},
	} {
		if l.value < 0 {
			errs = append(errs, fmt.Errorf("%s %d: must not be negative (0: no limit)", l.flag, l.value))
		}
	}
	switch {
	case c.MaxBufferedRequestBytes <= 0:
		errs = append(errs, fmt.Errorf("--max-buffered-request-bytes %d: must be positive", c.MaxBufferedRequestBytes))
	case c.MaxBufferedRequestBytesPerClient <= 0 || c.MaxBufferedRequestBytesPerClient > c.MaxBufferedRequestBytes:
		errs = append(errs, fmt.Errorf("--max-buffered-request-bytes-per-client %d: must be positive and at most --max-buffered-request-bytes (%d)",
			c.MaxBufferedRequestBytesPerClient, c.MaxBufferedRequestBytes))
	}
	return errs
}

// checkEnvoy checks what serve tells the Envoys: the ECDS file, the module
// path they load and its schema version.
func (c *Config) checkEnvoy() []error {
	var errs []error
	if c.EnvoyECDSFile != "" {
		if info, err := os.Stat(filepath.Dir(c.EnvoyECDSFile)); err != nil || !info.IsDir() {
			errs = append(errs, fmt.Errorf("--envoy-ecds-file %s: its directory does not exist", c.EnvoyECDSFile))
		}
	}
	if c.EnvoyWasmPath != "" {
		if err := envoyconfig.CheckWasmPath(c.EnvoyWasmPath); err != nil {
			errs = append(errs, fmt.Errorf("--envoy-wasm-path: %w", err))
		}
	}
	if c.EnvoyWasmSchemaVersion != "" {
		if c.EnvoyECDSFile == "" {
			errs = append(errs, errors.New("--envoy-wasm-schema-version needs --envoy-ecds-file: it describes the module the Envoy reading it loads"))
		}
		envoy, err := discovery.ParseSchemaVersion(c.EnvoyWasmSchemaVersion)
		if err == nil {
			err = pluginconfig.CheckModuleSchema(envoy)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("--envoy-wasm-schema-version %q: %w", c.EnvoyWasmSchemaVersion, err))
		}
	}
	return errs
}
