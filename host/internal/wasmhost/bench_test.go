package wasmhost

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// benchOptions configure the guest for its simple path only: one header read, one header replace and one counter
// increment per request, the workload of the reference figures.
func benchOptions(b *testing.B) Options {
	opts := guestOptions(b, nil)
	opts.Instances = 1
	opts.PluginConfiguration = []byte("cluster=blue;simple-only=1")
	return opts
}

// BenchmarkHandleRequestHeaders measures a full stream (create, request headers, log, done, delete) on the
// guest's simple path.
func BenchmarkHandleRequestHeaders(b *testing.B) {
	opts := benchOptions(b)
	h := newHost(b, guestWasm(b), opts)
	req := &Request{
		Headers:     [][2]string{{":method", "GET"}, {":path", "/api/v1/pods"}, {":authority", "kube"}, {"x-tenant", "acme"}},
		EndOfStream: true,
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if out := h.HandleRequestHeaders(ctx, req); out.Failed != nil || out.Verdict != Forward {
			b.Fatalf("unexpected outcome %+v", out)
		}
	}
}

// BenchmarkRequestHeadersCallback measures proxy_on_request_headers alone on a live stream context, the figure
// comparable to a host's per-call cost.
func BenchmarkRequestHeadersCallback(b *testing.B) {
	opts := benchOptions(b)
	h := newHost(b, guestWasm(b), opts)
	s := h.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.inst
	req := &Request{Headers: [][2]string{{":method", "GET"}, {":path", "/api/v1/pods"}, {":authority", "kube"}, {"x-tenant", "acme"}}}
	st := inst.newStream(context.Background(), inst.root, req)
	sctx := st.guestContext()
	if _, err := inst.call2(inst.fns.onContextCreate, sctx, sctx.id, inst.root.id); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		inst.stack[0], inst.stack[1], inst.stack[2] = uint64(sctx.id), uint64(len(st.headers)), 1
		st.requestOpen = true
		if action, err := inst.invoke(inst.fns.onRequestHeaders, sctx); err != nil || action != actionContinue {
			b.Fatalf("action %d, error %v", action, err)
		}
	}
}

// BenchmarkReplaceHeaderMapValue is one proxy_replace_header_map_value on a request carrying n headers: like
// Envoy's HeaderMap::remove before the append, a replacement scans the whole map once, so beyond the fixed cost
// of a host call its time grows in proportion to n, and a guest that rewrites k headers one by one pays k·n.
func BenchmarkReplaceHeaderMapValue(b *testing.B) {
	for _, n := range []int{100, 1000, 16000} {
		b.Run(fmt.Sprintf("headers=%d", n), func(b *testing.B) {
			p := newProbe(b, envoyabi.Envoy133, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
			headers := make([][2]string, n)
			for i := range headers {
				headers[i] = [2]string{fmt.Sprintf("x-remote-extra-%d", i), "forged"}
			}
			p.beginStream(headers, Properties{})
			k, kl := p.put(0, "x-skewgate-upstream")
			v, vl := p.put(32, "kube-a")
			for b.Loop() {
				if st := p.env("proxy_replace_header_map_value", mapTypeRequestHeaders, k, kl, v, vl); st != statusOK {
					b.Fatalf("status %d", st)
				}
			}
		})
	}
}

// BenchmarkRequestBodyCallback runs a stream paused for its body (headers, the body read and handed to
// proxy_on_request_body, which reads it whole, then log, done, delete) beside a headers-only stream of the same
// guest, alternately in one run: ns/headers-only, ns/body and their ratio, for bodies up to the 1 MiB a gateway
// reads.
func BenchmarkRequestBodyCallback(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("body=%dKiB", size>>10), func(b *testing.B) {
			opts := guestOptions(b, nil)
			opts.Instances = 1
			h := newHost(b, guestWasm(b), opts)
			ctx := context.Background()
			headersOnly := opRequest("metrics")
			withBody := bodyRequest("plain", &fakeBody{body: make([]byte, size)})
			var headersTime, bodyTime time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				if out := h.HandleRequestHeaders(ctx, headersOnly); out.Failed != nil || out.Verdict != Forward {
					b.Fatalf("headers-only outcome %+v", out)
				}
				between := time.Now()
				if out := h.HandleRequestHeaders(ctx, withBody); out.Failed != nil || out.Verdict != Forward || len(out.Body) != size {
					b.Fatalf("body outcome %+v", out)
				}
				headersTime += between.Sub(start)
				bodyTime += time.Since(between)
			}
			b.ReportMetric(float64(headersTime.Nanoseconds())/float64(b.N), "ns/headers-only")
			b.ReportMetric(float64(bodyTime.Nanoseconds())/float64(b.N), "ns/body")
			b.ReportMetric(float64(bodyTime)/float64(headersTime), "body/headers-only")
		})
	}
}
