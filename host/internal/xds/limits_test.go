package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/skewgate/skewgate/host/internal/envoyconfig"
)

// envoyNode is the Node an Envoy sends on a stream's first request: besides
// its ID, its build, its metadata and every extension compiled in (Istio's
// Envoy 1.32 lists about 400), which make it some 40 to 50 KB.
func envoyNode(id string) *corev3.Node {
	metadata, err := structpb.NewStruct(map[string]any{
		"NAME": id, "NAMESPACE": "kube-system", "CLUSTER_ID": "Kubernetes",
		"LABELS": map[string]any{"app": "skewgate-envoy", "pod-template-hash": "57868f9d7c"},
	})
	if err != nil {
		panic(err)
	}
	node := &corev3.Node{
		Id:            id,
		Cluster:       "skewgate",
		Metadata:      metadata,
		Locality:      &corev3.Locality{Region: "europe", Zone: "europe-west3-a"},
		UserAgentName: "envoy",
		UserAgentVersionType: &corev3.Node_UserAgentBuildVersion{UserAgentBuildVersion: &corev3.BuildVersion{
			Version: &typev3.SemanticVersion{MajorNumber: 1, MinorNumber: 36, Patch: 2},
		}},
		ClientFeatures: []string{"envoy.lb.does_not_support_overprovisioning", "xds.config.resource-ttl", "envoy.lrs.supports_send_all_clusters"},
	}
	for i := range 400 {
		node.Extensions = append(node.Extensions, &corev3.Extension{
			Name:     fmt.Sprintf("envoy.filters.http.extension_%03d", i),
			Category: fmt.Sprintf("envoy.filters.category_%02d", i%40),
			TypeUrls: []string{fmt.Sprintf("envoy.extensions.filters.http.extension_%03d.v3.Config", i)},
		})
	}
	return node
}

// streamError opens a state-of-the-world stream, sends req and returns how
// the stream ended; the test fails if the server answers instead.
func streamError(t *testing.T, conn *grpc.ClientConn, svc service, req *discoveryv3.DiscoveryRequest) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var stream xdsStream
	var err error
	switch svc {
	case ads:
		stream, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	case ecds:
		stream, err = extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
	}
	if err != nil {
		return err
	}
	// A stream the server refused at once may be closed before the request
	// is sent; Recv tells why.
	if err := stream.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	resp, err := stream.Recv()
	if err == nil {
		t.Fatalf("%s: served version %q", svc, resp.GetVersionInfo())
	}
	return err
}

func subscription(node *corev3.Node) *discoveryv3.DiscoveryRequest {
	return &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resourcev3.ExtensionConfigType, ResourceNames: []string{envoyconfig.FilterName}}
}

// wantRefusal requires err to be the status code with a message containing
// want.
func wantRefusal(t *testing.T, err error, code codes.Code, want string) {
	t.Helper()
	if s := status.Convert(err); s.Code() != code || !strings.Contains(s.Message(), want) {
		t.Fatalf("stream ended with %v, want %v with a message containing %q", err, code, want)
	}
}

// refusalsLogged counts the warnings about refusing peer's streams.
func refusalsLogged(s *testServer, peer string) int {
	n := 0
	for line := range strings.Lines(s.logs.String()) {
		if strings.Contains(line, "refusing xDS streams") && strings.Contains(line, `peer=`+peer) {
			n++
		}
	}
	return n
}

func refusedMetric(reason refusal, n int) string {
	return fmt.Sprintf(`skewgate_xds_refused_streams_total{reason=%q} %d`, reason, n)
}

