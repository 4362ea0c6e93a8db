package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/gateway"
	"github.com/skewgate/skewgate/host/internal/serve"
	"github.com/skewgate/skewgate/host/internal/xds"
	"github.com/skewgate/skewgate/plugin/config"
)

// runServe runs the gateway until SIGINT or SIGTERM. Flag names follow
// kube-apiserver's where the meaning is the same.
func runServe(args []string, stderr io.Writer) error {
	var cfg serve.Config
	var logs cmdline.LogFlags
	fs := cmdline.NewFlagSet("skewgate serve", "skewgate serve [flags]",
		"Runs the gateway in front of the API servers: it polls every server's discovery, runs the plugin on each request\n"+
			"and proxies to the server the plugin chose.", stderr)
	fs.StringVar(&cfg.BindAddress, "bind-address", "", "IP address the gateway listens on (default "+serve.DefaultBindAddress+"; "+serve.DefaultNodeLocalBindAddress+" in node-local mode, which allows only loopback)")
	fs.IntVar(&cfg.SecurePort, "secure-port", serve.DefaultSecurePort, "port the gateway serves HTTPS on")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "the gateway's serving certificate (PEM); reloaded when the file changes")
	fs.StringVar(&cfg.TLSPrivateKeyFile, "tls-private-key-file", "", "the serving certificate's private key (PEM)")
	fs.StringVar(&cfg.ClientCAFile, "client-ca-file", "", "CA certificates that verify client certificates, when clients present one; reloaded when the file changes")
	fs.StringVar(&cfg.PeerCAFile, "peer-ca-file", "", "CA certificates that sign the API servers' serving certificates; reloaded when the file changes")
	fs.StringVar(&cfg.PeerServerName, "peer-server-name", controller.DefaultServerName, "name verified in every API server's serving certificate")
	fs.StringVar(&cfg.ProxyClientCertFile, "proxy-client-cert-file", "", "front-proxy client certificate: the controller authenticates with it, and in front-proxy identity mode the gateway presents it on requests whose identity it asserts; reloaded when the file changes")
	fs.StringVar(&cfg.ProxyClientKeyFile, "proxy-client-key-file", "", "the front-proxy client certificate's private key")
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig for discovering API servers from identity leases and the kubernetes Service")
	fs.StringArrayVar(&cfg.APIServers, "apiserver", nil, "API server URL https://host:port (repeatable)")
	fs.StringVar(&cfg.LocalAPIServer, "local-apiserver", "", "node-local mode: URL of this node's own API server, which takes every request it can serve while it is healthy")
	fs.StringVar(&cfg.IdentityMode, "identity-mode", string(config.DefaultIdentityMode), "passthrough (forward credentials) or front-proxy (assert verified client certificates as X-Remote-* headers)")
	fs.StringVar(&cfg.MetricsBindAddress, "metrics-bind-address", serve.DefaultMetricsBindAddress, "host:port for /metrics, /healthz, /readyz, /debug/snapshot, /debug/requests and the status page (plain HTTP)")
	fs.BoolVar(&cfg.Profiling, "profiling", false, "serve Go's CPU, heap, allocation and goroutine profiles under /debug/pprof/ on the metrics listener")
	fs.StringVar(&cfg.EnvoyECDSFile, "envoy-ecds-file", "", "also write every accepted plugin configuration to this Envoy ECDS file (atomically)")
	fs.StringVar(&cfg.EnvoyWasmPath, "envoy-wasm-path", "", "plugin module path Envoy loads, written into the ECDS file and served over xDS (default for the ECDS file: the absolute --wasm path; required with --xds-bind-address)")
	fs.StringVar(&cfg.EnvoyWasmSchemaVersion, "envoy-wasm-schema-version", "", "schema version MAJOR.MINOR the Envoys' plugin module announces (its skewgate_schema_version_MAJOR_MINOR export), when it is another build than --wasm; the controller refuses to start when that module would refuse its configurations")
	fs.StringVar(&cfg.XDSBindAddress, "xds-bind-address", "", "host:port of the xDS management server that serves every accepted plugin configuration to Envoys over gRPC (ECDS and ADS); empty: none")
	fs.StringVar(&cfg.XDSTLSCertFile, "xds-tls-cert-file", "", "the xDS server's serving certificate (PEM; default: --tls-cert-file); reloaded when the file changes")
	fs.StringVar(&cfg.XDSTLSPrivateKeyFile, "xds-tls-private-key-file", "", "the xDS serving certificate's private key (PEM; default: --tls-private-key-file)")
	fs.IntVar(&cfg.XDSMaxStreams, "xds-max-streams", xds.DefaultMaxStreams, "most xDS streams the management server holds open at once, from all Envoys; more are refused")
	fs.IntVar(&cfg.XDSMaxStreamsPerClient, "xds-max-streams-per-client", xds.DefaultMaxStreamsPerClient, "most xDS streams one client certificate may hold open at once; Envoys sharing a certificate count as one client")
	fs.StringVar(&cfg.XDSClientCAFile, "xds-client-ca-file", "", "CA certificates that must have signed the client certificate every Envoy presents to the xDS server (required with --xds-bind-address); reloaded when the file changes")
	fs.StringVar(&cfg.WasmPath, "wasm", "", "plugin module (default: skewgate.wasm next to the binary, ../build/skewgate.wasm from it, or build/skewgate.wasm)")
	fs.StringVar(&cfg.RoutingHeader, "routing-header", config.DefaultRoutingHeader, "internal header carrying the chosen upstream (a lower-case header name the plugin does not own)")
	fs.IntVar(&cfg.RetryAfterSeconds, "retry-after-seconds", config.DefaultRetryAfterSeconds, "Retry-After announced with the gateway's 503 and 429 answers (1 to "+strconv.Itoa(config.MaxRetryAfterSeconds)+")")
	fs.DurationVar(&cfg.DiscoveryAuthorizationCache, "discovery-authorization-cache", serve.DefaultDiscoveryAuthorizationCache, "how long an API server's answer to whether a credential may read merged discovery is reused (whole seconds, at most "+serve.MaxDiscoveryAuthorizationCache.String()+")")
	fs.StringVar(&cfg.SchemaSkewRouting, "schema-skew-routing", string(config.DefaultSchemaSkewRouting), "which requests for a resource whose schema lacks fields on some API servers go only to the servers whose schema has them all: "+
		string(config.SchemaSkewReadsAndWrites)+" (every request: a client that updates what it read through a server lacking a field would clear it) or "+string(config.SchemaSkewWrites)+" (creates, updates, patches and deletes; reads spread over every server)")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", controller.DefaultPollInterval, "how often every API server's discovery documents are refreshed")
	fs.DurationVar(&cfg.ReadinessInterval, "readiness-interval", controller.DefaultReadinessInterval, "how often every API server's /readyz is probed between polls (at most --poll-interval)")
	fs.DurationVar(&cfg.GracePeriod, "grace-period", controller.DefaultGracePeriod, "how long an unreachable API server stays in discovery")
	fs.IntVar(&cfg.Instances, "instances", 0, "plugin VM instances (default: GOMAXPROCS; 1 in node-local mode)")
	fs.StringVar(&cfg.CompilationCacheDir, "compilation-cache-dir", "", "directory caching the compiled plugin across restarts")
	fs.DurationVar(&cfg.RequestTimeout, "request-timeout", gateway.DefaultRequestTimeout, "longest a request that is not long-running (not a watch, exec, attach, port-forward, proxy or log) may take, and any request's buffered body may take to arrive; later it is answered 504. A request waits for a plugin VM at most a quarter of it, then is answered 429")
	fs.IntVar(&cfg.MaxRequestsInFlight, "max-requests-inflight", gateway.DefaultMaxRequestsInFlight, "most read-only requests (get, list) that are not long-running proxied at once; more are answered 429 with Retry-After (0: no limit)")
	fs.IntVar(&cfg.MaxMutatingRequestsInFlight, "max-mutating-requests-inflight", gateway.DefaultMaxMutatingRequestsInFlight, "most mutating requests that are not long-running proxied at once; more are answered 429 with Retry-After (0: no limit)")
	fs.Int64Var(&cfg.MaxBufferedRequestBytes, "max-buffered-request-bytes", gateway.DefaultMaxBufferedRequestBytes, "most bytes of request bodies (each at most 1 MiB) held in memory so that their requests can be retried on another API server; beyond it bodies stream and are not retried")
	fs.Int64Var(&cfg.MaxBufferedRequestBytesPerClient, "max-buffered-request-bytes-per-client", gateway.DefaultMaxBufferedRequestBytesPerClient, "the share of --max-buffered-request-bytes one client (source address) may hold")
	fs.DurationVar(&cfg.PluginCallTimeout, "plugin-call-timeout", 0, "longest a plugin callback may run; an overrunning plugin VM is replaced. 0: unbounded, as in Envoy (a bound makes every callback interruptible, which makes it 1.4–1.9 times as costly)")
	fs.DurationVar(&cfg.ShutdownDelay, "shutdown-delay-duration", 0, "after SIGTERM, how long /readyz fails while both listeners keep serving, so that load balancers move away before the gateway stops accepting")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", serve.DefaultShutdownTimeout, "how long in-flight requests may finish once the listeners stop accepting; longer ones (watches) are then cut")
	logs.Register(fs, "info")
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	logger, err := logs.Logger(os.Stderr)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	server, err := serve.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return server.Run(ctx)
}
