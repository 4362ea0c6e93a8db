package wasmhost

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// probe drives host functions directly through a probe module's trampolines while the test holds the only
// instance, so each call runs in a context the test sets up (a stream's request-headers callback, a root...).
type probe struct {
	t    testing.TB
	host *Host
	inst *instance
	logs *logRecorder
}

// Fixed probe memory locations for out-parameters and inputs.
const (
	outPtr   = 0x10 // u32 pointer slot
	outSize  = 0x14 // u32 size slot
	outValue = 0x18 // u64 slot
	inBase   = 0x100
	badPtr   = math.MaxUint32 - 3
)

// implementedImports are the imports Envoy release envoy provides to abi that this host implements: everything a
// probe can import.
func implementedImports(envoy envoyabi.Version, abi string) []envoyabi.Import {
	impls := (&Host{opts: Options{Envoy: envoy}}).implementations()
	return slices.DeleteFunc(envoyabi.ProvidedBy(envoy, abi), func(imp envoyabi.Import) bool { return impls[imp.Name] == nil })
}

// newProbe builds a probe declaring ABI 0.2.1 that imports every function the host implements.
func newProbe(t testing.TB, envoy envoyabi.Version, configure func(*Options)) *probe {
	t.Helper()
	logs := &logRecorder{}
	opts := Options{
		Envoy:               envoy,
		Instances:           1,
		PluginName:          "probe-plugin",
		RootID:              "probe-root",
		VMID:                "probe-vm",
		VMConfiguration:     []byte("vm-config"),
		PluginConfiguration: []byte("plugin-config"),
		Environment:         [][2]string{{"A", "1"}, {"LONGER", "value"}},
		Logger:              slog.New(logs),
	}
	if configure != nil {
		configure(&opts)
	}
	wasm := probeSpec{abi: envoyabi.ABI021, imports: implementedImports(envoy, envoyabi.ABI021)}.build()
	h := newHost(t, wasm, opts)
	s := h.slots[0]
	s.mu.Lock()
	t.Cleanup(s.mu.Unlock)
	return &probe{t: t, host: h, inst: s.inst, logs: logs}
}

// beginStream makes the instance look like it is inside proxy_on_request_headers of a new stream, the only one.
func (p *probe) beginStream(headers [][2]string, props Properties) *stream {
	inst := p.inst
	for _, s := range inst.streams {
		inst.releaseStream(s)
	}
	s := inst.newStream(context.Background(), inst.root, &Request{Headers: headers, Properties: props})
	s.requestOpen = true
	inst.effective = s.guestContext()
	return s
}

func (p *probe) useRoot() {
	p.inst.effective = guestContext{id: p.inst.root.id, root: p.inst.root}
}

func (p *probe) callErr(qualifiedName string, args ...uint64) (uint64, error) {
	fn := p.inst.mod.ExportedFunction("call:" + qualifiedName)
	if fn == nil {
		p.t.Fatalf("probe does not import %s", qualifiedName)
	}
	res, err := fn.Call(p.inst.callCtx, args...)
	if err != nil || len(res) == 0 {
		return 0, err
	}
	return res[0], nil
}

func (p *probe) call(qualifiedName string, args ...uint64) uint64 {
	p.t.Helper()
	res, err := p.callErr(qualifiedName, args...)
	if err != nil {
		p.t.Fatalf("%s trapped: %v", qualifiedName, err)
	}
	return res
}

func (p *probe) env(name string, args ...uint64) status {
	p.t.Helper()
	return status(p.call("env."+name, args...))
}

// put writes data at inBase+offset and returns its pointer and length as call arguments.
func (p *probe) put(offset uint32, data string) (uint64, uint64) {
	p.t.Helper()
	if !p.inst.mem.WriteString(inBase+offset, data) {
		p.t.Fatal("write outside probe memory")
	}
	return uint64(inBase + offset), uint64(len(data))
}

func (p *probe) u32At(ptr uint32) uint32 {
	v, _ := p.inst.mem.ReadUint32Le(ptr)
	return v
}

func (p *probe) u64At(ptr uint32) uint64 {
	v, _ := p.inst.mem.ReadUint64Le(ptr)
	return v
}

