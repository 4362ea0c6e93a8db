package plugin

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/proxytest"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/metricdef"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// The suite runs natively and against the module built from this tree under
// proxytest, so what is tested is what Envoy loads; host/internal/wasmhost runs
// it a third time in skewgate's Envoy-faithful host.
func TestPluginNative(t *testing.T) {
	plugintest.Run(t, proxytestHarness{vm: func(*testing.T) types.VMContext { return &vmContext{} }})
}

func TestPluginWasmUnderProxytest(t *testing.T) {
	plugintest.Run(t, proxytestHarness{vm: func(t *testing.T) types.VMContext {
		vm, err := builtModuleVM()
		if err != nil {
			t.Fatalf("load the built module: %v", err)
		}
		return vm
	}})
}

// builtModule is the module built from the source in the tree, once per test
// binary and only when a test asks for it.
var builtModule = sync.OnceValues(func() ([]byte, error) { return plugintest.BuildModule(false) })

// builtModuleVM is one instance of the built module that every Start reuses:
// compiling the module takes seconds, and a Start creates the root context
// anew, which holds all the plugin's state (Envoy, too, configures a running
// VM by creating a new root context in it). It lives as long as the test
// binary.
var builtModuleVM = sync.OnceValues(func() (types.VMContext, error) {
	wasm, err := builtModule()
	if err != nil {
		return nil, err
	}
	return proxytest.NewWasmVMContext(wasm)
})

func readBuiltModule(t *testing.T) []byte {
	t.Helper()
	wasm, err := builtModule()
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

// proxytestHarness runs the plugin in the SDK's host emulator.
type proxytestHarness struct {
	vm func(*testing.T) types.VMContext
}

// proxytest supports one plugin context, configured once.
func (proxytestHarness) PushesConfiguration() bool { return false }

func (h proxytestHarness) Start(t *testing.T, opts plugintest.StartOptions) (plugintest.Plugin, error) {
	t.Helper()
	opt := proxytest.NewEmulatorOption().WithVMContext(h.vm(t)).WithPluginConfiguration(opts.Config)
	if opts.SubjectPeerCertificate != "" {
		opt = opt.WithProperty(propertySubjectPeerCertificate, []byte(opts.SubjectPeerCertificate))
	}
	if opts.SHA256PeerCertificateDigest != "" {
		opt = opt.WithProperty(propertySHA256PeerCertificateDigest, []byte(opts.SHA256PeerCertificateDigest))
	}
	host, reset := proxytest.NewHostEmulator(opt)
	t.Cleanup(reset)
	p := &proxytestPlugin{t: t, host: host, calls: opts.HTTPCalls}
	// proxytest cannot return an empty result (it indexes the first byte);
	// Envoy's clear_route_cache returns nothing and the plugin ignores it.
	host.RegisterForeignFunction("clear_route_cache", func([]byte) []byte { p.clears++; return []byte{0} })
	if host.StartPlugin() != types.OnPluginStartStatusOK {
		if v, _ := host.GetCounterMetric(metricdef.PluginConfigurationRejections.Name); v != 1 {
			t.Errorf("rejected-configurations counter %d after a rejection; want 1", v)
		}
		return nil, errors.New(strings.Join(host.GetCriticalLogs(), "\n"))
	}
	return p, nil
}

type proxytestPlugin struct {
	t      *testing.T
	host   proxytest.HostEmulator
	calls  func(plugintest.HTTPCall) plugintest.HTTPCallResponse
	clears int
}

func (p *proxytestPlugin) Request(method, path string, headers ...[2]string) plugintest.Result {
	id := p.host.InitializeHttpContext()
	all := append([][2]string{{":method", method}, {":path", path}, {":authority", "kube.example"}}, headers...)
	p.host.CallOnRequestHeaders(id, all, true)
	var res plugintest.Result
	// The emulator lists every call a context made; answering one may make
	// the plugin dispatch another.
	for callouts := p.host.GetCalloutAttributesFromContext(id); len(res.HTTPCalls) < len(callouts); callouts = p.host.GetCalloutAttributesFromContext(id) {
		c := callouts[len(res.HTTPCalls)]
		call := plugintest.HTTPCall{Cluster: c.Upstream, Headers: c.Headers, Body: c.Body}
		res.HTTPCalls = append(res.HTTPCalls, call)
		p.answer(c.CalloutID, call)
	}
	res.Forwarded = p.host.GetCurrentHttpStreamAction(id) == types.ActionContinue
	res.Headers = p.host.GetCurrentRequestHeaders(id)
	if l := p.host.GetSentLocalResponse(id); l != nil {
		res.Local = &plugintest.LocalResponse{Status: l.StatusCode, Headers: l.Headers, Body: l.Data}
	}
	p.host.CompleteHttpContext(id)
	return res
}

func (p *proxytestPlugin) Write(method, path, contentType string, body []byte, headers ...[2]string) plugintest.Result {
	id := p.host.InitializeHttpContext()
	all := append([][2]string{{":method", method}, {":path", path}, {":authority", "kube.example"},
		{"content-type", contentType}, {"content-length", strconv.Itoa(len(body))}}, headers...)
	var res plugintest.Result
	if p.host.CallOnRequestHeaders(id, all, false) == types.ActionPause && p.host.GetSentLocalResponse(id) == nil {
		p.host.CallOnRequestBody(id, body, true)
	}
	res.Forwarded = p.host.GetCurrentHttpStreamAction(id) == types.ActionContinue
	res.Headers = p.host.GetCurrentRequestHeaders(id)
	if l := p.host.GetSentLocalResponse(id); l != nil {
		res.Local = &plugintest.LocalResponse{Status: l.StatusCode, Headers: l.Headers, Body: l.Data}
	}
	p.host.CompleteHttpContext(id)
	return res
}

// answer delivers the test's response to one call; a failed call reaches the
// plugin with no headers and no body, as Envoy reports it.
func (p *proxytestPlugin) answer(calloutID uint32, call plugintest.HTTPCall) {
	if p.calls == nil {
		p.host.CallOnHttpCallResponse(calloutID, nil, nil, nil)
		return
	}
	r := p.calls(call)
	if r.Failed {
		p.host.CallOnHttpCallResponse(calloutID, nil, nil, nil)
		return
	}
	headers := append([][2]string{{":status", strconv.Itoa(r.Status)}}, r.Headers...)
	p.host.CallOnHttpCallResponse(calloutID, headers, nil, r.Body)
}

func (p *proxytestPlugin) Counter(name string) uint64 {
	v, err := p.host.GetCounterMetric(name)
	if err != nil {
		p.t.Fatalf("counter %s: %v", name, err)
	}
	return v
}

func (p *proxytestPlugin) Gauge(name string) int64 {
	v, err := p.host.GetGaugeMetric(name)
	if err != nil {
		p.t.Fatalf("gauge %s: %v", name, err)
	}
	return int64(v)
}

func (p *proxytestPlugin) RouteCacheClears() int { return p.clears }

// BenchmarkHeaderFloodStripping runs the built module on one request that
// carries n X-Remote-* headers to strip; ns/header must not grow with n.
func BenchmarkHeaderFloodStripping(b *testing.B) {
	vm, err := builtModuleVM()
	if err != nil {
		b.Fatalf("load the built module: %v", err)
	}
	for _, n := range []int{1000, 4000, 16000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			config := plugintest.Config(b, 1, nil, discoverytest.SkewedControlPlane())
			host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(vm).WithPluginConfiguration(config))
			defer reset()
			if host.StartPlugin() != types.OnPluginStartStatusOK {
				b.Fatal(host.GetCriticalLogs())
			}
			headers := [][2]string{{":method", "GET"}, {":path", "/api/v1/pods"}, {":authority", "kube.example"}}
			for i := range n {
				headers = append(headers, [2]string{"x-remote-extra-k" + strconv.Itoa(i), "v"})
			}
			for b.Loop() {
				id := host.InitializeHttpContext()
				host.CallOnRequestHeaders(id, headers, true)
				host.CompleteHttpContext(id)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/header")
		})
	}
}

