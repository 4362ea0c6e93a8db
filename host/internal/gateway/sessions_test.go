package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// openSession starts an exec session through the gateway and returns its
// client connection once the backend's first line arrived.
func openSession(t *testing.T, h *harness) (*tls.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.front.URL, "https://"), &tls.Config{RootCAs: h.peerCA.Pool(), NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "GET /api/v1/namespaces/default/pods/web/exec?command=sh&stdin=true HTTP/1.1\r\n"+
		"Host: gateway\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	if _, err := r.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	return conn, r
}

func TestDrainSessionsWaitsForSessionsAndEndsThoseLeftAtTheDeadline(t *testing.T) {
	h := newHarness(t, harnessConfig{handler: upgradeBackend})

	t.Run("a session still open at the deadline is ended", func(t *testing.T) {
		_, r := openSession(t, h)
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if n := h.gw.DrainSessions(ctx); n != 1 {
			t.Errorf("closed %d sessions; want 1", n)
		}
		if _, err := r.ReadByte(); err == nil {
			t.Error("the session's connection is still open after the drain")
		}
	})
	t.Run("a session that ends in time is waited for, not cut", func(t *testing.T) {
		conn, _ := openSession(t, h)
		time.AfterFunc(100*time.Millisecond, func() { conn.Close() })
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if n := h.gw.DrainSessions(ctx); n != 0 {
			t.Errorf("closed %d sessions; want 0", n)
		}
		if ctx.Err() != nil {
			t.Errorf("the drain waited %v, to its deadline, for a session that had ended", time.Since(start))
		}
	})
}
