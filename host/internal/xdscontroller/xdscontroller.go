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
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/host/internal/shell"
	"github.com/skewgate/skewgate/host/internal/xds"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// Server is a configured controller and management server; Listen binds it,
// Serve runs it.
type Server struct {
	cfg         Config
	log         *slog.Logger
	envoyModule discovery.SchemaVersion
	shell       *shell.Shell
	xds         *xds.Server
	xdsListener net.Listener

	publishFailures atomic.Uint64
}

// shutdownTimeout bounds the operator listener's drain; the xDS streams are
// stopped at once, and Envoys keep the configuration they have.
const shutdownTimeout = 5 * time.Second

// New checks cfg, reads every file it names and prepares the controller and
// the management server. Nothing listens yet.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.complete()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	if s.envoyModule, err = cfg.envoyModuleSchema(); err != nil {
		return nil, err
	}
	controller.NoteOlderModule(s.log, "the Envoys' plugin module", s.envoyModule)
	if s.shell, err = shell.New(shell.Config{
		Options:            cfg.Options,
		MetricsBindAddress: cfg.MetricsBindAddress,
		ShutdownTimeout:    shutdownTimeout,
		NotReady:           "no plugin configuration published yet",
		Logger:             cfg.Logger,
	}); err != nil {
		return nil, err
	}
	certificates := s.shell.Certificates()
	serving, err := certificates.KeyPair("--xds-tls-cert-file/--xds-tls-private-key-file", cfg.TLSCertFile, cfg.TLSPrivateKeyFile)
	if err != nil {
		return nil, err
	}
	clientCA, err := certificates.CABundle("--xds-client-ca-file", cfg.ClientCAFile)
	if err != nil {
		return nil, err
	}
	if s.xds, err = xds.New(xds.Options{Certificate: serving.Certificate, ClientCAs: clientCA.Pool,
		MaxStreams: cfg.MaxStreams, MaxStreamsPerClient: cfg.MaxStreamsPerClient, Logger: s.log.With("component", "xds")}); err != nil {
		return nil, err
	}
	_, err = s.shell.Attach(shell.Sink{
		Take: s.onSnapshot,
		Serve: func() error {
			if err := s.xds.Serve(s.xdsListener); err != nil {
				return fmt.Errorf("xDS listener: %w", err)
			}
			return nil
		},
		Shutdown: func(context.Context) { s.xds.Stop() },
		Collectors: []prometheus.Collector{
			s.xds,
			promdef.CounterFunc(&metricdef.XDSPublishFailures,
				func() float64 { return float64(s.publishFailures.Load()) }),
		},
	})
	return s, err
}

// onSnapshot is the sink's hand-over (shell.Sink.Take): the snapshot's
// plugin configuration is published, or, if it cannot be, the controller
// offers it again on its next poll.
func (s *Server) onSnapshot(_ context.Context, p controller.Published) error {
	if err := s.publish(p.Raw, p.Snapshot); err != nil {
		s.publishFailures.Add(1)
		s.log.Error("publishing the plugin configuration over xDS failed", "generation", p.Snapshot.Generation, "error", err)
		return err
	}
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
	if err := s.shell.Listen(); err != nil {
		s.xdsListener.Close()
		return err
	}
	return nil
}

// XDSAddr and MetricsAddr are the bound addresses, after Listen.
func (s *Server) XDSAddr() net.Addr     { return s.xdsListener.Addr() }
func (s *Server) MetricsAddr() net.Addr { return s.shell.MetricsAddr() }

// Run listens and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	return s.Serve(ctx)
}

// Serve runs the controller, the certificate watcher and both listeners
// until ctx ends or a listener fails (shell.Shell.Serve).
func (s *Server) Serve(ctx context.Context) error {
	return s.shell.Serve(ctx, "skewgate-xds serving", "xds", s.XDSAddr().String(), "metrics", s.MetricsAddr().String(),
		"identity_mode", s.cfg.IdentityMode, "envoy_wasm_path", s.cfg.EnvoyWasmPath)
}