// returned reads a buffer handed back through the outPtr/outSize slots.
func (p *probe) returned() string {
	data, ok := p.inst.mem.Read(p.u32At(outPtr), p.u32At(outSize))
	if !ok {
		p.t.Fatal("returned buffer outside memory")
	}
	return string(data)
}

func expectStatus(t testing.TB, what string, got, want status) {
	t.Helper()
	if got != want {
		t.Fatalf("%s: status %d, want %d", what, got, want)
	}
}

func TestEveryImplementedImportLinksForEveryEnvoyAndABI(t *testing.T) {
	for _, envoy := range []envoyabi.Version{envoyabi.Envoy133, envoyabi.Envoy139} {
		for _, abi := range []string{envoyabi.ABI020, envoyabi.ABI021} {
			t.Run(envoy.String()+"/"+abi, func(t *testing.T) {
				imports := implementedImports(envoy, abi)
				wasm := probeSpec{abi: abi, imports: imports}.build()
				h := newHost(t, wasm, Options{Envoy: envoy, Instances: 1, Logger: slog.New(slog.DiscardHandler)})
				if h.ABI() != abi {
					t.Fatalf("ABI = %s", h.ABI())
				}
				if len(h.imports) != len(imports) {
					t.Fatalf("linked %d of %d imports", len(h.imports), len(imports))
				}
			})
		}
	}
}

// The host implements what skewgate's plugin imports, and nothing more: a function only some other module would
// call is code no request runs. The test guest keeps to the same set.
func TestHostImplementsExactlyWhatThePluginImports(t *testing.T) {
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	for name, module := range map[string][]byte{"plugin": wasm, "test guest": guestWasm(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
			defer r.Close(ctx)
			compiled, err := r.CompileModule(ctx, module)
			if err != nil {
				t.Fatal(err)
			}
			imported := map[string]bool{}
			for _, def := range compiled.ImportedFunctions() {
				_, fn, _ := def.Import()
				imported[fn] = true
			}
			for fn := range (&Host{opts: Options{Envoy: envoyabi.Envoy139}}).implementations() {
				if name == "plugin" && !imported[fn] {
					t.Errorf("the host implements %s, which the plugin does not import", fn)
				}
				delete(imported, fn)
			}
			for fn := range imported {
				t.Errorf("the %s imports %s, which the host does not implement", name, fn)
			}
		})
	}
}

