package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/config"
)

const (
	commonPods       = "/api/v1/namespaces/default/pods"
	newerOnly        = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
	extraOnly        = "/apis/coordination.k8s.io/v1alpha2/namespaces/default/leasecandidates"
	aggregatedAccept = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
)

// status is the subset of a Kubernetes Status the tests check.
type status struct {
	Kind    string `json:"kind"`
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
	Details struct {
		RetryAfterSeconds int `json:"retryAfterSeconds"`
	} `json:"details"`
}

func TestRoutingHeaderIsHonouredAndNeverForwarded(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	client := h.client(nil, true)
	forged := http.Header{config.DefaultRoutingHeader: {"kube-a"}}
	for i := range 6 {
		resp, body := do(t, client, "GET", h.front.URL+extraOnly+"?limit=5", forged, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
		e := decodeEcho(t, body)
		if e.Cluster != "kube-c" {
			t.Errorf("request %d went to %s; only kube-c serves leasecandidates", i, e.Cluster)
		}
		if v, ok := e.Headers["X-Skewgate-Upstream"]; ok {
			t.Errorf("routing header reached the backend: %q", v)
		}
		if got := e.Headers["X-Kubernetes-Peer-Proxied"]; !slices.Equal(got, []string{"true"}) {
			t.Errorf("re-routed request carries x-kubernetes-peer-proxied %q, want exactly [true]", got)
		}
		if e.URI != extraOnly+"?limit=5" {
			t.Errorf("backend saw %q", e.URI)
		}
	}
	// A client's routing header does not steer a request the plugin leaves to
	// the gateway: round robin reaches every server.
	seen := map[string]bool{}
	for range 6 {
		_, body := do(t, client, "GET", h.front.URL+commonPods, forged, nil)
		e := decodeEcho(t, body)
		seen[e.Cluster] = true
		if _, ok := e.Headers["X-Skewgate-Upstream"]; ok {
			t.Error("a client's routing header reached the backend")
		}
	}
	if len(seen) != 3 {
		t.Errorf("round robin reached %v, want all three servers", seen)
	}
}

func TestRequestIsForwardedExactlyAsThePluginLeftIt(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	client := h.client(nil, false)
	header := http.Header{
		"Authorization":   {"Bearer token-123"},
		"X-Custom":        {"one", "two"},
		"Keep-Alive":      {"timeout=5"},
		"Connection":      {"X-Hop"},
		"X-Hop":           {"dropped"},
		"X-Forwarded-For": {"203.0.113.9", "198.51.100.2"},
		"X-Real-Ip":       {"203.0.113.10"},
		"Forwarded":       {"for=203.0.113.11"},
	}
	const target = "/api/v1/namespaces/default/configmaps/a%2Fb?fieldSelector=metadata.name%3Dx;y&watch=1"
	resp, body := do(t, client, "GET", h.front.URL+target, header, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Access-Control-Allow-Origin"); got != "https://console.example" {
		t.Errorf("Access-Control-Allow-Origin = %q; the gateway must not touch CORS headers", got)
	}
	e := decodeEcho(t, body)
	if e.URI != target {
		t.Errorf("backend saw %q, want the raw request URI %q", e.URI, target)
	}
	if e.Host != strings.TrimPrefix(h.front.URL, "https://") {
		t.Errorf("backend saw Host %q, want the client's authority", e.Host)
	}
	want := map[string][]string{
		"Authorization": {"Bearer token-123"},
		"X-Custom":      {"one", "two"},
		// The client's entries stay; the peer's address is appended, in one
		// field because kube-apiserver reads only the first.
		"X-Forwarded-For": {"203.0.113.9,198.51.100.2,127.0.0.1"},
		"Accept-Encoding": {"gzip"},
	}
	for k, v := range want {
		if !slices.Equal(e.Headers[k], v) {
			t.Errorf("backend header %s = %q, want %q", k, e.Headers[k], v)
		}
	}
	for _, k := range []string{"Keep-Alive", "X-Hop", "X-Skewgate-Upstream", "X-Real-Ip", "Forwarded"} {
		if v, ok := e.Headers[k]; ok {
			t.Errorf("hop-by-hop, internal or client-forged forwarding header %s = %q reached the backend", k, v)
		}
	}
}

func TestWatchResponseStreamsIncrementally(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, harnessConfig{handler: func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintln(w, `{"type":"ADDED"}`)
			http.NewResponseController(w).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintln(w, `{"type":"MODIFIED"}`)
		})
	}})
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", http2), func(t *testing.T) {
			client := h.client(nil, http2)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", h.front.URL+commonPods+"?watch=true", nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			lines := bufio.NewReader(resp.Body)
			// The second event is written only after the first arrived here, so
			// a buffering gateway would block until the deadline.
			first, err := lines.ReadString('\n')
			if err != nil || first != "{\"type\":\"ADDED\"}\n" {
				t.Fatalf("first event %q, %v", first, err)
			}
			release <- struct{}{}
			second, err := lines.ReadString('\n')
			if err != nil || second != "{\"type\":\"MODIFIED\"}\n" {
				t.Fatalf("second event %q, %v", second, err)
			}
		})
	}
}