// A configuration from a controller one minor schema version ahead is
// accepted with one warning naming what the plugin leaves out.
func TestNewerMinorConfigurationIsLoggedNamingTheIgnoredFields(t *testing.T) {
	config := plugintest.NewerMinorConfig(t, 1, discoverytest.SkewedControlPlane())
	host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&vmContext{}).WithPluginConfiguration(config))
	defer reset()
	if host.StartPlugin() != types.OnPluginStartStatusOK {
		t.Fatal(host.GetCriticalLogs())
	}
	next := discovery.SchemaVersion{Major: discovery.SchemaMajor, Minor: discovery.SchemaMinor + 1}
	want := "skewgate: configuration of schema " + next.String() + ", newer than this module's " + discovery.CurrentSchema().String() +
		": ignored the fields it does not know: futureOption, snapshot.servers[].weight, snapshot.shards"
	if warnings := host.GetWarnLogs(); len(warnings) != 1 || warnings[0] != want {
		t.Errorf("warnings %q; want exactly %q", warnings, want)
	}
}

// What a controller of another major version sends is refused, and counted
// apart from other rejections.
func TestConfigurationOfAnotherMajorSchemaIsCountedAsASchemaRejection(t *testing.T) {
	valid := string(plugintest.Config(t, 1, nil, discoverytest.SkewedControlPlane()))
	config := strings.Replace(valid, `{"snapshot"`, `{"schemaVersion":"2.0","snapshot"`, 1)
	host, reset := proxytest.NewHostEmulator(proxytest.NewEmulatorOption().WithVMContext(&vmContext{}).WithPluginConfiguration([]byte(config)))
	defer reset()
	if host.StartPlugin() == types.OnPluginStartStatusOK {
		t.Fatal("a configuration of schema 2.0 was accepted")
	}
	for name, want := range map[string]uint64{metricdef.PluginConfigurationRejections.Name: 1, metricdef.PluginConfigurationSchemaRejections.Name: 1} {
		if got, err := host.GetCounterMetric(name); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", name, got, err, want)
		}
	}
}
