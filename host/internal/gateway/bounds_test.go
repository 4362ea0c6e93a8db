package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/hostileclient"
	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// waitUntil polls cond for up to ten seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// stalledRequest is a request whose body arrives only when the test says so.
type stalledRequest struct {
	body *io.PipeWriter
	done chan *httptest.ResponseRecorder
}

// startStalled serves a POST from client announcing size bytes of body and
// sending none yet.
func startStalled(h *harness, client string, size int) *stalledRequest {
	pr, pw := io.Pipe()
	r := httptest.NewRequest(http.MethodPost, "https://gateway"+widgets, pr)
	r.ContentLength = int64(size)
	r.RemoteAddr = client + ":40000"
	s := &stalledRequest{body: pw, done: make(chan *httptest.ResponseRecorder, 1)}
	go func() {
		w := httptest.NewRecorder()
		h.gw.ServeHTTP(w, r)
		s.done <- w
	}()
	return s
}

// TestBufferedBodiesStayWithinTheBudgetAndEachClientsShare: however many
// requests announce a body and stall, the bodies held for retries never
// exceed the budget nor one client's share of it; the others stream to the
// API server at once (which can answer without them) and lose only their
// retry.
func TestBufferedBodiesStayWithinTheBudgetAndEachClientsShare(t *testing.T) {
	const size = 1 << 10
	var arrived atomic.Int64
	h := newHarness(t, harnessConfig{servers: retryServers(), plugin: routeTo("kube-a"),
		handler: func(cluster string) http.Handler {
			echo := echoHandler(cluster)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived.Add(1)
				echo.ServeHTTP(w, r)
			})
		},
		options: func(o *Options) {
			o.MaxBufferedRequestBytes = 4 * size
			o.MaxBufferedRequestBytesPerClient = 2 * size
		}})
	var requests []*stalledRequest
	// Each request either takes its bytes from the budget or reaches the
	// API server without its body; one at a time, so the order is known.
	for _, client := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2", "192.0.2.2", "192.0.2.2", "192.0.2.3"} {
		held, reached := h.gw.bodies.inUse(), arrived.Load()
		requests = append(requests, startStalled(h, client, size))
		waitUntil(t, "the request to be buffered or forwarded", func() bool {
			return h.gw.bodies.inUse() != held || arrived.Load() != reached
		})
		if held := h.gw.bodies.inUse(); held > 4*size {
			t.Fatalf("%d bytes buffered, more than the budget", held)
		}
	}
	// 192.0.2.1 buffers two and streams two (its share), 192.0.2.2 buffers
	// two (the rest of the budget) and streams one, 192.0.2.3 streams.
	if held, reached := h.gw.bodies.inUse(), arrived.Load(); held != 4*size || reached != 4 {
		t.Errorf("%d bytes buffered and %d requests forwarded without their body; want %d and 4", held, reached, 4*size)
	}
	m := scrape(t, h)
	for _, want := range []string{
		fmt.Sprintf("skewgate_gateway_buffered_request_bytes %d\n", 4*size),
		`skewgate_gateway_unbuffered_request_bodies_total{reason="client_share"} 3`,
		`skewgate_gateway_unbuffered_request_bodies_total{reason="budget"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, m)
		}
	}
	body := strings.Repeat("x", size)
	for i, s := range requests {
		go func() {
			_, _ = io.WriteString(s.body, body)
			_ = s.body.Close()
		}()
		w := <-s.done
		if w.Code != http.StatusOK || decodeEcho(t, w.Body.Bytes()).Body != body {
			t.Errorf("request %d: status %d, the API server got %d bytes of body", i, w.Code, len(decodeEcho(t, w.Body.Bytes()).Body))
		}
	}
	if held := h.gw.bodies.inUse(); held != 0 {
		t.Errorf("%d bytes still held once every request finished", held)
	}
}

// TestLongRunningRequestBodyMustArriveWithinTheRequestTimeout: a proxy
// request, long-running and so never cut by the request timeout, still has to
// deliver a body the gateway buffers within it, or is answered 504 and lets
// go of what it held.
func TestLongRunningRequestBodyMustArriveWithinTheRequestTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const proxy = "/api/v1/namespaces/default/services/web/proxy/upload"
	h := newHarness(t, harnessConfig{options: func(o *Options) { o.RequestTimeout = timeout }})
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", http2), func(t *testing.T) {
			if status := sendStalledBody(t, h, h.client(nil, http2), http2, proxy, 20*timeout); status != http.StatusGatewayTimeout {
				t.Errorf("status %d; want 504", status)
			}
			waitUntil(t, "the buffered bytes to be released", func() bool { return h.gw.bodies.inUse() == 0 })
		})
	}
}

// TestStalledBodyIsGivenUpOnceTheAPIServerAnswers: a body the gateway does
// not buffer streams to the API server, which may answer without reading it
// (kube-apiserver refuses an unauthenticated write at once). The answer
// reaches the client at once and the request ends, rather than the server
// waiting for the rest of the body first.
func TestStalledBodyIsGivenUpOnceTheAPIServerAnswers(t *testing.T) {
	h := newHarness(t, harnessConfig{
		handler: func(string) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`)
			})
		},
		// Nothing is buffered; the request timeout is twice the test's wait,
		// so an answer within the wait is the API server's, however slowly a
		// loaded machine runs the test.
		options: func(o *Options) { o.MaxBufferedRequestBytes, o.RequestTimeout = 1, time.Minute },
	})
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", http2), func(t *testing.T) {
			if status := sendStalledBody(t, h, h.client(nil, http2), http2, commonPods, 30*time.Second); status != http.StatusForbidden {
				t.Errorf("status %d; want the API server's 403", status)
			}
			waitUntil(t, "the request to end", func() bool { return h.gw.mutating.n.Load() == 0 })
		})
	}
}