func TestHeaderMapFunctionsFollowEnvoySemantics(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	s := p.beginStream([][2]string{{":path", "/x"}, {"X-Multi", "1"}, {"x-multi", "2"}, {"x-keep", "k"}}, Properties{})

	expectStatus(t, "get pairs from response headers", p.env("proxy_get_header_map_pairs", 2, outPtr, outSize), statusBadArgument)
	expectStatus(t, "unknown map type", p.env("proxy_get_header_map_pairs", 99, outPtr, outSize), statusBadArgument)

	k, kl := p.put(0, "X-MULTI")
	v, vl := p.put(32, "only")
	expectStatus(t, "replace", p.env("proxy_replace_header_map_value", 0, k, kl, v, vl), statusOK)
	if !s.routeCacheCleared {
		t.Fatal("a request-header mutation must clear the route cache")
	}
	k, kl = p.put(0, "X-New")
	v, vl = p.put(32, "v1")
	expectStatus(t, "replace an absent key", p.env("proxy_replace_header_map_value", 0, k, kl, v, vl), statusOK)
	bad, badLen := p.put(64, "a\r\nb")
	expectStatus(t, "replace with CRLF", p.env("proxy_replace_header_map_value", 0, k, kl, bad, badLen), statusBadArgument)

	want := [][2]string{{":path", "/x"}, {"x-keep", "k"}, {"x-multi", "only"}, {"x-new", "v1"}}
	if !slices.Equal(s.headers, want) {
		t.Fatalf("headers = %q, want %q", s.headers, want)
	}
	expectStatus(t, "get pairs", p.env("proxy_get_header_map_pairs", 0, outPtr, outSize), statusOK)
	if got, _ := decodePairs([]byte(p.returned())); !slices.Equal(got, want) {
		t.Fatalf("pairs = %q", got)
	}

	enc := string(appendPairs(nil, [][2]string{{"A", "1"}, {"b", "2"}}))
	m, ml := p.put(0, enc)
	expectStatus(t, "set pairs", p.env("proxy_set_header_map_pairs", 0, m, ml), statusOK)
	if !slices.Equal(s.headers, [][2]string{{"a", "1"}, {"b", "2"}}) {
		t.Fatalf("headers after set pairs = %q", s.headers)
	}
	m, ml = p.put(0, string(appendPairs(nil, [][2]string{{"a", "x\ny"}})))
	expectStatus(t, "set pairs with LF", p.env("proxy_set_header_map_pairs", 0, m, ml), statusBadArgument)
	tooMany := string(appendPairs(nil, make([][2]string, maxPairsCount+1)))
	m, ml = p.put(0, tooMany)
	expectStatus(t, "set pairs over the limit", p.env("proxy_set_header_map_pairs", 0, m, ml), statusOK)
	if len(s.headers) != 0 {
		t.Fatalf("an over-limit map decodes to an empty map in cpp-host; headers = %q", s.headers)
	}

	s.requestOpen, s.inLog = false, true
	k, kl = p.put(0, "a")
	expectStatus(t, "mutation after the headers callback", p.env("proxy_replace_header_map_value", 0, k, kl, k, kl), statusBadArgument)
	expectStatus(t, "request headers in the log phase", p.env("proxy_get_header_map_pairs", 0, outPtr, outSize), statusOK)
	expectStatus(t, "response headers in the log phase", p.env("proxy_get_header_map_pairs", 2, outPtr, outSize), statusNotFound)
	p.useRoot()
	expectStatus(t, "headers from a root context", p.env("proxy_get_header_map_pairs", 0, outPtr, outSize), statusBadArgument)
}

func TestBuffersExposeConfigurationOnlyWhenEnvoyDoes(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	p.useRoot()
	expectStatus(t, "vm configuration", p.env("proxy_get_buffer_bytes", 6, 0, 100, outPtr, outSize), statusOK)
	if got := p.returned(); got != "vm-config" {
		t.Fatalf("vm configuration = %q", got)
	}
	expectStatus(t, "vm configuration slice", p.env("proxy_get_buffer_bytes", 6, 3, 3, outPtr, outSize), statusOK)
	if got := p.returned(); got != "con" {
		t.Fatalf("slice = %q", got)
	}
	expectStatus(t, "start past the end", p.env("proxy_get_buffer_bytes", 6, 100, 1, outPtr, outSize), statusBadArgument)
	expectStatus(t, "plugin configuration outside on_configure", p.env("proxy_get_buffer_bytes", 7, 0, 100, outPtr, outSize), statusNotFound)
	expectStatus(t, "request body", p.env("proxy_get_buffer_bytes", 0, 0, 100, outPtr, outSize), statusNotFound)

	p.inst.configuring = p.inst.root
	expectStatus(t, "plugin configuration during on_configure", p.env("proxy_get_buffer_bytes", 7, 0, 100, outPtr, outSize), statusOK)
	if got := p.returned(); got != "plugin-config" {
		t.Fatalf("plugin configuration = %q", got)
	}
	p.inst.configuring = nil
}

// testDigest is a connection.sha256_peer_certificate_digest as Envoy spells it: 64 lower-case hex digits.
const testDigest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

