package serve

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// canBind reports whether a new listener can take address now.
func canBind(address string) bool {
	l, err := net.Listen("tcp", address)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func TestShutdownFailsReadyzKeepsServingForTheDelayThenReleasesBothPortsWhileDraining(t *testing.T) {
	f := newFixture(t)
	const delay = 3 * time.Second
	f.cfg.ShutdownDelay = delay
	s, cancel, served := f.serve(t)
	defer cancel()

	ops := "http://" + s.MetricsAddr().String()
	plain := &http.Client{Timeout: 10 * time.Second}
	// Each client call gets a new connection, as a client the load balancer
	// still sends here would.
	newClient := func() *http.Client {
		transport := f.gatewayTransport()
		transport.DisableKeepAlives = true
		return &http.Client{Timeout: 10 * time.Second, Transport: transport}
	}
	gateway := "https://" + s.GatewayAddr().String()
	eventually(t, "ready", s.Ready)

	slow := f.slowRequest(t, newClient(), gateway)
	cancel()
	stopped := time.Now()
	code, _, body := get(t, plain, ops+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz once shutdown began: %d %q, want 503 shutting down", code, body)
	}
	if code, _, body := get(t, newClient(), gateway+"/api/v1/namespaces/x/configmaps"); code != http.StatusOK {
		t.Errorf("a new connection during the shutdown delay: %d %s, want 200", code, body)
	}
	// A process started in this one's place can bind both ports once the
	// delay is over, while the slow request still drains.
	eventually(t, "both ports free", func() bool {
		return canBind(s.GatewayAddr().String()) && canBind(s.MetricsAddr().String())
	})
	if kept := time.Since(stopped); kept < delay {
		t.Errorf("the listeners closed %v after shutdown began, before the %v delay", kept, delay)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) before the in-flight request finished", err)
	default:
	}
	f.release()
	if code := <-slow; code != http.StatusOK {
		t.Errorf("in-flight request: status %d, want 200", code)
	}
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
