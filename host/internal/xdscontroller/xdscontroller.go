// Package xdscontroller runs skewgate-xds: the controller polls the API
// servers, and every snapshot becomes the plugin configuration that the xDS
// management server (package xds, go-control-plane) serves to a fleet of
// Envoys. No plugin runs here, so that the node-local gateway (skewgate
// serve) links neither gRPC nor go-control-plane, and this command no
// WebAssembly runtime. A plain-HTTP listener serves /metrics, /healthz and
// /readyz.
package xdscontroller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/certfile"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/host/internal/xds"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// Server is a configured controller and management server; Listen binds it,
// Serve runs it.
type Server struct {
	cfg          Config
	log          *slog.Logger
	envoyModule  discovery.SchemaVersion
	certificates *certfile.Watcher
	ctrl         *controller.Controller
	xds          *xds.Server

	xdsListener, metricsListener net.Listener
	metricsServer                *http.Server

	// ready is set once a configuration was published.
	ready                             atomic.Bool
	configRejections, publishFailures atomic.Uint64
}

// New checks cfg, reads every file it names and prepares the controller and
// the management server. Nothing listens yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	klog.SetSlogLogger(cfg.Logger.With("component", "client-go"))
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.envoyModule, err = cfg.envoyModuleSchema(); err != nil {
		return nil, err
	}
	controller.NoteOlderModule(s.log, "the Envoys' plugin module", s.envoyModule)
	s.certificates = certfile.NewWatcher(cfg.Logger.With("component", "certificates"), certfile.DefaultInterval)
	peerCA, err := s.certificates.CABundle("--peer-ca-file", cfg.PeerCAFile)
	if err != nil {
		return nil, err
	}
	serving, err := s.certificates.KeyPair("--xds-tls-cert-file/--xds-tls-private-key-file", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
	if err != nil {
		return nil, err
	}
	clientCA, err := s.certificates.CABundle("--xds-client-ca-file", cfg.ClientCAFile)
	if err != nil {
		return nil, err
	}
	var proxyClient *certfile.KeyPair
	if cfg.ProxyClientCertFile != "" {
		if proxyClient, err = s.certificates.KeyPair("--proxy-client-cert-file/--proxy-client-key-file", cfg.ProxyClientCertFile, cfg.ProxyClientKeyFile); err != nil {
			return nil, err
		}
	}
	if s.xds, err = xds.New(xds.Options{Certificate: serving.Certificate, ClientCAs: clientCA.Pool,
		MaxStreams: cfg.MaxStreams, MaxStreamsPerClient: cfg.MaxStreamsPerClient, Logger: s.log.With("component", "xds")}); err != nil {
		return nil, err
	}
	ctrlOpts := controller.Options{
		StaticServers:         cfg.APIServers,
		PeerCA:                peerCA,
		FrontProxyCertificate: proxyClient,
		// The Envoys present the certificate only in front-proxy mode.
		CheckFrontProxyCertificate: cfg.IdentityMode == string(pluginconfig.IdentityFrontProxy),
		OnSnapshot:                 s.onSnapshot,
		Logger:                     cfg.Logger.With("component", "controller"),
	}
	if err := cfg.ControllerOptions.ApplyTo(&ctrlOpts); err != nil {
		return nil, err
	}
	if s.ctrl, err = controller.New(ctrlOpts); err != nil {
		return nil, err
	}
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

// onSnapshot is the controller's hand-over: the snapshot's plugin
// configuration is published, or, if it cannot be, the controller offers it
// again on its next poll.
func (s *Server) onSnapshot(_ context.Context, p controller.Published) error {
	if err := s.publish(p.Raw, p.Snapshot); err != nil {
		s.publishFailures.Add(1)
		s.log.Error("publishing the plugin configuration over xDS failed", "generation", p.Snapshot.Generation, "error", err)
		return err
	}
	s.ready.Store(true)
	s.log.Info("snapshot published", "generation", p.Snapshot.Generation, "servers", len(p.Snapshot.Servers))
	return nil
}

// publish hands the management server the plugin configuration of a
// snapshot, once the plugin's own parser accepts it.
func (s *Server) publish(raw []byte, snap *discovery.Snapshot) error {
	config, err := s.pluginConfig(raw)
	if err != nil {
		return err
	}
	version, err := s.version(snap)
	if err != nil {
		return err
	}
	doc, err := envoyconfig.RenderExtensionConfig(config, s.cfg.EnvoyWasmPath)
	if err != nil {
		return err
	}
	ext, err := xds.ParseExtensionConfig(doc)
	if err != nil {
		return err
	}
	return s.xds.Publish(ext, version)
}

// pluginConfig is the plugin configuration of a snapshot, checked by the
// parser the plugin runs.
func (s *Server) pluginConfig(raw []byte) ([]byte, error) {
	config, err := s.cfg.PluginOptions.Config().Marshal(raw)
	if err != nil {
		return nil, err
	}
	if _, err := pluginconfig.Parse(config); err != nil {
		return nil, fmt.Errorf("the plugin would refuse the configuration: %w", err)
	}
	return config, nil
}

// version names a snapshot's resource by what decides the plugin's
// behaviour: the resource rendered with the snapshot numbered 1. The
// generation counts this controller's snapshots since it started, so it
// differs between replicas and across a restart for the same discovery, and
// the plugin only reports it.
func (s *Server) version(snap *discovery.Snapshot) (string, error) {
	unnumbered := *snap
	unnumbered.Generation = 1
	config, err := s.cfg.PluginOptions.Config().Marshal(unnumbered.AppendJSON(nil))
	if err != nil {
		return "", err
	}
	doc, err := envoyconfig.RenderExtensionConfig(config, s.cfg.EnvoyWasmPath)
	if err != nil {
		return "", err
	}
	return xds.Version(doc), nil
}

// Listen binds the xDS and metrics listeners.
func (s *Server) Listen() error {
	var err error
	if s.xdsListener, err = net.Listen("tcp", s.cfg.BindAddress); err != nil {
		return fmt.Errorf("xDS listener: %w", err)
	}
	if s.metricsListener, err = net.Listen("tcp", s.cfg.MetricsBindAddress); err != nil {
		s.xdsListener.Close()
		return fmt.Errorf("metrics listener: %w", err)
	}
	return nil
}

// XDSAddr and MetricsAddr are the bound addresses, after Listen.
func (s *Server) XDSAddr() net.Addr     { return s.xdsListener.Addr() }
func (s *Server) MetricsAddr() net.Addr { return s.metricsListener.Addr() }

// Run listens and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve runs the controller, the certificate watcher and both listeners
// until ctx ends or a listener fails.
func (s *Server) Serve(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() {
		if err := s.xds.Serve(s.xdsListener); err != nil {
			errs <- fmt.Errorf("xDS listener: %w", err)
		}
	}()
	go func() {
		if err := s.metricsServer.Serve(s.metricsListener); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("metrics listener: %w", err)
		}
	}()
	done := make(chan struct{}, 2)
	go func() { _ = s.ctrl.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.certificates.Run(ctx); done <- struct{}{} }()
	s.log.Info("skewgate-xds serving", "xds", s.XDSAddr().String(), "metrics", s.MetricsAddr().String(),
		"identity_mode", s.cfg.IdentityMode, "envoy_wasm_path", s.cfg.EnvoyWasmPath)
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	cancel()
	s.xds.Stop()
	shutdown, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	_ = s.metricsServer.Shutdown(shutdown)
	<-done
	<-done
	return err
}

// metricsHandler serves /metrics, /healthz and /readyz.
func (s *Server) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		s.xds,
		s.ctrl,
		s.certificates,
		promdef.GaugeFunc(&metricdef.ServeReady,
			func() float64 {
				if s.ready.Load() {
					return 1
				}
				return 0
			}),
		promdef.CounterFunc(&metricdef.XDSPublishFailures,
			func() float64 { return float64(s.publishFailures.Load()) }),
	)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready: no plugin configuration published yet", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok\n")
	})
	return mux
}
