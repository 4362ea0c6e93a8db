package gateway

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// kubectlRequest is a request as kubectl sends it over TLS, with the
// connection's addresses the server records.
func kubectlRequest() *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://127.0.0.1:6443"+commonPods+"?limit=500", nil)
	r.Header = http.Header{
		"Accept":          {"application/json;as=Table;v=v1;g=meta.k8s.io,application/json"},
		"Accept-Encoding": {"gzip"},
		"Authorization":   {"Bearer abcdefghijklmnopqrstuvwxyz0123456789"},
		"Kubectl-Command": {"kubectl get"},
		"Kubectl-Session": {"2b6a3c1e-8f0d-4c1a-9d57-0e4c6f1f7a21"},
		"User-Agent":      {"kubectl/v1.36.3 (linux/amd64) kubernetes/1a2b3c4"},
	}
	r.RequestURI = commonPods + "?limit=500" // as the server records the target
	r.TLS = &tls.ConnectionState{Version: tls.VersionTLS13, ServerName: "127.0.0.1"}
	r.RemoteAddr = "127.0.0.1:40000"
	return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6443}))
}

// The request the plugin sees is assembled in pooled buffers from strings the
// server already holds: building it costs a request no allocation.
func TestPluginRequestIsBuiltWithoutAllocating(t *testing.T) {
	r := kubectlRequest()
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := pluginRequest(r)
		if err != nil {
			t.Fatal(err)
		}
		p.release()
	})
	if allocs != 0 {
		t.Errorf("building the plugin request allocates %v times", allocs)
	}
}

// Running a request through the plugin allocates only the forwarded header
// map, which outlives the VM's turn: the guest's memory, the stream and the
// worker hand-off are reused from one request to the next.
func TestPluginCallAllocatesOnlyTheForwardedHeaders(t *testing.T) {
	h := newHarness(t, harnessConfig{handler: fastBackend})
	p, err := pluginRequest(kubectlRequest())
	if err != nil {
		t.Fatal(err)
	}
	defer p.release()
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		if out := h.host.HandleRequestHeaders(ctx, &p.Request); out.Failed != nil {
			t.Fatal(out.Failed)
		}
	})
	if allocs > 1 {
		t.Errorf("a request through the plugin allocates %v times, want at most once (the forwarded headers)", allocs)
	}
}
