package wasmhost

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// The built plugin in this host against its native decision core, on the
// discovery documents of three real servers (the default API sets of v1.35.4,
// v1.36.3 and v1.37.2 captured in fixtures/). bench/ runs these through its
// harness; the ratios it reports are taken within one run.

var benchPlaneVersions = []string{"v1.35.4", "v1.36.3", "v1.37.2"}

// benchSnapshot renders the snapshot of the captured plane, every server healthy.
func benchSnapshot(tb testing.TB, generation uint64) []byte {
	tb.Helper()
	servers, err := fixtures.Servers("default", benchPlaneVersions...)
	if err != nil {
		tb.Fatal(err)
	}
	return discoverytest.CapturedSnapshotJSON(generation, servers)
}

// benchSnapshotWithOpenAPI is benchSnapshot with each server's /openapi/v3
// index: the paths a real server lists for its discovery documents (47 for
// v1.36.3), each with a 128-digit hash as kube-openapi writes them.
func benchSnapshotWithOpenAPI(tb testing.TB, generation uint64) []byte {
	tb.Helper()
	servers, err := fixtures.Servers("default", benchPlaneVersions...)
	if err != nil {
		tb.Fatal(err)
	}
	members := make([]discovery.Server, len(servers))
	for i, s := range servers {
		groups := map[string][]string{}
		for _, doc := range [][]byte{s.APIs, s.API} {
			list, err := discovery.ParseGroupList(doc)
			if err != nil {
				tb.Fatal(err)
			}
			for _, g := range list.Items {
				for _, v := range g.Versions {
					groups[g.Name()+"/"+v.Version] = nil
				}
			}
		}
		hashes := map[string]string{}
		for _, path := range discoverytest.OpenAPIPaths(groups) {
			hashes[path] = fmt.Sprintf("%X", sha512.Sum512([]byte(path+"@"+s.Version)))
		}
		members[i] = discoverytest.ServerOf(s.ID, "kube-"+s.Version, s.Version, true, s.APIs, s.API, hashes)
	}
	return discoverytest.Encode(generation, "", members...)
}

func benchPluginConfig(tb testing.TB, generation uint64) []byte {
	tb.Helper()
	return pluginConfigOf(tb, benchSnapshot(tb, generation))
}

func pluginConfigOf(tb testing.TB, snapshot []byte) []byte {
	tb.Helper()
	raw, err := json.Marshal(map[string]json.RawMessage{"snapshot": snapshot})
	if err != nil {
		tb.Fatal(err)
	}
	return raw
}