// A client certificate may hold only so many streams, however many
// connections it opens; other clients are served meanwhile, and the client
// is served again once one of its streams ends.
func TestAClientCertificateIsHeldToItsStreamLimit(t *testing.T) {
	p := newPKI(t)
	s := startServerWith(t, p, Options{MaxStreamsPerClient: 2})
	_, version := publish(t, s, 1)
	greedy := p.clientCertificate(t, "envoy-a")
	var held []*subscriber
	for i := range 2 {
		sub := subscribe(t, dial(t, s, p, greedy), services[i], "envoy-a", "")
		if resp := sub.next(); resp.GetVersionInfo() != version {
			t.Fatalf("version %q, want %q", resp.GetVersionInfo(), version)
		}
		held = append(held, sub)
	}
	for _, svc := range services {
		wantRefusal(t, streamError(t, dial(t, s, p, greedy), svc, subscription(&corev3.Node{Id: "envoy-a"})),
			codes.ResourceExhausted, `"CN=envoy-a" has 2 streams open`)
	}
	other := subscribe(t, dial(t, s, p, p.clientCertificate(t, "envoy-b")), ecds, "envoy-b", "")
	if resp := other.next(); resp.GetVersionInfo() != version {
		t.Fatalf("the other client got version %q, want %q", resp.GetVersionInfo(), version)
	}
	for _, want := range []string{refusedMetric(refusedClientLimit, 2), refusedMetric(refusedServerLimit, 0), "skewgate_xds_streams 3"} {
		eventuallyMetric(t, s, want)
	}
	if n := refusalsLogged(s, `"CN=envoy-a"`); n != 1 {
		t.Errorf("the refusals were logged %d times, want once:\n%s", n, s.logs.String())
	}

	held[0].cancel()
	eventuallyMetric(t, s, "skewgate_xds_streams 2")
	again := subscribe(t, dial(t, s, p, greedy), ecds, "envoy-a", "")
	if resp := again.next(); resp.GetVersionInfo() != version {
		t.Fatalf("version %q, want %q", resp.GetVersionInfo(), version)
	}
}

func TestTheServerIsHeldToItsTotalStreamLimit(t *testing.T) {
	p := newPKI(t)
	s := startServerWith(t, p, Options{MaxStreams: 3})
	publish(t, s, 1)
	var held []*subscriber
	for i := range 3 {
		node := fmt.Sprintf("envoy-%d", i)
		sub := subscribe(t, dial(t, s, p, p.clientCertificate(t, node)), services[i%2], node, "")
		sub.next()
		held = append(held, sub)
	}
	late := p.clientCertificate(t, "envoy-late")
	wantRefusal(t, streamError(t, dial(t, s, p, late), ecds, subscription(&corev3.Node{Id: "envoy-late"})),
		codes.ResourceExhausted, "the server has 3 streams open")
	eventuallyMetric(t, s, refusedMetric(refusedServerLimit, 1))
	if n := refusalsLogged(s, `"CN=envoy-late"`); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, s.logs.String())
	}
	held[1].cancel()
	eventuallyMetric(t, s, "skewgate_xds_streams 2")
	subscribe(t, dial(t, s, p, late), ecds, "envoy-late", "").next()
}

// A client that ignores the limits the server advertises in HTTP/2 SETTINGS
// has its streams beyond them refused by the transport, before they cost a
// handler.
func TestAConnectionIsHeldToItsStreamAndHeaderLimits(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	conn := dialHTTP2(t, s, p)
	if got := conn.settings[http2.SettingMaxConcurrentStreams]; got != maxStreamsPerConnection {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d, want %d", got, maxStreamsPerConnection)
	}
	if got := conn.settings[http2.SettingMaxHeaderListSize]; got != maxHeaderListBytes {
		t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE %d, want %d", got, maxHeaderListBytes)
	}
	for i := range maxStreamsPerConnection + 1 {
		conn.openStream(uint32(2*i+1), nil)
	}
	if code := conn.resetOf(uint32(2*maxStreamsPerConnection + 1)); code != http2.ErrCodeRefusedStream {
		t.Errorf("stream beyond the limit reset with %v, want %v", code, http2.ErrCodeRefusedStream)
	}
	eventuallyMetric(t, s, fmt.Sprintf("skewgate_xds_streams %d", maxStreamsPerConnection))

	other := dialHTTP2(t, s, p)
	half := strings.Repeat("p", maxHeaderListBytes/2)
	other.openStream(1, []hpack.HeaderField{{Name: "x-padding-1", Value: half}, {Name: "x-padding-2", Value: half}})
	if code := other.resetOf(1); code != http2.ErrCodeFrameSize {
		t.Errorf("stream with too many header bytes reset with %v, want %v", code, http2.ErrCodeFrameSize)
	}
}

