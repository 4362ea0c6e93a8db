package serve

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/skewgate/skewgate/host/internal/statuspage"

	"github.com/skewgate/skewgate/host/internal/promtext"
)

// metricsHandler serves the operator endpoints.
func (s *Server) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case s.stopping.Load():
			writeText(w, http.StatusServiceUnavailable, "not ready: shutting down\n")
			return
		case !s.Ready():
			writeText(w, http.StatusServiceUnavailable, "not ready: no snapshot accepted by the plugin yet\n")
			return
		}
		writeText(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /debug/snapshot", func(w http.ResponseWriter, _ *http.Request) {
		cur := s.applied.Load()
		if cur == nil {
			writeText(w, http.StatusNotFound, "no snapshot accepted yet\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write(cur.raw)
	})
	mux.HandleFunc("GET /{$}", s.serveStatusPage)
	return mux
}

func writeText(w http.ResponseWriter, code int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, text)
}

func (s *Server) serveStatusPage(w http.ResponseWriter, _ *http.Request) {
	in := statuspage.Input{Ready: s.Ready(), Now: time.Now()}
	if cur := s.applied.Load(); cur != nil {
		in.Snapshot, in.AcceptedAt, in.Addresses = cur.snap, cur.acceptedAt, cur.addresses
	}
	var b bytes.Buffer
	if err := statuspage.Render(&b, in); err != nil {
		s.log.Error("rendering the status page failed", "error", err)
		writeText(w, http.StatusInternalServerError, "status page unavailable\n")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	_, _ = w.Write(b.Bytes())
}

// serveMetrics writes the gateway's, the plugin host's, the controller's, the
// certificate files' and this process's own metrics.
func (s *Server) serveMetrics(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", promtext.ContentType)
	bw := bufio.NewWriter(w)
	write := func(f func(io.Writer) error) {
		if err := f(bw); err != nil {
			s.log.Warn("writing metrics failed", "error", err)
		}
	}
	write(s.gw.WritePrometheus)
	if host := s.plugins.host.Load(); host != nil {
		write(host.WritePrometheus)
	}
	write(s.ctrl.WritePrometheus)
	write(s.certificates.WritePrometheus)
	if s.xds != nil {
		write(s.xds.WritePrometheus)
	}
	ready := "0"
	if s.Ready() {
		ready = "1"
	}
	pw := promtext.NewWriter(bw)
	for _, m := range []struct{ name, kind, help, value string }{
		{"skewgate_ready", "gauge", "1 once a snapshot was accepted by the plugin VMs.", ready},
		{"skewgate_configuration_rejections_total", "counter", "Snapshots the plugin VMs did not accept; the previous configuration stayed.",
			strconv.FormatUint(s.counts.configRejections.Load(), 10)},
		{"skewgate_ecds_writes_total", "counter", "Envoy ECDS files written.", strconv.FormatUint(s.counts.ecdsWrites.Load(), 10)},
		{"skewgate_ecds_write_failures_total", "counter", "Envoy ECDS files that could not be written.", strconv.FormatUint(s.counts.ecdsFailures.Load(), 10)},
		{"skewgate_xds_publish_failures_total", "counter", "Accepted plugin configurations the xDS management server could not be given.", strconv.FormatUint(s.counts.xdsFailures.Load(), 10)},
	} {
		pw.Family(m.name, m.kind, m.help)
		pw.Sample(m.name, m.value)
	}
	_ = pw.Flush()
	_ = bw.Flush()
}