func benchIndex(tb testing.TB) *discovery.Index {
	tb.Helper()
	snap, err := discovery.ParseSnapshot(benchSnapshot(tb, 1))
	if err != nil {
		tb.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}

func newBenchPluginHost(tb testing.TB, instances int) *Host {
	tb.Helper()
	wasm, err := builtPlugin()
	if err != nil {
		tb.Fatal(err)
	}
	config := benchPluginConfig(tb, 1)
	return newHost(tb, wasm, Options{
		Envoy:               envoyabi.Envoy133,
		Instances:           instances,
		CompilationCacheDir: compilationCacheDir(),
		PluginName:          "skewgate", RootID: "skewgate", VMID: "skewgate",
		PluginConfiguration: config,
		HTTPCalls:           newConfigCaller(config, allowEveryCall),
		Logger:              slog.New(slog.DiscardHandler),
	})
}

const benchAcceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// pluginBenchRequest is one request shape and the outcome the plugin must give it.
type pluginBenchRequest struct {
	name   string
	method string
	target string
	extra  [][2]string
	check  func(Outcome) error
}

func (r pluginBenchRequest) request() *Request {
	return &Request{
		Headers: append([][2]string{
			{":method", r.method}, {":path", r.target}, {":authority", "kube.example"}, {":scheme", "https"},
			{"authorization", "Bearer benchmark"}, {"user-agent", "kubectl/v1.36.3 (linux/amd64) kubernetes/abcdef0"},
		}, r.extra...),
		EndOfStream: true,
		Properties:  Properties{RequestProtocol: "HTTP/2", TLS: &TLSProperties{Version: "TLSv1.3"}},
	}
}

func (r pluginBenchRequest) decisionInput() discovery.Request {
	req := discovery.Request{Method: r.method}
	for _, kv := range r.extra {
		switch kv[0] {
		case "accept":
			req.Accept = kv[1]
		case "if-none-match":
			req.IfNoneMatch = kv[1]
		}
	}
	return req
}

func pluginBenchRequests(ix *discovery.Index) []pluginBenchRequest {
	forwarded := func(rerouted bool) func(Outcome) error {
		return func(out Outcome) error {
			_, routed := header(out.Headers, "x-skewgate-upstream")
			if out.Failed != nil || out.Verdict != Forward || routed != rerouted {
				return fmt.Errorf("outcome %+v; want forward, routing header set: %v", out, rerouted)
			}
			return nil
		}
	}
	return []pluginBenchRequest{
		{name: "forward", method: "GET", target: "/apis/apps/v1/namespaces/default/deployments/web", check: forwarded(false)},
		{name: "reroute", method: "GET", target: "/apis/certificates.k8s.io/v1/clustertrustbundles?watch=true&resourceVersion=1",
			check: forwarded(true)},
		{name: "discovery-not-modified", method: "GET", target: "/apis",
			extra: [][2]string{{"accept", benchAcceptAggregated + ",application/json"}, {"if-none-match", ix.MergedAPIs().ETag}},
			check: func(out Outcome) error {
				if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 304 {
					return fmt.Errorf("outcome %+v; want a local 304", out)
				}
				return nil
			}},
	}
}

var pluginSinkAction discovery.Action

// decideInWasm is testdata/decide, the decision core alone built as the plugin
// is, instantiated once in wazero with its index set up: its exported decide
// function decides one of pluginBenchRequests' shapes n times.
var decideInWasm = sync.OnceValues(func() (api.Function, error) {
	dir, err := os.MkdirTemp("", "wasmhost-decide-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "decide.wasm")
	if err := buildReactor("./testdata/decide", out); err != nil {
		return nil, err
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	// The runtime the plugin host makes, without the call bound serve leaves off.
	rt := wazero.NewRuntime(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		return nil, err
	}
	if res, err := mod.ExportedFunction("setup").Call(ctx); err != nil || res[0] != 0 {
		return nil, fmt.Errorf("testdata/decide setup: %v %v", res, err)
	}
	return mod.ExportedFunction("decide"), nil
})

// BenchmarkPluginRequestHeaders compares, per request shape, the native
// decision (request target split and Decide), the plugin's
// proxy_on_request_headers callback with every host call it makes (wasm), and
// the whole stream the gateway runs per request (wasm-stream: context create,
// request headers, log, done, delete).
func BenchmarkPluginRequestHeaders(b *testing.B) {
	ix := benchIndex(b)
	h := newBenchPluginHost(b, 1)
	ctx := context.Background()
	guest, err := decideInWasm()
	if err != nil {
		b.Fatal(err)
	}
	for kind, r := range pluginBenchRequests(ix) {
		req := r.request()
		if err := r.check(h.HandleRequestHeaders(ctx, req)); err != nil {
			b.Fatalf("%s: %v", r.name, err)
		}
		b.Run(r.name, func(b *testing.B) {
			b.Run("native", func(b *testing.B) {
				in := r.decisionInput()
				b.ReportAllocs()
				for i := range b.N {
					path, _, ok := discovery.SplitRequestTarget(r.target)
					if !ok {
						b.Fatal("malformed target")
					}
					in.Path = path
					pluginSinkAction = ix.Decide(&in, uint64(i)).Action
				}
			})
			b.Run("decide-wasm", func(b *testing.B) {
				in := r.decisionInput()
				in.Path, _, _ = discovery.SplitRequestTarget(r.target)
				want := ix.Decide(&in, 0).Action
				res, err := guest.Call(ctx, uint64(kind), uint64(b.N))
				if err != nil {
					b.Fatal(err)
				}
				if got := discovery.Action(int32(res[0])); got != want {
					b.Fatalf("the decision core in Wasm decided %v; natively %v", got, want)
				}
			})
			b.Run("wasm", func(b *testing.B) { benchmarkRequestHeadersCallback(b, h, req) })
			b.Run("wasm-stream", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if out := h.HandleRequestHeaders(ctx, req); out.Failed != nil {
						b.Fatal(out.Failed)
					}
				}
			})
		})
	}
}

// benchmarkRequestHeadersCallback runs proxy_on_request_headers again and again
// on one live stream context, restoring the request headers the plugin
// rewrites, as a fresh stream would present them.
func benchmarkRequestHeadersCallback(b *testing.B, h *Host, req *Request) {
	s := h.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	inst := s.inst
	st := inst.newStream(context.Background(), inst.root, req)
	defer inst.releaseStream(st)
	sctx := st.guestContext()
	if _, err := inst.call2(inst.fns.onContextCreate, sctx, sctx.id, inst.root.id); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		st.headers = append(st.headers[:0], req.Headers...)
		st.routeCacheCleared, st.response = false, nil
		inst.stack[0], inst.stack[1], inst.stack[2] = uint64(sctx.id), uint64(len(st.headers)), 1
		st.requestOpen = true
		_, err := inst.invoke(inst.fns.onRequestHeaders, sctx)
		st.requestOpen = false
		if err != nil {
			b.Fatal(err)
		}
	}
	for _, fn := range []struct {
		name string
		call func() error
	}{
		{"proxy_on_done", func() error { _, err := inst.call1(inst.fns.onDone, sctx, sctx.id); return err }},
		{"proxy_on_delete", func() error { _, err := inst.call1(inst.fns.onDelete, sctx, sctx.id); return err }},
	} {
		if err := fn.call(); err != nil {
			b.Fatalf("%s: %v", fn.name, err)
		}
	}
}