// upgradeBackend switches to the requested protocol, reports what it received
// in the first line and then echoes bytes, as exec and port-forward streams do.
func upgradeBackend(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" || !strings.EqualFold(r.Header.Get("Connection"), "Upgrade") {
			http.Error(w, "upgrade required", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", r.Header.Get("Upgrade"))
		report, _ := json.Marshal(echoOf(cluster, r))
		rw.Write(append(report, '\n'))
		rw.Flush()
		io.Copy(conn, rw)
	})
}

func TestUpgradesAreCarriedWithTheSameHeaderHandling(t *testing.T) {
	h := newHarness(t, harnessConfig{identityMode: "front-proxy", handler: upgradeBackend})
	cert := mustClient(t, h.clientCA, pkix.Name{CommonName: "jane", Organization: []string{"developers"}})
	for _, tc := range []struct {
		name, protocol string
		extra          string
	}{
		{"spdy exec", "SPDY/3.1", "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"},
		{"websocket exec", "websocket", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := tls.Dial("tcp", strings.TrimPrefix(h.front.URL, "https://"), &tls.Config{
				RootCAs: h.peerCA.Pool(), Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			// pods/exec exists on every server, so the gateway balances it.
			fmt.Fprintf(conn, "GET /api/v1/namespaces/default/pods/web/exec?command=sh&stdin=true HTTP/1.1\r\n"+
				"Host: gateway\r\nConnection: Upgrade\r\nUpgrade: %s\r\n%s"+
				"X-Remote-User: system:admin\r\nX-Remote-Group: system:masters\r\n"+
				"Authorization: Bearer token-abc\r\n\r\n", tc.protocol, tc.extra)
			r := bufio.NewReader(conn)
			resp, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != tc.protocol {
				t.Fatalf("status %d, Upgrade %q", resp.StatusCode, resp.Header.Get("Upgrade"))
			}
			line, err := r.ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			e := decodeEcho(t, line)
			if e.Proto != "HTTP/1.1" {
				t.Errorf("upgrade reached the backend over %s", e.Proto)
			}
			if got := e.Headers["X-Remote-User"]; !slices.Equal(got, []string{"jane"}) {
				t.Errorf("X-Remote-User = %q, want the verified certificate's [jane] (upstream sends none on upgrades)", got)
			}
			if e.ClientCert != frontProxyClientName {
				t.Errorf("the asserted upgrade presented client certificate %q, want the front-proxy one", e.ClientCert)
			}
			if got := e.Headers["X-Remote-Group"]; !slices.Equal(got, []string{"developers"}) {
				t.Errorf("X-Remote-Group = %q, want [developers]", got)
			}
			if got := e.Headers["Authorization"]; !slices.Equal(got, []string{"Bearer token-abc"}) {
				t.Errorf("Authorization = %q", got)
			}
			if _, err := conn.Write([]byte("ping\n")); err != nil {
				t.Fatal(err)
			}
			echo, err := r.ReadString('\n')
			if err != nil || echo != "ping\n" {
				t.Fatalf("stream echo %q, %v", echo, err)
			}
		})
	}
}

func TestClientHeadersNeverBecomeAnIdentity(t *testing.T) {
	forged := http.Header{
		"X-Remote-User":        {"system:admin"},
		"X-Remote-Group":       {"system:masters"},
		"X-Remote-Uid":         {"0"},
		"X-Remote-Extra-Scope": {"all"},
		"Authorization":        {"Bearer passes-through"},
	}
	subject := pkix.Name{CommonName: `jane, "doe"+admin`, Organization: []string{"dev#ops", "on call"}}
	for _, tc := range []struct {
		name       string
		mode       string
		clientCert bool
		wantUser   []string
		wantGroups []string
	}{
		{"passthrough ignores a client certificate", "passthrough", true, nil, nil},
		{"front-proxy without a certificate asserts nothing", "front-proxy", false, nil, nil},
		{"front-proxy asserts the verified certificate", "front-proxy", true, []string{`jane, "doe"+admin`}, []string{"dev#ops", "on call"}},
	} {
		// Only an asserted identity travels with the front-proxy certificate.
		wantCert := ""
		if tc.wantUser != nil {
			wantCert = frontProxyClientName
		}
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{identityMode: tc.mode})
			var cert *tls.Certificate
			if tc.clientCert {
				c := mustClient(t, h.clientCA, subject)
				cert = &c
			}
			for _, http2 := range []bool{false, true} {
				resp, body := do(t, h.client(cert, http2), "GET", h.front.URL+newerOnly, forged, nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d: %s", resp.StatusCode, body)
				}
				e := decodeEcho(t, body)
				if got := e.Headers["X-Remote-User"]; !slices.Equal(got, tc.wantUser) {
					t.Errorf("X-Remote-User = %q, want %q", got, tc.wantUser)
				}
				if got := e.Headers["X-Remote-Group"]; !slices.Equal(got, tc.wantGroups) {
					t.Errorf("X-Remote-Group = %q, want %q", got, tc.wantGroups)
				}
				for _, k := range []string{"X-Remote-Uid", "X-Remote-Extra-Scope"} {
					if v, ok := e.Headers[k]; ok {
						t.Errorf("forged %s = %q reached the backend", k, v)
					}
				}
				if got := e.Headers["Authorization"]; !slices.Equal(got, []string{"Bearer passes-through"}) {
					t.Errorf("Authorization = %q, bearer tokens must pass through", got)
				}
				if e.ClientCert != wantCert {
					t.Errorf("the backend saw client certificate %q, want %q", e.ClientCert, wantCert)
				}
			}
		})
	}
}

