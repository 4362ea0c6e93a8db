// Package xds is skewgate's xDS management server. It serves the plugin
// filter's TypedExtensionConfig, the resource of the ECDS file, to any number
// of Envoys over gRPC: through the ExtensionConfigDiscoveryService and through
// ADS, state of the world or incremental. Streams, watches and responses are
// go-control-plane's server and snapshot cache; this package adds TLS with
// required client certificates, one configuration for every node, versions
// named by content, and the accounting of what Envoys accept and reject.
package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/host/internal/promdef"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// fleetKey is the snapshot cache's one node key: every Envoy in front of the
// same API servers runs the same plugin configuration, whatever its node ID.
const fleetKey = "fleet"

// Keepalive: the server pings an idle connection to find Envoys that vanished,
// and lets Envoy ping as often as the rendered bootstrap does (every 30 s,
// with jitter), which gRPC's default policy (5 min) would answer with GOAWAY.
const (
	pingInterval    = 30 * time.Second
	pingTimeout     = 15 * time.Second
	minClientPing   = 20 * time.Second
	versionHexChars = 32
)

// Options configure a Server.
type Options struct {
	// Certificate returns the serving certificate for each new connection, so
	// a renewed one is used without a restart.
	Certificate func() *tls.Certificate
	// ClientCAs returns the CAs that must have signed each new connection's
	// client certificate; a client without one is refused.
	ClientCAs func() *x509.CertPool
	// MaxStreams bounds the streams open at once from all clients; zero
	// takes DefaultMaxStreams.
	MaxStreams int
	// MaxStreamsPerClient bounds the streams open at once under one client
	// certificate (Envoys sharing a certificate count as one client); zero
	// takes DefaultMaxStreamsPerClient.
	MaxStreamsPerClient int
	Logger              *slog.Logger
}

// Server serves one TypedExtensionConfig at a time to every subscriber.
type Server struct {
	log    *slog.Logger
	cache  cachev3.SnapshotCache
	grpc   *grpc.Server
	stop   context.CancelFunc
	limits *limits

	publishMu sync.Mutex
	version   atomic.Pointer[string]

	mu      sync.Mutex
	streams map[streamKey]*streamState

	pushes, acks, nacks atomic.Uint64
}

// streamKey tells streams apart: go-control-plane numbers state-of-the-world
// and incremental streams separately.
type streamKey struct {
	delta bool
	id    int64
}

type streamState struct {
	client client
	// typeURL is what the stream serves: the extension config type, or
	// none for ADS, whose requests name it.
	typeURL string
	node    string
	// deltaNames are the resource names an incremental stream subscribed
	// to, counted against maxResourceNames.
	deltaNames map[string]struct{}
	// nonce and version are those of the last response sent, which an ACK or
	// NACK refers to.
	nonce, version string
}

// New prepares a Server; Serve runs it on a listener.
func New(opts Options) (*Server, error) {
	if opts.Certificate == nil || opts.ClientCAs == nil {
		return nil, errors.New("xds: a serving certificate and client CAs are required")
	}
	if opts.MaxStreams < 0 || opts.MaxStreamsPerClient < 0 {
		return nil, fmt.Errorf("xds: stream limits %d and %d per client: must not be negative", opts.MaxStreams, opts.MaxStreamsPerClient)
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.MaxStreamsPerClient == 0 {
		opts.MaxStreamsPerClient = DefaultMaxStreamsPerClient
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{log: opts.Logger, streams: map[streamKey]*streamState{}, limits: newLimits(opts.MaxStreams, opts.MaxStreamsPerClient)}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.cache = cachev3.NewSnapshotCache(false, fleet{}, cacheLog{opts.Logger})
	xds := serverv3.NewServer(ctx, s.cache, callbacks{s})
	tlsConfig := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*opts.Certificate()},
				ClientAuth:   tls.RequireAndVerifyClientCert,
				ClientCAs:    opts.ClientCAs(),
			}, nil
		},
	}
	s.grpc = grpc.NewServer(
		grpc.Creds(credentials.NewTLS(tlsConfig)),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: pingInterval, Timeout: pingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: minClientPing, PermitWithoutStream: true}),
		grpc.MaxConcurrentStreams(maxStreamsPerConnection),
		grpc.MaxRecvMsgSize(maxRequestBytes),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.StreamInterceptor(s.admitStreams),
	)
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(s.grpc, xds)
	extensionv3.RegisterExtensionConfigDiscoveryServiceServer(s.grpc, xds)
	return s, nil
}

