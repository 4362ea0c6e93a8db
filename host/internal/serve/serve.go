// Package serve runs skewgate's standalone gateway: the controller polls the
// API servers, every new snapshot becomes the plugin configuration of the
// wazero-hosted VMs (and, optionally, of the Envoy reading an ECDS file; a
// fleet of Envoys is skewgate-xds's), and the gateway proxies client traffic
// through the plugin. A second, plain-HTTP listener
// serves /metrics, /healthz, /readyz, the status page, with --debug-handlers
// /debug/snapshot and /debug/requests (the shapes of the requests received),
// and, with profiling on,
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

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/certfile"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/gateway"
	"github.com/skewgate/skewgate/host/internal/shell"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

// maxHeaderBytes bounds a request's header block, Envoy's default
// max_request_headers_kb (net/http adds 4 KiB of slack for the request line).
const maxHeaderBytes = 60 << 10

// Server is a configured gateway; Listen binds it, Serve runs it.
type Server struct {
	cfg     Config
	log     *slog.Logger
	wasm    []byte
	shell   *shell.Shell
	gw      *gateway.Gateway
	plugins *pluginSlot
	// requests counts the shapes of the requests the gateway receives,
	// served at /debug/requests for `skewgate check --from-skewgate`.
	requests *gateway.RequestLog

	gatewayServer   *http.Server
	gatewayListener net.Listener

	applied atomic.Pointer[appliedSnapshot]
	counts  counters
}

// appliedSnapshot is a snapshot the plugin accepted.
type appliedSnapshot struct {
	raw        []byte
	snap       *discovery.Snapshot
	addresses  map[string]string
	acceptedAt time.Time
}

type counters struct {
	ecdsWrites, ecdsFailures atomic.Uint64
}

// New checks cfg, reads every file it names and prepares the controller and
// the gateway. Nothing listens yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
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
	if s.shell, err = shell.New(shell.Config{
		Options:            cfg.Options,
		LocalAPIServer:     cfg.LocalAPIServer,
		MetricsBindAddress: cfg.MetricsBindAddress,
		ShutdownDelay:      cfg.ShutdownDelay,
		ShutdownTimeout:    cfg.ShutdownTimeout,
		NotReady:           "no snapshot accepted by the plugin yet",
		Logger:             cfg.Logger,
	}); err != nil {
		return nil, err
	}
	serving, err := s.shell.Certificates().KeyPair("--tls-cert-file/--tls-private-key-file", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
	if err != nil {
		return nil, err
	}
	var clientCA *certfile.CABundle
	if cfg.ClientCAFile != "" {
		if clientCA, err = s.shell.Certificates().CABundle("--client-ca-file", cfg.ClientCAFile); err != nil {
			return nil, err
		}
	}
	if cfg.DebugHandlers {
		// Nobody can read the record without the debug handlers.
		s.requests = gateway.NewRequestLog(gateway.DefaultRequestShapes, cfg.RequestLogWindow)
	}
	if err := s.newGateway(); err != nil {
		return nil, err
	}
	s.gatewayServer = &http.Server{
		Handler:           s.gw,
		TLSConfig:         serverTLSConfig(serving, clientCA),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    maxHeaderBytes,
		// What one HTTP/2 connection can make the gateway hold (RATIONALE:
		// "Why these HTTP/2 windows and stream limits?"): kube-apiserver's
		// 100 streams and 256 KiB window per stream, and Go's 1 MiB window
		// for the whole connection, so that a client's unread request data
		// never exceeds 1 MiB per connection; a connection whose client
		// takes no byte for the stalled-stream timeout is closed.
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          100,
			MaxReceiveBufferPerStream:     256 << 10,
			MaxReceiveBufferPerConnection: 1 << 20,
			WriteByteTimeout:              cfg.StalledStreamTimeout,
		},
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelInfo),
	}
	operator, err := s.shell.Attach(shell.Sink{
		Take: s.onSnapshot,
		Serve: func() error {
			if err := s.gatewayServer.ServeTLS(s.gatewayListener, "", ""); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("gateway listener: %w", err)
			}
			return nil
		},
		// A client on a kept-alive connection never meets the load
		// balancer again: answering with Connection: close (HTTP/1.1) and
		// GOAWAY once idle (HTTP/2) makes it reconnect through it.
		Draining:   func() { s.gatewayServer.SetKeepAlivesEnabled(false) },
		Shutdown:   s.drainGateway,
		Collectors: s.collectors(),
	})
	if err != nil {
		return nil, err
	}
	s.addOperatorHandlers(operator)
	return s, nil
}

