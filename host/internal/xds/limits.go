package xds

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Limits on what a client can make the server hold. RATIONALE.md says how
// they were chosen. Only the stream counts are Options: the rest follow from
// what an Envoy sends.
const (
	// DefaultMaxStreams bounds the streams open at once, from every client:
	// a fleet of several hundred Envoys, each with one or two streams.
	DefaultMaxStreams = 1024
	// DefaultMaxStreamsPerClient bounds the streams open at once under one
	// client certificate: an Envoy's ECDS or ADS stream, a second while a
	// restarting Envoy overlaps its successor, and streams of connections
	// that died unnoticed until keepalive closes them.
	DefaultMaxStreamsPerClient = 8
	// maxStreamsPerConnection is advertised in HTTP/2 SETTINGS: a client
	// that honours it waits or opens another connection, and the transport
	// refuses a stream beyond it (REFUSED_STREAM).
	maxStreamsPerConnection = 8
	// maxRequestBytes bounds one request. An Envoy's largest is its first,
	// which carries its Node listing every extension compiled in: about
	// 40 KB.
	maxRequestBytes = 256 << 10
	// maxHeaderListBytes bounds a stream's request headers, which it keeps
	// while it is open: gRPC's coming default. Envoy sends a few hundred
	// bytes.
	maxHeaderListBytes = 8 << 10
	// maxNodeIDBytes bounds the node ID, the one part of the Node a stream
	// keeps (it names the Envoy in logs); a host name is at most 253.
	maxNodeIDBytes = 1024
	// maxResourceNames bounds the resource names a stream subscribes to: an
	// Envoy subscribes to the plugin filter's one name.
	maxResourceNames = 16
	// maxNameBytes bounds each resource name, version and nonce a stream
	// keeps: the server's names are short, its versions 32 characters and
	// its nonces decimal counters.
	maxNameBytes = 256
	// maxLoggedErrorBytes bounds the error of a NACK as logged.
	maxLoggedErrorBytes = 1024
	// maxWarnedClients bounds the memory of which clients were told about a
	// refusal; when full it starts again, and the next refusals are logged
	// anew.
	maxWarnedClients = 4096
)

// refusal is why the server refused or ended a stream; its value is the
// reason label of skewgate_xds_refused_streams_total.
type refusal string

const (
	refusedClientLimit refusal = "client_stream_limit"
	refusedServerLimit refusal = "server_stream_limit"
	refusedRequestSize refusal = "request_too_large"
	refusedNodeID      refusal = "node_id_too_long"
	refusedUnserved    refusal = "unserved_request"
)

var allRefusals = []refusal{refusedClientLimit, refusedServerLimit, refusedRequestSize, refusedNodeID, refusedUnserved}

// client is who opened a stream: the verified leaf certificate, unlike the
// node ID, which the client chooses.
type client struct {
	id      [sha256.Size]byte
	subject string
}

func clientOf(ctx context.Context) (client, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return client{}, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return client{}, false
	}
	leaf := info.State.PeerCertificates[0]
	return client{id: sha256.Sum256(leaf.Raw), subject: leaf.Subject.String()}, true
}

// limits counts open streams per client and in all, and refusals.
type limits struct {
	maxStreams, maxPerClient int

	mu      sync.Mutex
	total   int
	streams map[[sha256.Size]byte]int
	warned  map[warning]struct{}
	refused map[refusal]uint64
}

type warning struct {
	client [sha256.Size]byte
	reason refusal
}

func newLimits(maxStreams, maxPerClient int) *limits {
	return &limits{maxStreams: maxStreams, maxPerClient: maxPerClient,
		streams: map[[sha256.Size]byte]int{}, warned: map[warning]struct{}{}, refused: map[refusal]uint64{}}
}

// admit takes a stream slot for c, or says why there is none.
func (l *limits) admit(c client) (refusal, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.streams[c.id] >= l.maxPerClient:
		return refusedClientLimit, status.Errorf(codes.ResourceExhausted,
			"xds: the client certificate %q has %d streams open, the most one client may have", c.subject, l.maxPerClient)
	case l.total >= l.maxStreams:
		return refusedServerLimit, status.Errorf(codes.ResourceExhausted,
			"xds: the server has %d streams open, the most it serves at once", l.maxStreams)
	}
	l.streams[c.id]++
	l.total++
	return "", nil
}

func (l *limits) release(c client) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.streams[c.id]--; l.streams[c.id] == 0 {
		delete(l.streams, c.id)
	}
}

// count records a refusal and says whether c is to be told in the log: once
// per client and reason.
func (l *limits) count(c client, reason refusal) (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused[reason]++
	w := warning{c.id, reason}
	if _, ok := l.warned[w]; ok {
		return false
	}
	if len(l.warned) >= maxWarnedClients {
		clear(l.warned)
	}
	l.warned[w] = struct{}{}
	return true
}