// holdingBackend holds requests carrying X-Hold until hold is closed,
// counting them in holding, and echoes the others.
func holdingBackend(hold <-chan struct{}, holding *sync.WaitGroup) func(string) http.Handler {
	return func(cluster string) http.Handler {
		echo := echoHandler(cluster)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Hold") != "" {
				holding.Done()
				<-hold
			}
			echo.ServeHTTP(w, r)
		})
	}
}

func TestInFlightLimitsAnswer429WithRetryAfterAndAStatus(t *testing.T) {
	hold := make(chan struct{})
	var holding sync.WaitGroup
	h := newHarness(t, harnessConfig{handler: holdingBackend(hold, &holding), options: func(o *Options) {
		o.MaxRequestsInFlight, o.MaxMutatingRequestsInFlight = 1, 1
	}})
	client := h.client(nil, true)
	held := make(chan int, 2)
	holding.Add(2)
	for _, method := range []string{"GET", "POST"} {
		var body io.Reader
		if method == "POST" {
			body = strings.NewReader("{}")
		}
		req, _ := http.NewRequest(method, h.front.URL+commonPods, body)
		req.Header.Set("X-Hold", "1")
		go func() {
			resp, err := client.Do(req)
			if err != nil {
				held <- 0
				return
			}
			resp.Body.Close()
			held <- resp.StatusCode
		}()
	}
	holding.Wait()
	for _, tc := range []struct {
		method, target string
		want           int
	}{
		{"GET", commonPods, http.StatusTooManyRequests},
		{"PATCH", commonPods + "/web", http.StatusTooManyRequests},
		// Long-running requests are not counted.
		{"GET", commonPods + "?watch=true", http.StatusOK},
		{"GET", commonPods + "/web/log", http.StatusOK},
	} {
		resp, body := do(t, client, tc.method, h.front.URL+tc.target, nil, nil)
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: status %d, want %d: %s", tc.method, tc.target, resp.StatusCode, tc.want, body)
			continue
		}
		if tc.want != http.StatusTooManyRequests {
			continue
		}
		var s status
		if err := json.Unmarshal(body, &s); err != nil || s.Kind != "Status" || s.Reason != "TooManyRequests" || s.Code != 429 ||
			s.Details.RetryAfterSeconds != 7 || resp.Header.Get("Retry-After") != "7" {
			t.Errorf("%s %s: Retry-After %q, body %s (%v); want a TooManyRequests Status and Retry-After 7",
				tc.method, tc.target, resp.Header.Get("Retry-After"), body, err)
		}
	}
	close(hold)
	for range 2 {
		if code := <-held; code != http.StatusOK {
			t.Errorf("a request admitted first got %d", code)
		}
	}
	if resp, body := do(t, client, "GET", h.front.URL+commonPods, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("once the first finished: %d %s", resp.StatusCode, body)
	}
	m := scrape(t, h)
	for _, want := range []string{
		`skewgate_gateway_rejected_requests_total{reason="max_requests_inflight"} 1`,
		`skewgate_gateway_rejected_requests_total{reason="max_mutating_requests_inflight"} 1`,
		`skewgate_gateway_requests_in_flight{request_kind="readOnly"} 0`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, m)
		}
	}
}

