package shell

import (
	"log/slog"
	"net/http"
	"testing"
)

func TestOperatorListenerBoundsSlowAndIdleConnections(t *testing.T) {
	m := operatorServer(http.NotFoundHandler(), slog.Default())
	if m.ReadHeaderTimeout <= 0 || m.ReadTimeout <= 0 || m.WriteTimeout <= 0 || m.IdleTimeout <= 0 {
		t.Errorf("metrics server timeouts: header %v, read %v, write %v, idle %v; want all bounded",
			m.ReadHeaderTimeout, m.ReadTimeout, m.WriteTimeout, m.IdleTimeout)
	}
}
