package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"

	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/internal/envoyconfig"
	"github.com/skewgate/skewgate/host/internal/logtest"
	"github.com/skewgate/skewgate/host/internal/metricstest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

const (
	serverName = "skewgate-xds"
	wasmPath   = "/etc/skewgate/skewgate.wasm"
)

// pki is one CA for the server's certificate and another for its clients.
type pki struct {
	serverCA, clientCA *devpki.CA
	serving, client    tls.Certificate
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	serverCA, err := devpki.NewCA("xds-server-ca")
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := devpki.NewCA("xds-client-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := serverCA.Serving(serverName, serverName, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	client, err := clientCA.Client(pkix.Name{CommonName: "envoy"})
	if err != nil {
		t.Fatal(err)
	}
	return &pki{serverCA: serverCA, clientCA: clientCA, serving: serving.TLSCertificate(), client: client.TLSCertificate()}
}

// clientCertificate issues a client certificate of its own for the Envoy
// named commonName.
func (p *pki) clientCertificate(t testing.TB, commonName string) *tls.Certificate {
	t.Helper()
	leaf, err := p.clientCA.Client(pkix.Name{CommonName: commonName})
	if err != nil {
		t.Fatal(err)
	}
	certificate := leaf.TLSCertificate()
	return &certificate
}

type testServer struct {
	*Server
	addr string
	logs *logtest.Buffer
}

func startServer(t testing.TB, p *pki) *testServer {
	t.Helper()
	return startServerWith(t, p, Options{})
}

// startServerWith starts a server with opts, its certificates and logger
// set.
func startServerWith(t testing.TB, p *pki, opts Options) *testServer {
	t.Helper()
	logs := &logtest.Buffer{}
	opts.Certificate = func() *tls.Certificate { return &p.serving }
	opts.ClientCAs = p.clientCA.Pool
	opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(l) }()
	t.Cleanup(func() {
		s.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testServer{Server: s, addr: l.Addr().String(), logs: logs}
}

// extensionConfig renders the plugin filter's resource for a plugin
// configuration padded to about size bytes, and names it by its content.
func extensionConfig(t testing.TB, generation, size int) (*corev3.TypedExtensionConfig, string) {
	t.Helper()
	// Not a snapshot the plugin would accept: the management server carries
	// the configuration without reading it.
	config := fmt.Sprintf(`{"routingHeader":"x-skewgate-upstream","snapshot":{"padding%d":%q}}`, generation, strings.Repeat("x", size))
	doc, err := envoyconfig.RenderExtensionConfig([]byte(config), wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	ext, err := ParseExtensionConfig(doc)
	if err != nil {
		t.Fatal(err)
	}
	return ext, Version(doc)
}

func publish(t testing.TB, s *testServer, generation int) (*corev3.TypedExtensionConfig, string) {
	t.Helper()
	ext, version := extensionConfig(t, generation, 64)
	if err := s.Publish(ext, version); err != nil {
		t.Fatal(err)
	}
	return ext, version
}

// dial connects like an Envoy: TLS to the server's name, presenting
// certificate when not nil.
func dial(t testing.TB, s *testServer, p *pki, certificate *tls.Certificate) *grpc.ClientConn {
	t.Helper()
	config := &tls.Config{RootCAs: p.serverCA.Pool(), ServerName: serverName}
	if certificate != nil {
		config.Certificates = []tls.Certificate{*certificate}
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(config)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

type service string

const (
	ads  service = "ADS"
	ecds service = "ExtensionConfigDiscoveryService"
)

var services = []service{ads, ecds}

type xdsStream interface {
	Send(*discoveryv3.DiscoveryRequest) error
	Recv() (*discoveryv3.DiscoveryResponse, error)
}

// subscriber is one Envoy's state-of-the-world subscription to the plugin
// filter, as Envoy's ECDS subscription sends it.
type subscriber struct {
	t         testing.TB
	node      string
	stream    xdsStream
	cancel    context.CancelFunc
	responses chan *discoveryv3.DiscoveryResponse
	failed    chan error
}

func subscribe(t testing.TB, conn *grpc.ClientConn, svc service, node, version string) *subscriber {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var stream xdsStream
	var err error
	switch svc {
	case ads:
		stream, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	case ecds:
		stream, err = extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &subscriber{t: t, node: node, stream: stream, cancel: cancel,
		responses: make(chan *discoveryv3.DiscoveryResponse, 16), failed: make(chan error, 1)}
	go func() {
		for {
			resp, err := stream.Recv()
			if err != nil {
				s.failed <- err
				return
			}
			s.responses <- resp
		}
	}()
	s.send(&discoveryv3.DiscoveryRequest{
		VersionInfo:   version,
		Node:          &corev3.Node{Id: node, Cluster: "skewgate"},
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResourceNames: []string{envoyconfig.FilterName},
	})
	return s
}

func (s *subscriber) send(req *discoveryv3.DiscoveryRequest) {
	s.t.Helper()
	if err := s.stream.Send(req); err != nil {
		s.t.Fatalf("%s: send: %v", s.node, err)
	}
}

// next is the next response; the test fails if the stream ends first.
func (s *subscriber) next() *discoveryv3.DiscoveryResponse {
	s.t.Helper()
	select {
	case resp := <-s.responses:
		return resp
	case err := <-s.failed:
		s.t.Fatalf("%s: stream ended: %v", s.node, err)
	case <-time.After(time.Minute):
		s.t.Fatalf("%s: no response", s.node)
	}
	return nil
}

// ack accepts resp as Envoy does: the version it now runs and the nonce.
func (s *subscriber) ack(resp *discoveryv3.DiscoveryResponse) {
	s.t.Helper()
	s.send(&discoveryv3.DiscoveryRequest{
		VersionInfo:   resp.GetVersionInfo(),
		ResponseNonce: resp.GetNonce(),
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResourceNames: []string{envoyconfig.FilterName},
	})
}

// nack rejects resp as Envoy does: the version it keeps, the nonce and why.
func (s *subscriber) nack(resp *discoveryv3.DiscoveryResponse, kept, why string) {
	s.t.Helper()
	s.send(&discoveryv3.DiscoveryRequest{
		VersionInfo:   kept,
		ResponseNonce: resp.GetNonce(),
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResourceNames: []string{envoyconfig.FilterName},
		ErrorDetail:   &statuspb.Status{Code: 3, Message: why},
	})
}

// checkResponse requires resp to deliver exactly want as version.
func checkResponse(t testing.TB, resp *discoveryv3.DiscoveryResponse, want *corev3.TypedExtensionConfig, version string) {
	t.Helper()
	if resp.GetVersionInfo() != version || resp.GetTypeUrl() != resourcev3.ExtensionConfigType || len(resp.GetResources()) != 1 {
		t.Fatalf("response version %q type %q with %d resources, want version %q of %s with one resource",
			resp.GetVersionInfo(), resp.GetTypeUrl(), len(resp.GetResources()), version, resourcev3.ExtensionConfigType)
	}
	var got corev3.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&got); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&got, want) {
		t.Fatalf("response delivers\n%v\nwant\n%v", &got, want)
	}
}

// waitForWatches waits until n subscriptions wait for the next version,
// failing if one of subs receives something meanwhile.
func waitForWatches(t testing.TB, s *testServer, n int, subs ...*subscriber) {
	t.Helper()
	watches := func() int {
		if info := s.cache.GetStatusInfo(fleetKey); info != nil {
			return info.GetNumWatches()
		}
		return 0
	}
	deadline := time.Now().Add(time.Minute)
	for watches() != n {
		for _, sub := range subs {
			select {
			case resp := <-sub.responses:
				t.Fatalf("%s received version %q while it should wait for the next one", sub.node, resp.GetVersionInfo())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d watches, want %d", watches(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// metrics is the server's metrics in the text format, as /metrics serves
// them.
func metrics(t testing.TB, s *testServer) string {
	t.Helper()
	text, err := metricstest.Exposition(s.Server)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func eventuallyMetric(t testing.TB, s *testServer, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(metrics(t, s), want+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("metrics never held %q:\n%s", want, metrics(t, s))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestFirstResponseCarriesTheCurrentConfiguration(t *testing.T) {
	p := newPKI(t)
	for _, svc := range services {
		t.Run(string(svc), func(t *testing.T) {
			t.Run("published before subscribing", func(t *testing.T) {
				s := startServer(t, p)
				ext, version := publish(t, s, 1)
				sub := subscribe(t, dial(t, s, p, &p.client), svc, "envoy-a", "")
				checkResponse(t, sub.next(), ext, version)
			})
			t.Run("subscribed before the first configuration", func(t *testing.T) {
				s := startServer(t, p)
				sub := subscribe(t, dial(t, s, p, &p.client), svc, "envoy-a", "")
				waitForWatches(t, s, 1, sub)
				ext, version := publish(t, s, 1)
				checkResponse(t, sub.next(), ext, version)
			})
		})
	}
}

func TestASnapshotChangeReachesTheSubscriberAsANewVersionAndAnACKWaitsForIt(t *testing.T) {
	p := newPKI(t)
	for _, svc := range services {
		t.Run(string(svc), func(t *testing.T) {
			s := startServer(t, p)
			_, first := publish(t, s, 1)
			sub := subscribe(t, dial(t, s, p, &p.client), svc, "envoy-a", "")
			sub.ack(sub.next())
			// After the ACK the stream waits; the same content again is no
			// change and sends nothing.
			waitForWatches(t, s, 1, sub)
			publish(t, s, 1)
			ext, second := publish(t, s, 2)
			if second == first {
				t.Fatal("different content got the same version")
			}
			resp := sub.next()
			checkResponse(t, resp, ext, second)
			sub.ack(resp)
			eventuallyMetric(t, s, "skewgate_xds_acks_total 2")
			for _, want := range []string{"skewgate_xds_pushes_total 2", "skewgate_xds_nacks_total 0", `skewgate_xds_version_info{version="` + second + `"} 1`} {
				if m := metrics(t, s); !strings.Contains(m, want+"\n") {
					t.Errorf("metrics lack %q:\n%s", want, m)
				}
			}
		})
	}
}

// A NACK leaves the rejecting Envoy on the configuration it had, and is
// logged and counted. The server does not send the rejected version back (the
// Envoy would only reject it again), keeps serving it to others, and sends
// the rejecting Envoy the next one.
func TestANACKIsCountedAndLoggedAndTheRejectedVersionIsNotSentBack(t *testing.T) {
	p := newPKI(t)
	for _, svc := range services {
		t.Run(string(svc), func(t *testing.T) {
			s := startServer(t, p)
			_, first := publish(t, s, 1)
			conn := dial(t, s, p, &p.client)
			sub := subscribe(t, conn, svc, "envoy-a", "")
			sub.ack(sub.next())
			waitForWatches(t, s, 1, sub)
			ext, second := publish(t, s, 2)
			rejectedResp := sub.next()
			checkResponse(t, rejectedResp, ext, second)
			sub.nack(rejectedResp, first, "wasm: plugin configure failed")
			eventuallyMetric(t, s, "skewgate_xds_nacks_total 1")
			waitForWatches(t, s, 1, sub)

			logs := s.logs.String()
			for _, want := range []string{"an Envoy rejected the plugin configuration", "node=envoy-a", `peer="CN=envoy"`,
				"rejected_version=" + second, "version_in_force=" + first, `error="wasm: plugin configure failed"`} {
				if !strings.Contains(logs, want) {
					t.Errorf("log lacks %q:\n%s", want, logs)
				}
			}

			other := subscribe(t, conn, svc, "envoy-b", "")
			resp := other.next()
			checkResponse(t, resp, ext, second)
			other.ack(resp)
			waitForWatches(t, s, 2, sub, other)

			third, version := publish(t, s, 3)
			checkResponse(t, sub.next(), third, version)
			checkResponse(t, other.next(), third, version)
		})
	}
}

// Envoy reconnecting sends the version it runs; it gets the current one at
// once, whether that changed while it was away or not.
func TestAReconnectingSubscriberGetsTheCurrentVersionAtOnce(t *testing.T) {
	p := newPKI(t)
	for _, svc := range services {
		t.Run(string(svc), func(t *testing.T) {
			s := startServer(t, p)
			ext, first := publish(t, s, 1)
			conn := dial(t, s, p, &p.client)
			sub := subscribe(t, conn, svc, "envoy-a", "")
			sub.ack(sub.next())
			sub.cancel()
			eventuallyMetric(t, s, "skewgate_xds_streams 0")

			again := subscribe(t, dial(t, s, p, &p.client), svc, "envoy-a", first)
			checkResponse(t, again.next(), ext, first)
			again.cancel()

			ext, second := publish(t, s, 2)
			third := subscribe(t, dial(t, s, p, &p.client), svc, "envoy-a", first)
			checkResponse(t, third.next(), ext, second)
		})
	}
}

func TestAHundredConcurrentSubscribersAllReceiveAnUpdate(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	_, first := publish(t, s, 1)
	subs := make([]*subscriber, 100)
	for i := range subs {
		node := fmt.Sprintf("envoy-%d", i)
		subs[i] = subscribe(t, dial(t, s, p, p.clientCertificate(t, node)), services[i%2], node, "")
	}
	for _, sub := range subs {
		resp := sub.next()
		if resp.GetVersionInfo() != first {
			t.Fatalf("%s: first response version %q, want %q", sub.node, resp.GetVersionInfo(), first)
		}
		sub.ack(resp)
	}
	waitForWatches(t, s, len(subs), subs...)
	eventuallyMetric(t, s, "skewgate_xds_streams 100")
	ext, second := publish(t, s, 2)
	var wg sync.WaitGroup
	for _, sub := range subs {
		wg.Go(func() { checkResponse(t, sub.next(), ext, second) })
	}
	wg.Wait()
	eventuallyMetric(t, s, "skewgate_xds_pushes_total 200")
}

// Replicas of the controller given the same configuration serve the same
// version and bytes, so an Envoy moving between them sees no change.
func TestTwoServersGivenTheSameConfigurationServeIdenticalVersions(t *testing.T) {
	p := newPKI(t)
	var got []*discoveryv3.DiscoveryResponse
	for range 2 {
		s := startServer(t, p)
		ext, version := extensionConfig(t, 7, 1024)
		if err := s.Publish(ext, version); err != nil {
			t.Fatal(err)
		}
		got = append(got, subscribe(t, dial(t, s, p, &p.client), ecds, "envoy-a", "").next())
	}
	if got[0].GetVersionInfo() != got[1].GetVersionInfo() || !bytes.Equal(got[0].GetResources()[0].GetValue(), got[1].GetResources()[0].GetValue()) {
		t.Errorf("versions %q and %q, resources equal: %v", got[0].GetVersionInfo(), got[1].GetVersionInfo(),
			bytes.Equal(got[0].GetResources()[0].GetValue(), got[1].GetResources()[0].GetValue()))
	}
	if _, other := extensionConfig(t, 8, 1024); other == got[0].GetVersionInfo() {
		t.Error("another configuration got the same version")
	}
}

func TestOnlyClientsWithACertificateFromTheClientCAAreServed(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	publish(t, s, 1)
	stranger, err := p.serverCA.Client(pkix.Name{CommonName: "envoy"})
	if err != nil {
		t.Fatal(err)
	}
	strangerCert := stranger.TLSCertificate()
	for _, tc := range []struct {
		name        string
		certificate *tls.Certificate
	}{
		{"no client certificate", nil},
		{"a certificate from another CA", &strangerCert},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t, s, p, tc.certificate)
			stream, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(context.Background())
			if err == nil {
				_ = stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ExtensionConfigType, ResourceNames: []string{envoyconfig.FilterName}})
				var resp *discoveryv3.DiscoveryResponse
				resp, err = stream.Recv()
				if err == nil {
					t.Fatalf("served version %q", resp.GetVersionInfo())
				}
			}
			t.Logf("refused: %v", err)
		})
	}
	if m := metrics(t, s); !strings.Contains(m, "skewgate_xds_pushes_total 0\n") {
		t.Errorf("something was pushed:\n%s", m)
	}
}

// The incremental protocol works too; its NACKs are counted, and the next
// version follows.
func TestIncrementalSubscribersGetTheConfigurationAndTheirNACKsAreCounted(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	ext, first := publish(t, s, 1)
	stream, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(dial(t, s, p, &p.client)).DeltaExtensionConfigs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		Node:                   &corev3.Node{Id: "envoy-delta"},
		TypeUrl:                resourcev3.ExtensionConfigType,
		ResourceNamesSubscribe: []string{envoyconfig.FilterName},
	}); err != nil {
		t.Fatal(err)
	}
	check := func(want *corev3.TypedExtensionConfig, version string) *discoveryv3.DeltaDiscoveryResponse {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetSystemVersionInfo() != version || len(resp.GetResources()) != 1 {
			t.Fatalf("version %q with %d resources, want %q with one", resp.GetSystemVersionInfo(), len(resp.GetResources()), version)
		}
		var got corev3.TypedExtensionConfig
		if err := resp.GetResources()[0].GetResource().UnmarshalTo(&got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, want) {
			t.Fatalf("delivers %v, want %v", &got, want)
		}
		return resp
	}
	resp := check(ext, first)
	if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{
		TypeUrl:       resourcev3.ExtensionConfigType,
		ResponseNonce: resp.GetNonce(),
		ErrorDetail:   &statuspb.Status{Code: 3, Message: "rejected"},
	}); err != nil {
		t.Fatal(err)
	}
	eventuallyMetric(t, s, "skewgate_xds_nacks_total 1")
	if logs := s.logs.String(); !strings.Contains(logs, "node=envoy-delta") || !strings.Contains(logs, "rejected_version="+first) {
		t.Errorf("log lacks the node and the rejected version:\n%s", logs)
	}
	ext, second := publish(t, s, 2)
	check(ext, second)
}

func TestParseExtensionConfigRejectsWhatEnvoyWould(t *testing.T) {
	doc, err := envoyconfig.RenderExtensionConfig([]byte(`{"snapshot":{}}`), wasmPath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseExtensionConfig(doc); err != nil {
		t.Fatalf("the rendered resource: %v", err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"misspelt field", "typed_config:", "typed_confg:", "typed_confg"},
		{"no name", "name: skewgate\ntyped_config:", "typed_config:", "Name"},
		{"another filter type", "envoy.extensions.filters.http.wasm.v3.Wasm", "envoy.extensions.filters.http.lua.v3.Lua", "lua"},
		{"Wasm config without a VM", "  vm_config:", "  vm_confg:", "vm_confg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(doc), tc.old) {
				t.Fatalf("the rendered resource lacks %q:\n%s", tc.old, doc)
			}
			_, err := ParseExtensionConfig([]byte(strings.Replace(string(doc), tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want)) {
				t.Fatalf("ParseExtensionConfig = %v, want an error about %q", err, tc.want)
			}
		})
	}
}

func TestPublishRefusesWhatItCannotServe(t *testing.T) {
	s := startServer(t, newPKI(t))
	ext, _ := extensionConfig(t, 1, 8)
	for _, tc := range []struct {
		name    string
		ext     *corev3.TypedExtensionConfig
		version string
	}{
		{"no configuration", nil, "v"},
		{"no name", &corev3.TypedExtensionConfig{TypedConfig: ext.GetTypedConfig()}, "v"},
		{"no version", ext, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.Publish(tc.ext, tc.version); err == nil {
				t.Error("Publish accepted it")
			}
		})
	}
	if strings.Contains(metrics(t, s), "skewgate_xds_version_info") {
		t.Error("a version is served")
	}
}

func TestNewRequiresTheServingCertificateAndClientCAs(t *testing.T) {
	p := newPKI(t)
	for _, opts := range []Options{
		{ClientCAs: p.clientCA.Pool},
		{Certificate: func() *tls.Certificate { return &p.serving }},
	} {
		if _, err := New(opts); err == nil {
			t.Errorf("New(%+v) succeeded", opts)
		}
	}
}

// BenchmarkFanOut100Subscribers measures the time from publishing a new
// configuration until each of 100 subscribers, on connections of their own,
// has received it; the sizes are those of the three- and the 24-server
// snapshot's plugin configuration.
func BenchmarkFanOut100Subscribers(b *testing.B) {
	for _, size := range []struct {
		name  string
		bytes int
	}{{"77KiB", 77 << 10}, {"617KiB", 617 << 10}} {
		b.Run(size.name, func(b *testing.B) { benchmarkFanOut(b, 100, size.bytes) })
	}
}

func benchmarkFanOut(b *testing.B, subscribers, size int) {
	p := newPKI(b)
	s := startServer(b, p)
	ext, version := extensionConfig(b, 0, size)
	if err := s.Publish(ext, version); err != nil {
		b.Fatal(err)
	}
	received := make(chan struct{}, subscribers)
	for i := range subscribers {
		node := fmt.Sprintf("envoy-%d", i)
		sub := subscribe(b, dial(b, s, p, p.clientCertificate(b, node)), services[i%2], node, "")
		sub.ack(sub.next())
		go func() {
			for {
				select {
				case resp := <-sub.responses:
					received <- struct{}{}
					_ = sub.stream.Send(&discoveryv3.DiscoveryRequest{VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
						TypeUrl: resourcev3.ExtensionConfigType, ResourceNames: []string{envoyconfig.FilterName}})
				case <-sub.failed:
					return
				}
			}
		}()
	}
	waitForWatches(b, s, subscribers)
	configs := make([]*corev3.TypedExtensionConfig, 2)
	versions := make([]string, 2)
	for i := range configs {
		configs[i], versions[i] = extensionConfig(b, i+1, size)
	}
	for i := 0; b.Loop(); i++ {
		if err := s.Publish(configs[i%2], versions[i%2]); err != nil {
			b.Fatal(err)
		}
		for range subscribers {
			<-received
		}
		// Every subscriber has acknowledged before the next round.
		b.StopTimer()
		waitForWatches(b, s, subscribers)
		b.StartTimer()
	}
}

// The server exports its metrics as metricdef defines them, and every one
// defined as the xDS server's.
func TestTheServerExportsItsMetricsAsDefined(t *testing.T) {
	s := startServer(t, newPKI(t))
	publish(t, s, 1)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.Server)
	if err := metricstest.Defined(reg); err != nil {
		t.Error(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, mf := range families {
		served[mf.GetName()] = true
	}
	for _, def := range metricdef.All {
		// The refusals are counted by reason once one happened, the failed
		// publishes by the command that publishes.
		if def.Exporter == metricdef.XDS && def != &metricdef.XDSRefusedStreams && def != &metricdef.XDSPublishFailures && !served[def.Name] {
			t.Errorf("%s is defined but not exported", def.Name)
		}
	}
}