// TestNoFreePluginVMIsAnswered429: a request that waited for a plugin VM as
// long as it may is told to come back (429, Retry-After), as kube-apiserver
// answers a request its priority and fairness queue timed out; it is no
// plugin failure.
func TestNoFreePluginVMIsAnswered429(t *testing.T) {
	plugin := pluginFunc(func(context.Context, *wasmhost.Request) wasmhost.Outcome {
		// What wasmhost answers when no instance became free in time.
		return wasmhost.Outcome{Verdict: wasmhost.Respond, Response: &wasmhost.LocalResponse{Status: http.StatusServiceUnavailable},
			Failed: wasmhost.ErrNoInstance}
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	resp, body := do(t, h.client(nil, true), "GET", h.front.URL+commonPods, nil, nil)
	var s status
	if err := json.Unmarshal(body, &s); err != nil || resp.StatusCode != http.StatusTooManyRequests || s.Reason != "TooManyRequests" ||
		resp.Header.Get("Retry-After") != "7" || s.Details.RetryAfterSeconds != 7 {
		t.Errorf("status %d, Retry-After %q, body %s (%v); want 429 with a TooManyRequests Status and Retry-After 7",
			resp.StatusCode, resp.Header.Get("Retry-After"), body, err)
	}
	m := scrape(t, h)
	if !strings.Contains(m, "skewgate_gateway_plugin_failures_total 0\n") || !strings.Contains(m, `skewgate_gateway_rejected_requests_total{reason="plugin_busy"} 1`) {
		t.Errorf("want no plugin failure and one plugin_busy rejection:\n%s", m)
	}
}

// TestRequestClassIsKubeAPIServers: the in-flight limits count a request as
// mutating unless its verb is get, list or watch.
func TestRequestClassIsKubeAPIServers(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		want           discovery.RequestClass
	}{
		{"GET", commonPods, discovery.RequestClass{}},
		{"GET", commonPods + "/web", discovery.RequestClass{}},
		{"GET", commonPods + "?watch=1", discovery.RequestClass{LongRunning: true}},
		{"POST", commonPods, discovery.RequestClass{Mutating: true}},
		{"DELETE", commonPods, discovery.RequestClass{Mutating: true}},
		{"PATCH", commonPods + "/web", discovery.RequestClass{Mutating: true}},
		{"POST", commonPods + "/web/exec?command=ls", discovery.RequestClass{LongRunning: true, Mutating: true}},
		{"GET", "/apis", discovery.RequestClass{}},
		// As upstream: a non-resource request's verb is its method.
		{"HEAD", "/healthz", discovery.RequestClass{Mutating: true}},
	} {
		target := parseTarget(tc.method, tc.target)
		if got := target.Class(tc.method, false); got != tc.want {
			t.Errorf("%s %s: %+v, want %+v", tc.method, tc.target, got, tc.want)
		}
	}
}

// TestLocalAnswerDoesNotWaitForAStalledBody: a request answered before its
// body is read (here, the in-flight limit) is answered at once, not once the
// client sends the rest, and a client waiting for 100 Continue is not asked
// for its body.
func TestLocalAnswerDoesNotWaitForAStalledBody(t *testing.T) {
	hold := make(chan struct{})
	var holding sync.WaitGroup
	h := newHarness(t, harnessConfig{handler: holdingBackend(hold, &holding), options: func(o *Options) {
		// Bodies stream, so the limit is met before any is read.
		o.MaxMutatingRequestsInFlight, o.MaxBufferedRequestBytes = 1, 1
	}})
	// Before the harness's servers close, which waits for the held request.
	t.Cleanup(func() { close(hold) })
	holding.Add(1)
	go func() {
		_, _ = hostileclient.HTTP1(h.address(), h.anonymousTLS(), "DELETE "+commonPods+"/web HTTP/1.1\r\nHost: kube\r\nX-Hold: 1\r\n\r\n", 10*time.Second)
	}()
	holding.Wait()
	for name, request := range map[string]string{
		"a body that stops":               "POST " + commonPods + " HTTP/1.1\r\nHost: kube\r\nContent-Length: 1024\r\n\r\n{\"kind\":",
		"a body waiting for 100 Continue": "POST " + commonPods + " HTTP/1.1\r\nHost: kube\r\nContent-Length: 1024\r\nExpect: 100-continue\r\n\r\n",
	} {
		// The first answer must be the final one: no 100 Continue asking for
		// a body that will not be read.
		code, err := hostileclient.HTTP1(h.address(), h.anonymousTLS(), request, 5*time.Second)
		if err != nil || code != http.StatusTooManyRequests {
			t.Errorf("%s: status %d, %v; want 429 at once, not once the body arrived", name, code, err)
		}
	}
}

// TestStalledBufferedBodiesTakeNoInFlightPlace: a request counts against the
// in-flight limits only once its buffered body is in hand, so a client that
// announces bodies and stalls cannot lock everyone out of writing; what it
// can hold is bounded by its share of the buffer budget.
func TestStalledBufferedBodiesTakeNoInFlightPlace(t *testing.T) {
	h := newHarness(t, harnessConfig{servers: retryServers(), plugin: routeTo("kube-a"), options: func(o *Options) { o.MaxMutatingRequestsInFlight = 1 }})
	stalled := startStalled(h, "192.0.2.1", 1<<10)
	waitUntil(t, "the stalled body to be buffered", func() bool { return h.gw.bodies.inUse() == 1<<10 })
	if resp, body := do(t, h.client(nil, true), "POST", h.front.URL+widgets, nil, strings.NewReader(`{"kind":"Widget"}`)); resp.StatusCode != http.StatusOK {
		t.Errorf("a write while another client stalls its body: %d %s", resp.StatusCode, body)
	}
	go func() {
		_, _ = io.WriteString(stalled.body, strings.Repeat("x", 1<<10))
		_ = stalled.body.Close()
	}()
	if w := <-stalled.done; w.Code != http.StatusOK {
		t.Errorf("the stalled request, once its body came: %d", w.Code)
	}
}