// Serve accepts connections on l until Stop, which may come first.
func (s *Server) Serve(l net.Listener) error {
	if err := s.grpc.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("xds: %w", err)
	}
	return nil
}

// Stop closes the listener and every stream: an xDS stream never ends on its
// own, so there is nothing to drain, and Envoy keeps its configuration while
// it reconnects, to this server's successor or another replica.
func (s *Server) Stop() {
	s.grpc.Stop()
	s.stop()
}

// Version names a configuration by its content, so that every server given
// the same content serves the same version: hex of the first 128 bits of its
// SHA-256.
func Version(content []byte) string {
	sum := sha256.Sum256(content)
	return hex.EncodeToString(sum[:versionHexChars/2])
}

// Publish makes ext the configuration every subscriber receives, as version:
// subscribers holding another version get it at once, new ones on their first
// request. Publishing the version already served changes nothing.
func (s *Server) Publish(ext *corev3.TypedExtensionConfig, version string) error {
	if ext == nil {
		return errors.New("xds: no configuration")
	}
	if err := ext.ValidateAll(); err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	if version == "" {
		return errors.New("xds: empty version")
	}
	s.publishMu.Lock()
	defer s.publishMu.Unlock()
	if current := s.version.Load(); current != nil && *current == version {
		return nil
	}
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{resourcev3.ExtensionConfigType: {ext}})
	if err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	if err := s.cache.SetSnapshot(context.Background(), fleetKey, snap); err != nil {
		return fmt.Errorf("xds: %w", err)
	}
	s.version.Store(&version)
	s.log.Debug("xDS configuration published", "version", version)
	return nil
}

// extensionTypes resolves exactly the typed configs the plugin filter's
// resource holds.
var extensionTypes = func() *protoregistry.Types {
	var types protoregistry.Types
	for _, m := range []proto.Message{&wasmfilterv3.Wasm{}, &wrapperspb.StringValue{}} {
		if err := types.RegisterMessage(m.ProtoReflect().Type()); err != nil {
			panic(err)
		}
	}
	return &types
}()

// ParseExtensionConfig reads a TypedExtensionConfig document (YAML or JSON,
// as envoyconfig.RenderExtensionConfig writes it) the way Envoy reads its
// configuration, and checks it and its Wasm filter config against Envoy's
// validation rules.
func ParseExtensionConfig(doc []byte) (*corev3.TypedExtensionConfig, error) {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("xds: extension config: %w", err)
	}
	var ext corev3.TypedExtensionConfig
	if err := (protojson.UnmarshalOptions{Resolver: extensionTypes}).Unmarshal(js, &ext); err != nil {
		return nil, fmt.Errorf("xds: extension config: %w", err)
	}
	if err := ext.ValidateAll(); err != nil {
		return nil, fmt.Errorf("xds: extension config: %w", err)
	}
	var wasm wasmfilterv3.Wasm
	if err := anypb.UnmarshalTo(ext.GetTypedConfig(), &wasm, proto.UnmarshalOptions{Resolver: extensionTypes}); err != nil {
		return nil, fmt.Errorf("xds: extension config: typed_config: %w", err)
	}
	if err := wasm.ValidateAll(); err != nil {
		return nil, fmt.Errorf("xds: extension config: typed_config: %w", err)
	}
	return &ext, nil
}

var (
	streamsDesc     = promdef.Desc(&metricdef.XDSStreams)
	pushesDesc      = promdef.Desc(&metricdef.XDSPushes)
	acksDesc        = promdef.Desc(&metricdef.XDSAcks)
	nacksDesc       = promdef.Desc(&metricdef.XDSNacks)
	versionInfoDesc = promdef.Desc(&metricdef.XDSVersionInfo)
	refusedDesc     = promdef.Desc(&metricdef.XDSRefusedStreams)
)

