// Package shell is the process skewgate serve and skewgate-xds share around
// their sinks, what each makes of the published snapshots (the plugin VMs,
// the gateway and the ECDS file; the xDS management server): the
// certificate files it follows, the controller polling the API servers, the
// plain-HTTP operator listener (/metrics, /healthz, /readyz), and the run
// and shutdown, as kube-apiserver's: /readyz fails first, the listeners keep
// serving for the shutdown delay, then drain.
package shell

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/skewgate/skewgate/host/internal/certfile"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// Config is what the shell is told; Options are the command-line groups it
// shares with every command that runs it.
type Config struct {
	Options
	// LocalAPIServer is skewgate serve's --local-apiserver; empty: none.
	LocalAPIServer string
	// MetricsBindAddress is host:port of the operator listener.
	MetricsBindAddress string
	// ShutdownDelay is how long the listeners keep serving, with /readyz
	// failing, once shutdown begins; ShutdownTimeout then bounds the drain.
	ShutdownDelay, ShutdownTimeout time.Duration
	// NotReady is why /readyz fails until the sink has taken a snapshot.
	NotReady string
	Logger   *slog.Logger
}

// Sink is what a command makes of the published snapshots, and its
// listener.
type Sink struct {
	// Take is the controller's hand-over (controller.Options.OnSnapshot):
	// nil once the sink serves the snapshot; an error keeps the previous
	// one current, and the controller offers this one again on its next
	// poll.
	Take func(ctx context.Context, p controller.Published) error
	// Serve serves the sink's listener until Shutdown; an error ends the
	// process.
	Serve func() error
	// Draining, when set, is called as shutdown begins with a delay, while
	// the listener still serves.
	Draining func()
	// Shutdown stops the listener accepting, lets what is in flight finish
	// until ctx ends and then ends the rest.
	Shutdown func(ctx context.Context)
	// Collectors are the sink's metrics, served beside the shell's.
	Collectors []prometheus.Collector
}

// Shell is the process around a sink: New follows the certificates, Attach
// builds the controller and the operator listener around the sink, Listen
// binds the operator listener and Serve runs it all.
type Shell struct {
	cfg          Config
	log          *slog.Logger
	certificates *certfile.Watcher
	peerCA       *certfile.CABundle
	frontProxy   *certfile.KeyPair
	sink         Sink
	ctrl         *controller.Controller

	operator         *http.Server
	operatorListener net.Listener

	// ready is set once the sink took a snapshot; stopping once shutdown
	// begins: /readyz fails from then on.
	ready, stopping atomic.Bool
}

// New reads the API servers' CA and the front-proxy client certificate and
// follows them.
func New(cfg Config) (*Shell, error) {
	// client-go and apimachinery log through klog, which is process-wide:
	// their messages join the structured log instead of stderr.
	klog.SetSlogLogger(cfg.Logger.With("component", "client-go"))
	sh := &Shell{cfg: cfg, log: cfg.Logger}
	// Every certificate, key and CA file is followed: new handshakes use new
	// material, connections in flight keep theirs.
	sh.certificates = certfile.NewWatcher(cfg.Logger.With("component", "certificates"), certfile.DefaultInterval)
	var err error
	if sh.peerCA, err = sh.certificates.CABundle("--peer-ca-file", cfg.PeerCAFile); err != nil {
		return nil, err
	}
	if cfg.ProxyClientCertFile != "" {
		if sh.frontProxy, err = sh.certificates.KeyPair("--proxy-client-cert-file/--proxy-client-key-file", cfg.ProxyClientCertFile, cfg.ProxyClientKeyFile); err != nil {
			return nil, err
		}
	}
	return sh, nil
}

// Certificates follows the sink's own certificate files too.
func (sh *Shell) Certificates() *certfile.Watcher { return sh.certificates }

// PeerCA verifies the API servers (--peer-ca-file).
func (sh *Shell) PeerCA() *certfile.CABundle { return sh.peerCA }

// FrontProxyCertificate is the front-proxy client certificate; nil without
// --proxy-client-cert-file.
func (sh *Shell) FrontProxyCertificate() *certfile.KeyPair { return sh.frontProxy }

// Controller polls the API servers, once Attach has built it.
func (sh *Shell) Controller() *controller.Controller { return sh.ctrl }

// Attach builds the controller, which hands its snapshots to sink, and the
// operator listener's handler, which serves the returned mux: the sink may
// add its own endpoints to it.
func (sh *Shell) Attach(sink Sink) (*http.ServeMux, error) {
	sh.sink = sink
	opts := controller.Options{
		LocalServer:           sh.cfg.LocalAPIServer,
		PeerCA:                sh.peerCA,
		FrontProxyCertificate: sh.frontProxy,
		OnSnapshot:            sh.Take,
		Logger:                sh.log.With("component", "controller"),
	}
	if err := sh.cfg.ApplyTo(&opts); err != nil {
		return nil, err
	}
	var err error
	if sh.ctrl, err = controller.New(opts); err != nil {
		return nil, err
	}
	mux := sh.operatorMux()
	sh.operator = operatorServer(mux, sh.log)
	return mux, nil
}

