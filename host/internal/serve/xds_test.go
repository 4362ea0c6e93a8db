package serve

import (
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/json"
	"os"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
)

const envoyWasmPath = "/etc/skewgate/skewgate.wasm"

// withXDS turns the management server on, with the gateway's serving
// certificate and the fixture's CA for the Envoys' client certificates.
func (f *fixture) withXDS() {
	f.cfg.XDSBindAddress = "127.0.0.1:0"
	f.cfg.XDSClientCAFile = f.cfg.PeerCAFile
	f.cfg.EnvoyWasmPath = envoyWasmPath
}

// xdsSubscriber is an Envoy's ECDS subscription to the plugin filter.
type xdsSubscriber struct {
	t      *testing.T
	stream extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsClient
}

func (f *fixture) subscribeXDS(t *testing.T, s *Server) *xdsSubscriber {
	t.Helper()
	sub := &xdsSubscriber{t: t, stream: f.openXDSStream(t, s)}
	sub.send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a", Cluster: "skewgate"}})
	return sub
}

// openXDSStream opens an ECDS stream as an Envoy with a client certificate
// of its own.
func (f *fixture) openXDSStream(t *testing.T, s *Server) extensionv3.ExtensionConfigDiscoveryService_StreamExtensionConfigsClient {
	t.Helper()
	client := mustLeaf(t)(f.ca.Client(pkix.Name{CommonName: "envoy"}))
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

func (x *xdsSubscriber) send(req *discoveryv3.DiscoveryRequest) {
	x.t.Helper()
	req.TypeUrl, req.ResourceNames = resourcev3.ExtensionConfigType, []string{envoyconfig.FilterName}
	if err := x.stream.Send(req); err != nil {
		x.t.Fatal(err)
	}
}

// next receives a response, acknowledges it as Envoy does and returns its
// resource and the snapshot the plugin configuration in it carries.
func (x *xdsSubscriber) next() (*discoveryv3.DiscoveryResponse, *corev3.TypedExtensionConfig, *discovery.Snapshot) {
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
	var plugin struct{ Snapshot json.RawMessage }
	if err := json.Unmarshal([]byte(configuration.GetValue()), &plugin); err != nil {
		x.t.Fatal(err)
	}
	snap, err := discovery.ParseSnapshot(plugin.Snapshot)
	if err != nil {
		x.t.Fatal(err)
	}
	return resp, &ext, snap
}

func healthyServers(snap *discovery.Snapshot) int {
	n := 0
	for _, srv := range snap.Servers {
		if srv.Healthy {
			n++
		}
	}
	return n
}

// ecdsFileResource is the TypedExtensionConfig the ECDS file holds.
func ecdsFileResource(t *testing.T, path string) *corev3.TypedExtensionConfig {
	t.Helper()
	content, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.YAMLToJSON(content)
	if err != nil {
		t.Fatal(err)
	}
	var resp discoveryv3.DiscoveryResponse
	if err := protojson.Unmarshal(js, &resp); err != nil {
		t.Fatal(err)
	}
	var ext corev3.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&ext); err != nil {
		t.Fatal(err)
	}
	return &ext
}

// Each snapshot the plugin accepts reaches the Envoys subscribed over xDS as
// a new version carrying the resource the ECDS file gets.
func TestControllerSnapshotChangesReachAnXDSSubscriber(t *testing.T) {
	f := newFixture(t)
	f.withXDS()
	s := f.startServer(t)
	sub := f.subscribeXDS(t, s)

	resp, ext, snap := sub.next()
	for healthyServers(snap) != len(f.servers) {
		resp, ext, snap = sub.next()
	}
	first := resp.GetVersionInfo()
	// The file is written first, and the discovery has settled.
	if file := ecdsFileResource(t, f.cfg.EnvoyECDSFile); !proto.Equal(file, ext) {
		t.Errorf("xDS delivers\n%v\nthe ECDS file holds\n%v", ext, file)
	}

	f.servers[2].ready.Store(false)
	for healthyServers(snap) == len(f.servers) {
		previous := resp.GetVersionInfo()
		resp, _, snap = sub.next()
		if resp.GetVersionInfo() == previous {
			t.Fatalf("a new snapshot came as the same version %q", previous)
		}
	}
	if resp.GetVersionInfo() == first {
		t.Fatalf("the snapshot with kube-c unhealthy has the version %q of the healthy one", first)
	}
	for _, want := range []string{"skewgate_xds_streams 1", "skewgate_xds_nacks_total 0", "skewgate_xds_publish_failures_total 0",
		`skewgate_xds_version_info{version="` + resp.GetVersionInfo() + `"} 1`} {
		eventuallyMetric(t, s, want)
	}
}