// Describe and Collect make the Server the prometheus.Collector of its
// metrics.
func (s *Server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{streamsDesc, pushesDesc, acksDesc, nacksDesc, refusedDesc, versionInfoDesc} {
		ch <- d
	}
}

func (s *Server) Collect(ch chan<- prometheus.Metric) {
	// The streams the limits count, so that the gauge and the limits agree.
	streams, refused := s.limits.state()
	ch <- prometheus.MustNewConstMetric(streamsDesc, prometheus.GaugeValue, float64(streams))
	ch <- prometheus.MustNewConstMetric(pushesDesc, prometheus.CounterValue, float64(s.pushes.Load()))
	ch <- prometheus.MustNewConstMetric(acksDesc, prometheus.CounterValue, float64(s.acks.Load()))
	ch <- prometheus.MustNewConstMetric(nacksDesc, prometheus.CounterValue, float64(s.nacks.Load()))
	for reason, n := range refused {
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(n), string(reason))
	}
	if v := s.version.Load(); v != nil {
		ch <- prometheus.MustNewConstMetric(versionInfoDesc, prometheus.GaugeValue, 1, *v)
	}
}

func (s *Server) opened(ctx context.Context, key streamKey, typeURL string) {
	st := &streamState{typeURL: typeURL}
	st.client, _ = clientOf(ctx)
	s.mu.Lock()
	s.streams[key] = st
	s.mu.Unlock()
	s.log.Debug("xDS stream opened", "stream", key.id, "delta", key.delta, "peer", st.client.subject)
}

func (s *Server) closed(key streamKey) {
	s.mu.Lock()
	delete(s.streams, key)
	s.mu.Unlock()
	s.log.Debug("xDS stream closed", "stream", key.id, "delta", key.delta)
}

func (s *Server) sent(key streamKey, nonce, version string) {
	s.pushes.Add(1)
	s.mu.Lock()
	if st := s.streams[key]; st != nil {
		st.nonce, st.version = nonce, version
	}
	s.mu.Unlock()
}

// received accounts for a request and returns the version of the response
// it answers, if that is the last one sent on the stream: the version a NACK
// rejected or an ACK accepted. versionInForce is what a state-of-the-world
// NACK says Envoy keeps.
func (s *Server) received(key streamKey, node *corev3.Node, nonce, versionInForce string, rejection *statusDetail) (answered string) {
	s.mu.Lock()
	st := s.streams[key]
	if st == nil {
		st = &streamState{}
	}
	if node.GetId() != "" {
		st.node = node.GetId()
	}
	if nonce != "" && nonce == st.nonce {
		answered = st.version
	}
	peer, nodeID := st.client.subject, st.node
	s.mu.Unlock()
	switch {
	case rejection != nil:
		s.nacks.Add(1)
		s.log.Warn("an Envoy rejected the plugin configuration and keeps the one it had",
			"node", nodeID, "peer", peer, "rejected_version", answered, "version_in_force", versionInForce,
			"code", rejection.code, "error", rejection.message)
	case nonce != "":
		s.acks.Add(1)
		s.log.Debug("an Envoy accepted the plugin configuration", "node", nodeID, "peer", peer, "version", answered)
	}
	return answered
}

type statusDetail struct {
	code    int32
	message string
}

// rejectionOf is a NACK's error, shortened for the log.
func rejectionOf(d *statuspb.Status) *statusDetail {
	if d == nil {
		return nil
	}
	return &statusDetail{d.GetCode(), truncate(d.GetMessage(), maxLoggedErrorBytes)}
}

// callbacks are go-control-plane's hooks into every stream.
type callbacks struct{ s *Server }

func (c callbacks) OnStreamOpen(ctx context.Context, id int64, typeURL string) error {
	c.s.opened(ctx, streamKey{id: id}, typeURL)
	return nil
}