func TestPropertiesAreEncodedAsEnvoyEncodesThem(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	props := Properties{
		SourceAddress:   "10.0.0.7:51234",
		SourcePort:      51234,
		RequestProtocol: "HTTP/2",
		TLS: &TLSProperties{
			PeerCertificatePresented: true, SubjectPeerCertificate: "CN=admin,O=system:masters", Version: "TLSv1.3",
			SHA256PeerCertificateDigest: testDigest,
		},
	}
	p.beginStream([][2]string{{":path", "/api"}, {":method", "GET"}, {"x-request-id", "rid"}}, props)
	le := func(v int64) string { return string(binary.LittleEndian.AppendUint64(nil, uint64(v))) }
	tests := []struct {
		path string
		want string
		st   status
	}{
		{"plugin_name", "probe-plugin", statusOK},
		{"plugin_root_id", "probe-root", statusOK},
		{"plugin_vm_id", "probe-vm", statusOK},
		{"source\x00address", "10.0.0.7:51234", statusOK},
		{"source\x00port", le(51234), statusOK},
		{"destination\x00address", "", statusNotFound},
		{"request\x00protocol", "HTTP/2", statusOK},
		{"request\x00path", "/api", statusOK},
		{"request\x00method", "GET", statusOK},
		{"request\x00id", "rid", statusOK},
		{"request\x00host", "", statusNotFound},
		{"connection\x00mtls", "\x01", statusOK},
		{"connection\x00subject_peer_certificate", "CN=admin,O=system:masters", statusOK},
		{"connection\x00sha256_peer_certificate_digest", testDigest, statusOK},
		{"connection\x00tls_version", "TLSv1.3", statusOK},
		{"xds\x00cluster_name", "", statusNotFound},
		{"custom", "", statusNotFound},
		{"no\x00such", "", statusNotFound},
		{"request\x00headers", string(appendPairs(nil, [][2]string{{":path", "/api"}, {":method", "GET"}, {"x-request-id", "rid"}})), statusOK},
	}
	for _, tt := range tests {
		t.Run(strings.ReplaceAll(tt.path, "\x00", "."), func(t *testing.T) {
			path, pl := p.put(0, tt.path)
			expectStatus(t, "get_property", p.env("proxy_get_property", path, pl, outPtr, outSize), tt.st)
			if tt.st == statusOK && p.returned() != tt.want {
				t.Fatalf("value = %q, want %q", p.returned(), tt.want)
			}
		})
	}

	t.Run("plaintext connection", func(t *testing.T) {
		p.beginStream(nil, Properties{})
		path, pl := p.put(0, "connection\x00mtls")
		expectStatus(t, "mtls", p.env("proxy_get_property", path, pl, outPtr, outSize), statusOK)
		if p.returned() != "\x00" {
			t.Fatalf("mtls = %q", p.returned())
		}
		path, pl = p.put(0, "connection\x00subject_peer_certificate")
		expectStatus(t, "subject", p.env("proxy_get_property", path, pl, outPtr, outSize), statusNotFound)
	})

	// Envoy leaves the digest out rather than answering an empty string.
	t.Run("TLS without a client certificate has no digest", func(t *testing.T) {
		p.beginStream(nil, Properties{TLS: &TLSProperties{Version: "TLSv1.3"}})
		path, pl := p.put(0, "connection\x00sha256_peer_certificate_digest")
		expectStatus(t, "digest", p.env("proxy_get_property", path, pl, outPtr, outSize), statusNotFound)
	})

	t.Run("root context has no request attributes", func(t *testing.T) {
		p.useRoot()
		path, pl := p.put(0, "source\x00address")
		expectStatus(t, "source.address", p.env("proxy_get_property", path, pl, outPtr, outSize), statusNotFound)
	})
}

func TestLocalResponseIsDeferredAndRecordedOnce(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	s := p.beginStream(nil, Properties{})
	details, dl := p.put(0, "denied by plugin")
	body, bl := p.put(64, "nope")
	hdrs, hl := p.put(128, string(appendPairs(nil, [][2]string{{"Content-Type", "text/plain"}})))
	expectStatus(t, "send", p.env("proxy_send_local_response", 403, details, dl, body, bl, hdrs, hl, math.MaxUint32), statusOK)
	want := LocalResponse{Status: 403, Headers: [][2]string{{"content-type", "text/plain"}}, Body: []byte("nope"),
		Details: "denied_by_plugin", GRPCStatus: -1}
	got := s.response
	if got == nil || got.Status != want.Status || !slices.Equal(got.Headers, want.Headers) ||
		string(got.Body) != string(want.Body) || got.Details != want.Details || got.GRPCStatus != want.GRPCStatus {
		t.Fatalf("response = %+v, want %+v", got, want)
	}
	expectStatus(t, "second reply", p.env("proxy_send_local_response", 500, 0, 0, 0, 0, 0, 0, 2), statusBadArgument)

	var out Outcome
	p.inst.decide(s, &Request{}, &out, actionContinue)
	if out.Verdict != Respond || out.Response != s.response {
		t.Fatalf("a local reply must force a pause: %+v", out)
	}
	s = p.beginStream(nil, Properties{})
	s.requestOpen, s.inLog = false, true
	expectStatus(t, "reply in the log phase", p.env("proxy_send_local_response", 200, 0, 0, 0, 0, 0, 0, 0), statusBadArgument)
	p.useRoot()
	expectStatus(t, "reply from a root context", p.env("proxy_send_local_response", 200, 0, 0, 0, 0, 0, 0, 0), statusBadArgument)
}

