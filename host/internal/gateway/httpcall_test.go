package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// callBackend echoes, except on a few paths that answer with trailers, with
// too large a body, or never.
func callBackend(cluster string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/trailers":
			w.Header().Set("Trailer", "X-Checksum")
			w.Write([]byte("payload"))
			w.Header().Set("X-Checksum", "abc")
		case "/large":
			w.Write([]byte(strings.Repeat("x", maxCallResponseBody+1)))
		case "/stall":
			<-r.Context().Done()
		default:
			echoHandler(cluster).ServeHTTP(w, r)
		}
	})
}

func TestHasClusterKnowsEveryServerAndItsFrontProxyName(t *testing.T) {
	for _, tc := range []struct {
		mode string
		want map[string]bool
	}{
		{"front-proxy", map[string]bool{"kube-a": true, "kube-c+front-proxy": true, "kube-z": false, "kube-z+front-proxy": false, "kube-a+other": false, "": false}},
		{"passthrough", map[string]bool{"kube-a": true, "kube-a+front-proxy": false}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			h := newHarness(t, harnessConfig{identityMode: tc.mode, plugin: routeTo("")})
			for cluster, want := range tc.want {
				if got := h.gw.HasCluster(cluster); got != want {
					t.Errorf("HasCluster(%q) = %v, want %v", cluster, got, want)
				}
			}
		})
	}
}

func TestHTTPCallReachesTheNamedServerWithItsCredential(t *testing.T) {
	h := newHarness(t, harnessConfig{identityMode: "front-proxy", plugin: routeTo(""), handler: callBackend})
	get := func(path string) [][2]string {
		return [][2]string{{":method", "GET"}, {":path", path}, {":authority", "gateway.example"}, {":scheme", "https"},
			{"accept", "application/json"}, {"x-remote-user", "jane"}, {"x-remote-group", "a"}, {"x-remote-group", "b"}}
	}
	for _, tc := range []struct {
		name        string
		call        wasmhost.HTTPCall
		wantCluster string
		wantCert    string
	}{
		{"the front-proxy name presents the front-proxy certificate", wasmhost.HTTPCall{Cluster: "kube-a+front-proxy", Headers: get("/apis?limit=1")}, "kube-a", frontProxyClientName},
		{"the plain name presents none", wasmhost.HTTPCall{Cluster: "kube-b", Headers: get("/apis?limit=1")}, "kube-b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := h.gw.HTTPCall(context.Background(), tc.call)
			if err != nil {
				t.Fatal(err)
			}
			if resp.Headers[0] != [2]string{":status", "200"} {
				t.Errorf("headers %q do not start with :status 200", resp.Headers)
			}
			if v, _ := header(resp.Headers, "content-type"); v != "application/json" {
				t.Errorf("content-type %q in %q", v, resp.Headers)
			}
			var e echoed
			if err := json.Unmarshal(resp.Body, &e); err != nil {
				t.Fatalf("%v: %s", err, resp.Body)
			}
			if e.Cluster != tc.wantCluster || e.ClientCert != tc.wantCert {
				t.Errorf("reached %s presenting %q, want %s presenting %q", e.Cluster, e.ClientCert, tc.wantCluster, tc.wantCert)
			}
			if e.URI != "/apis?limit=1" || e.Host != "gateway.example" || e.Method != "GET" {
				t.Errorf("the backend saw %s %s for %s", e.Method, e.URI, e.Host)
			}
			if !slices.Equal(e.Headers["X-Remote-User"], []string{"jane"}) || !slices.Equal(e.Headers["X-Remote-Group"], []string{"a", "b"}) ||
				!slices.Equal(e.Headers["Accept"], []string{"application/json"}) {
				t.Errorf("the backend saw headers %q", e.Headers)
			}
		})
	}
	t.Run("a body is sent and trailers come back", func(t *testing.T) {
		resp, err := h.gw.HTTPCall(context.Background(), wasmhost.HTTPCall{Cluster: "kube-a", Body: []byte(`{"x":1}`),
			Headers: [][2]string{{":method", "POST"}, {":path", "/echo"}, {":authority", "gateway"}, {"content-length", "7"}}})
		if err != nil {
			t.Fatal(err)
		}
		var e echoed
		if err := json.Unmarshal(resp.Body, &e); err != nil || e.Method != "POST" || e.Body != `{"x":1}` {
			t.Errorf("the backend saw %s with body %q (%v)", e.Method, e.Body, err)
		}
		resp, err = h.gw.HTTPCall(context.Background(), wasmhost.HTTPCall{Cluster: "kube-a", Headers: get("/trailers")})
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.Body) != "payload" || !slices.Equal(resp.Trailers, [][2]string{{"x-checksum", "abc"}}) {
			t.Errorf("body %q, trailers %q", resp.Body, resp.Trailers)
		}
	})
	for _, tc := range []struct {
		name string
		call wasmhost.HTTPCall
	}{
		{"an unknown cluster", wasmhost.HTTPCall{Cluster: "kube-z", Headers: get("/apis")}},
		{"an answer over the body limit", wasmhost.HTTPCall{Cluster: "kube-a", Headers: get("/large")}},
		{"no answer within the call's timeout", wasmhost.HTTPCall{Cluster: "kube-a", Headers: get("/stall"), Timeout: 200 * time.Millisecond}},
		{"a target that is not a path", wasmhost.HTTPCall{Cluster: "kube-a", Headers: [][2]string{{":method", "GET"}, {":path", "https://elsewhere/"}}}},
	} {
		t.Run(tc.name+" fails the call", func(t *testing.T) {
			if resp, err := h.gw.HTTPCall(context.Background(), tc.call); err == nil {
				t.Errorf("the call succeeded: %q %q", resp.Headers, resp.Body)
			}
		})
	}
}

// TestAbandonedHTTPCallIsNoUpstreamError: a call its caller cancels (the
// client left, or the plugin's stream ended) says nothing about the API
// server, while a call the server leaves unanswered past its deadline counts
// as that server's timeout.
func TestAbandonedHTTPCallIsNoUpstreamError(t *testing.T) {
	stall := [][2]string{{":method", "GET"}, {":path", "/stall"}, {":authority", "gateway.example"}}
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want string
	}{
		{"the caller cancels", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx, cancel
		}, ""},
		{"the caller's deadline passes", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, `skewgate_gateway_upstream_errors_total{backend="kube-a",kind="timeout"} 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessConfig{plugin: routeTo(""), handler: callBackend})
			ctx, cancel := tc.ctx()
			defer cancel()
			if resp, err := h.gw.HTTPCall(ctx, wasmhost.HTTPCall{Cluster: "kube-a", Headers: stall}); err == nil {
				t.Fatalf("the call succeeded: %q %q", resp.Headers, resp.Body)
			}
			var errors []string
			for line := range strings.Lines(scrape(t, h)) {
				if strings.HasPrefix(line, "skewgate_gateway_upstream_errors_total{") {
					errors = append(errors, strings.TrimSpace(line))
				}
			}
			if got := strings.Join(errors, "\n"); got != tc.want {
				t.Errorf("upstream errors:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}