// operatorServer serves the operator endpoints, which answer small GETs at
// once: a connection that takes longer, or idles between scrapes, is
// closed.
func operatorServer(handler http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelInfo),
	}
}

// Take hands a published snapshot to the sink; the process is ready once
// the sink has taken one.
func (sh *Shell) Take(ctx context.Context, p controller.Published) error {
	if err := sh.sink.Take(ctx, p); err != nil {
		return err
	}
	sh.ready.Store(true)
	return nil
}

// Ready reports whether the sink has taken a snapshot and shutdown has not
// begun.
func (sh *Shell) Ready() bool { return sh.ready.Load() && !sh.stopping.Load() }

// operatorMux serves /metrics, /healthz and /readyz.
func (sh *Shell) operatorMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(sh.registry(), promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(sh.log.Handler(), slog.LevelWarn),
		// A collector that fails costs its own series, not the scrape.
		ErrorHandling: promhttp.ContinueOnError,
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case sh.stopping.Load():
			WriteText(w, http.StatusServiceUnavailable, "not ready: shutting down\n")
		case !sh.ready.Load():
			WriteText(w, http.StatusServiceUnavailable, "not ready: "+sh.cfg.NotReady+"\n")
		default:
			WriteText(w, http.StatusOK, "ok\n")
		}
	})
	return mux
}

// registry holds the Go runtime's and the process's metrics, the
// controller's, the certificate files', the readiness and the sink's.
func (sh *Shell) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		sh.ctrl,
		sh.certificates,
		promdef.GaugeFunc(&metricdef.ServeReady,
			func() float64 {
				if sh.Ready() {
					return 1
				}
				return 0
			}),
	)
	reg.MustRegister(sh.sink.Collectors...)
	return reg
}

// WriteText answers a plain-text body that no cache keeps.
func WriteText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, text)
}

// Listen binds the operator listener.
func (sh *Shell) Listen() error {
	var err error
	if sh.operatorListener, err = net.Listen("tcp", sh.cfg.MetricsBindAddress); err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	return nil
}

// MetricsAddr is the operator listener's bound address, after Listen.
func (sh *Shell) MetricsAddr() net.Addr { return sh.operatorListener.Addr() }

// Serve runs the controller, the certificate watcher, the sink's listener
// and the operator listener, logging serving with attrs once they run,
// until ctx is done or a listener fails; then it shuts down as
// kube-apiserver does: /readyz fails at once, both listeners keep serving
// for Config.ShutdownDelay, then they stop accepting and in-flight requests
// drain for at most Config.ShutdownTimeout, after which the rest are cut.
// The controller stops last, and every listener is closed when Serve
// returns. Listen must have been called.
func (sh *Shell) Serve(ctx context.Context, serving string, attrs ...any) error {
	// The sink stays current until it has drained.
	ctrlCtx, stopController := context.WithCancel(context.WithoutCancel(ctx))
	defer stopController()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		if err := sh.sink.Serve(); err != nil {
			errs <- err
		}
	})
	wg.Go(func() {
		if err := sh.operator.Serve(sh.operatorListener); !errors.Is(err, http.ErrServerClosed) {
			errs <- fmt.Errorf("metrics listener: %w", err)
		}
	})
	controllerDone := make(chan struct{})
	go func() {
		defer close(controllerDone)
		_ = sh.ctrl.Run(ctrlCtx)
	}()
	certificatesDone := make(chan struct{})
	go func() {
		defer close(certificatesDone)
		_ = sh.certificates.Run(ctrlCtx)
	}()
	sh.log.Info(serving, attrs...)

	var runErr error
	select {
	case <-ctx.Done():
		sh.stopping.Store(true)
		if delay := sh.cfg.ShutdownDelay; delay > 0 {
			sh.log.Info("shutting down: /readyz fails; still serving for the shutdown delay", "delay", delay)
			if sh.sink.Draining != nil {
				sh.sink.Draining()
			}
			timer := time.NewTimer(delay)
			select {
			case <-timer.C:
			case runErr = <-errs:
				timer.Stop()
			}
		}
	case runErr = <-errs:
	}
	sh.stopping.Store(true)
	sh.log.Info("shutting down: draining in-flight requests", "timeout", sh.cfg.ShutdownTimeout)
	drainCtx, drainCancel := context.WithTimeout(context.Background(), sh.cfg.ShutdownTimeout)
	defer drainCancel()
	// The listeners close together, so that a process started in this one's
	// place can bind every port while it drains.
	var drain sync.WaitGroup
	drain.Go(func() { sh.sink.Shutdown(drainCtx) })
	drain.Go(func() { ShutdownServer(drainCtx, sh.log, "metrics", sh.operator) })
	drain.Wait()
	wg.Wait()
	stopController()
	<-controllerDone
	<-certificatesDone
	return runErr
}

// ShutdownServer stops srv, the listener named name, accepting and lets its
// in-flight requests finish until ctx ends, then closes them.
func ShutdownServer(ctx context.Context, log *slog.Logger, name string, srv *http.Server) {
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("in-flight requests did not finish in time; closing them", "listener", name, "error", err)
		_ = srv.Close()
	}
}