// state is the streams admitted and open, and the refusals so far.
func (l *limits) state() (open int, refused map[refusal]uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	refused = make(map[refusal]uint64, len(allRefusals))
	for _, r := range allRefusals {
		refused[r] = l.refused[r]
	}
	return l.total, refused
}

// refuse counts and logs a refusal and returns err, which ends the stream
// and tells the client why.
func (s *Server) refuse(c client, reason refusal, err error) error {
	if s.limits.count(c, reason) {
		s.log.Warn("refusing xDS streams of a client; logged once per client and reason",
			"peer", c.subject, "reason", string(reason), "error", status.Convert(err).Message())
	}
	return err
}

// admitStreams is the stream interceptor: it holds every stream to the
// per-client and total limits, and turns a request over the size limit,
// which go-control-plane takes for the end of the stream, into the error
// the client is told.
func (s *Server) admitStreams(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	c, ok := clientOf(ss.Context())
	if !ok {
		return status.Error(codes.Unauthenticated, "xds: no verified client certificate")
	}
	if reason, err := s.limits.admit(c); err != nil {
		return s.refuse(c, reason, err)
	}
	defer s.limits.release(c)
	recv := &recvErrorStream{ServerStream: ss}
	err := handler(srv, recv)
	if recvErr := recv.failure(); err == nil && status.Code(recvErr) == codes.ResourceExhausted {
		return s.refuse(c, refusedRequestSize, recvErr)
	}
	return err
}

// recvErrorStream remembers why receiving failed.
type recvErrorStream struct {
	grpc.ServerStream
	mu  sync.Mutex
	err error
}

func (r *recvErrorStream) RecvMsg(m any) error {
	err := r.ServerStream.RecvMsg(m)
	if err != nil && !errors.Is(err, io.EOF) {
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}
	return err
}

func (r *recvErrorStream) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// request is what a stream would keep of one request, in either protocol.
type request struct {
	node    *corev3.Node
	typeURL string
	// names is how many resource names the stream subscribes to with it.
	names int
	// kept are the request's resource names, version and nonce.
	kept []string
}

// checkRequest holds a request to what the server serves and to what a
// stream may keep of it, and leaves of its Node only the ID:
// go-control-plane keeps a stream's last Node for the stream's life, and the
// rest (metadata, every extension Envoy was built with) is tens of
// kilobytes this server never reads.
func checkRequest(r request) (refusal, error) {
	if id := r.node.GetId(); len(id) > maxNodeIDBytes {
		return refusedNodeID, status.Errorf(codes.InvalidArgument,
			"xds: the node ID has %d bytes, more than the %d this server accepts", len(id), maxNodeIDBytes)
	}
	if r.typeURL != resourcev3.ExtensionConfigType {
		return refusedUnserved, status.Errorf(codes.InvalidArgument,
			"xds: this server serves only %s, not %q", resourcev3.ExtensionConfigType, truncate(r.typeURL, maxNameBytes))
	}
	if r.names > maxResourceNames {
		return refusedUnserved, status.Errorf(codes.InvalidArgument,
			"xds: %d resource names, more than the %d one stream may subscribe to", r.names, maxResourceNames)
	}
	for _, k := range r.kept {
		if len(k) > maxNameBytes {
			return refusedUnserved, status.Errorf(codes.InvalidArgument,
				"xds: a resource name, version or nonce of %d bytes, more than the %d of any this server serves", len(k), maxNameBytes)
		}
	}
	if r.node != nil {
		id := r.node.GetId()
		proto.Reset(r.node)
		r.node.Id = id
	}
	return "", nil
}

// check refuses, counts and logs a request checkRequest refuses.
func (s *Server) check(key streamKey, r request) error {
	reason, err := checkRequest(r)
	if err == nil {
		return nil
	}
	s.mu.Lock()
	var c client
	if st := s.streams[key]; st != nil {
		c = st.client
	}
	s.mu.Unlock()
	return s.refuse(c, reason, err)
}

// subscribeDelta follows an incremental stream's subscriptions, which
// accumulate over its requests, and returns the request's type and the
// names the stream would then hold. A request naming more than the limit is
// not applied.
func (s *Server) subscribeDelta(key streamKey, req *discoveryv3.DeltaDiscoveryRequest) (typeURL string, names int) {
	typeURL = req.GetTypeUrl()
	added := len(req.GetResourceNamesSubscribe()) + len(req.GetInitialResourceVersions())
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[key]
	if st == nil {
		return typeURL, added
	}
	if typeURL == "" {
		typeURL = st.typeURL
	}
	if added > maxResourceNames {
		return typeURL, len(st.deltaNames) + added
	}
	if st.deltaNames == nil {
		st.deltaNames = map[string]struct{}{}
	}
	for _, name := range req.GetResourceNamesSubscribe() {
		st.deltaNames[name] = struct{}{}
	}
	for name := range req.GetInitialResourceVersions() {
		st.deltaNames[name] = struct{}{}
	}
	for _, name := range req.GetResourceNamesUnsubscribe() {
		delete(st.deltaNames, name)
	}
	return typeURL, len(st.deltaNames)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}