// newGateway builds the gateway, which presents the front-proxy client
// certificate in front-proxy identity mode only, and has it follow the
// certificate files.
func (s *Server) newGateway() error {
	peerCA, frontProxy := s.shell.PeerCA(), s.shell.FrontProxyCertificate()
	opts := gateway.Options{
		Plugin:      s.plugins,
		Requests:    s.requests,
		PeerRootCAs: peerCA.Pool(),
		Logger:      s.log,
		// Requests reach the gateway only once the controller exists.
		OnServerLost: func(cluster string) { s.shell.Controller().ServerLost(cluster) },
	}
	s.cfg.applyTo(&opts)
	if s.cfg.FrontProxy() {
		opts.ClientCertificate = frontProxy.Certificate()
	}
	var err error
	if s.gw, err = gateway.New(opts); err != nil {
		return err
	}
	peerCA.OnChange(func() { s.gw.SetPeerRootCAs(peerCA.Pool()) })
	if s.cfg.FrontProxy() {
		frontProxy.OnChange(func() { s.gw.SetClientCertificate(frontProxy.Certificate()) })
	}
	return nil
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

// Listen binds the gateway and metrics listeners.
func (s *Server) Listen() error {
	var err error
	gatewayAddress := net.JoinHostPort(s.cfg.BindAddress, strconv.Itoa(s.cfg.SecurePort))
	if s.gatewayListener, err = net.Listen("tcp", gatewayAddress); err != nil {
		return fmt.Errorf("gateway listener: %w", err)
	}
	s.gatewayListener = s.gw.Listener(s.gatewayListener)
	if err := s.shell.Listen(); err != nil {
		s.gatewayListener.Close()
		return err
	}
	return nil
}

// GatewayAddr and MetricsAddr are the bound addresses, after Listen.
func (s *Server) GatewayAddr() net.Addr { return s.gatewayListener.Addr() }
func (s *Server) MetricsAddr() net.Addr { return s.shell.MetricsAddr() }

// Ready reports whether a snapshot was accepted by the plugin VMs and
// shutdown has not begun.
func (s *Server) Ready() bool { return s.shell.Ready() }

// Serve runs the controller and both listeners until ctx is done, then shuts
// down as kube-apiserver does (shell.Shell.Serve): /readyz fails at once,
// both listeners keep serving for Config.ShutdownDelay, then in-flight
// requests drain for at most Config.ShutdownTimeout, after which the rest
// (long-running watches, exec and port-forward sessions) are cut. Routing
// stays current until the gateway has drained; every listener is closed and
// the plugin VMs are stopped when Serve returns. Listen must have been
// called.
func (s *Server) Serve(ctx context.Context) error {
	if s.gatewayListener == nil {
		return errors.New("serve: Listen was not called")
	}
	err := s.shell.Serve(ctx, "skewgate serving", "gateway", s.GatewayAddr().String(), "metrics", s.MetricsAddr().String(),
		"identity_mode", s.cfg.IdentityMode, "wasm", s.cfg.WasmPath)
	s.gw.CloseIdleConnections()
	if host := s.plugins.host.Load(); host != nil {
		_ = host.Close(context.Background())
	}
	return err
}

// drainGateway stops the gateway accepting and lets its in-flight requests
// finish until ctx ends. exec, attach and port-forward sessions left
// http.Server when they switched protocols; they get the same time, then
// are ended.
func (s *Server) drainGateway(ctx context.Context) {
	var drain sync.WaitGroup
	drain.Go(func() { shell.ShutdownServer(ctx, s.log, "gateway", s.gatewayServer) })
	drain.Go(func() {
		if n := s.gw.DrainSessions(ctx); n > 0 {
			s.log.Warn("switched-protocol sessions did not end in time; closing them", "sessions", n)
		}
	})
	drain.Wait()
}

// Run is Listen and Serve.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// onSnapshot is the sink's hand-over (shell.Sink.Take): the snapshot becomes
// the gateway's and every VM's, or, if the plugin rejects it, the controller keeps
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
		// The host keeps the compiled module; the file's bytes (4 MiB)
		// are not needed again.
		s.wasm = nil
		// Compiling the module churns through about a hundred MiB that the
		// idle gateway would otherwise keep resident for minutes; the live
		// heap afterwards is a fraction of that.
		debug.FreeOSMemory()
		s.tuneCollector()
		s.limitGoMemory()
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
func (s *Server) pluginOptions() pluginconfig.Options { return s.cfg.PluginOptions.Config() }

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

// nodeLocalGCPercent is the Go collector's target in node-local mode: a
// heap may grow half its live size between collections instead of all of
// it, which keeps a gateway beside its API server about 5 MiB smaller under
// sustained load for about 3 % more CPU time per request (RATIONALE.md).
const nodeLocalGCPercent = 50

// tuneCollector sets nodeLocalGCPercent in node-local mode unless GOGC set
// a target: after compiling, whose churn would otherwise be collected twice
// as often.
func (s *Server) tuneCollector() {
	if s.cfg.LocalAPIServer != "" {
		s.unlessEnvironmentSets("GOGC", "the node-local collector target", func() { debug.SetGCPercent(nodeLocalGCPercent) })
	}
}

// limitGoMemory sets --go-memory-limit-bytes as the Go runtime's soft memory
// limit, unless GOMEMLIMIT set one: after compiling, so that the compiler's
// churn is not collected back to back.
func (s *Server) limitGoMemory() {
	if s.cfg.GoMemoryLimitBytes != 0 {
		s.unlessEnvironmentSets("GOMEMLIMIT", "--go-memory-limit-bytes", func() { debug.SetMemoryLimit(s.cfg.GoMemoryLimitBytes) })
	}
}

// unlessEnvironmentSets applies a runtime setting unless the environment
// variable that sets it is set: the operator's choice wins, and is logged.
func (s *Server) unlessEnvironmentSets(variable, setting string, apply func()) {
	if value, ok := os.LookupEnv(variable); ok {
		s.log.Info(variable+" is set: "+setting+" left unapplied", variable, value)
		return
	}
	apply()
}