// A request larger than an Envoy ever sends ends its stream, with the reason,
// and is counted; an Envoy's own requests, Node and all, are served.
func TestARequestOverTheSizeLimitIsRefusedAndAnEnvoysIsServed(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	ext, version := publish(t, s, 1)
	envoy := envoyNode("envoy-a")
	if size := proto.Size(envoy); size < 40<<10 || size > maxRequestBytes/4 {
		t.Fatalf("the Envoy-like node has %d bytes, want an Envoy's 40 to 50 KB or so", size)
	}
	for _, svc := range services {
		stream := openStream(t, dial(t, s, p, p.clientCertificate(t, "envoy-a-"+string(svc))), svc)
		if err := stream.Send(subscription(envoy)); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		checkResponse(t, resp, ext, version)
	}

	oversized := envoyNode("envoy-b")
	oversized.Metadata.Fields["padding"] = structpb.NewStringValue(strings.Repeat("x", maxRequestBytes))
	conn := dial(t, s, p, p.clientCertificate(t, "envoy-b"))
	for _, svc := range services {
		wantRefusal(t, streamError(t, conn, svc, subscription(oversized)), codes.ResourceExhausted, "received message larger than max")
	}
	eventuallyMetric(t, s, refusedMetric(refusedRequestSize, 2))
	if n := refusalsLogged(s, `"CN=envoy-b"`); n != 1 {
		t.Errorf("the refusals were logged %d times, want once:\n%s", n, s.logs.String())
	}
}

func openStream(t *testing.T, conn *grpc.ClientConn, svc service) xdsStream {
	t.Helper()
	var stream xdsStream
	var err error
	switch svc {
	case ads:
		stream, err = discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	case ecds:
		stream, err = extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(t.Context())
	}
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// A stream keeps of a request's Node only the ID, and refuses an ID longer
// than any host name.
func TestAStreamKeepsOnlyTheNodeIDAndRefusesAnOverlongOne(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	publish(t, s, 1)
	conn := dial(t, s, p, &p.client)
	for _, svc := range services {
		longest := strings.Repeat("n", maxNodeIDBytes)
		sub := openStream(t, conn, svc)
		if err := sub.Send(subscription(envoyNode(longest))); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.Recv(); err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		if kept := s.cache.GetStatusInfo(fleetKey).GetNode(); !proto.Equal(kept, &corev3.Node{Id: longest}) {
			t.Errorf("%s: the server keeps a node of %d bytes with %d extensions, want the ID alone", svc, proto.Size(kept), len(kept.GetExtensions()))
		}
		wantRefusal(t, streamError(t, conn, svc, subscription(envoyNode(longest+"n"))),
			codes.InvalidArgument, fmt.Sprintf("the node ID has %d bytes, more than the %d", maxNodeIDBytes+1, maxNodeIDBytes))
	}
	eventuallyMetric(t, s, refusedMetric(refusedNodeID, 2))
}

// Requests for another resource type, which would each cost a watch, for
// more names than an Envoy subscribes to, or with names or nonces longer than
// any the server serves, are refused, in either protocol.
func TestRequestsForWhatTheServerDoesNotServeAreRefused(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	publish(t, s, 1)
	conn := dial(t, s, p, &p.client)
	wantRefusal(t, streamError(t, conn, ads, &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "envoy-a"}, TypeUrl: resourcev3.ListenerType}),
		codes.InvalidArgument, "serves only "+resourcev3.ExtensionConfigType)
	names := make([]string, maxResourceNames+1)
	for i := range names {
		names[i] = fmt.Sprintf("filter-%d", i)
	}
	for _, svc := range services {
		req := subscription(&corev3.Node{Id: "envoy-a"})
		req.ResourceNames = names
		wantRefusal(t, streamError(t, conn, svc, req), codes.InvalidArgument, fmt.Sprintf("%d resource names", len(names)))
		req = subscription(&corev3.Node{Id: "envoy-a"})
		req.ResponseNonce = strings.Repeat("1", maxNameBytes+1)
		wantRefusal(t, streamError(t, conn, svc, req), codes.InvalidArgument, fmt.Sprintf("nonce of %d bytes", maxNameBytes+1))
	}

	// Incremental subscriptions add up over a stream's requests.
	delta, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).DeltaExtensionConfigs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	half := len(names) / 2
	for _, req := range []*discoveryv3.DeltaDiscoveryRequest{
		{Node: &corev3.Node{Id: "envoy-delta"}, TypeUrl: resourcev3.ExtensionConfigType, ResourceNamesSubscribe: names[:half]},
		{TypeUrl: resourcev3.ExtensionConfigType, ResourceNamesSubscribe: names[half:]},
	} {
		if err := delta.Send(req); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	// Whatever the first request brings comes before the refusal.
	for {
		if _, err := delta.Recv(); err != nil {
			wantRefusal(t, err, codes.InvalidArgument, fmt.Sprintf("%d resource names", len(names)))
			break
		}
	}
	eventuallyMetric(t, s, refusedMetric(refusedUnserved, 6))
}

