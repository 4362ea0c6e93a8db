package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/skewgate/skewgate/host/internal/hostileclient"
)

func TestOnlyEvidenceFromTheServerMarksIt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		marked bool
	}{
		{"dial refused", &connectError{phase: "dial", err: &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}}, true},
		{"TLS handshake failed", &connectError{phase: "tls", err: errors.New("x509: certificate signed by unknown authority")}, true},
		{"HTTP/1.1 connection broken by the server", fmt.Errorf("net/http: HTTP/1.x transport connection broken: %w", io.EOF), true},
		{"HTTP/2 connection ended", io.ErrUnexpectedEOF, true},
		{"connection reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"broken pipe writing the request", &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, true},
		{"stream reset by the server", http2.StreamError{StreamID: 1, Code: http2.ErrCodeInternal, Cause: errors.New("received from peer")}, true},
		{"GOAWAY, then the connection closed", errors.New("http2: server sent GOAWAY and closed the connection; LastStreamID=1, ErrCode=NO_ERROR, debug=\"\""), true},

		{"invalid Host header, refused by the transport", errors.New("http2: invalid Host header"), false},
		{"invalid header field, refused by the transport", errors.New(`net/http: invalid header field value for "X-A"`), false},
		{"request headers over the server's limit", errors.New("http2: request header list larger than peer's advertised limit"), false},
		{"stream reset by the gateway's own transport", http2.StreamError{StreamID: 1, Code: http2.ErrCodeCancel}, false},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: timeoutError{}}, false},
		{"connection the gateway closed", &net.OpError{Op: "read", Net: "tcp", Err: net.ErrClosed}, false},
		{"idle connection closed as it was reused", errors.New("http: server closed idle connection"), false},
		{"HTTP/2 ping unanswered", errors.New("http2: client connection lost"), false},
		{"request canceled", context.Canceled, false},
	} {
		if got := serverFailed(tc.err); got != tc.marked {
			t.Errorf("%s (%v): marks the server = %v, want %v", tc.name, tc.err, got, tc.marked)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// lostRecorder records the servers the gateway reports lost.
type lostRecorder struct {
	mu   sync.Mutex
	lost []string
}

func (r *lostRecorder) report(cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = append(r.lost, cluster)
}

func (r *lostRecorder) reported() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lost...)
}

func newEvidenceHarness(t testing.TB) (*harness, *lostRecorder) {
	lost := &lostRecorder{}
	h := newHarness(t, harnessConfig{options: func(o *Options) { o.OnServerLost = lost.report }})
	return h, lost
}

func (h *harness) address() string { return strings.TrimPrefix(h.front.URL, "https://") }

func (h *harness) anonymousTLS() *tls.Config { return &tls.Config{RootCAs: h.peerCA.Pool()} }

