package wasmhost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/envoyabi"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// builtPlugin is the plugin module built from the tree as `make build` builds it, once per test binary and only
// when a test asks for it.
var builtPlugin = sync.OnceValues(func() ([]byte, error) { return plugintest.BuildModule(false) })

// The plugin's behaviour suite, third run: the built module in this host, under
// the WASI semantics of the Envoy release that first loads Go plugins.
func TestPluginSuiteInEnvoyFaithfulHost(t *testing.T) {
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	plugintest.Run(t, pluginHarness{wasm: wasm})
}

// pluginHarness starts the built module in this host. environment is the VM's environment variables and
// wamrAppHeap lays its memory out as Envoy's WAMR runtime would (Options.WAMRAppHeap).
type pluginHarness struct {
	wasm        []byte
	environment [][2]string
	wamrAppHeap bool
}

func (pluginHarness) PushesConfiguration() bool { return true }

func (h pluginHarness) Start(t *testing.T, opts plugintest.StartOptions) (plugintest.Plugin, error) {
	t.Helper()
	calls := newConfigCaller(opts.Config, opts.HTTPCalls)
	host, err := New(context.Background(), h.wasm, Options{
		Envoy:               envoyabi.Envoy133,
		Instances:           1,
		CompilationCacheDir: compilationCacheDir(),
		PluginName:          "skewgate", RootID: "skewgate", VMID: "skewgate",
		PluginConfiguration: opts.Config,
		Environment:         h.environment,
		WAMRAppHeap:         h.wamrAppHeap,
		HTTPCalls:           calls,
		// A callback nesting deeper than Envoy's fixed Wasm stack allows traps here as it would there.
		CallDepth: &CallDepth{Limit: pluginCallDepthBudget},
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { host.Close(context.Background()) })
	return &hostedPlugin{t: t, host: host, subject: opts.SubjectPeerCertificate, digest: opts.SHA256PeerCertificateDigest, calls: calls}, nil
}

// configCaller is the HTTPCaller the built plugin runs with in these tests. Like Envoy's cluster manager it
// knows the clusters the configuration's snapshot defines, each server's own and its front-proxy twin, and
// refuses others; it answers each call with answer, one at a time, and records the calls. A nil answer, or one
// marked Failed, is a call that got no response.
type configCaller struct {
	answer func(plugintest.HTTPCall) plugintest.HTTPCallResponse

	mu       sync.Mutex
	clusters map[string]bool
	made     []plugintest.HTTPCall
}

var errCallFailed = errors.New("the test answered the call as failed")

func newConfigCaller(config []byte, answer func(plugintest.HTTPCall) plugintest.HTTPCallResponse) *configCaller {
	c := &configCaller{answer: answer}
	c.configure(config)
	return c
}

// allowEveryCall answers every call 200, as API servers answer a client they authorize.
func allowEveryCall(plugintest.HTTPCall) plugintest.HTTPCallResponse {
	return plugintest.HTTPCallResponse{Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte("{}")}
}

// configure takes the clusters of config's snapshot; a configuration without a valid one defines none (the
// plugin rejects it anyway).
func (c *configCaller) configure(config []byte) {
	clusters := make(map[string]bool)
	var cfg struct {
		Snapshot json.RawMessage `json:"snapshot"`
	}
	if json.Unmarshal(config, &cfg) == nil {
		if snap, err := discovery.ParseSnapshot(cfg.Snapshot); err == nil {
			for _, srv := range snap.Servers {
				clusters[srv.Cluster] = true
				clusters[srv.Cluster+discovery.FrontProxyClusterSuffix] = true
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clusters = clusters
}

func (c *configCaller) HasCluster(cluster string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clusters[cluster]
}

func (c *configCaller) HTTPCall(_ context.Context, call HTTPCall) (*HTTPCallResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	asked := plugintest.HTTPCall{Cluster: call.Cluster, Headers: call.Headers, Body: call.Body}
	c.made = append(c.made, asked)
	if c.answer == nil {
		return nil, errCallFailed
	}
	r := c.answer(asked)
	if r.Failed {
		return nil, errCallFailed
	}
	return &HTTPCallResponse{Headers: append([][2]string{{":status", strconv.Itoa(r.Status)}}, r.Headers...), Body: r.Body}, nil
}

// takeCalls returns the calls made since the last take.
func (c *configCaller) takeCalls() []plugintest.HTTPCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	made := c.made
	c.made = nil
	return made
}

type hostedPlugin struct {
	t       *testing.T
	host    *Host
	subject string
	digest  string
	calls   *configCaller
	clears  int
}

func (p *hostedPlugin) Request(method, path string, headers ...[2]string) plugintest.Result {
	return p.run(p.request(method, path, headers)).Result
}

// Write runs a stream with a body, which the host hands the plugin if it pauses the request headers for it.
func (p *hostedPlugin) Write(method, path, contentType string, body []byte, headers ...[2]string) plugintest.Result {
	req := p.request(method, path, append([][2]string{{"content-type", contentType}, {"content-length", strconv.Itoa(len(body))}}, headers...))
	req.EndOfStream = false
	reader := &fakeBody{body: body}
	req.Body = reader
	res := p.run(req)
	if res.Forwarded && reader.reads.Load() > 0 && !bytes.Equal(res.Body, body) {
		p.t.Errorf("the plugin read a body of %d bytes and the host forwards %d", len(body), len(res.Body))
	}
	return res.Result
}

func (p *hostedPlugin) request(method, path string, headers [][2]string) *Request {
	req := &Request{
		Headers:     append([][2]string{{":method", method}, {":path", path}, {":authority", "kube.example"}, {":scheme", "https"}}, headers...),
		EndOfStream: true,
		Properties:  Properties{RequestProtocol: "HTTP/2", TLS: &TLSProperties{Version: "TLSv1.3"}},
	}
	if p.subject != "" {
		req.Properties.TLS.PeerCertificatePresented = true
		req.Properties.TLS.SubjectPeerCertificate = p.subject
		req.Properties.TLS.SHA256PeerCertificateDigest = p.digest
	}
	return req
}

// hostedResult is the suite's result with the body the host forwards.
type hostedResult struct {
	plugintest.Result
	Body []byte
}

func (p *hostedPlugin) run(req *Request) hostedResult {
	out := p.host.HandleRequestHeaders(context.Background(), req)
	if out.Failed != nil || out.BodyFailed != nil {
		p.t.Fatalf("plugin failed: %v %v", out.Failed, out.BodyFailed)
	}
	if out.RouteCacheCleared {
		p.clears++
	}
	// This host cannot count the plugin's header calls, so HeaderCalls stays nil.
	res := plugintest.Result{Forwarded: out.Verdict == Forward, Headers: out.Headers, HTTPCalls: p.calls.takeCalls()}
	if out.Response != nil {
		res.Local = &plugintest.LocalResponse{Status: out.Response.Status, Headers: out.Response.Headers, Body: out.Response.Body}
	}
	return hostedResult{Result: res, Body: out.Body}
}

func (p *hostedPlugin) Reconfigure(config []byte) error {
	if err := p.host.Configure(context.Background(), config); err != nil {
		return err
	}
	p.calls.configure(config)
	return nil
}

// RouteCacheClears counts requests after which the route had to be resolved
// again; the plugin mutates headers and calls clear_route_cache together.
func (p *hostedPlugin) RouteCacheClears() int { return p.clears }

func (p *hostedPlugin) Counter(name string) uint64 {
	return uint64(p.metric(name))
}

func (p *hostedPlugin) Gauge(name string) int64 { return p.metric(name) }

// metric reads one unlabelled series from the Prometheus export, which is how
// operators see the plugin's metrics.
func (p *hostedPlugin) metric(name string) int64 {
	p.t.Helper()
	v, ok := p.exported(name)
	if !ok {
		p.t.Fatalf("metric %s not exported", name)
	}
	return v
}

// exported is the value of the unlabelled series name, if the host exports it.
func (p *hostedPlugin) exported(name string) (int64, bool) {
	p.t.Helper()
	var buf bytes.Buffer
	if err := p.host.WritePrometheus(&buf); err != nil {
		p.t.Fatal(err)
	}
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		value, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			p.t.Fatalf("metric %s: %q: %v", name, value, err)
		}
		return int64(v), true
	}
	return 0, false
}

// TestPluginSoakUnderEnvoy133WASI pushes 100,000 streams through the built
// plugin on the host semantics where a Go runtime timer or blocking wait is
// fatal (poll_oneoff answers ENOSYS). The mix includes the merged discovery
// answer, whose body copies keep the guest's garbage collector busy.
func TestPluginSoakUnderEnvoy133WASI(t *testing.T) {
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	const total = 100_000
	servers := discoverytest.SkewedControlPlane()
	servers[2].Healthy = false
	config := plugintest.Config(t, 1, nil, servers)
	h := newHost(t, wasm, Options{
		Envoy: envoyabi.Envoy133, Instances: 2, CompilationCacheDir: compilationCacheDir(),
		PluginConfiguration: config,
		HTTPCalls:           newConfigCaller(config, allowEveryCall),
		Logger:              slog.New(slog.DiscardHandler),
	})
	header := func(path string, extra ...[2]string) *Request {
		return &Request{Headers: append([][2]string{{":method", "GET"}, {":path", path}, {":authority", "kube"}}, extra...), EndOfStream: true}
	}
	mix := []struct {
		req  *Request
		want func(Outcome) bool
	}{
		{header("/apis/apps/v1/namespaces/default/deployments"), func(o Outcome) bool { return o.Verdict == Forward }},
		{header("/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", [2]string{"x-remote-user", "x"}),
			func(o Outcome) bool { return o.Verdict == Forward && o.RouteCacheCleared }},
		{header("/apis", [2]string{"accept", plugintest.AcceptV2}), func(o Outcome) bool { return o.Verdict == Respond && o.Response.Status == 200 }},
		{header("/version"), func(o Outcome) bool { return o.Verdict == Forward }},
		{header("/apis/coordination.k8s.io/v1alpha2/leasecandidates"), func(o Outcome) bool { return o.Verdict == Respond && o.Response.Status == 503 }},
	}
	var wg sync.WaitGroup
	var failures atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < total; i += 2 {
				m := mix[i%len(mix)]
				if out := h.HandleRequestHeaders(context.Background(), m.req); out.Failed != nil || !m.want(out) {
					if failures.Add(1) == 1 {
						t.Errorf("request %d (%s): %+v", i, m.req.Headers[1][1], out)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d of %d requests failed", n, total)
	}
	if traps := h.counters.traps.Load(); traps != 0 {
		t.Fatalf("%d traps", traps)
	}
}