func TestUnverifiedClientCertificateIsRefused(t *testing.T) {
	h := newHarness(t, harnessConfig{identityMode: "front-proxy"})
	stranger := mustClient(t, mustCA(t, "stranger-ca"), pkix.Name{CommonName: "mallory", Organization: []string{"system:masters"}})
	// Present the certificate even though the gateway does not name its CA.
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: h.peerCA.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &stranger, nil
		},
	}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("GET", h.front.URL+commonPods, nil)
	if resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a certificate from an unknown CA was accepted (status %d)", resp.StatusCode)
	}
	if n := h.totalHits(); n != 0 {
		t.Errorf("backends saw %d requests", n)
	}
}

// retryServers: kube-a and kube-b serve widgets, kube-c does not; all are
// marked healthy, so the plugin's first pick for widgets is kube-a.
func retryServers() []discoverytest.Server {
	common := map[string][]string{"/v1": {"pods"}}
	withWidgets := map[string][]string{"/v1": {"pods"}, "example.com/v1": {"widgets"}}
	return []discoverytest.Server{
		{ID: "server-a", Cluster: "kube-a", Version: "v1.36.3", Healthy: true, Groups: withWidgets},
		{ID: "server-b", Cluster: "kube-b", Version: "v1.36.3", Healthy: true, Groups: withWidgets},
		{ID: "server-c", Cluster: "kube-c", Version: "v1.35.4", Healthy: true, Groups: common},
	}
}

