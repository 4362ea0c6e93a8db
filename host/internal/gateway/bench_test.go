package gateway

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

// fastBackend answers every request with a small fixed list.
func fastBackend(string) http.Handler {
	body := []byte(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[]}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	})
}

func benchmarkGet(b *testing.B, client *http.Client, url string) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkGatewayRequest is one GET through the gateway (TLS in, plugin,
// TLS out over HTTP/2) to a fast local backend.
func BenchmarkGatewayRequest(b *testing.B) {
	h := newHarness(b, harnessConfig{handler: fastBackend})
	benchmarkGet(b, h.client(nil, true), h.front.URL+commonPods)
}

// BenchmarkGatewayRequestRecorded is BenchmarkGatewayRequest with the record
// of request shapes skewgate serve keeps (for skewgate check): its cost is the
// difference.
func BenchmarkGatewayRequestRecorded(b *testing.B) {
	h := newHarness(b, harnessConfig{handler: fastBackend, options: func(o *Options) { o.Requests = NewRequestLog(0, 0) }})
	benchmarkGet(b, h.client(nil, true), h.front.URL+commonPods)
}

// BenchmarkPlainReverseProxy is the same request through a bare
// httputil.ReverseProxy with the same TLS on both sides: the cost skewgate
// adds is the difference.
func BenchmarkPlainReverseProxy(b *testing.B) {
	ca := mustCA(b, "peer-ca")
	backend := httptest.NewUnstartedServer(fastBackend(""))
	backend.EnableHTTP2 = true
	backend.TLS = &tls.Config{Certificates: []tls.Certificate{mustServing(b, ca, DefaultPeerServerName, "127.0.0.1")}}
	backend.StartTLS()
	b.Cleanup(backend.Close)
	target, _ := url.Parse(backend.URL)
	protocols := &http.Protocols{}
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	transport := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), ServerName: DefaultPeerServerName, MinVersion: tls.VersionTLS12},
		Protocols:       protocols,
	}
	b.Cleanup(transport.CloseIdleConnections)
	proxy := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1,
	}
	front := httptest.NewUnstartedServer(proxy)
	front.EnableHTTP2 = true
	front.TLS = ServerTLSConfig(mustServing(b, ca, "127.0.0.1"), nil)
	front.StartTLS()
	b.Cleanup(front.Close)
	clientTransport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}, Protocols: protocols}
	b.Cleanup(clientTransport.CloseIdleConnections)
	benchmarkGet(b, &http.Client{Transport: clientTransport}, front.URL+commonPods)
}

// BenchmarkRequestMetrics is the bookkeeping of one forwarded request, on
// every core at once: counted and observed without a lock or an allocation.
func BenchmarkRequestMetrics(b *testing.B) {
	m := newMetrics()
	upstream := &backend{cluster: "kube-a", duration: m.upstream("kube-a")}
	arrived := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		w := &statusRecorder{ResponseWriter: httptest.NewRecorder(), status: http.StatusOK, upstream: upstream}
		for pb.Next() {
			m.request(wasmhost.Forward, w, arrived)
		}
	})
}

// BenchmarkGatewayRequestBody is one POST through the gateway whose body the
// plugin reads (headers paused, the body read and handed to the plugin, then
// sent from memory) beside the same POST streamed to the server untouched,
// alternately in one run on one plugin VM: ns/streamed, ns/read and their
// ratio.
func BenchmarkGatewayRequestBody(b *testing.B) {
	drain := func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"kind":"ConfigMap","apiVersion":"v1"}`))
		})
	}
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("body=%dKiB", size>>10), func(b *testing.B) {
			h, _ := newBodyHarness(b, harnessConfig{handler: drain})
			client := h.client(nil, true)
			url := h.front.URL + commonPods
			body := bytes.Repeat([]byte("x"), size)
			read, streamed := http.Header{"X-No-Digest": {"1"}}, http.Header{"X-Stream-Body": {"1"}}
			send := func(header http.Header) {
				if resp, _ := do(b, client, http.MethodPost, url, header, bytes.NewReader(body)); resp.StatusCode != http.StatusOK {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
			var streamedTime, readTime time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				send(streamed)
				between := time.Now()
				send(read)
				streamedTime += between.Sub(start)
				readTime += time.Since(between)
			}
			b.ReportMetric(float64(streamedTime.Nanoseconds())/float64(b.N), "ns/streamed")
			b.ReportMetric(float64(readTime.Nanoseconds())/float64(b.N), "ns/read")
			b.ReportMetric(float64(readTime)/float64(streamedTime), "read/streamed")
		})
	}
}
