package gateway

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
	"github.com/skewgate/skewgate/plugin/config"
)

const widgets = "/apis/example.com/v1/namespaces/default/widgets"

// kube-apiserver's answers while it shuts down (k8s.io/apiserver's
// WithRetryAfter and WithWaitGroup), and two answers that only look similar.
var (
	shutdownRetryAfter = func(w http.ResponseWriter) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "5")
		http.Error(w, "The apiserver is shutting down, please try again later.", http.StatusTooManyRequests)
	}
	shutdownWaitGroup = func(w http.ResponseWriter) {
		w.Header().Add("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"apiserver is shutting down","reason":"ServiceUnavailable","code":503}`)
	}
	priorityAndFairness = func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
	}
	serviceUnavailable = func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "3")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"service unavailable","reason":"ServiceUnavailable","code":503}`)
	}
)

func TestShuttingDownServersAnswersAreRetriedElsewhere(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(http.ResponseWriter)
		// unhealthy marks kube-b, the only other server with widgets, unhealthy.
		unhealthy  bool
		wantStatus int
	}{
		{"429 of --shutdown-send-retry-after moves to another server", shutdownRetryAfter, false, http.StatusOK},
		{"503 after the shutdown delay moves to another server", shutdownWaitGroup, false, http.StatusOK},
		{"a priority-and-fairness 429 goes back to the client", priorityAndFairness, false, http.StatusTooManyRequests},
		{"another 503 goes back to the client", serviceUnavailable, false, http.StatusServiceUnavailable},
		{"without another capable server the 429 goes back to the client", shutdownRetryAfter, true, http.StatusTooManyRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			handler := func(cluster string) http.Handler {
				if cluster != "kube-a" {
					return echoHandler(cluster)
				}
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					tc.answer(w)
				})
			}
			servers := retryServers()
			if tc.unhealthy {
				servers = withHealth(servers, "kube-b")
			}
			h := newHarness(t, harnessConfig{servers: servers, handler: handler, plugin: routeTo("kube-a")})
			for _, method := range []string{"GET", "POST"} {
				for _, http2 := range []bool{false, true} {
					var body io.Reader
					if method == "POST" {
						body = strings.NewReader(`{"kind":"Widget"}`)
					}
					resp, got := do(t, h.client(nil, http2), method, h.front.URL+widgets, nil, body)
					if resp.StatusCode != tc.wantStatus {
						t.Fatalf("%s http2=%v: status %d, want %d: %s", method, http2, resp.StatusCode, tc.wantStatus, got)
					}
					if tc.wantStatus == http.StatusOK {
						if e := decodeEcho(t, got); e.Cluster != "kube-b" || (method == "POST" && e.Body != `{"kind":"Widget"}`) {
							t.Errorf("%s http2=%v: served by %s with body %q", method, http2, e.Cluster, e.Body)
						}
						continue
					}
					// The client gets kube-a's answer as it was.
					want := &fakeResponse{}
					tc.answer(want)
					if string(got) != want.body.String() || resp.Header.Get("Retry-After") != want.header.Get("Retry-After") {
						t.Errorf("%s http2=%v: the client got %q, Retry-After %q; want kube-a's %q", method, http2, got, resp.Header.Get("Retry-After"), want.body.String())
					}
				}
			}
			if tc.wantStatus != http.StatusOK && h.hitsOf("kube-b") != 0 {
				t.Errorf("kube-b saw %d requests", h.hitsOf("kube-b"))
			}
		})
	}
}

// fakeResponse records what an answer function writes.
type fakeResponse struct {
	header http.Header
	body   strings.Builder
}

func (f *fakeResponse) Header() http.Header {
	if f.header == nil {
		f.header = http.Header{}
	}
	return f.header
}
func (f *fakeResponse) Write(b []byte) (int, error) { return f.body.Write(b) }
func (f *fakeResponse) WriteHeader(int)             {}

// goAwayServer is an HTTP/2 server shutting down: it stops listening when the
// first request arrives and answers it with a GOAWAY whose last stream ID (0)
// says that no stream was processed.
func goAwayServer(t *testing.T, cert tls.Certificate) string {
	t.Helper()
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		conn, err := l.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
		if _, err := io.ReadFull(conn, preface); err != nil {
			return
		}
		writeFrame(conn, 0x4, nil) // SETTINGS
		for {
			head := make([]byte, 9)
			if _, err := io.ReadFull(conn, head); err != nil {
				return
			}
			length := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
			if _, err := io.CopyN(io.Discard, conn, int64(length)); err != nil {
				return
			}
			if head[3] == 0x1 { // HEADERS
				l.Close()
				writeFrame(conn, 0x7, make([]byte, 8)) // GOAWAY, last stream 0, NO_ERROR
				_, _ = io.Copy(io.Discard, conn)
				return
			}
		}
	}()
	return l.Addr().String()
}

func writeFrame(w io.Writer, kind byte, payload []byte) {
	head := make([]byte, 9)
	head[0], head[1], head[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	head[3] = kind
	binary.BigEndian.PutUint32(head[5:], 0)
	_, _ = w.Write(append(head, payload...))
}

func TestStreamsRefusedByGoAwayMoveToAnotherServer(t *testing.T) {
	for _, tc := range []struct {
		method, body string
	}{
		{"GET", ""},
		{"POST", `{"kind":"Widget"}`},
	} {
		t.Run(tc.method, func(t *testing.T) {
			h := newHarness(t, harnessConfig{servers: retryServers(), plugin: routeTo("kube-a"), listen: map[string]func(*harness) string{
				"kube-a": func(h *harness) string {
					return goAwayServer(t, mustServing(t, h.peerCA, DefaultPeerServerName, "127.0.0.1"))
				},
			}})
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			resp, got := do(t, h.client(nil, true), tc.method, h.front.URL+widgets, nil, body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, got)
			}
			if e := decodeEcho(t, got); e.Cluster != "kube-b" || e.Body != tc.body {
				t.Errorf("served by %s with body %q, want kube-b with %q", e.Cluster, e.Body, tc.body)
			}
			if m := scrape(t, h); !strings.Contains(m, "skewgate_gateway_retries_total 1\n") {
				t.Errorf("retry not counted:\n%s", m)
			}
		})
	}
}

// TestAnnouncedBodyLengthCommitsNoMemoryUntilTheBodyArrives: a body small
// enough to be buffered for a retry takes memory as its bytes arrive, not as
// its Content-Length announces, so requests that announce a megabyte and
// send nothing cannot make the gateway reserve a megabyte each.
func TestAnnouncedBodyLengthCommitsNoMemoryUntilTheBodyArrives(t *testing.T) {
	h := newHarness(t, harnessConfig{servers: retryServers(), plugin: routeTo("kube-a")})
	r := httptest.NewRequest(http.MethodPost, widgets, strings.NewReader(`{"kind":"Widget"}`))
	r.ContentLength = maxReplayableBody
	w := httptest.NewRecorder()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.gw.ServeHTTP(w, r)
	runtime.ReadMemStats(&after)
	if w.Code != http.StatusBadRequest {
		t.Errorf("a body shorter than its Content-Length got %d, want 400: %s", w.Code, w.Body)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated >= maxReplayableBody/4 {
		t.Errorf("the request allocated %d bytes for a body of 17 bytes announced as %d", allocated, maxReplayableBody)
	}
}

// A server that dies with requests in flight answers none of them. A read
// is sent again to another capable server, a watch included; a write, which
// the server may have carried out, is answered 503 saying so, without the
// Retry-After that would have client-go send it again unasked.
func TestReadsWhoseConnectionIsLostBeforeAnAnswerAreRetriedElsewhere(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		body         string
		wantStatus   int
	}{
		{"GET", widgets, "", http.StatusOK},
		{"GET", widgets + "?watch=true", "", http.StatusOK},
		{"HEAD", widgets, "", http.StatusOK},
		{"POST", widgets, `{"kind":"Widget"}`, http.StatusServiceUnavailable},
		{"DELETE", widgets + "/w1", "", http.StatusServiceUnavailable},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			handler := func(cluster string) http.Handler {
				if cluster != "kube-a" {
					return echoHandler(cluster)
				}
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					_, _ = io.Copy(io.Discard, r.Body)
					panic(http.ErrAbortHandler) // the connection or stream is cut, unanswered
				})
			}
			h := newHarness(t, harnessConfig{servers: retryServers(), handler: handler, plugin: routeTo("kube-a")})
			for _, http2 := range []bool{false, true} {
				var body io.Reader
				if tc.body != "" {
					body = strings.NewReader(tc.body)
				}
				resp, got := do(t, h.client(nil, http2), tc.method, h.front.URL+tc.path, nil, body)
				if resp.StatusCode != tc.wantStatus {
					t.Fatalf("http2=%v: status %d, want %d: %s", http2, resp.StatusCode, tc.wantStatus, got)
				}
				switch {
				case tc.wantStatus == http.StatusServiceUnavailable:
					// No Retry-After: client-go would send the write again unasked.
					if !strings.Contains(string(got), `"reason":"ServiceUnavailable"`) || !strings.Contains(string(got), "may have been carried out") ||
						resp.Header.Get("Retry-After") != "" {
						t.Errorf("http2=%v: want a Status saying the write may have been carried out, without Retry-After; got Retry-After %q: %s",
							http2, resp.Header.Get("Retry-After"), got)
					}
				case tc.method == "GET":
					if e := decodeEcho(t, got); e.Cluster != "kube-b" {
						t.Errorf("http2=%v: served by %s, want kube-b", http2, e.Cluster)
					}
				}
			}
			if tc.wantStatus == http.StatusOK && h.hitsOf("kube-b") != 2 {
				t.Errorf("kube-b saw %d requests, want 2", h.hitsOf("kube-b"))
			}
			if tc.wantStatus != http.StatusOK && h.hitsOf("kube-b") != 0 {
				t.Errorf("kube-b saw %d requests of a write kube-a may have carried out", h.hitsOf("kube-b"))
			}
		})
	}
}

func TestReadLostOnEveryCapableServerIsUnavailableWithRetryAfter(t *testing.T) {
	h := newHarness(t, harnessConfig{servers: retryServers(), handler: cutOn("kube-a", "kube-b", "kube-c"), plugin: routeTo("kube-a")})
	for _, http2 := range []bool{false, true} {
		resp, got := do(t, h.client(nil, http2), "GET", h.front.URL+widgets, nil, nil)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("http2=%v: status %d, Retry-After %q; want 503 with Retry-After: %s", http2, resp.StatusCode, resp.Header.Get("Retry-After"), got)
		}
		if !strings.Contains(string(got), "retry shortly") || strings.Contains(string(got), "may have been carried out") {
			t.Errorf("http2=%v: want a Status asking for a retry, not one saying a read may have been carried out: %s", http2, got)
		}
	}
	if h.hitsOf("kube-a") != 2 || h.hitsOf("kube-b") != 2 {
		t.Errorf("kube-a saw %d requests, kube-b %d; want each tried once per request", h.hitsOf("kube-a"), h.hitsOf("kube-b"))
	}
}

func TestServersLostUnderARequestAreReportedToTheHealthOwner(t *testing.T) {
	var mu sync.Mutex
	var lost []string
	h := newHarness(t, harnessConfig{servers: retryServers(), handler: cutOn("kube-a"), plugin: routeTo("kube-a"),
		options: func(o *Options) {
			o.OnServerLost = func(cluster string) {
				mu.Lock()
				defer mu.Unlock()
				lost = append(lost, cluster)
			}
		}})
	resp, got := do(t, h.client(nil, true), "GET", h.front.URL+widgets, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(lost, " ") != "kube-a" {
		t.Errorf("reported lost: %q, want only kube-a, once: the retry on kube-b was answered", lost)
	}
}

// cutOn makes the named clusters' servers cut every request's connection or
// stream, unanswered; the others echo.
func cutOn(clusters ...string) func(string) http.Handler {
	return func(cluster string) http.Handler {
		if !slices.Contains(clusters, cluster) {
			return echoHandler(cluster)
		}
		return http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	}
}

// A kube-apiserver whose etcd went away (kubeadm upgrades a node's etcd
// before its kube-apiserver) holds a read until its own timeout, and fails
// its readiness check meanwhile. Once the snapshot says it is unhealthy, the
// read it has not answered goes to another capable server; a write stays
// with its server, which may still carry it out.
func TestAReadWaitingOnAServerThatTurnsUnhealthyIsSentToAnother(t *testing.T) {
	held := make(chan string, 4)
	h := newHarness(t, harnessConfig{servers: retryServers(), plugin: routeTo("kube-a"), handler: func(cluster string) http.Handler {
		if cluster != "kube-a" {
			return echoHandler(cluster)
		}
		return http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			held <- r.Method
			<-r.Context().Done()
		})
	}})
	type result struct {
		status  int
		cluster string
		err     error
	}
	send := func(ctx context.Context, client *http.Client, method string) <-chan result {
		done := make(chan result, 1)
		go func() {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader(`{"kind":"Widget"}`)
			}
			req, err := http.NewRequestWithContext(ctx, method, h.front.URL+widgets, body)
			if err != nil {
				done <- result{err: err}
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer resp.Body.Close()
			var e echoed
			_ = json.NewDecoder(resp.Body).Decode(&e)
			done <- result{status: resp.StatusCode, cluster: e.Cluster}
		}()
		return done
	}
	waitHeld := func(want string) {
		t.Helper()
		select {
		case got := <-held:
			if got != want {
				t.Fatalf("kube-a holds a %s; want a %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s never reached kube-a", want)
		}
	}
	down := retryServers()
	down[0].Healthy = false
	for _, http2 := range []bool{false, true} {
		read := send(context.Background(), h.client(nil, http2), http.MethodGet)
		waitHeld(http.MethodGet)
		h.apply(down, h.addresses)
		select {
		case r := <-read:
			if r.err != nil || r.status != http.StatusOK || r.cluster != "kube-b" {
				t.Errorf("http2=%v: the read got %+v; want kube-b's 200", http2, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("http2=%v: the read still waits on the unhealthy kube-a", http2)
		}
		h.apply(retryServers(), h.addresses)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	write := send(ctx, h.client(nil, true), http.MethodPost)
	waitHeld(http.MethodPost)
	h.apply(down, h.addresses)
	select {
	case r := <-write:
		t.Fatalf("the write was answered %+v; want it left with kube-a", r)
	case <-time.After(500 * time.Millisecond):
	}
	if n := h.hitsOf("kube-b"); n != 2 {
		t.Errorf("kube-b saw %d requests; want the two reads only", n)
	}
}

// A write the plugin routed by the fields its body sets is retried only
// where that decision could have sent it: with the one server whose schema
// has the field refusing connections, a retry through the servers that lack
// it would store the write without the field, so none is made.
func TestARetryOfAWriteRoutedByItsBodyGoesOnlyWhereItsFieldsAreKnown(t *testing.T) {
	servers, skew := discoverytest.WithBothWayFieldSkew(discoverytest.SkewedControlPlane())
	// The plugin reads the body and routes it to kube-a, the only server
	// whose schema has spec.template.spec.workloadRef.
	plugin := pluginFunc(func(_ context.Context, req *wasmhost.Request) wasmhost.Outcome {
		body, err := req.Body.ReadBody()
		if err != nil {
			return wasmhost.Outcome{Verdict: wasmhost.Reset, BodyFailed: err}
		}
		headers := append(slices.Clone(req.Headers), [2]string{config.DefaultRoutingHeader, "kube-a"})
		return wasmhost.Outcome{Verdict: wasmhost.Forward, Headers: headers, Body: body}
	})
	h := newHarness(t, harnessConfig{servers: servers, refusing: []string{"kube-a"}, plugin: plugin})
	snap, err := discovery.ParseSnapshot(discoverytest.SnapshotJSONWithFieldSkew(1, servers, skew))
	if err != nil {
		t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := apply(h.gw, Routing{Index: ix, Addresses: h.addresses}); err != nil {
		t.Fatal(err)
	}
	const deployment = `{"kind":"Deployment","spec":{"template":{"spec":{"workloadRef":{"name":"w"}}}}}`
	header := http.Header{"Content-Type": {"application/json"}}
	for _, http2 := range []bool{false, true} {
		resp, got := do(t, h.client(nil, http2), "POST", h.front.URL+"/apis/apps/v1/namespaces/ns/deployments", header, strings.NewReader(deployment))
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("http2=%v: status %d, want 503 with kube-a unreachable: %s", http2, resp.StatusCode, got)
		}
	}
	if n := h.hitsOf("kube-b") + h.hitsOf("kube-c"); n != 0 {
		t.Errorf("the servers lacking the field got %d of the writes; want none", n)
	}
	// A body setting no field that differs goes to the newest minor on a
	// retry too, as the decision without the field would.
	resp, got := do(t, h.client(nil, true), "POST", h.front.URL+"/apis/apps/v1/namespaces/ns/deployments", header,
		strings.NewReader(`{"kind":"Deployment","spec":{"replicas":1}}`))
	if resp.StatusCode != http.StatusOK || h.hitsOf("kube-b")+h.hitsOf("kube-c") != 1 {
		t.Errorf("status %d, %d at the newest minor; want the write retried there: %s", resp.StatusCode, h.hitsOf("kube-b")+h.hitsOf("kube-c"), got)
	}
}