// An abusive client, flooding the server with streams whose node IDs fill
// gRPC's largest message, is refused every one, while an Envoy with a
// certificate of its own is served its configuration and the next one.
func TestAnEnvoyIsServedWhileAnAbusiveClientIsRefused(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p)
	publish(t, s, 1)
	envoy := subscribe(t, dial(t, s, p, p.clientCertificate(t, "envoy")), ecds, "envoy", "")
	envoy.ack(envoy.next())
	waitForWatches(t, s, 1, envoy)

	abusive := p.clientCertificate(t, "abusive")
	flood := &discoveryv3.DiscoveryRequest{
		Node:    &corev3.Node{Id: strings.Repeat("x", 3900000)},
		TypeUrl: resourcev3.ExtensionConfigType,
	}
	var conns []*grpc.ClientConn
	for range 4 {
		conns = append(conns, dial(t, s, p, abusive))
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			stream := openStream(t, conns[i%len(conns)], ecds)
			if err := stream.Send(flood); err != nil && !errors.Is(err, io.EOF) {
				t.Error(err)
				return
			}
			if _, err := stream.Recv(); status.Code(err) != codes.ResourceExhausted {
				t.Errorf("abusive stream ended with %v, want %v", err, codes.ResourceExhausted)
			}
		})
	}
	wg.Wait()

	ext, version := publish(t, s, 2)
	checkResponse(t, envoy.next(), ext, version)
	_, counts := s.limits.state()
	if refused := counts[refusedClientLimit] + counts[refusedRequestSize]; refused != 50 {
		t.Errorf("%d refusals counted, want 50: %v", refused, counts)
	}
	if n := refusalsLogged(s, `"CN=abusive"`); n > 2 {
		t.Errorf("the refusals were logged %d times, want at most once per reason:\n%s", n, s.logs.String())
	}
	eventuallyMetric(t, s, "skewgate_xds_streams 1")
}

// http2Conn speaks HTTP/2 to the server directly, so that it can ignore the
// limits the server advertises, as an abusive client would.
type http2Conn struct {
	t        *testing.T
	framer   *http2.Framer
	settings map[http2.SettingID]uint32
}

func dialHTTP2(t *testing.T, s *testServer, p *pki) *http2Conn {
	t.Helper()
	conn, err := tls.Dial("tcp", s.addr, &tls.Config{
		RootCAs: p.serverCA.Pool(), ServerName: serverName, NextProtos: []string{"h2"},
		Certificates: []tls.Certificate{p.client},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c := &http2Conn{t: t, framer: http2.NewFramer(conn, conn), settings: map[http2.SettingID]uint32{}}
	if err := c.framer.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		frame, err := c.framer.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if settings, ok := frame.(*http2.SettingsFrame); ok && !settings.IsAck() {
			if err := settings.ForeachSetting(func(s http2.Setting) error { c.settings[s.ID] = s.Val; return nil }); err != nil {
				t.Fatal(err)
			}
			if err := c.framer.WriteSettingsAck(); err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

// openStream starts a StreamExtensionConfigs call with extra headers.
func (c *http2Conn) openStream(id uint32, extra []hpack.HeaderField) {
	c.t.Helper()
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range append([]hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"}, {Name: ":authority", Value: serverName},
		{Name: ":path", Value: "/" + extensionv3.ExtensionConfigDiscoveryService_ServiceDesc.ServiceName + "/StreamExtensionConfigs"},
		{Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"},
	}, extra...) {
		if err := enc.WriteField(f); err != nil {
			c.t.Fatal(err)
		}
	}
	if err := c.framer.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

// resetOf reads frames until the server resets stream id, and returns the
// code; the test fails if the server resets another stream first.
func (c *http2Conn) resetOf(id uint32) http2.ErrCode {
	c.t.Helper()
	for {
		frame, err := c.framer.ReadFrame()
		if err != nil {
			c.t.Fatalf("waiting for stream %d to be reset: %v", id, err)
		}
		if rst, ok := frame.(*http2.RSTStreamFrame); ok {
			if rst.StreamID != id {
				c.t.Fatalf("stream %d reset (%v), waiting for stream %d", rst.StreamID, rst.ErrCode, id)
			}
			return rst.ErrCode
		}
	}
}
