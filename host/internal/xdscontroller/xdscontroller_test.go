package xdscontroller

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/metricstest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

const envoyWasmPath = "/etc/skewgate/skewgate.wasm"

// fixture is a configuration whose every file exists, the CA that signed
// them, and snapshots to hand the server as its controller would.
type fixture struct {
	ca  *devpki.CA
	cfg Config
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	ca, err := devpki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteFile(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf := func(l *devpki.Leaf, err error) *devpki.Leaf {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	servingCert, servingKey, err := leaf(ca.Serving("skewgate-xds", "127.0.0.1")).WriteFiles(dir, "xds")
	if err != nil {
		t.Fatal(err)
	}
	proxyCert, proxyKey, err := leaf(ca.Client(pkix.Name{CommonName: "front-proxy-client"})).WriteFiles(dir, "proxy")
	if err != nil {
		t.Fatal(err)
	}
	cfg := NewConfig()
	cfg.APIServers = []string{"https://127.0.0.1:1"}
	cfg.PeerCAFile, cfg.ProxyClientCertFile, cfg.ProxyClientKeyFile = caFile, proxyCert, proxyKey
	cfg.BindAddress, cfg.MetricsBindAddress = "127.0.0.1:0", "127.0.0.1:0"
	cfg.TLSCertFile, cfg.TLSPrivateKeyFile, cfg.ClientCAFile = servingCert, servingKey, caFile
	cfg.EnvoyWasmPath = envoyWasmPath
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return &fixture{ca: ca, cfg: cfg}
}

// start runs a Server until the test ends; the test hands snapshots over
// itself, as the controller would: the controller finds no API server at
// --apiserver, and publishes nothing.
func (f *fixture) start(t *testing.T) *Server {
	t.Helper()
	s, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	// The test's context ends before its cleanups run.
	go func() { served <- s.Serve(t.Context()) }()
	t.Cleanup(func() {
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

// hand gives s a snapshot of the skewed control plane, with the servers
// healthy or not, as the controller does.
func hand(t *testing.T, s *Server, generation uint64, healthy bool) {
	t.Helper()
	servers := discoverytest.SkewedControlPlane()
	for i := range servers {
		servers[i].Healthy = healthy
	}
	raw := discoverytest.SnapshotJSON(generation, servers)
	snap, err := discovery.ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.shell.Take(context.Background(), controller.Published{Raw: raw, Snapshot: snap}); err != nil {
		t.Fatal(err)
	}
}

// subscriber is an Envoy's ECDS subscription to the plugin filter.
type subscriber struct {
	t      *testing.T
	stream extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsClient
}

func (f *fixture) subscribe(t *testing.T, s *Server) *subscriber {
	t.Helper()
	sub := &subscriber{t: t, stream: f.openStream(t, s)}
	sub.send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a", Cluster: "skewgate"}})
	return sub
}

// openStream opens an ECDS stream as an Envoy with a client certificate of
// its own.
func (f *fixture) openStream(t *testing.T, s *Server) extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsClient {
	t.Helper()
	client, err := f.ca.Client(pkix.Name{CommonName: "envoy"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.XDSAddr().String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs:      f.ca.Pool(),
		Certificates: []tls.Certificate{client.TLSCertificate()},
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func (x *subscriber) send(req *discoveryv3.DiscoveryRequest) {
	x.t.Helper()
	req.TypeUrl, req.ResourceNames = resourcev3.ExtensionConfigType, []string{envoyconfig.FilterName}
	if err := x.stream.Send(req); err != nil {
		x.t.Fatal(err)
	}
}

// next receives a response, acknowledges it as Envoy does and returns its
// version and the plugin configuration in it.
func (x *subscriber) next() (version string, config map[string]json.RawMessage) {
	x.t.Helper()
	resp, err := x.stream.Recv()
	if err != nil {
		x.t.Fatal(err)
	}
	x.send(&discoveryv3.DiscoveryRequest{VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce()})
	if len(resp.GetResources()) != 1 {
		x.t.Fatalf("%d resources", len(resp.GetResources()))
	}
	var ext corev3.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&ext); err != nil {
		x.t.Fatal(err)
	}
	var wasm wasmfilterv3.Wasm
	if err := ext.GetTypedConfig().UnmarshalTo(&wasm); err != nil {
		x.t.Fatal(err)
	}
	if got := wasm.GetConfig().GetVmConfig().GetCode().GetLocal().GetFilename(); got != envoyWasmPath {
		x.t.Errorf("module %q, want --envoy-wasm-path %q", got, envoyWasmPath)
	}
	var configuration wrapperspb.StringValue
	if err := wasm.GetConfig().GetConfiguration().UnmarshalTo(&configuration); err != nil {
		x.t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(configuration.GetValue()), &config); err != nil {
		x.t.Fatal(err)
	}
	return resp.GetVersionInfo(), config
}

func metrics(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func eventuallyMetric(t *testing.T, s *Server, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(metrics(t, s), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in /metrics:\n%s", want, metrics(t, s))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Each snapshot reaches the Envoys subscribed over xDS as a new version whose
// plugin configuration carries it with the plugin flags' settings.
func TestSnapshotChangesReachAnXDSSubscriber(t *testing.T) {
	f := newFixture(t)
	f.cfg.RoutingHeader = "x-chosen-upstream"
	s := f.start(t)
	hand(t, s, 1, true)
	sub := f.subscribe(t, s)
	healthy, config := sub.next()
	if string(config["routingHeader"]) != `"x-chosen-upstream"` {
		t.Errorf("routing header %s; want --routing-header's", config["routingHeader"])
	}
	hand(t, s, 2, false)
	if unhealthy, _ := sub.next(); unhealthy == healthy {
		t.Fatalf("a new snapshot came as the same version %q", healthy)
	}
	for _, want := range []string{"skewgate_xds_streams 1", "skewgate_xds_nacks_total 0", "skewgate_xds_publish_failures_total 0", "skewgate_ready 1"} {
		eventuallyMetric(t, s, want)
	}
}

// The version names the configuration, not the controller's snapshot count:
// the same discovery is the same version at another generation, and after a
// restart, which begins counting anew.
func TestTheSameDiscoveryIsTheSameXDSVersionAcrossGenerationsAndRestarts(t *testing.T) {
	f := newFixture(t)
	s := f.start(t)
	hand(t, s, 1, true)
	sub := f.subscribe(t, s)
	first, _ := sub.next()
	hand(t, s, 2, false)
	sub.next()
	hand(t, s, 3, true)
	if again, _ := sub.next(); again != first {
		t.Errorf("generation 3 has version %q, generation 1 of the same discovery %q", again, first)
	}

	restarted := f.start(t)
	hand(t, restarted, 1, true)
	if version, _ := f.subscribe(t, restarted).next(); version != first {
		t.Errorf("after a restart the same discovery has version %q, before it %q", version, first)
	}
}

// --xds-max-streams reaches the management server: beyond it, an Envoy is
// refused and told why, and the refusal is counted.
func TestTheXDSStreamLimitIsTheFlags(t *testing.T) {
	f := newFixture(t)
	f.cfg.MaxStreams = 1
	s := f.start(t)
	hand(t, s, 1, true)
	f.subscribe(t, s).next()
	refused := f.openStream(t, s)
	// The server may end the stream before the request is sent; Recv says why.
	_ = refused.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-b"}, TypeUrl: resourcev3.ExtensionConfigType})
	if _, err := refused.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the server has 1 streams open") {
		t.Fatalf("second stream ended with %v, want ResourceExhausted naming the limit of 1", err)
	}
	eventuallyMetric(t, s, `skewgate_xds_refused_streams_total{reason="server_stream_limit"} 1`)
}

// Until a configuration is published, /readyz fails: an Envoy would get
// nothing from this replica.
func TestReadyOnlyOnceAConfigurationIsPublished(t *testing.T) {
	f := newFixture(t)
	s := f.start(t)
	readyz := func() int {
		resp, err := http.Get("http://" + s.MetricsAddr().String() + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := readyz(); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before any snapshot: %d, want 503", code)
	}
	hand(t, s, 1, true)
	if code := readyz(); code != http.StatusOK {
		t.Errorf("/readyz once published: %d, want 200", code)
	}
}

// The Envoys' module is taken to be this build's unless
// --envoy-wasm-schema-version says otherwise, and one that would refuse
// every configuration stops the start.
func TestAnEnvoyModuleOfAnotherMajorVersionStopsTheStart(t *testing.T) {
	f := newFixture(t)
	f.cfg.EnvoyWasmSchemaVersion = "2.0"
	if _, err := New(f.cfg); err == nil || !strings.Contains(err.Error(), `--envoy-wasm-schema-version "2.0"`) {
		t.Errorf("New = %v; want a refusal naming --envoy-wasm-schema-version", err)
	}
}

// Every metric /metrics serves is Prometheus' own or one metricdef defines,
// as it defines it; and every definition of the xDS server is served.
func TestEveryMetricServedIsDefined(t *testing.T) {
	f := newFixture(t)
	s := f.start(t)
	hand(t, s, 1, true)
	served, err := metricstest.Endpoint("http://" + s.MetricsAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range metricdef.All {
		// The refusals are counted by reason once one happened.
		if def.Exporter == metricdef.XDS && def != &metricdef.XDSRefusedStreams && !served[def.Name] {
			t.Errorf("%s is defined but not served", def.Name)
		}
	}
}
