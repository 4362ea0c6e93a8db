package wasmhost

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/envoyabi"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// The plugin's behaviour suite, third run: the built module in this host, under
// the WASI semantics of the Envoy release that first loads Go plugins.
const builtPlugin = "../../../build/skewgate.wasm"

var builtPluginOnce = sync.OnceValues(func() ([]byte, error) { return os.ReadFile(builtPlugin) })

func TestPluginSuiteInEnvoyFaithfulHost(t *testing.T) {
	wasm, err := builtPluginOnce()
	if err != nil {
		t.Fatalf("the built plugin is missing (run `make build`): %v", err)
	}
	plugintest.Run(t, pluginHarness{wasm: wasm})
}

type pluginHarness struct{ wasm []byte }

// This host adds a second header field for an added value, as Envoy does.
func (pluginHarness) ConcatenatesAddedValues() bool { return false }

func (pluginHarness) PushesConfiguration() bool { return true }

func (h pluginHarness) Start(t *testing.T, opts plugintest.StartOptions) (plugintest.Plugin, error) {
	t.Helper()
	host, err := New(context.Background(), h.wasm, Options{
		Envoy:               envoyabi.Envoy133,
		Instances:           1,
		CompilationCacheDir: compilationCacheDir(),
		PluginName:          "skewgate", RootID: "skewgate", VMID: "skewgate",
		PluginConfiguration: opts.Config,
		Logger:              slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { host.Close(context.Background()) })
	return &hostedPlugin{t: t, host: host, subject: opts.SubjectPeerCertificate}, nil
}

type hostedPlugin struct {
	t       *testing.T
	host    *Host
	subject string
	clears  int
}

func (p *hostedPlugin) Request(method, path string, headers ...[2]string) plugintest.Result {
	req := &Request{
		Headers:     append([][2]string{{":method", method}, {":path", path}, {":authority", "kube.example"}, {":scheme", "https"}}, headers...),
		EndOfStream: true,
		Properties:  Properties{RequestProtocol: "HTTP/2", TLS: &TLSProperties{Version: "TLSv1.3"}},
	}
	if p.subject != "" {
		req.Properties.TLS.PeerCertificatePresented = true
		req.Properties.TLS.SubjectPeerCertificate = p.subject
	}
	out := p.host.HandleRequestHeaders(context.Background(), req)
	if out.Failed != nil {
		p.t.Fatalf("plugin failed: %v", out.Failed)
	}
	if out.RouteCacheCleared {
		p.clears++
	}
	res := plugintest.Result{Forwarded: out.Verdict == Forward, Headers: out.Headers}
	if out.Response != nil {
		res.Local = &plugintest.LocalResponse{Status: out.Response.Status, Headers: out.Response.Headers, Body: out.Response.Body}
	}
	return res
}

func (p *hostedPlugin) Reconfigure(config []byte) error {
	return p.host.Configure(context.Background(), config)
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
		return int64(v)
	}
	p.t.Fatalf("metric %s not exported:\n%s", name, buf.String())
	return 0
}

// TestPluginSoakUnderEnvoy133WASI pushes 100,000 streams through the built
// plugin on the host semantics where a Go runtime timer or blocking wait is
// fatal (poll_oneoff answers ENOSYS). The mix includes the merged discovery
// answer, whose body copies keep the guest's garbage collector busy.
func TestPluginSoakUnderEnvoy133WASI(t *testing.T) {
	wasm, err := builtPluginOnce()
	if err != nil {
		t.Fatalf("the built plugin is missing (run `make build`): %v", err)
	}
	const total = 100_000
	servers := discoverytest.SkewedControlPlane()
	servers[2].Healthy = false
	h := newHost(t, wasm, Options{
		Envoy: envoyabi.Envoy133, Instances: 2, CompilationCacheDir: compilationCacheDir(),
		PluginConfiguration: plugintest.Config(t, 1, nil, servers),
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
		{header("/apis/coordination.k8s.io/v1alpha2/leases"), func(o Outcome) bool { return o.Verdict == Forward }},
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