func TestConnectionFailureRetryRules(t *testing.T) {
	const widget = `{"kind":"Widget"}`
	large := strings.Repeat("x", maxReplayableBody+1)
	for _, tc := range []struct {
		name     string
		refusing []string
		method   string
		path     string
		body     string
		// unsized hides the body's length, so it is sent chunked.
		unsized     bool
		wantStatus  int
		wantCluster string
		wantRetries string
	}{
		{"idempotent request moves to another capable server", []string{"kube-a"}, "GET", widgets, "", false, 200, "kube-b", "1"},
		{"delete without body is retried", []string{"kube-a"}, "DELETE", widgets + "/w1", "", false, 200, "kube-b", "1"},
		{"balanced request moves to any healthy server", []string{"kube-a"}, "GET", "/api/v1/pods", "", false, 200, "", "1"},
		{"a create with a small body moves with its body", []string{"kube-a"}, "POST", widgets, widget, false, 200, "kube-b", "1"},
		{"an update with a small body moves with its body", []string{"kube-a"}, "PUT", widgets + "/w1", widget, false, 200, "kube-b", "1"},
		{"a body of unknown length is not retried", []string{"kube-a"}, "POST", widgets, widget, true, 503, "", "0"},
		{"a body too large to buffer is not retried", []string{"kube-a"}, "PUT", widgets + "/w1", large, false, 503, "", "0"},
		{"no other capable server means 503, never a false 404", []string{"kube-a", "kube-b"}, "GET", widgets, "", false, 503, "", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{servers: retryServers(), refusing: tc.refusing})
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
				if tc.unsized {
					body = io.MultiReader(body)
				}
			}
			resp, got := do(t, h.client(nil, true), tc.method, h.front.URL+tc.path, nil, body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %.200s", resp.StatusCode, tc.wantStatus, got)
			}
			if tc.wantStatus == 200 {
				e := decodeEcho(t, got)
				if tc.wantCluster != "" && e.Cluster != tc.wantCluster {
					t.Errorf("served by %s, want %s", e.Cluster, tc.wantCluster)
				}
				if slices.Contains(tc.refusing, e.Cluster) {
					t.Errorf("served by refusing %s", e.Cluster)
				}
				if e.Body != tc.body {
					t.Errorf("the retried request arrived with body %q, want %q", e.Body, tc.body)
				}
			} else {
				checkUnavailable(t, resp, got, 7)
			}
			metrics := scrape(t, h)
			if !strings.Contains(metrics, "skewgate_gateway_retries_total "+tc.wantRetries+"\n") {
				t.Errorf("want skewgate_gateway_retries_total %s in\n%s", tc.wantRetries, metrics)
			}
			if !strings.Contains(metrics, `skewgate_gateway_upstream_errors_total{backend="kube-a",kind="connect"} 1`) {
				t.Errorf("connection failure to kube-a not counted:\n%s", metrics)
			}
		})
	}
}

// /openapi/v2 goes to the server serving the most group versions (kube-a
// and kube-b tie, kube-a has the lower ID); when kube-a cannot be reached
// the retry goes to kube-b, the best server left, never to kube-c, whose
// document lacks the widgets API.
func TestOpenAPIV2IsRetriedOnlyOnTheBestServerLeft(t *testing.T) {
	h := newHarness(t, harnessConfig{servers: retryServers(), refusing: []string{"kube-a"}})
	for i := range 4 {
		resp, got := do(t, h.client(nil, true), "GET", h.front.URL+"/openapi/v2", nil, nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %.200s", i, resp.StatusCode, got)
		}
		if e := decodeEcho(t, got); e.Cluster != "kube-b" {
			t.Errorf("request %d: served by %s, want kube-b", i, e.Cluster)
		}
	}
}

