package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/hostileclient"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	"github.com/skewgate/skewgate/plugin/config"
)

// bodyPluginModule is testdata/bodyplugin built as the plugin is built, once
// per test binary and only when a test asks for it.
var bodyPluginModule = sync.OnceValues(func() ([]byte, error) {
	dir, err := os.MkdirTemp("", "gateway-bodyplugin-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "bodyplugin.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./testdata/bodyplugin")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building testdata/bodyplugin: %v\n%s", err, msg)
	}
	return os.ReadFile(out)
})

// newBodyHarness is a gateway running testdata/bodyplugin on a pool of one
// VM instance in front of backends answering with bodyEchoHandler, with the
// servers it reports lost recorded.
func newBodyHarness(t testing.TB, cfg harnessConfig) (*harness, *lostRecorder) {
	t.Helper()
	wasm, err := bodyPluginModule()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.servers == nil {
		cfg.servers = discoverytest.SkewedControlPlane()
	}
	host, err := wasmhost.New(context.Background(), wasm, wasmhost.Options{
		Instances:           1,
		PoolTimeout:         2 * time.Second,
		CompilationCacheDir: compilationCache,
		PluginConfiguration: pluginConfig(t, "passthrough", cfg.servers),
		Logger:              quietLogger,
	})
	if err != nil {
		t.Fatalf("starting the body plugin: %v", err)
	}
	t.Cleanup(func() { _ = host.Close(context.Background()) })
	cfg.plugin = host
	if cfg.handler == nil {
		cfg.handler = bodyEchoHandler
	}
	lost := &lostRecorder{}
	options := cfg.options
	cfg.options = func(o *Options) {
		o.OnServerLost = lost.report
		if options != nil {
			options(o)
		}
	}
	h := newHarness(t, cfg)
	h.host = host
	return h, lost
}

// bodyEchoHandler answers with the body it received, the Content-Length it
// came with (X-Received-Content-Length), its cluster (X-Cluster) and every
// request header prefixed with Echo-.
func bodyEchoHandler(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		for k, v := range r.Header {
			w.Header()["Echo-"+k] = v
		}
		w.Header().Set("X-Cluster", cluster)
		w.Header().Set("X-Received-Content-Length", strconv.FormatInt(r.ContentLength, 10))
		_, _ = w.Write(body)
	})
}

// unsized hides a body's length from the client, which then sends it chunked
// (HTTP/1.1) or without a content-length (HTTP/2).
type unsized struct{ io.Reader }

func randomBody(n int) []byte {
	body := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	_, _ = r.Read(body)
	return body
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// post sends body to the gateway, with its length announced or not.
func post(t *testing.T, client *http.Client, url string, body []byte, sized bool, header http.Header) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if !sized {
		r = unsized{r}
	}
	return do(t, client, http.MethodPost, url, header, r)
}

// A body the plugin reads reaches the API server exactly as the client sent
// it, with its Content-Length, however the client framed it, together with
// the headers the body callback set; a body the plugin does not ask for
// streams to it untouched.
func TestABodyThePluginReadsArrivesUpstreamByteForByte(t *testing.T) {
	h, lost := newBodyHarness(t, harnessConfig{})
	for _, tc := range []struct {
		size         int
		sized, http2 bool
	}{
		{1, true, true},
		{64<<10 + 3, true, true},
		{64<<10 + 3, false, true},
		{64<<10 + 3, true, false},
		{64<<10 + 3, false, false},
		{maxPluginBody, true, true},
		{maxPluginBody, false, false},
	} {
		for _, streamed := range []bool{false, true} {
			name := fmt.Sprintf("%d bytes, sized %v, HTTP/2 %v, streamed %v", tc.size, tc.sized, tc.http2, streamed)
			t.Run(name, func(t *testing.T) {
				body := randomBody(tc.size)
				header := http.Header{}
				if streamed {
					header.Set("X-Stream-Body", "1")
				}
				resp, got := post(t, h.client(nil, tc.http2), h.front.URL+commonPods, body, tc.sized, header)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, got)
				}
				if !bytes.Equal(got, body) {
					t.Fatalf("the API server received %d bytes (sha256 %s), the client sent %d (sha256 %s)",
						len(got), sha256Hex(got), len(body), sha256Hex(body))
				}
				size, digest := resp.Header.Get("Echo-X-Body-Size"), resp.Header.Get("Echo-X-Body-Sha256")
				switch {
				case streamed && (size != "" || digest != ""):
					t.Fatalf("the plugin read a body it did not ask for: size %q", size)
				case !streamed && (size != strconv.Itoa(len(body)) || digest != sha256Hex(body)):
					t.Fatalf("the body callback's headers: size %q sha256 %q; want %d and %s", size, digest, len(body), sha256Hex(body))
				}
				if cl := resp.Header.Get("X-Received-Content-Length"); !streamed && cl != strconv.Itoa(len(body)) {
					t.Fatalf("forwarded with Content-Length %s, want %d", cl, len(body))
				}
			})
		}
	}
	if got := lost.reported(); len(got) > 0 {
		t.Errorf("servers reported lost: %v", got)
	}
	if n := h.gw.bodies.inUse(); n != 0 {
		t.Errorf("%d bytes of the buffer budget still held after every request ended", n)
	}
}