func TestContinueStreamIsDeferred(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	tests := []struct {
		name    string
		fn      string
		typ     uint64
		st      status
		action  uint32
		verdict Verdict
		failed  bool
	}{
		{"continue request after pause", "proxy_continue_stream", streamTypeRequest, statusOK, 1, Forward, false},
		{"continue response only", "proxy_continue_stream", streamTypeResponse, statusOK, 1, Respond, true},
		{"downstream is a network stream", "proxy_continue_stream", 2, statusBadArgument, 0, Forward, false},
		{"unknown stream type", "proxy_continue_stream", 9, statusBadArgument, 0, Forward, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := p.beginStream([][2]string{{":path", "/"}}, Properties{})
			expectStatus(t, tt.fn, p.env(tt.fn, tt.typ), tt.st)
			var out Outcome
			p.inst.decide(s, &Request{}, &out, tt.action)
			if out.Verdict != tt.verdict || (out.Failed != nil) != tt.failed {
				t.Fatalf("outcome = %+v", out)
			}
		})
	}
}

func TestMetricsFunctions(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	p.useRoot()
	define := func(kind uint64, metricName string) uint32 {
		n, nl := p.put(0, metricName)
		expectStatus(t, "define "+metricName, p.env("proxy_define_metric", kind, n, nl, outValue), statusOK)
		return p.u32At(outValue)
	}
	counter, gauge, hist := define(0, "c"), define(1, "g"), define(2, "h")
	if counter != 1 || gauge != 2 || hist != 3 || define(0, "c2") != 5 || define(0, "c") != counter {
		t.Fatalf("ids follow Envoy's scheme: %d %d %d", counter, gauge, hist)
	}
	n, nl := p.put(0, "x")
	expectStatus(t, "unknown type", p.env("proxy_define_metric", 3, n, nl, outValue), statusBadArgument)

	expectStatus(t, "counter +2", p.env("proxy_increment_metric", uint64(counter), 2), statusOK)
	expectStatus(t, "counter +0", p.env("proxy_increment_metric", uint64(counter), 0), statusBadArgument)
	expectStatus(t, "counter -1", p.env("proxy_increment_metric", uint64(counter), uint64(math.MaxUint64)), statusBadArgument)
	expectStatus(t, "counter +3", p.env("proxy_increment_metric", uint64(counter), 3), statusOK)
	expectStatus(t, "gauge +10", p.env("proxy_increment_metric", uint64(gauge), 10), statusOK)
	expectStatus(t, "gauge -4", p.env("proxy_increment_metric", uint64(gauge), uint64(math.MaxUint64-3)), statusOK)
	expectStatus(t, "histogram increment", p.env("proxy_increment_metric", uint64(hist), 1), statusBadArgument)
	expectStatus(t, "unknown id", p.env("proxy_increment_metric", 4001, 1), statusNotFound)

	expectStatus(t, "get counter", p.env("proxy_get_metric", uint64(counter), outValue), statusOK)
	if p.u64At(outValue) != 5 {
		t.Fatalf("counter = %d", p.u64At(outValue))
	}
	expectStatus(t, "get gauge", p.env("proxy_get_metric", uint64(gauge), outValue), statusOK)
	if p.u64At(outValue) != 6 {
		t.Fatalf("gauge = %d", p.u64At(outValue))
	}
	expectStatus(t, "get histogram", p.env("proxy_get_metric", uint64(hist), outValue), statusBadArgument)
	expectStatus(t, "get unknown", p.env("proxy_get_metric", 77, outValue), statusNotFound)
}