// --xds-max-streams reaches the management server: beyond it, an Envoy is
// refused and told why, and the refusal is counted.
func TestTheXDSStreamLimitIsTheFlags(t *testing.T) {
	f := newFixture(t)
	f.withXDS()
	f.cfg.XDSMaxStreams = 1
	s := f.startServer(t)
	f.subscribeXDS(t, s).next()
	refused := f.openXDSStream(t, s)
	// The server may end the stream before the request is sent; Recv says why.
	_ = refused.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-b"}, TypeUrl: resourcev3.ExtensionConfigType})
	if _, err := refused.Recv(); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "the server has 1 streams open") {
		t.Fatalf("second stream ended with %v, want ResourceExhausted naming the limit of 1", err)
	}
	eventuallyMetric(t, s, `skewgate_xds_refused_streams_total{reason="server_stream_limit"} 1`)
}

// The version names the configuration, not the controller's snapshot count:
// the same discovery is the same version after the controller went through
// other snapshots, and after a restart, which begins counting anew.
func TestTheSameDiscoveryIsTheSameXDSVersionAcrossGenerationsAndRestarts(t *testing.T) {
	f := newFixture(t)
	f.withXDS()
	s, cancel, served := f.serve(t)
	sub := f.subscribeXDS(t, s)
	resp, _, snap := sub.next()
	for healthyServers(snap) != len(f.servers) {
		resp, _, snap = sub.next()
	}
	healthy, healthyGeneration := resp.GetVersionInfo(), snap.Generation

	f.servers[2].ready.Store(false)
	for healthyServers(snap) == len(f.servers) {
		_, _, snap = sub.next()
	}
	f.servers[2].ready.Store(true)
	for healthyServers(snap) != len(f.servers) {
		resp, _, snap = sub.next()
	}
	if snap.Generation <= healthyGeneration {
		t.Fatalf("generation %d after %d", snap.Generation, healthyGeneration)
	}
	if resp.GetVersionInfo() != healthy {
		t.Errorf("generation %d has version %q, generation %d of the same discovery %q", snap.Generation, resp.GetVersionInfo(), healthyGeneration, healthy)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}

	f.cfg.SecurePort = freePort(t)
	sub = f.subscribeXDS(t, f.startServer(t))
	resp, _, snap = sub.next()
	for healthyServers(snap) != len(f.servers) {
		resp, _, snap = sub.next()
	}
	if resp.GetVersionInfo() != healthy {
		t.Errorf("after a restart generation %d has version %q, before it %q", snap.Generation, resp.GetVersionInfo(), healthy)
	}
}

func TestXDSFlagMistakesNameTheFlag(t *testing.T) {
	base := NewConfig()
	base.TLSCertFile, base.TLSPrivateKeyFile, base.PeerCAFile = "c", "k", "ca"
	base.APIServers, base.WasmPath = []string{"https://10.0.0.1:6443"}, "x.wasm"
	base.XDSBindAddress, base.XDSClientCAFile, base.EnvoyWasmPath = "127.0.0.1:18000", "xds-ca", envoyWasmPath
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"address without a port", func(c *Config) { c.XDSBindAddress = "127.0.0.1" }, "--xds-bind-address"},
		{"port out of range", func(c *Config) { c.XDSBindAddress = "127.0.0.1:70000" }, "--xds-bind-address \"127.0.0.1:70000\": port"},
		{"no client CA", func(c *Config) { c.XDSClientCAFile = "" }, "--xds-client-ca-file"},
		{"no module path for the Envoys", func(c *Config) { c.EnvoyWasmPath = "" }, "--envoy-wasm-path"},
		{"relative module path", func(c *Config) { c.EnvoyWasmPath = "skewgate.wasm" }, "--envoy-wasm-path"},
		{"certificate without its key", func(c *Config) { c.XDSTLSCertFile = "xds.crt" }, "--xds-tls-private-key-file"},
		{"xDS TLS without xDS", func(c *Config) { c.XDSBindAddress = "" }, "need --xds-bind-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.modify(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestUnreadableXDSFilesNameTheirFlag(t *testing.T) {
	f := newFixture(t)
	f.withXDS()
	for _, tc := range []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"client CA", func(c *Config) { c.XDSClientCAFile = f.dir + "/missing-ca.crt" }, "--xds-client-ca-file"},
		{"serving certificate", func(c *Config) { c.XDSTLSCertFile, c.XDSTLSPrivateKeyFile = f.dir+"/missing.crt", f.dir+"/missing.key" }, "--xds-tls-cert-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := f.cfg
			tc.modify(&cfg)
			_, err := New(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
