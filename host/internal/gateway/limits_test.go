package gateway

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

func TestTooManyHeaderFieldsAreRefusedBeforeThePlugin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		limit      int
		fields     int
		wantStatus int
	}{
		{"the default limit admits 100 fields", 0, 100, http.StatusOK},
		{"the default limit refuses 101 fields", 0, 101, http.StatusRequestHeaderFieldsTooLarge},
		{"a configured limit refuses one field more", 5, 6, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			plugin := pluginFunc(func(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
				calls.Add(1)
				return routeTo("")(ctx, req)
			})
			h := newHarness(t, harnessConfig{plugin: plugin, options: func(o *Options) { o.MaxRequestHeaders = tc.limit }})
			r := httptest.NewRequest("GET", "https://gateway"+commonPods, nil)
			for i := range tc.fields - 1 {
				r.Header.Add(fmt.Sprintf("X-Field-%d", i%7), "v")
			}
			r.Header.Add("Accept", "application/json")
			rec := httptest.NewRecorder()
			h.gw.ServeHTTP(rec, r)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body)
			}
			if tc.wantStatus == http.StatusOK {
				return
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the plugin ran %d times", n)
			}
			var s status
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Code != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("body %s is not a 431 Status (%v)", rec.Body, err)
			}
			if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_requests_total{code="431",verdict="none"} 1`) {
				t.Errorf("refusal not counted:\n%s", m)
			}
		})
	}
}

func TestLocalResponseToHEADAnnouncesTheBodyLengthAndSendsNoBody(t *testing.T) {
	const document = `{"kind":"APIGroupDiscoveryList"}`
	plugin := pluginFunc(func(context.Context, *wasmhost.Request) wasmhost.Outcome {
		return wasmhost.Outcome{Verdict: wasmhost.Respond, Response: &wasmhost.LocalResponse{
			Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte(document),
		}}
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	t.Run("handler", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.gw.ServeHTTP(rec, httptest.NewRequest("HEAD", "https://gateway/apis", nil))
		if got := rec.Header().Get("Content-Length"); got != fmt.Sprint(len(document)) {
			t.Errorf("Content-Length %q, want %d", got, len(document))
		}
		if rec.Body.Len() != 0 {
			t.Errorf("a HEAD answer carried a body: %q", rec.Body)
		}
	})
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", http2), func(t *testing.T) {
			resp, body := do(t, h.client(nil, http2), "HEAD", h.front.URL+"/apis", nil, nil)
			if resp.ContentLength != int64(len(document)) || len(body) != 0 {
				t.Errorf("Content-Length %d and %d body bytes, want %d and none", resp.ContentLength, len(body), len(document))
			}
		})
	}
}

func TestClientLeavingWhileThePluginRunsIsNotAPluginFailure(t *testing.T) {
	plugin := pluginFunc(func(ctx context.Context, _ *wasmhost.Request) wasmhost.Outcome {
		<-ctx.Done()
		// What wasmhost reports when the stream's context ends during a call.
		return wasmhost.Outcome{
			Verdict:  wasmhost.Respond,
			Response: &wasmhost.LocalResponse{Status: http.StatusServiceUnavailable},
			Failed:   fmt.Errorf("wasmhost: the plugin's HTTP call was cancelled: %w", context.Canceled),
		}
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.gw.ServeHTTP(rec, httptest.NewRequest("GET", "https://gateway/apis", nil).WithContext(ctx))
	m := scrape(t, h)
	if !strings.Contains(m, "skewgate_gateway_plugin_failures_total 0\n") {
		t.Errorf("a client leaving was counted as a plugin failure:\n%s", m)
	}
	if !strings.Contains(m, `skewgate_gateway_requests_total{code="499",verdict="respond"} 1`) {
		t.Errorf("a client leaving is not counted as 499:\n%s", m)
	}
	if body, _ := io.ReadAll(rec.Result().Body); len(body) != 0 {
		t.Errorf("answered a client that left: %s", body)
	}
}

func TestInvalidConnectionNominationIsRefusedBeforeThePlugin(t *testing.T) {
	var calls atomic.Int64
	plugin := pluginFunc(func(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
		calls.Add(1)
		return routeTo("")(ctx, req)
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	r := httptest.NewRequest("GET", "https://gateway"+commonPods, nil)
	r.Header.Set("Connection", "X-Forwarded-For")
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	rec := httptest.NewRecorder()
	h.gw.ServeHTTP(rec, r)
	var s status
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || rec.Code != http.StatusBadRequest || s.Reason != "BadRequest" {
		t.Errorf("status %d, body %s (%v); want a 400 BadRequest Status", rec.Code, rec.Body, err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the plugin ran %d times", n)
	}
}

// dialFrom is an HTTP/2 client of the gateway whose connections come from
// the loopback address source, so that tests can be several clients.
func dialFrom(h *harness, source string) *http.Client {
	transport := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: h.peerCA.Pool()},
		ForceAttemptHTTP2: true,
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}).DialContext,
	}
	h.t.Cleanup(transport.CloseIdleConnections)
	return &http.Client{Transport: transport}
}

// Watches, logs and exec sessions count against no in-flight limit, so one
// client could hold any number: beyond its share, or beyond the gateway's
// total, a long-running request is answered 429 with Retry-After.
func TestLongRunningRequestsBeyondTheirBoundsAreAnswered429(t *testing.T) {
	h := newHarness(t, harnessConfig{handler: streamingBackend, options: func(o *Options) {
		o.MaxLongRunningRequests, o.MaxLongRunningRequestsPerClient = 5, 3
	}})
	quietWatch := h.front.URL + commonPods + "?watch=1&quiet=1"
	open := func(client *http.Client) (int, func()) {
		resp, err := client.Get(quietWatch)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
		}
		return resp.StatusCode, func() { resp.Body.Close() }
	}
	first, second := dialFrom(h, "127.0.0.1"), dialFrom(h, "127.0.0.2")
	var held []func()
	for _, tc := range []struct {
		client *http.Client
		want   int
	}{
		{first, 200}, {first, 200}, {first, 200},
		{first, 429}, // beyond the client's share
		{second, 200}, {second, 200},
		{second, 429}, // beyond the total
	} {
		code, closeBody := open(tc.client)
		if code != tc.want {
			t.Fatalf("watch %d: status %d, want %d", len(held)+1, code, tc.want)
		}
		if code == http.StatusOK {
			held = append(held, closeBody)
		}
	}
	resp, body := do(t, second, "GET", quietWatch, nil, nil)
	var s status
	if err := json.Unmarshal(body, &s); err != nil || s.Reason != "TooManyRequests" || resp.Header.Get("Retry-After") != "7" {
		t.Errorf("the refusal: Retry-After %q, %s; want a TooManyRequests Status with Retry-After", resp.Header.Get("Retry-After"), body)
	}
	held[0]()
	waitUntil(t, "the closed watch's place to be free", func() bool { return h.gw.longRunning.inUse() == 4 })
	if code, closeBody := open(second); code != http.StatusOK {
		t.Errorf("once a place is free: %d, want 200", code)
	} else {
		closeBody()
	}
	m := scrape(t, h)
	for _, want := range []string{
		`skewgate_gateway_rejected_requests_total{reason="max_long_running_requests"} 2`,
		`skewgate_gateway_rejected_requests_total{reason="max_long_running_requests_per_client"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	for _, closeBody := range held[1:] {
		closeBody()
	}
}