func TestForeignFunctionsAndEffectiveContext(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	s := p.beginStream(nil, Properties{})
	fn, fl := p.put(0, "clear_route_cache")
	expectStatus(t, "clear_route_cache", p.env("proxy_call_foreign_function", fn, fl, 0, 0, outPtr, outSize), statusOK)
	if !s.routeCacheCleared {
		t.Fatal("clear_route_cache must mark the route for re-resolution")
	}
	fn, fl = p.put(0, "unknown")
	expectStatus(t, "unknown function", p.env("proxy_call_foreign_function", fn, fl, 0, 0, outPtr, outSize), statusNotFound)

	expectStatus(t, "switch to root", p.env("proxy_set_effective_context", uint64(p.inst.root.id)), statusOK)
	if p.inst.effective.stream != nil || p.inst.effective.root != p.inst.root {
		t.Fatal("effective context did not switch to the root")
	}
	expectStatus(t, "switch to stream", p.env("proxy_set_effective_context", uint64(s.id)), statusOK)
	expectStatus(t, "unknown context", p.env("proxy_set_effective_context", 4242), statusBadArgument)
}

func TestProxyLogRemembersErrorLinesAndRefusesUnknownLevels(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	p.useRoot()
	msg, ml := p.put(0, "hello from the guest")
	expectStatus(t, "log", p.env("proxy_log", 4, msg, ml), statusOK)
	if !p.logs.contains("hello from the guest") || p.inst.lastGuestErr != "hello from the guest" {
		t.Fatal("error-level guest log not recorded")
	}
	expectStatus(t, "log level out of range", p.env("proxy_log", 6, msg, ml), statusBadArgument)
}

// TestOutOfRangeGuestPointersReturnInvalidMemoryAccess passes pointers and lengths outside guest memory to every
// host function that reads or writes guest memory: each must answer INVALID_MEMORY_ACCESS without trapping.
func TestOutOfRangeGuestPointersReturnInvalidMemoryAccess(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	s := p.beginStream([][2]string{{"k", "v"}}, Properties{})
	k, kl := p.put(0, "k")
	prop, pl := p.put(16, "plugin_name")
	p.useRoot()
	mn, ml := p.put(64, "m")
	expectStatus(t, "define metric", p.env("proxy_define_metric", 0, mn, ml, outValue), statusOK)
	metricID := uint64(p.u32At(outValue))
	huge := uint64(math.MaxUint32)
	tests := []struct {
		fn   string
		args []uint64
	}{
		{"proxy_log", []uint64{2, badPtr, 10}},
		{"proxy_log", []uint64{2, inBase, huge}},
		{"proxy_get_buffer_bytes", []uint64{6, 0, 100, badPtr, outSize}},
		{"proxy_get_buffer_bytes", []uint64{6, 0, 100, outPtr, badPtr}},
		{"proxy_replace_header_map_value", []uint64{0, badPtr, 3, k, kl}},
		{"proxy_replace_header_map_value", []uint64{0, k, kl, inBase, huge}},
		{"proxy_replace_header_map_value", []uint64{0, k, kl, badPtr, 2}},
		{"proxy_get_header_map_pairs", []uint64{0, badPtr, outSize}},
		{"proxy_set_header_map_pairs", []uint64{0, badPtr, 8}},
		{"proxy_get_property", []uint64{badPtr, 5, outPtr, outSize}},
		{"proxy_get_property", []uint64{prop, pl, outPtr, badPtr}},
		{"proxy_send_local_response", []uint64{200, badPtr, 5, 0, 0, 0, 0, 0}},
		{"proxy_send_local_response", []uint64{200, 0, 0, inBase, huge, 0, 0, 0}},
		{"proxy_define_metric", []uint64{0, badPtr, 4, outValue}},
		{"proxy_define_metric", []uint64{0, mn, ml, badPtr}},
		{"proxy_get_metric", []uint64{metricID, badPtr}},
		{"proxy_call_foreign_function", []uint64{badPtr, 3, 0, 0, outPtr, outSize}},
		{"proxy_http_call", []uint64{badPtr, 4, 0, 0, 0, 0, 0, 0, 0, outValue}},
		{"proxy_http_call", []uint64{k, kl, inBase, huge, 0, 0, 0, 0, 0, outValue}},
		{"proxy_http_call", []uint64{k, kl, 0, 0, 0, 0, 0, 0, 0, badPtr}},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			p.inst.effective = guestContext{id: s.id, root: p.inst.root, stream: s}
			s.requestOpen = true
			expectStatus(t, tt.fn, p.env(tt.fn, tt.args...), statusInvalidMemoryAccess)
		})
	}
}