// BenchmarkPluginConfigure is a snapshot push of the three-server plane: the
// native core (ParseSnapshot and NewIndex, which merges /apis and /api and
// computes their ETags) against Host.Configure on 1, 2 and 4 VM instances,
// which every instance runs in turn (a new root context each, committed only
// when all accept).
func BenchmarkPluginConfigure(b *testing.B) {
	snapshots := [][]byte{benchSnapshot(b, 2), benchSnapshot(b, 3)}
	configs := [][]byte{benchPluginConfig(b, 2), benchPluginConfig(b, 3)}
	b.Run("native", func(b *testing.B) {
		benchNativeConfigure(b, snapshots)
	})
	withIndex := [][]byte{benchSnapshotWithOpenAPI(b, 2), benchSnapshotWithOpenAPI(b, 3)}
	b.Run("native/openapi", func(b *testing.B) {
		benchNativeConfigure(b, withIndex)
	})
	b.Run("instances=1/openapi", func(b *testing.B) {
		h := newBenchPluginHost(b, 1)
		configs := [][]byte{pluginConfigOf(b, withIndex[0]), pluginConfigOf(b, withIndex[1])}
		b.SetBytes(int64(len(configs[0])))
		b.ReportAllocs()
		for i := range b.N {
			if err := h.Configure(context.Background(), configs[i%2]); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, instances := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("instances=%d", instances), func(b *testing.B) {
			h := newBenchPluginHost(b, instances)
			ctx := context.Background()
			b.SetBytes(int64(len(configs[0])))
			b.ReportAllocs()
			for i := range b.N {
				if err := h.Configure(ctx, configs[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPluginConfigure64 is a snapshot push of 64 servers (the captured
// v1.35.4, v1.36.3 and v1.37.2 documents in turn), without and with
// field-level data shaped like the skew the captured schemas show between
// v1.36.3 and v1.37.2 (benchFieldData): the native core against
// Host.Configure on one VM, with the configuration's size.
func BenchmarkPluginConfigure64(b *testing.B) {
	for _, fields := range []bool{false, true} {
		name := "servers=64"
		if fields {
			name += "/field-data"
		}
		snapshots := [][]byte{benchSnapshot64(b, 2, fields), benchSnapshot64(b, 3, fields)}
		configs := [][]byte{pluginConfigOf(b, snapshots[0]), pluginConfigOf(b, snapshots[1])}
		b.Run(name+"/native", func(b *testing.B) {
			benchNativeConfigure(b, snapshots)
			b.ReportMetric(float64(len(configs[0])), "config-bytes")
		})
		b.Run(name+"/instances=1", func(b *testing.B) {
			h := newBenchPluginHost(b, 1)
			b.SetBytes(int64(len(configs[0])))
			b.ReportAllocs()
			for i := range b.N {
				if err := h.Configure(context.Background(), configs[i%2]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(configs[0])), "config-bytes")
		})
	}
}

// benchSnapshot64 is fixtureSnapshot's 64 servers, every one healthy, with
// benchFieldData or none.
func benchSnapshot64(tb testing.TB, generation uint64, fields bool) []byte {
	tb.Helper()
	captured, err := fixtures.Servers("default", benchPlaneVersions...)
	if err != nil {
		tb.Fatal(err)
	}
	members := make([]discovery.Server, 64)
	for i := range members {
		s := captured[i%len(captured)]
		members[i] = discoverytest.ServerOf(fmt.Sprintf("%s-%02d", s.ID, i), fmt.Sprintf("kube-%02d", i), s.Version, true, s.APIs, s.API, nil)
		if fields {
			benchFieldData(&members[i])
		}
	}
	return discoverytest.Encode(generation, "", members...)
}

// benchFieldData gives a server of the captured plane the field-level data
// the comparison of v1.36.3 and v1.37.2 yields: resource slices accept
// spec.pool.name as a field-selector label from v1.37 on, and the older
// servers' schemas of 14 kinds lack fields (as many as 59 paths for jobs, of
// which the snapshot carries discovery.MaxMissingFields, 60 to 70 bytes each).
func benchFieldData(srv *discovery.Server) {
	labels := []string{"metadata.name", "spec.driver", "spec.nodeName"}
	if srv.Version == "v1.37.2" {
		labels = append(labels, "spec.pool.name")
	}
	srv.FieldSelectors = map[string][]string{"resource.k8s.io/v1/resourceslices": labels}
	if srv.Version == "v1.37.2" {
		return
	}
	srv.MissingFields = map[string][]string{}
	for _, kind := range []string{
		"apps/v1/daemonsets", "apps/v1/deployments", "apps/v1/replicasets", "apps/v1/statefulsets",
		"autoscaling/v2/horizontalpodautoscalers", "batch/v1/cronjobs", "batch/v1/jobs",
		"resource.k8s.io/v1/resourceclaims", "resource.k8s.io/v1/resourceclaimtemplates", "resource.k8s.io/v1/resourceslices",
		"storage.k8s.io/v1/csinodes", "v1/nodes", "v1/persistentvolumeclaims", "v1/pods",
	} {
		var paths []string
		for p := range discovery.MaxMissingFields {
			paths = append(paths, fmt.Sprintf("spec.template.spec.containers[].lifecycle.postStart.httpGet.field%02d", p))
		}
		srv.MissingFields[kind] = paths
	}
}

func benchNativeConfigure(b *testing.B, snapshots [][]byte) {
	b.SetBytes(int64(len(snapshots[0])))
	b.ReportAllocs()
	for i := range b.N {
		snap, err := discovery.ParseSnapshot(snapshots[i%2])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := discovery.NewIndex(snap); err != nil {
			b.Fatal(err)
		}
	}
}

// guestMemoryRequests is how many requests BenchmarkPluginGuestMemory sends
// through one VM per operation.
const guestMemoryRequests = 1_000_000

// BenchmarkPluginGuestMemory sends a million requests (forwarded, re-routed,
// merged /apis served with its body, and revalidated with 304) through one VM
// per operation and reports the VM's linear memory afterwards: Wasm memory
// never shrinks, so this is the high-water mark the plugin's garbage collector
// keeps it to.
func BenchmarkPluginGuestMemory(b *testing.B) {
	ix := benchIndex(b)
	h := newBenchPluginHost(b, 1)
	ctx := context.Background()
	mix := pluginBenchRequests(ix)
	mix = append(mix, pluginBenchRequest{name: "discovery", method: "GET", target: "/apis",
		extra: [][2]string{{"accept", benchAcceptAggregated}},
		check: func(out Outcome) error {
			if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 200 || len(out.Response.Body) == 0 {
				return fmt.Errorf("outcome %+v; want the merged /apis", out)
			}
			return nil
		}})
	requests := make([]*Request, len(mix))
	for i, r := range mix {
		requests[i] = r.request()
	}
	for b.Loop() {
		for i := range guestMemoryRequests {
			r := i % len(mix)
			if err := mix[r].check(h.HandleRequestHeaders(ctx, requests[r])); err != nil {
				b.Fatalf("request %d (%s): %v", i, mix[r].name, err)
			}
		}
	}
	if traps := h.counters.traps.Load(); traps != 0 {
		b.Fatalf("%d traps", traps)
	}
	size := h.slots[0].inst.mem.Size()
	b.ReportMetric(float64(size)/65536, "pages/vm")
	b.ReportMetric(float64(size)/(1<<20), "MiB/vm")
}

// BenchmarkPluginRemoteHeaderFlood sends a request carrying n distinct
// X-Remote-* headers through the built plugin, which must strip them all, and
// reports the stream's cost per header: a flat figure as n grows means the
// stripping is linear in the request's size. This host removes a header the
// way Envoy does, by scanning the whole map once per removal.
func BenchmarkPluginRemoteHeaderFlood(b *testing.B) {
	h := newBenchPluginHost(b, 1)
	ctx := context.Background()
	for _, n := range []int{100, 1000, 16000} {
		b.Run(fmt.Sprintf("headers=%d", n), func(b *testing.B) {
			flood := make([][2]string, n)
			for i := range flood {
				flood[i] = [2]string{fmt.Sprintf("x-remote-extra-%d", i), "forged"}
			}
			req := pluginBenchRequest{method: "GET", target: "/apis/apps/v1/namespaces/default/deployments/web", extra: flood}.request()
			check := func(out Outcome) {
				if out.Failed != nil || out.Verdict != Forward {
					b.Fatalf("outcome %+v; want forward", out)
				}
				for _, kv := range out.Headers {
					if strings.HasPrefix(kv[0], "x-remote-") {
						b.Fatalf("%s was forwarded", kv[0])
					}
				}
			}
			check(h.HandleRequestHeaders(ctx, req))
			for b.Loop() {
				check(h.HandleRequestHeaders(ctx, req))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/header")
		})
	}
}