// What the body callback decides is carried out: the routing header it sets
// sends the request to that server, and its local response is the answer,
// with no server asked.
func TestTheBodyCallbacksDecisionIsCarriedOut(t *testing.T) {
	h, _ := newBodyHarness(t, harnessConfig{})
	client := h.client(nil, true)

	body := []byte(`{"route":"kube-b","kind":"ConfigMap"}`)
	for range 3 {
		resp, got := post(t, client, h.front.URL+commonPods, body, true, nil)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Cluster") != "kube-b" || !bytes.Equal(got, body) {
			t.Fatalf("status %d from %q, body %q; want 200 from kube-b with the body", resp.StatusCode, resp.Header.Get("X-Cluster"), got)
		}
		if v := resp.Header.Get("Echo-" + config.DefaultRoutingHeader); v != "" {
			t.Fatalf("the internal routing header reached the server: %q", v)
		}
	}
	if n := h.hitsOf("kube-b"); n != 3 {
		t.Fatalf("kube-b served %d of 3 requests routed to it", n)
	}

	before := h.totalHits()
	resp, got := post(t, client, h.front.URL+commonPods, []byte(`{"respond":409}`), true, nil)
	if resp.StatusCode != http.StatusConflict || string(got) != "answered from the body callback" {
		t.Fatalf("status %d body %q; want the body callback's 409", resp.StatusCode, got)
	}
	if n := h.totalHits() - before; n != 0 {
		t.Fatalf("a request answered by the plugin reached %d servers", n)
	}
}

// A body the plugin read is in memory, so a request that provably reached no
// server is sent to another one with the same body.
func TestABodyThePluginReadIsSentAgainOnARetry(t *testing.T) {
	h, lost := newBodyHarness(t, harnessConfig{refusing: []string{"kube-a"}})
	body := []byte(`{"route":"kube-a","data":"` + strings.Repeat("x", 5000) + `"}`)
	resp, got := post(t, h.client(nil, true), h.front.URL+commonPods, body, false, nil)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("status %d, %d bytes; want 200 with the %d bytes sent", resp.StatusCode, len(got), len(body))
	}
	if c := resp.Header.Get("X-Cluster"); c == "kube-a" || c == "" {
		t.Fatalf("answered by %q", c)
	}
	if got := lost.reported(); len(got) != 1 || got[0] != "kube-a" {
		t.Fatalf("servers reported lost: %v; want kube-a, which refused the connection", got)
	}
}

// A body that arrives slowly holds no VM instance: with a pool of one,
// other requests, with bodies or not, are served while it trickles in.
func TestASlowBodyHoldsNoVMInstance(t *testing.T) {
	h, _ := newBodyHarness(t, harnessConfig{})
	client := h.client(nil, true)
	first, rest := []byte(`{"kind":"ConfigMap","data":{"a":"`), []byte(`b"}}`)
	pr, pw := io.Pipe()
	defer pw.Close()
	slow := make(chan []byte, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, h.front.URL+commonPods, pr)
		if err != nil {
			slow <- nil
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			slow <- []byte(err.Error())
			return
		}
		defer resp.Body.Close()
		got, _ := io.ReadAll(resp.Body)
		slow <- append([]byte(resp.Status+" "), got...)
	}()
	if _, err := pw.Write(first); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the plugin asking for the slow body", func() bool { return h.gw.bodies.inUse() > 0 })

	resp, _ := do(t, client, http.MethodGet, h.front.URL+commonPods, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a GET while a body trickles in: status %d", resp.StatusCode)
	}
	other := []byte(`{"kind":"Secret"}`)
	resp, got := post(t, client, h.front.URL+commonPods, other, true, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Echo-X-Body-Size") != strconv.Itoa(len(other)) || !bytes.Equal(got, other) {
		t.Fatalf("a POST while a body trickles in: status %d, body %q", resp.StatusCode, got)
	}
	select {
	case got := <-slow:
		t.Fatalf("the slow request finished before its body did: %s", got)
	default:
	}

	if _, err := pw.Write(rest); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	select {
	case got := <-slow:
		if want := "200 OK " + string(first) + string(rest); string(got) != want {
			t.Fatalf("the slow request: %q; want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request never finished")
	}
}