// FuzzGuestPointerReads feeds arbitrary pointers and lengths to host functions that read guest memory: the
// result must be INVALID_MEMORY_ACCESS exactly when the range leaves guest memory, and never a trap.
func FuzzGuestPointerReads(f *testing.F) {
	p := newProbe(f, envoyabi.Envoy133, func(o *Options) { o.Logger = slog.New(slog.DiscardHandler) })
	memSize := uint64(p.inst.mem.Size())
	for _, seed := range [][2]uint32{{0, 0}, {inBase, 16}, {uint32(memSize) - 1, 1}, {uint32(memSize), 0}, {uint32(memSize) - 4, 8}, {badPtr, 4}, {1, math.MaxUint32}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, ptr, size uint32) {
		p := &probe{t: t, host: p.host, inst: p.inst, logs: p.logs}
		inRange := uint64(ptr)+uint64(size) <= memSize
		want := statusOK
		if !inRange {
			want = statusInvalidMemoryAccess
		}
		s := p.beginStream(nil, Properties{})
		if got := status(p.call("env.proxy_log", 0, uint64(ptr), uint64(size))); got != want {
			t.Fatalf("proxy_log(%#x, %d) = %d, want %d", ptr, size, got, want)
		}
		// Whatever a range in memory names, it is no foreign function and no attribute the probe's stream has
		// (its headers are empty): not found.
		if got := status(p.call("env.proxy_get_property", uint64(ptr), uint64(size), outPtr, outSize)); (got == statusInvalidMemoryAccess) == inRange {
			t.Fatalf("proxy_get_property(%#x, %d) = %d; in range %v", ptr, size, got, inRange)
		}
		if got := status(p.call("env.proxy_call_foreign_function", uint64(ptr), uint64(size), 0, 0, outPtr, outSize)); (got == statusInvalidMemoryAccess) == inRange {
			t.Fatalf("proxy_call_foreign_function(%#x, %d) = %d; in range %v", ptr, size, got, inRange)
		}
		s.headers = s.headers[:0]
		wantWrite := statusOK
		if uint64(ptr)+4 > memSize {
			wantWrite = statusInvalidMemoryAccess
		}
		if got := status(p.call("env.proxy_get_header_map_pairs", 0, uint64(ptr), outSize)); got != wantWrite {
			t.Fatalf("proxy_get_header_map_pairs(%#x) = %d, want %d", ptr, got, wantWrite)
		}
	})
}