// The requests an anonymous client used to mark healthy servers lost with:
// the gateway answers each 400 as the client's mistake, and reports no server.
func TestRequestsTheGatewayCannotSendMarkNoServer(t *testing.T) {
	h, lost := newEvidenceHarness(t)
	http1 := func(request string) (int, error) {
		return hostileclient.HTTP1(h.address(), h.anonymousTLS(), request, 10*time.Second)
	}
	http2Stream := func(send func(*hostileclient.H2Conn) (uint32, error)) (int, error) {
		return hostileclient.H2Stream(h.address(), h.anonymousTLS(), 10*time.Second, send)
	}
	for _, tc := range []struct {
		name string
		send func() (int, error)
	}{
		{"HTTP/2 GET with an invalid :authority", func() (int, error) {
			return http2Stream(func(c *hostileclient.H2Conn) (uint32, error) { return c.Get("a b", commonPods) })
		}},
		{"HTTP/1.1 POST with a malformed chunked body", func() (int, error) {
			return http1(hostileclient.MalformedChunkedBody(commonPods))
		}},
		{"HTTP/2 POST announcing 2,000,000 bytes and sending 10", func() (int, error) {
			return http2Stream(func(c *hostileclient.H2Conn) (uint32, error) {
				return c.ShortBody(commonPods, 2_000_000, []byte(`{"kind":1}`))
			})
		}},
		{"HTTP/2 POST announcing 1,000 bytes and sending 10", func() (int, error) {
			return http2Stream(func(c *hostileclient.H2Conn) (uint32, error) {
				return c.ShortBody(commonPods, 1000, []byte(`{"kind":1}`))
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := tc.send()
			if err != nil || status != http.StatusBadRequest {
				t.Errorf("answered %d, %v; want 400", status, err)
			}
			if got := lost.reported(); len(got) > 0 {
				t.Errorf("servers reported lost: %v; want none", got)
			}
		})
	}
}

// FuzzHostileHTTP1MarksNoServer sends arbitrary bytes as an HTTP/1.1 request
// to a gateway in front of healthy servers, ends the client's side, and
// asserts that no server is ever reported lost, whatever was sent.
func FuzzHostileHTTP1MarksNoServer(f *testing.F) {
	for _, seed := range []string{
		"GET " + commonPods + " HTTP/1.1\r\nHost: kubernetes\r\n\r\n",
		hostileclient.MalformedChunkedBody(commonPods),
		"POST " + commonPods + " HTTP/1.1\r\nHost: kubernetes\r\nContent-Length: 2000000\r\n\r\n{\"kind\":1}",
		"POST " + commonPods + " HTTP/1.1\r\nHost: kubernetes\r\nContent-Length: 100\r\n\r\n{\"kind\":1}",
		"PUT " + commonPods + "/web HTTP/1.1\r\nHost: kubernetes\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
		"GET " + commonPods + "?watch=1 HTTP/1.1\r\nHost: kubernetes\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET /api HTTP/1.1\r\nHost: a b\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	h, lost := newEvidenceHarness(f)
	f.Fuzz(func(t *testing.T, request []byte) {
		conn, err := tls.Dial("tcp", h.address(), &tls.Config{RootCAs: h.peerCA.Pool(), NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Write(request)
		_ = conn.CloseWrite()
		_, _ = io.Copy(io.Discard, conn)
		if got := lost.reported(); len(got) > 0 {
			t.Fatalf("request %q: servers reported lost: %v", request, got)
		}
	})
}

// FuzzHostileHTTP2MarksNoServer opens HTTP/2 streams with an arbitrary
// authority, path, announced length and body, and asserts that no server is
// ever reported lost.
func FuzzHostileHTTP2MarksNoServer(f *testing.F) {
	f.Add("a b", commonPods, "POST", 2_000_000, []byte(`{"kind":1}`), true)
	f.Add("kubernetes", commonPods, "GET", -1, []byte(nil), true)
	f.Add("kubernetes", commonPods, "PUT", 10, []byte(`{}`), true)
	f.Add("kubernetes:6443", "/apis", "GET", 0, []byte(nil), false)
	h, lost := newEvidenceHarness(f)
	f.Fuzz(func(t *testing.T, authority, path, method string, announced int, body []byte, end bool) {
		c, err := hostileclient.DialH2(h.address(), h.anonymousTLS(), 1<<16)
		if err != nil {
			t.Fatal(err)
		}
		fields := [][2]string{{":method", method}, {":scheme", "https"}, {":authority", authority}, {":path", path}}
		if announced >= 0 {
			fields = append(fields, [2]string{"content-length", fmt.Sprint(announced)})
		}
		id, err := c.Request(fields, body, end)
		if err == nil {
			_, _ = c.Status(id, 2*time.Second)
		}
		// Closing with the stream open is the client leaving mid-request.
		c.Close()
		if got := lost.reported(); len(got) > 0 {
			t.Fatalf("%s %q on %q, content-length %d, %d bytes, end %v: servers reported lost: %v",
				method, path, authority, announced, len(body), end, got)
		}
	})
}