func (c callbacks) OnStreamClosed(id int64, _ *corev3.Node) { c.s.closed(streamKey{id: id}) }

// OnStreamRequest runs before the cache sees the request. It holds the
// request to the limits (checkRequest), then accounts for it. A NACK names
// the version Envoy keeps, which differs from the one served, so the cache
// would send the rejected configuration straight back and Envoy reject it
// again, in a loop. Naming the rejected version instead makes the cache wait
// for the next one, as after an ACK.
func (c callbacks) OnStreamRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	if err := c.s.check(streamKey{id: id}, request{node: req.GetNode(), typeURL: req.GetTypeUrl(), names: len(req.GetResourceNames()),
		kept: append([]string{req.GetVersionInfo(), req.GetResponseNonce()}, req.GetResourceNames()...)}); err != nil {
		return err
	}
	// The error is for the log alone, and go-control-plane holds a stream's
	// last request while it waits.
	rejection := rejectionOf(req.GetErrorDetail())
	req.ErrorDetail = nil
	rejected := c.s.received(streamKey{id: id}, req.GetNode(), req.GetResponseNonce(), req.GetVersionInfo(), rejection)
	if rejection != nil && rejected != "" {
		req.VersionInfo = rejected
	}
	return nil
}

func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	c.s.sent(streamKey{id: id}, resp.GetNonce(), resp.GetVersionInfo())
}

func (c callbacks) OnDeltaStreamOpen(ctx context.Context, id int64, typeURL string) error {
	c.s.opened(ctx, streamKey{delta: true, id: id}, typeURL)
	return nil
}

func (c callbacks) OnDeltaStreamClosed(id int64, _ *corev3.Node) {
	c.s.closed(streamKey{delta: true, id: id})
}

// OnStreamDeltaRequest holds the request to the limits and accounts for it;
// the incremental protocol tracks what each stream was sent, so a NACK does
// not bring the rejected version back.
func (c callbacks) OnStreamDeltaRequest(id int64, req *discoveryv3.DeltaDiscoveryRequest) error {
	key := streamKey{delta: true, id: id}
	typeURL, names := c.s.subscribeDelta(key, req)
	kept := append(append([]string{req.GetResponseNonce()}, req.GetResourceNamesSubscribe()...), req.GetResourceNamesUnsubscribe()...)
	for name, version := range req.GetInitialResourceVersions() {
		kept = append(kept, name, version)
	}
	if err := c.s.check(key, request{node: req.GetNode(), typeURL: typeURL, names: names, kept: kept}); err != nil {
		return err
	}
	// The error is for the log alone, and go-control-plane holds a stream's
	// last request while it waits.
	rejection := rejectionOf(req.GetErrorDetail())
	req.ErrorDetail = nil
	c.s.received(streamKey{delta: true, id: id}, req.GetNode(), req.GetResponseNonce(), "", rejection)
	return nil
}

func (c callbacks) OnStreamDeltaResponse(id int64, _ *discoveryv3.DeltaDiscoveryRequest, resp *discoveryv3.DeltaDiscoveryResponse) {
	c.s.sent(streamKey{delta: true, id: id}, resp.GetNonce(), resp.GetSystemVersionInfo())
}

func (callbacks) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error { return nil }

func (callbacks) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}

// fleet maps every node to fleetKey.
type fleet struct{}

func (fleet) ID(*corev3.Node) string { return fleetKey }

// cacheLog adapts the snapshot cache's logging. Its informational messages
// are routine (a stale nonce, a watch opened), so they are debug messages
// here.
type cacheLog struct{ log *slog.Logger }

func (l cacheLog) Debugf(format string, args ...any) { l.at(slog.LevelDebug, format, args) }
func (l cacheLog) Infof(format string, args ...any)  { l.at(slog.LevelDebug, format, args) }
func (l cacheLog) Warnf(format string, args ...any)  { l.at(slog.LevelWarn, format, args) }
func (l cacheLog) Errorf(format string, args ...any) { l.at(slog.LevelError, format, args) }

func (l cacheLog) at(level slog.Level, format string, args []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "xds-cache")
	}
}
