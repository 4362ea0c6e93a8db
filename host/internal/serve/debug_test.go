package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/gateway"
)

// /debug/snapshot and /debug/requests answer whoever reaches the metrics
// listener, every hostNetwork Pod of a node included: they are served only
// with --debug-handlers, and without it answer 404 naming the flag.
func TestDebugHandlersAreServedOnlyWithTheirFlag(t *testing.T) {
	for _, c := range []struct {
		name string
		on   bool
	}{{"off by default", false}, {"on with --debug-handlers", true}} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.DebugHandlers = c.on
			s := f.startServer(t)
			plain := &http.Client{Timeout: 10 * time.Second}
			for _, path := range []string{"/debug/snapshot", "/debug/requests"} {
				code, header, body := get(t, plain, "http://"+s.MetricsAddr().String()+path)
				switch {
				case c.on && (code != http.StatusOK || header.Get("Content-Type") != "application/json" || !json.Valid([]byte(body))):
					t.Errorf("GET %s: %d %s: %.200s, want its JSON", path, code, header.Get("Content-Type"), body)
				case !c.on && (code != http.StatusNotFound || body != path+" is served only with --debug-handlers\n"):
					t.Errorf("GET %s: %d: %q, want 404 naming --debug-handlers", path, code, body)
				}
			}
			// The other operator endpoints stay as they were.
			for _, path := range []string{"/healthz", "/readyz", "/metrics", "/"} {
				if code, _, body := get(t, plain, "http://"+s.MetricsAddr().String()+path); code != http.StatusOK {
					t.Errorf("GET %s: %d: %.200s", path, code, body)
				}
			}
		})
	}
}

// The request log keeps shapes for --request-log-window, an hour unless
// told; a window that is not positive is refused naming the flag.
func TestRequestLogWindowFlag(t *testing.T) {
	if got := NewConfig().RequestLogWindow; got != gateway.DefaultRequestLogWindow || gateway.DefaultRequestLogWindow != time.Hour {
		t.Errorf("default window %v, want 1h", got)
	}
	for _, c := range []struct {
		arg     string
		want    time.Duration
		refused string
	}{
		{"--request-log-window=30m", 30 * time.Minute, ""},
		{"--request-log-window=24h", 24 * time.Hour, ""},
		{"--request-log-window=0s", 0, "--request-log-window 0s: must be positive"},
		{"--request-log-window=-1m", -time.Minute, "--request-log-window -1m0s: must be positive"},
	} {
		t.Run(c.arg, func(t *testing.T) {
			cfg := NewConfig()
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			cfg.AddFlags(fs)
			if err := fs.Parse([]string{c.arg}); err != nil {
				t.Fatal(err)
			}
			if cfg.RequestLogWindow != c.want {
				t.Fatalf("%s: window %v, want %v", c.arg, cfg.RequestLogWindow, c.want)
			}
			var messages []string
			for _, err := range cfg.validate() {
				if strings.Contains(err.Error(), "request-log-window") {
					messages = append(messages, err.Error())
				}
			}
			if got := strings.Join(messages, "; "); got != c.refused {
				t.Errorf("%s: refused with %q, want %q", c.arg, got, c.refused)
			}
		})
	}
}
