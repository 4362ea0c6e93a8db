package wasmhost

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/fixtures/fieldselectors"
	"github.com/skewgate/skewgate/host/internal/envoyabi"
	"github.com/skewgate/skewgate/host/internal/schemafields"
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
// v1.35.4, v1.36.3 and v1.37.2 documents in turn) without field-level data,
// and of 3 and 64 servers of each pair of adjacent versions whose schemas
// schema-skew.json compares (the older and the newer in turn) with the
// field-level data the controller computes for them (benchFieldData): the
// servers' missing fields alone (what a schema 1.2 controller sends) and with
// the field skew. The native core against Host.Configure on one VM, with the
// configuration's size.
func BenchmarkPluginConfigure64(b *testing.B) {
	run := func(name string, snapshot func(generation uint64) []byte) {
		snapshots := [][]byte{snapshot(2), snapshot(3)}
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
	run("servers=64", func(generation uint64) []byte { return benchSnapshot64(b, generation) })
	pairs, err := fixtures.LoadSchemaSkew()
	if err != nil {
		b.Fatal(err)
	}
	for _, pair := range pairs {
		for _, n := range []int{3, 64} {
			for _, data := range []string{"missing-fields", "field-skew"} {
				run(fmt.Sprintf("pair=%s-%s/servers=%d/%s", pair.Older, pair.Newer, n, data), func(generation uint64) []byte {
					members := benchPlane(b, n, "", pair.Older, pair.Newer)
					fieldSkew := benchFieldData(b, members)
					if data == "missing-fields" {
						fieldSkew = nil
					}
					return encodeWithFieldSkew(b, generation, members, fieldSkew)
				})
			}
		}
	}
}

// benchSnapshot64 is 64 servers of the captured plane (benchPlaneVersions),
// every one healthy, without field-level data.
func benchSnapshot64(tb testing.TB, generation uint64) []byte {
	tb.Helper()
	return discoverytest.Encode(generation, "", benchPlane(tb, 64, "", benchPlaneVersions...)...)
}

// benchPlane is n servers of the captured default documents of versions in
// turn, each with its own id and cluster; the servers of version down are
// unhealthy.
func benchPlane(tb testing.TB, n int, down string, versions ...string) []discovery.Server {
	tb.Helper()
	captured, err := fixtures.Servers("default", versions...)
	if err != nil {
		tb.Fatal(err)
	}
	members := make([]discovery.Server, n)
	for i := range members {
		s := captured[i%len(captured)]
		members[i] = discoverytest.ServerOf(fmt.Sprintf("%s-%02d", s.ID, i), fmt.Sprintf("kube-%02d", i), s.Version,
			s.Version != down, s.APIs, s.API, nil)
	}
	return members
}

// encodeWithFieldSkew encodes the snapshot of the servers with the field
// skew, which NewSnapshot does not take.
func encodeWithFieldSkew(tb testing.TB, generation uint64, members []discovery.Server, fieldSkew map[string]discovery.FieldSkew) []byte {
	tb.Helper()
	snap, err := discovery.NewSnapshot(generation, "", members)
	if err != nil {
		tb.Fatal(err)
	}
	snap.FieldSkew = fieldSkew
	if err := snap.Validate(); err != nil {
		tb.Fatal(err)
	}
	return snap.AppendJSON(nil)
}

// benchFieldData gives the servers (of captured versions, each adjacent two
// of which schema-skew.json compares) the field-level data the controller
// computes for them, and returns the snapshot's field skew. Their schemas
// are capturedKindFields; as the controller does, it compares the healthy
// servers that serve a resource, gives each the first
// discovery.MaxMissingFields paths the others' schemas have and its own
// lacks, and lists the paths schemafields.Differing yields, each schema's
// servers together. Field-selector labels are those of the versions'
// captured tables, for the resources every table lists and some two tables
// differ on (resource slices between v1.36 and v1.37, services between v1.30
// and v1.31).
func benchFieldData(tb testing.TB, members []discovery.Server) map[string]discovery.FieldSkew {
	tb.Helper()
	var versions []string
	for _, m := range members {
		if !slices.Contains(versions, m.Version) {
			versions = append(versions, m.Version)
		}
	}
	slices.Sort(versions) // the captured versions are all v1.3x.y
	fields := capturedKindFields(tb, versions)

	tables, err := fieldselectors.Tables()
	if err != nil {
		tb.Fatal(err)
	}
	labels := map[string]map[string][]string{}
	for _, t := range tables {
		if slices.Contains(versions, t.Version) {
			labels[t.Version] = t.Resources
		}
	}
	for key, first := range labels[versions[0]] {
		differ := false
		for _, v := range versions {
			l, listed := labels[v][key]
			if !listed {
				differ = false
				break
			}
			differ = differ || !slices.Equal(l, first)
		}
		for i := range members {
			if differ && servesResource(&members[i], key) {
				if members[i].FieldSelectors == nil {
					members[i].FieldSelectors = map[string][]string{}
				}
				members[i].FieldSelectors[key] = labels[members[i].Version][key]
			}
		}
	}

	skew := map[string]discovery.FieldSkew{}
	for _, key := range slices.Sorted(maps.Keys(fields[versions[0]])) {
		var distinct []schemafields.Fields
		var f discovery.FieldSkew
		for i := range members {
			if !members[i].Healthy || !servesResource(&members[i], key) {
				continue
			}
			mine := fields[members[i].Version][key]
			at := slices.Index(distinct, mine)
			if at < 0 {
				at = len(distinct)
				distinct = append(distinct, mine)
				f.Schemas = append(f.Schemas, discovery.FieldSchema{Knows: []int{}})
			}
			f.Schemas[at].Servers = append(f.Schemas[at].Servers, i)
		}
		if len(distinct) < 2 {
			continue
		}
		for path, having := range schemafields.Differing(distinct) {
			for s := range f.Schemas {
				if having&(1<<uint(s)) != 0 {
					f.Schemas[s].Knows = append(f.Schemas[s].Knows, len(f.Paths))
				}
			}
			f.Paths = append(f.Paths, path)
		}
		if len(f.Paths) > discovery.MaxSkewPaths {
			tb.Fatalf("%s: %d paths differ, more than a snapshot carries", key, len(f.Paths))
		}
		skew[key] = f
		for s, schema := range f.Schemas {
			var lacking []string
			for o := range distinct {
				paths, _ := distinct[s].Lacks(distinct[o], discovery.MaxMissingFields)
				lacking = append(lacking, paths...)
			}
			if len(lacking) == 0 {
				continue
			}
			slices.Sort(lacking)
			lacking = slices.Compact(lacking)
			lacking = lacking[:min(len(lacking), discovery.MaxMissingFields)]
			for _, i := range schema.Servers {
				if members[i].MissingFields == nil {
					members[i].MissingFields = map[string][]string{}
				}
				members[i].MissingFields[key] = lacking
			}
		}
	}
	return skew
}

// capturedKindFields are, per version of versions (ascending, each adjacent
// two compared in schema-skew.json) and per resource whose schemas differ
// between two of them, the field paths of its kind: those that differ and
// those above them, which is all a comparison of the versions depends on.
// A path above one that differs, and that differs itself between no two, is
// every version's.
func capturedKindFields(tb testing.TB, versions []string) map[string]map[string]schemafields.Fields {
	tb.Helper()
	pairs, err := fixtures.LoadSchemaSkew()
	if err != nil {
		tb.Fatal(err)
	}
	// differ[j][resource] are the paths that differ between versions[j] and
	// versions[j+1], true for those only the older has.
	differ := make([]map[string]map[string]bool, len(versions)-1)
	paths := map[string]map[string]bool{}
	for j := range differ {
		i := slices.IndexFunc(pairs, func(p fixtures.SchemaSkew) bool { return p.Older == versions[j] && p.Newer == versions[j+1] })
		if i < 0 {
			tb.Fatalf("schema-skew.json does not compare %s and %s", versions[j], versions[j+1])
		}
		differ[j] = map[string]map[string]bool{}
		for _, r := range pairs[i].Resources {
			differ[j][r.Resource] = map[string]bool{}
			if paths[r.Resource] == nil {
				paths[r.Resource] = map[string]bool{}
			}
			for older, only := range map[bool][]string{true: r.OnlyInOlder, false: r.OnlyInNewer} {
				for _, p := range only {
					differ[j][r.Resource][p] = older
					for a, ok := p, true; ok; a, ok = schemafields.ParentPath(a) {
						paths[r.Resource][a] = true
					}
				}
			}
		}
	}
	has := map[string]map[string][]string{}
	for _, v := range versions {
		has[v] = map[string][]string{}
	}
	for resource, all := range paths {
		for p := range all {
			// Whether the oldest version has p: as the first pair that
			// differs on it says of its older side, every version's if none.
			in := true
			for j := range differ {
				if older, ok := differ[j][resource][p]; ok {
					in = older
					break
				}
			}
			for j, v := range versions {
				if j > 0 {
					if _, ok := differ[j-1][resource][p]; ok {
						in = !in
					}
				}
				if in {
					has[v][resource] = append(has[v][resource], p)
				}
			}
		}
	}
	out := map[string]map[string]schemafields.Fields{}
	for v, byResource := range has {
		out[v] = map[string]schemafields.Fields{}
		for resource := range paths {
			ps := byResource[resource]
			slices.Sort(ps)
			var b strings.Builder
			for _, p := range ps {
				b.WriteString(p + "\n")
			}
			out[v][resource] = schemafields.Fields(b.String())
		}
	}
	return out
}

// servesResource reports whether the server's discovery lists the resource
// a discovery.ResourceKey names.
func servesResource(srv *discovery.Server, key string) bool {
	for _, list := range []*discovery.GroupList{&srv.Core, &srv.APIs} {
		for g := range list.Items {
			for _, v := range list.Items[g].Versions {
				for _, r := range v.Resources {
					if discovery.ResourceKey(list.Items[g].Name(), v.Version, r.Resource) == key {
						return true
					}
				}
			}
		}
	}
	return false
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
