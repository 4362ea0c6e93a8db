package gateway

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/hostileclient"
)

// streamingBackend answers a watch with events of 16 KiB until the request
// ends, a list with 1 MiB at once, and a request for a quiet watch
// (?watch=1&quiet=1) with its headers only.
func streamingBackend(string) http.Handler {
	event := strings.Repeat("x", 16<<10)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		switch {
		case r.URL.Query().Get("quiet") != "":
			_ = rc.Flush()
			<-r.Context().Done()
		case r.URL.Query().Get("watch") != "":
			for r.Context().Err() == nil {
				if _, err := w.Write([]byte(event)); err != nil {
					return
				}
				_ = rc.Flush()
				time.Sleep(10 * time.Millisecond)
			}
		default:
			_, _ = w.Write([]byte(strings.Repeat("y", 1<<20)))
		}
	})
}

// A client that opens streams and never lets the gateway send (a zero
// flow-control window) held every in-flight place past the request timeout.
// A response it does not read is given up when its request's time is up, and
// its place is free again.
func TestAResponseTheClientDoesNotReadIsGivenUpAtTheRequestTimeout(t *testing.T) {
	h := newHarness(t, harnessConfig{handler: streamingBackend, options: func(o *Options) {
		o.RequestTimeout, o.MaxRequestsInFlight = time.Second, 4
	}})
	attacker, err := hostileclient.DialH2(h.address(), h.anonymousTLS(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	var streams []uint32
	for range 4 {
		id, err := attacker.Get("kubernetes", commonPods)
		if err != nil {
			t.Fatal(err)
		}
		streams = append(streams, id)
	}
	waitUntil(t, "the attacker to hold every read-only place", func() bool { return h.gw.readOnly.n.Load() == 4 })
	if resp, _ := do(t, h.client(nil, true), "GET", h.front.URL+commonPods, nil, nil); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("while the places are held: %d, want 429", resp.StatusCode)
	}
	start := time.Now()
	waitUntil(t, "the unread responses to be given up", func() bool { return h.gw.readOnly.n.Load() == 0 })
	if held := time.Since(start); held > 3*time.Second {
		t.Errorf("the places were held %v after the request timeout, want about the timeout", held)
	}
	for _, id := range streams {
		if !attacker.Reset(id) {
			t.Errorf("stream %d was not reset", id)
		}
	}
	if resp, _ := do(t, h.client(nil, true), "GET", h.front.URL+commonPods, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("once the places are free: %d, want 200", resp.StatusCode)
	}
}

// A watch whose client stops reading is ended after the stalled-stream
// timeout, and its long-running place freed; a watch with nothing to send is
// never ended, however long it is quiet.
func TestAStalledLongRunningResponseEndsButAQuietOneDoesNot(t *testing.T) {
	const stall = 500 * time.Millisecond
	h := newHarness(t, harnessConfig{handler: streamingBackend, options: func(o *Options) { o.StalledStreamTimeout = stall }})
	attacker, err := hostileclient.DialH2(h.address(), h.anonymousTLS(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	stalled, err := attacker.Get("kubernetes", commonPods+"?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := attacker.Get("kubernetes", commonPods+"?watch=1&quiet=1")
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both watches to be served", func() bool { return h.gw.longRunning.inUse() == 2 })
	waitUntil(t, "the stalled watch to be ended", func() bool { return attacker.Reset(stalled) })
	waitUntil(t, "its place to be freed", func() bool { return h.gw.longRunning.inUse() == 1 })
	time.Sleep(4 * stall)
	if attacker.Reset(quiet) || h.gw.longRunning.inUse() != 1 {
		t.Errorf("the quiet watch was ended (reset %v, long-running requests %d)", attacker.Reset(quiet), h.gw.longRunning.inUse())
	}

	// A client that reads is never cut, however long its watch runs.
	resp, err := h.client(nil, true).Get(h.front.URL + commonPods + "?watch=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 64<<10)
	for deadline := time.Now().Add(4 * stall); time.Now().Before(deadline); {
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatalf("a watch read as it streams ended: %v", err)
		}
	}
}

// An upgraded session's client that stops reading ends the session: each
// write must complete within the timeout.
func TestAnUpgradedSessionsWriteWaitsNoLongerThanTheStalledStreamTimeout(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	conn := &stallBoundConn{Conn: server, timeout: 100 * time.Millisecond}
	start := time.Now()
	_, err := conn.Write([]byte("output nobody reads"))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write: %v, want a deadline error", err)
	}
	if waited := time.Since(start); waited > 2*time.Second {
		t.Errorf("the write waited %v", waited)
	}
}