// A body over 1 MiB is answered 413, as Envoy answers a body beyond its
// buffer, however it is framed, and says nothing of any server.
func TestABodyOverOneMiBIsAnswered413AndMarksNoServer(t *testing.T) {
	h, lost := newBodyHarness(t, harnessConfig{})
	over := maxPluginBody + 1
	chunked := func() string {
		var b strings.Builder
		b.WriteString("POST " + commonPods + " HTTP/1.1\r\nHost: kubernetes\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
		body := randomBody(over)
		for len(body) > 0 {
			n := min(len(body), 32<<10)
			fmt.Fprintf(&b, "%x\r\n%s\r\n", n, body[:n])
			body = body[n:]
		}
		b.WriteString("0\r\n\r\n")
		return b.String()
	}
	for _, tc := range []struct {
		name string
		send func(t *testing.T) (int, error)
	}{
		{"HTTP/1.1 announcing 1 MiB + 1", func(*testing.T) (int, error) {
			return hostileclient.HTTP1(h.address(), h.anonymousTLS(),
				"POST "+commonPods+" HTTP/1.1\r\nHost: kubernetes\r\nContent-Length: "+strconv.Itoa(over)+"\r\n\r\n{", 10*time.Second)
		}},
		{"HTTP/1.1 chunked, 1 MiB + 1", func(*testing.T) (int, error) {
			return hostileclient.HTTP1(h.address(), h.anonymousTLS(), chunked(), 10*time.Second)
		}},
		{"HTTP/2 announcing 1 MiB + 1", func(*testing.T) (int, error) {
			return hostileclient.H2Stream(h.address(), h.anonymousTLS(), 10*time.Second, func(c *hostileclient.H2Conn) (uint32, error) {
				return c.Request([][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "kubernetes"},
					{":path", commonPods}, {"content-length", strconv.Itoa(over)}}, []byte("{"), false)
			})
		}},
		{"HTTP/2 without a length, 1 MiB + 1", func(t *testing.T) (int, error) {
			resp, _ := post(t, h.client(nil, true), h.front.URL+commonPods, randomBody(over), false, nil)
			return resp.StatusCode, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := tc.send(t)
			if err != nil || status != http.StatusRequestEntityTooLarge {
				t.Fatalf("answered %d, %v; want 413", status, err)
			}
		})
	}
	if got := lost.reported(); len(got) > 0 {
		t.Errorf("servers reported lost: %v; want none", got)
	}
	if n := h.totalHits(); n != 0 {
		t.Errorf("%d requests reached a server", n)
	}
	waitUntil(t, "the buffer budget given back", func() bool { return h.gw.bodies.inUse() == 0 })
}

