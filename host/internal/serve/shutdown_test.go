package serve

import (
	"context"
	"crypto/tls"
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
	s, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()

	ops := "http://" + s.MetricsAddr().String()
	plain := &http.Client{Timeout: 10 * time.Second}
	ca, _ := readPool(f.cfg.PeerCAFile)
	// Each client call gets a new connection, as a client the load balancer
	// still sends here would.
	newClient := func() *http.Client {
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca}, DisableKeepAlives: true}}
	}
	gateway := "https://" + s.GatewayAddr().String()
	eventually(t, "ready", s.Ready)

	slow := make(chan int, 1)
	go func() {
		resp, err := newClient().Get(gateway + "/slow")
		if err != nil {
			slow <- 0
			return
		}
		resp.Body.Close()
		slow <- resp.StatusCode
	}()
	eventually(t, "the slow request to arrive", func() bool {
		n := int32(0)
		for _, srv := range f.servers {
			n += srv.slowEntered.Load()
		}
		return n == 1
	})

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