func TestBackendWithCertificateFromAnotherCAIsRefused(t *testing.T) {
	servers := []discoverytest.Server{{ID: "server-a", Cluster: "kube-a", Version: "v1.36.3", Healthy: true, Groups: map[string][]string{"/v1": {"pods"}}}}
	h := newHarness(t, harnessConfig{servers: servers, foreignCA: []string{"kube-a"}})
	resp, body := do(t, h.client(nil, true), "GET", h.front.URL+commonPods, nil, nil)
	checkUnavailable(t, resp, body, 7)
	if n := h.hitsOf("kube-a"); n != 0 {
		t.Errorf("the impostor backend received %d requests", n)
	}
	if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_upstream_errors_total{backend="kube-a",kind="tls"} 1`) {
		t.Errorf("TLS refusal not counted:\n%s", m)
	}
}

func TestUnavailableAnswersAreKubernetesStatusWithRetryAfter(t *testing.T) {
	t.Run("no healthy server serves the resource", func(t *testing.T) {
		h := newHarness(t, harnessConfig{servers: withHealth(discoverytest.SkewedControlPlane(), "kube-c")})
		resp, body := do(t, h.client(nil, true), "GET", h.front.URL+extraOnly, nil, nil)
		checkUnavailable(t, resp, body, 7)
		if n := h.hitsOf("kube-c"); n != 0 {
			t.Errorf("unhealthy kube-c received %d requests", n)
		}
	})
	t.Run("no snapshot yet", func(t *testing.T) {
		h := newHarness(t, harnessConfig{})
		fresh, err := New(Options{Plugin: h.host, PeerRootCAs: h.peerCA.Pool(), Logger: quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		fresh.ServeHTTP(rec, httptest.NewRequest("GET", "https://gateway"+commonPods, nil))
		checkUnavailable(t, rec.Result(), rec.Body.Bytes(), config.DefaultRetryAfterSeconds)
	})
}

func TestNewRequiresPluginAndPeerCAs(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"no plugin", Options{PeerRootCAs: mustCA(t, "ca").Pool()}},
		{"no peer CAs", Options{Plugin: PluginHost(nil)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.opts); err == nil {
				t.Error("New accepted incomplete options")
			}
		})
	}
}

func TestMergedDiscoveryIsAnsweredLocallyAfterOneAuthorizationCheck(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	resp, body := do(t, h.client(nil, true), "GET", h.front.URL+"/apis", http.Header{"Accept": {aggregatedAccept}}, nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == "" {
		t.Fatalf("status %d, ETag %q", resp.StatusCode, resp.Header.Get("ETag"))
	}
	for _, group := range []string{`"coordination.k8s.io"`, `"v1alpha2"`, `"mutatingadmissionpolicies"`} {
		if !bytes.Contains(body, []byte(group)) {
			t.Errorf("merged /apis lacks %s", group)
		}
	}
	again, _ := do(t, h.client(nil, false), "GET", h.front.URL+"/apis", http.Header{"Accept": {aggregatedAccept}, "If-None-Match": {resp.Header.Get("ETag")}}, nil)
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation answered %d, want 304", again.StatusCode)
	}
	for _, http2 := range []bool{false, true} {
		head, headBody := do(t, h.client(nil, http2), "HEAD", h.front.URL+"/apis", http.Header{"Accept": {aggregatedAccept}}, nil)
		if head.StatusCode != http.StatusOK || head.ContentLength != int64(len(body)) || len(headBody) != 0 {
			t.Errorf("HEAD http2=%v: status %d, Content-Length %d, %d body bytes; want 200, %d, none", http2, head.StatusCode, head.ContentLength, len(headBody), len(body))
		}
	}
	// The one request the servers saw is the plugin's check that they would
	// answer this (anonymous) client; its answer is remembered.
	if n := h.totalHits(); n != 1 {
		t.Errorf("backends saw %d requests, want the one authorization check", n)
	}
	if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_requests_total{code="200",verdict="respond"} 3`) ||
		!strings.Contains(m, `skewgate_gateway_requests_total{code="304",verdict="respond"} 1`) {
		t.Errorf("local answers not counted:\n%s", m)
	}
}