// A client that breaks off the body the plugin waits for is answered 400, as
// when its body breaks off on the way to a server, and no server is marked.
func TestAClientThatBreaksOffItsBodyGets400AndMarksNoServer(t *testing.T) {
	h, lost := newBodyHarness(t, harnessConfig{})
	for _, tc := range []struct {
		name string
		send func() (int, error)
	}{
		{"HTTP/1.1 ending its side after 10 of 100 bytes", func() (int, error) {
			return halfClosedHTTP1(h, "POST "+commonPods+" HTTP/1.1\r\nHost: kubernetes\r\nContent-Length: 100\r\n\r\n{\"kind\":1}")
		}},
		{"HTTP/1.1 with a malformed chunked body", func() (int, error) {
			return hostileclient.HTTP1(h.address(), h.anonymousTLS(), hostileclient.MalformedChunkedBody(commonPods), 10*time.Second)
		}},
		{"HTTP/2 announcing 1,000 bytes and sending 10", func() (int, error) {
			return hostileclient.H2Stream(h.address(), h.anonymousTLS(), 10*time.Second, func(c *hostileclient.H2Conn) (uint32, error) {
				return c.ShortBody(commonPods, 1000, []byte(`{"kind":1}`))
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := tc.send()
			if err != nil || status != http.StatusBadRequest {
				t.Fatalf("answered %d, %v; want 400", status, err)
			}
		})
	}
	if got := lost.reported(); len(got) > 0 {
		t.Errorf("servers reported lost: %v; want none", got)
	}
	if n := h.totalHits(); n != 0 {
		t.Errorf("%d requests reached a server", n)
	}
	waitUntil(t, "the buffer budget given back", func() bool { return h.gw.bodies.inUse() == 0 })
}

// halfClosedHTTP1 sends request on a new HTTP/1.1 connection, ends the
// client's side of it, and returns the status of the answer.
func halfClosedHTTP1(h *harness, request string) (int, error) {
	cfg := h.anonymousTLS()
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", h.address(), cfg)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		return 0, err
	}
	if err := conn.CloseWrite(); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A body the plugin waits for must arrive within the request timeout, as a
// body buffered for a retry must: past it the request is answered 504.
func TestABodyNotInWithinTheRequestTimeoutGets504(t *testing.T) {
	h, lost := newBodyHarness(t, harnessConfig{options: func(o *Options) { o.RequestTimeout = 300 * time.Millisecond }})
	for _, tc := range []struct {
		name string
		send func() (int, error)
	}{
		{"HTTP/1.1", func() (int, error) {
			return hostileclient.HTTP1(h.address(), h.anonymousTLS(),
				"POST "+commonPods+" HTTP/1.1\r\nHost: kubernetes\r\nContent-Length: 100\r\n\r\n{\"kind\":1}", 10*time.Second)
		}},
		{"HTTP/2", func() (int, error) {
			return hostileclient.H2Stream(h.address(), h.anonymousTLS(), 10*time.Second, func(c *hostileclient.H2Conn) (uint32, error) {
				return c.Request([][2]string{{":method", "POST"}, {":scheme", "https"}, {":authority", "kubernetes"},
					{":path", commonPods}, {"content-length", "100"}}, []byte(`{"kind":1}`), false)
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, err := tc.send()
			if err != nil || status != http.StatusGatewayTimeout {
				t.Fatalf("answered %d, %v; want 504", status, err)
			}
		})
	}
	if got := lost.reported(); len(got) > 0 {
		t.Errorf("servers reported lost: %v; want none", got)
	}
}

// A body the plugin reads is held against the client's share of the buffer
// budget: one that would exceed it is answered 429 with Retry-After, and the
// share is given back when the request ends.
func TestABodyBeyondTheClientsBufferShareIsAnswered429(t *testing.T) {
	h, _ := newBodyHarness(t, harnessConfig{options: func(o *Options) { o.MaxBufferedRequestBytesPerClient = 1000 }})
	client := h.client(nil, true)
	for _, tc := range []struct {
		size   int
		sized  bool
		status int
	}{
		{1000, true, http.StatusOK},
		{1001, true, http.StatusTooManyRequests},
		// Of unknown length, a body may be as large as 1 MiB.
		{10, false, http.StatusTooManyRequests},
		{10, true, http.StatusOK},
	} {
		resp, got := post(t, client, h.front.URL+commonPods, randomBody(tc.size), tc.sized, nil)
		if resp.StatusCode != tc.status {
			t.Fatalf("%d bytes, sized %v: status %d (%s), want %d", tc.size, tc.sized, resp.StatusCode, got, tc.status)
		}
		if tc.status == http.StatusTooManyRequests && resp.Header.Get("Retry-After") != "7" {
			t.Fatalf("429 without Retry-After: %v", resp.Header)
		}
	}
	if n := h.gw.bodies.inUse(); n != 0 {
		t.Fatalf("%d bytes of the buffer budget still held", n)
	}
}

// Offering the body to the plugin is a few stores into the pooled request: a
// request whose body the plugin does not read pays no allocation for it.
func TestOfferingTheBodyToThePluginAllocatesNothing(t *testing.T) {
	g := &Gateway{}
	r := httptest.NewRequest(http.MethodPost, "https://127.0.0.1:6443"+commonPods, strings.NewReader(`{"kind":"Pod"}`))
	r.RemoteAddr = "127.0.0.1:40000"
	w := &statusRecorder{ResponseWriter: httptest.NewRecorder()}
	arrived := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := pluginRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		p.offerBody(g, w, r, arrived)
		if p.Request.Body == nil {
			t.Fatal("a request with a body offers none")
		}
		p.release()
	})
	if allocs != 0 {
		t.Errorf("offering the body allocates %v times", allocs)
	}
}
