package serve

import (
	"bytes"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/host/internal/shell"
	"github.com/skewgate/skewgate/host/internal/statuspage"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// DebugHandlersFlag is the flag that serves /debug/snapshot and
// /debug/requests.
const DebugHandlersFlag = "debug-handlers"

// addOperatorHandlers adds the status page, the debug handlers and the
// profiles to the operator endpoints the shell serves.
func (s *Server) addOperatorHandlers(mux *http.ServeMux) {
	if s.cfg.DebugHandlers {
		mux.HandleFunc("GET /debug/snapshot", func(w http.ResponseWriter, _ *http.Request) {
			cur := s.applied.Load()
			if cur == nil {
				shell.WriteText(w, http.StatusNotFound, "no snapshot accepted yet\n")
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_, _ = w.Write(cur.raw)
		})
		mux.Handle("GET /debug/requests", s.requests)
	} else {
		// Whoever reaches the listener, every hostNetwork Pod of a node
		// included, would read them: they are off unless asked for, and
		// say so.
		off := func(w http.ResponseWriter, r *http.Request) {
			shell.WriteText(w, http.StatusNotFound, r.URL.Path+" is served only with --"+DebugHandlersFlag+"\n")
		}
		mux.HandleFunc("GET /debug/snapshot", off)
		mux.HandleFunc("GET /debug/requests", off)
	}
	mux.HandleFunc("GET /{$}", s.serveStatusPage)
	if s.cfg.Profiling {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
}

func (s *Server) serveStatusPage(w http.ResponseWriter, _ *http.Request) {
	members := s.shell.Controller().Members()
	in := statuspage.Input{Ready: s.Ready(), Now: time.Now(), Members: &members}
	if cur := s.applied.Load(); cur != nil {
		in.Snapshot, in.AcceptedAt, in.Addresses = cur.snap, cur.acceptedAt, cur.addresses
	}
	var b bytes.Buffer
	if err := statuspage.Render(&b, in); err != nil {
		s.log.Error("rendering the status page failed", "error", err)
		shell.WriteText(w, http.StatusInternalServerError, "status page unavailable\n")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_, _ = w.Write(b.Bytes())
}

// collectors are the gateway's, the plugin host's and the ECDS file's
// metrics, served beside the shell's.
func (s *Server) collectors() []prometheus.Collector {
	counter := func(def *metricdef.Metric, v *atomic.Uint64) prometheus.Collector {
		return promdef.CounterFunc(def, func() float64 { return float64(v.Load()) })
	}
	return []prometheus.Collector{
		s.gw,
		pluginMetrics{s.plugins},
		counter(&metricdef.ServeECDSWrites, &s.counts.ecdsWrites),
		counter(&metricdef.ServeECDSWriteFailures, &s.counts.ecdsFailures),
	}
}

// pluginMetrics collects the plugin host's metrics once the first snapshot
// has started it.
type pluginMetrics struct{ plugins *pluginSlot }

// Describe sends nothing, as the host does: the plugin defines its metrics
// while it runs.
func (pluginMetrics) Describe(chan<- *prometheus.Desc) {}

func (p pluginMetrics) Collect(ch chan<- prometheus.Metric) {
	if host := p.plugins.host.Load(); host != nil {
		host.Collect(ch)
	}
}