func TestHTTPCallArgumentsAreCheckedLikeEnvoy(t *testing.T) {
	caller := &fakeCaller{clusters: []string{"auth"}, started: make(chan HTTPCall, 1)}
	p := newProbe(t, envoyabi.Envoy133, func(o *Options) { o.HTTPCalls = caller })
	complete := [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "a"}, {"Accept", "application/json"}}
	without := func(name string) [][2]string {
		return slices.DeleteFunc(slices.Clone(complete), func(h [2]string) bool { return h[0] == name })
	}
	tests := []struct {
		name     string
		cluster  string
		headers  string
		timeout  uint64
		want     status
		accepted bool
	}{
		{"accepted", "auth", string(appendPairs(nil, complete)), 250, statusOK, true},
		{"unknown cluster", "other", string(appendPairs(nil, complete)), 0, statusBadArgument, false},
		{"no :method", "auth", string(appendPairs(nil, without(":method"))), 0, statusBadArgument, false},
		{"no :path", "auth", string(appendPairs(nil, without(":path"))), 0, statusBadArgument, false},
		{"no :authority", "auth", string(appendPairs(nil, without(":authority"))), 0, statusBadArgument, false},
		{"malformed header map", "auth", "\xff\xff\xff\xff", 0, statusBadArgument, false},
		{"negative timeout", "auth", string(appendPairs(nil, complete)), 1 << 31, statusBadArgument, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.beginStream(nil, Properties{})
			up, ul := p.put(0, tt.cluster)
			hd, hl := p.put(64, tt.headers)
			p.inst.mem.WriteUint32Le(outValue, 77)
			expectStatus(t, "proxy_http_call", p.env("proxy_http_call", up, ul, hd, hl, 0, 0, 0, 0, tt.timeout, outValue), tt.want)
			token := p.u32At(outValue)
			if !tt.accepted {
				if token != 0 {
					t.Fatalf("a refused call leaves token %d; cpp-host writes 0 first", token)
				}
				return
			}
			if token == 0 {
				t.Fatal("no token for an accepted call")
			}
			call := waitStarted(t, caller.started)
			want := [][2]string{{":method", "GET"}, {":path", "/x"}, {":authority", "a"}, {"accept", "application/json"}}
			if call.Cluster != "auth" || !slices.Equal(call.Headers, want) || call.Timeout != 250*time.Millisecond {
				t.Fatalf("call = %+v", call)
			}
		})
	}
	t.Run("from the VM context", func(t *testing.T) {
		p.inst.effective = guestContext{}
		up, ul := p.put(0, "auth")
		hd, hl := p.put(64, string(appendPairs(nil, complete)))
		expectStatus(t, "proxy_http_call", p.env("proxy_http_call", up, ul, hd, hl, 0, 0, 0, 0, 0, outValue), statusBadArgument)
	})
}

func TestHTTPCallResponseIsUnavailableOutsideItsCallback(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	p.beginStream([][2]string{{":path", "/"}}, Properties{})
	for _, mapType := range []uint64{mapTypeHTTPCallResponseHeaders, mapTypeHTTPCallResponseTrailer} {
		k, kl := p.put(0, ":status")
		v, vl := p.put(16, "200")
		expectStatus(t, "replace value", p.env("proxy_replace_header_map_value", mapType, k, kl, v, vl), statusBadArgument)
		expectStatus(t, "get pairs", p.env("proxy_get_header_map_pairs", mapType, outPtr, outSize), statusBadArgument)
	}
	expectStatus(t, "body", p.env("proxy_get_buffer_bytes", bufferTypeHTTPCallResponseBody, 0, 10, outPtr, outSize), statusNotFound)
}

// The plugin answers merged discovery with the same document request after
// request: a reply whose body is the previous reply's shares its bytes instead
// of copying them out of guest memory again, and a different body is copied.
func TestALocalReplyRepeatingThePreviousBodySharesItsBytes(t *testing.T) {
	h := newBenchPluginHost(t, 1)
	ix := benchIndex(t)
	serve := func(path string) []byte {
		t.Helper()
		req := pluginBenchRequest{method: "GET", target: path,
			extra: [][2]string{{"accept", benchAcceptAggregated + ",application/json"}}}.request()
		out := h.HandleRequestHeaders(context.Background(), req)
		if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 200 {
			t.Fatalf("GET %s: outcome %+v; want the merged document", path, out)
		}
		return out.Response.Body
	}
	apis, core := ix.MergedAPIs().Body, ix.MergedCoreAPI().Body
	first, second := serve("/apis"), serve("/apis")
	if !bytes.Equal(first, apis) || !bytes.Equal(second, apis) {
		t.Fatal("GET /apis twice: a body other than the merged /apis document")
	}
	if &first[0] != &second[0] {
		t.Error("GET /apis twice: the second reply copied the body again; want the first reply's bytes")
	}
	other := serve("/api")
	if !bytes.Equal(other, core) || &other[0] == &first[0] {
		t.Error("GET /api after /apis: want the merged /api document in bytes of its own")
	}
	if again := serve("/apis"); !bytes.Equal(again, apis) || !bytes.Equal(first, apis) {
		t.Error("GET /apis after /api: a reply's body changed")
	}
}