// authorizingBackend answers /apis as an API server that lets in bearer
// tokens and identities asserted with the front-proxy certificate, and
// forbids everyone else.
func authorizingBackend(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e := echoOf(cluster, r)
		if r.URL.Path != "/apis" || r.Header.Get("Authorization") != "" || (e.ClientCert == frontProxyClientName && r.Header.Get("X-Remote-User") != "") {
			echoHandler(cluster).ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/apis\"","reason":"Forbidden","details":{},"code":403}`)
	})
}

func TestMergedDiscoveryIsServedOnlyToClientsTheServersWouldAnswer(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		clientCert bool
		header     http.Header
		wantStatus int
	}{
		{"an anonymous client gets the servers' 403", "passthrough", false, nil, http.StatusForbidden},
		{"a bearer token is let in", "passthrough", false, http.Header{"Authorization": {"Bearer t"}}, http.StatusOK},
		{"an asserted identity is checked with the front-proxy certificate", "front-proxy", true, nil, http.StatusOK},
		{"an anonymous client in front-proxy mode gets the servers' 403", "front-proxy", false, nil, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{identityMode: tc.mode, handler: authorizingBackend})
			var cert *tls.Certificate
			if tc.clientCert {
				c := mustClient(t, h.clientCA, pkix.Name{CommonName: "jane"})
				cert = &c
			}
			header := http.Header{"Accept": {aggregatedAccept}}
			maps.Copy(header, tc.header)
			resp, body := do(t, h.client(cert, true), "GET", h.front.URL+"/apis", header, nil)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("status %d, want %d: %.300s", resp.StatusCode, tc.wantStatus, body)
			}
			if tc.wantStatus == http.StatusForbidden && !bytes.Contains(body, []byte(`"reason":"Forbidden"`)) {
				t.Errorf("the client did not get the servers' answer: %s", body)
			}
		})
	}
}

func TestApplyKeepsPreviousRoutingWhenConfigurationFails(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	before := currentIndex(h.gw)
	staged, err := h.gw.Stage(Routing{Index: before, Addresses: map[string]string{"kube-a": "127.0.0.1:1", "kube-b": "127.0.0.1:2", "kube-c": "127.0.0.1:3"}})
	if err != nil {
		t.Fatal(err)
	}
	staged.Abort() // the plugin refused the configuration
	if currentIndex(h.gw) != before {
		t.Fatal("the routing changed despite the rejection")
	}
	resp, body := do(t, h.client(nil, true), "GET", h.front.URL+commonPods, nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("after a rejected configuration: status %d: %s", resp.StatusCode, body)
	}
	if err := apply(h.gw, Routing{Index: before, Addresses: map[string]string{"kube-a": "127.0.0.1:1"}}); err == nil {
		t.Error("routing with clusters that have no address was accepted")
	}
}

func checkUnavailable(t *testing.T, resp *http.Response, body []byte, retryAfter int) {
	t.Helper()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Retry-After"); got != fmt.Sprint(retryAfter) {
		t.Errorf("Retry-After = %q, want %d", got, retryAfter)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
	var s status
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("body is not a Status: %v: %s", err, body)
	}
	if s.Kind != "Status" || s.Status != "Failure" || s.Reason != "ServiceUnavailable" || s.Code != 503 || s.Details.RetryAfterSeconds != retryAfter {
		t.Errorf("Status = %+v", s)
	}
}