// Connections beyond a client's share, or beyond the total, are closed as
// soon as they are accepted; a closed one gives its place back.
func TestConnectionsBeyondTheirBoundsAreClosedAtOnce(t *testing.T) {
	g, err := New(Options{Plugin: routeTo(""), PeerRootCAs: mustCA(t, "peer-ca").Pool(), Logger: quietLogger, MaxConnections: 3, MaxConnectionsPerClient: 2})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := g.Listener(raw)
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- conn
		}
	}()
	dial := func(source string) net.Conn {
		t.Helper()
		conn, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(source)}}).Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	// closedAtOnce reports whether the gateway closed conn without serving it.
	closedAtOnce := func(conn net.Conn) bool {
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		_, err := conn.Read(make([]byte, 1))
		return err == io.EOF || errors.Is(err, syscall.ECONNRESET)
	}
	a1, a2, a3 := dial("127.0.0.1"), dial("127.0.0.1"), dial("127.0.0.1")
	b1, b2 := dial("127.0.0.2"), dial("127.0.0.2")
	for _, tc := range []struct {
		name   string
		conn   net.Conn
		closed bool
	}{
		{"first of 127.0.0.1", a1, false},
		{"second of 127.0.0.1", a2, false},
		{"third of 127.0.0.1, beyond its share", a3, true},
		{"first of 127.0.0.2", b1, false},
		{"second of 127.0.0.2, beyond the total", b2, true},
	} {
		if got := closedAtOnce(tc.conn); got != tc.closed {
			t.Errorf("%s: closed at once = %v, want %v", tc.name, got, tc.closed)
		}
	}
	(<-accepted).Close()
	waitUntil(t, "the closed connection's place to be free", func() bool { return g.connections.inUse() == 2 })
	if closedAtOnce(dial("127.0.0.2")) {
		t.Error("a connection once a place is free was closed")
	}
	m := exposition(t, g)
	for _, want := range []string{
		`skewgate_gateway_refused_connections_total{reason="max_connections"} 1`,
		`skewgate_gateway_refused_connections_total{reason="max_connections_per_client"} 1`,
		`skewgate_gateway_open_connections 3`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s:\n%s", want, m)
		}
	}
}

// One client address holds at most its share of the in-flight places, so a
// client that holds its requests (or never reads their answers) cannot take
// every place from the others.
func TestOneClientHoldsNoMoreThanItsInFlightShare(t *testing.T) {
	hold := make(chan struct{})
	var holding sync.WaitGroup
	h := newHarness(t, harnessConfig{handler: holdingBackend(hold, &holding), options: func(o *Options) {
		o.MaxRequestsInFlight, o.MaxRequestsInFlightPerClient = 10, 2
	}})
	defer close(hold)
	greedy, other := dialFrom(h, "127.0.0.1"), dialFrom(h, "127.0.0.2")
	holding.Add(2)
	for range 2 {
		req, _ := http.NewRequest("GET", h.front.URL+commonPods, nil)
		req.Header.Set("X-Hold", "1")
		go func() {
			if resp, err := greedy.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	holding.Wait()
	if resp, body := do(t, greedy, "POST", h.front.URL+commonPods, nil, strings.NewReader("{}")); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a third request of the client holding two: %d %s, want 429", resp.StatusCode, body)
	}
	if resp, body := do(t, other, "GET", h.front.URL+commonPods, nil, nil); resp.StatusCode != http.StatusOK {
		t.Errorf("another client meanwhile: %d %s, want 200", resp.StatusCode, body)
	}
	if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_rejected_requests_total{reason="max_requests_inflight_per_client"} 1`) {
		t.Errorf("the refusal is not counted:\n%s", m)
	}
}
