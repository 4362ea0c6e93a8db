// Package plugin is skewgate's proxy-wasm HTTP filter, built by its command
// plugin/cmd/skewgate-plugin with upstream Go as a wasip1 reactor
// (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared). It holds a discovery
// snapshot and decides, per request, whether to leave routing to the gateway,
// steer to a server that serves the resource, answer the merged discovery
// document itself (to clients an API server would answer, asked through
// proxy_http_call), or answer 503.
//
// It never blocks, sleeps, starts goroutines, arms runtime timers or touches
// files: in Envoy's Wasm host a Go runtime timer kills the VM at the next GC.
// Waiting for an HTTP call is the host's: the plugin pauses the stream and
// resumes it from the call's callback.
package plugin

import (
	"errors"
	"strconv"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/plugin/config"
)

const (
	headerPeerProxied   = config.PeerProxiedHeader
	headerRemoteUser    = "x-remote-user"
	headerRemoteGroup   = "x-remote-group"
	headerRemoteUID     = "x-remote-uid"
	prefixRemoteHeaders = config.RemoteHeaderPrefix
)

// headerCredentialID carries the x509 authenticator's credential-id extra:
// kube-apiserver lower-cases the key after X-Remote-Extra- and %-unescapes it,
// so its '/' travels as %2f.
const headerCredentialID = "x-remote-extra-authentication.kubernetes.io%2fcredential-id"

// The Envoy attributes holding the verified client certificate's subject and
// the SHA-256 digest of its DER.
var (
	propertySubjectPeerCertificate      = []string{"connection", "subject_peer_certificate"}
	propertySHA256PeerCertificateDigest = []string{"connection", "sha256_peer_certificate_digest"}
)

// NewVMContext is the plugin's VM context, which the module's command
// registers with the SDK.
func NewVMContext() types.VMContext { return &vmContext{} }

type vmContext struct {
	types.DefaultVMContext
}

func (*vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{}
}

// pluginContext is one root context: one configuration. Envoy creates a new one
// for every configuration change, so a configuration is never mutated in place.
type pluginContext struct {
	types.DefaultPluginContext
	cfg     *Config
	metrics *metrics
	// picks spreads re-routed requests over the capable servers.
	picks uint64
	// authorizations remembers, per credential, whether the API servers let it
	// read discovery.
	authorizations authorizationCache
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	p.metrics = defineMetrics()
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		p.metrics.rejectedConfigurations.Increment(1)
		proxywasm.LogCriticalf("skewgate: configuration rejected: cannot read it: %v", err)
		return types.OnPluginStartStatusFailed
	}
	// Parsed, then built, each called from here (see configFrom).
	var cfg *Config
	parsed, err := config.Parse(raw)
	if err == nil {
		cfg, err = configFrom(parsed)
	}
	if err != nil {
		p.metrics.rejectedConfigurations.Increment(1)
		if isSchemaError(err) {
			p.metrics.schemaRejections.Increment(1)
		}
		proxywasm.LogCriticalf("skewgate: configuration rejected: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.cfg = cfg
	p.metrics.setGeneration(cfg.Index.Snapshot().Generation)
	if len(cfg.Ignored) > 0 {
		// A controller ahead of the module: what it added is optional, so
		// the module routes as before, and says what it leaves out.
		p.metrics.ignoredFields.Increment(uint64(len(cfg.Ignored)))
		proxywasm.LogWarnf("skewgate: configuration of schema %s, newer than this module's %s: ignored the fields it does not know: %s",
			cfg.Schema, discovery.CurrentSchema(), strings.Join(cfg.Ignored, ", "))
	}
	proxywasm.LogInfof("skewgate: configured snapshot generation %d with %d servers",
		cfg.Index.Snapshot().Generation, len(cfg.Index.Servers()))
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p, cfg: p.cfg}
}

// isSchemaError is errors.As for *discovery.SchemaError without the
// reflection errors.As links into the module.
func isSchemaError(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if _, ok := err.(*discovery.SchemaError); ok {
			return true
		}
	}
	return false
}

// pick chooses a server for a request the plugin must name the server of
// itself: a routable one.
func (p *pluginContext) pick(ix *discovery.Index) int {
	i := ix.Routable().Pick(p.picks)
	p.picks++
	return i
}

// httpContext keeps the configuration it started with, so a request in flight
// is decided against one snapshot even if a new one arrives meanwhile.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	cfg    *Config
	// headers and in are the request as it arrived.
	headers [][2]string
	in      inbound
	// id is the identity the request asserts (front-proxy mode), nil for none.
	id *certIdentity
	// awaitingBody is set while the decision waits for the request body.
	awaitingBody bool
	// pending is the merged discovery answer waiting for its authorization.
	pending pendingDiscovery
}

// inbound is what the plugin reads from the request headers in one pass.
type inbound struct {
	method, path, authority, accept, ifNoneMatch string
	peerProxied, contentType                     string
	// contentLength is the declared body length, -1 when absent or unreadable.
	contentLength int64
	// strip is set when the request carries a header the client must not
	// control: an identity assertion, the backend choice or an untrusted
	// peer-proxied marker.
	strip bool
}

// noServer is the target of a request left to the gateway's load balancing.
const noServer = -1

func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) types.Action {
	if h.cfg == nil {
		// Only reachable on a host that sends traffic to a root context whose
		// configuration failed; Envoy and skewgate's host never do.
		return h.unavailable(&discovery.Decision{})
	}
	headers, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		proxywasm.LogErrorf("skewgate: cannot read request headers: %v", err)
		return h.unavailable(&discovery.Decision{})
	}
	h.headers, h.in = headers, h.scan(headers)
	if h.cfg.IdentityMode == config.IdentityFrontProxy {
		var ok bool
		if h.id, ok = h.clientIdentity(); !ok {
			return h.unauthorized()
		}
	}

	// A malformed request target is the API server's to reject.
	d := discovery.Decision{Action: discovery.Forward}
	if req, ok := h.request(&h.in); ok {
		req.BodyAwaitable = !endOfStream && h.cfg.RouteWritesByBody
		d = h.cfg.Index.Decide(&req, h.plugin.picks)
	}
	if d.Action == discovery.AwaitBody {
		// The host buffers the body (Envoy up to its buffer limit, which
		// MaxInspectedBody does not pass) and calls OnHttpRequestBody.
		h.awaitingBody = true
		return types.ActionPause
	}
	return h.carryOut(&d)
}

// OnHttpRequestBody decides a write whose body says which servers can store
// it, once the host has buffered all of it.
func (h *httpContext) OnHttpRequestBody(bodySize int, endOfStream bool) types.Action {
	if !h.awaitingBody {
		return types.ActionContinue
	}
	if !endOfStream {
		return types.ActionPause
	}
	return h.decideWithBody(bodySize)
}

// OnHttpRequestTrailers ends a body that trailers follow.
func (h *httpContext) OnHttpRequestTrailers(int) types.Action {
	if !h.awaitingBody {
		return types.ActionContinue
	}
	return h.decideWithBody(discovery.MaxInspectedBody)
}

func (h *httpContext) decideWithBody(bodySize int) types.Action {
	h.awaitingBody = false
	d := discovery.Decision{Action: discovery.Forward}
	if req, ok := h.request(&h.in); ok {
		// Unread, the body is routed as one the plugin cannot read.
		if body, err := proxywasm.GetHttpRequestBody(0, bodySize); err == nil && len(body) > 0 {
			req.Body = body
		} else if err != nil {
			proxywasm.LogWarnf("skewgate: cannot read the request body: %v", err)
		}
		d = h.cfg.Index.Decide(&req, h.plugin.picks)
	}
	return h.carryOut(&d)
}

// carryOut does what the decision says.
func (h *httpContext) carryOut(d *discovery.Decision) types.Action {
	switch d.Body {
	case discovery.BodyRead:
		h.plugin.metrics.routedByBody.Increment(1)
	case discovery.BodyUnreadable:
		h.plugin.metrics.unreadableBodies.Increment(1)
	}
	if d.NoPeer {
		h.plugin.metrics.noPeerForwarded.Increment(1)
	}
	switch d.Action {
	case discovery.Route:
		h.plugin.picks++
		if d.Rerouted {
			h.plugin.metrics.rerouted.Increment(1)
		}
		return h.forward(d.Server, h.id, d.Rerouted)
	case discovery.ServeDocument, discovery.NotModified:
		return h.authorizeDiscovery(d, h.id)
	case discovery.Unavailable:
		return h.unavailable(d)
	}
	if h.id != nil {
		// The front-proxy credential goes only where the plugin sends it.
		return h.forward(h.plugin.pick(h.cfg.Index), h.id, false)
	}
	return h.forward(noServer, nil, false)
}

// request is what Decide needs; ok is false for a malformed request target.
func (h *httpContext) request(in *inbound) (req discovery.Request, ok bool) {
	path, query, ok := discovery.SplitRequestTarget(in.path)
	return discovery.Request{
		Method: in.method, Path: path, Query: query,
		Accept: in.accept, IfNoneMatch: in.ifNoneMatch,
		PeerProxied: h.cfg.TrustPeerProxiedHeader && in.peerProxied == "true",
		ContentType: in.contentType, ContentLength: in.contentLength,
	}, ok
}

func (h *httpContext) scan(headers [][2]string) inbound {
	in := inbound{contentLength: -1}
	var hasPeerProxied bool
	for _, kv := range headers {
		switch name := kv[0]; {
		case name == ":method":
			in.method = kv[1]
		case name == ":path":
			in.path = kv[1]
		case name == ":authority":
			in.authority = kv[1]
		case name == "accept":
			if in.accept == "" {
				in.accept = kv[1]
			}
		case name == "if-none-match":
			if in.ifNoneMatch == "" {
				in.ifNoneMatch = kv[1]
			}
		case name == "content-type":
			in.contentType = kv[1]
		case name == "content-length":
			if n, err := strconv.ParseInt(kv[1], 10, 64); err == nil && n >= 0 {
				in.contentLength = n
			}
		case name == headerPeerProxied:
			if !hasPeerProxied {
				in.peerProxied = kv[1]
			}
			hasPeerProxied = true
			in.strip = in.strip || !h.cfg.TrustPeerProxiedHeader
		case h.stripped(name):
			in.strip = true
		}
	}
	return in
}

// stripped reports a header the client must never control: identity
// assertions, the backend choice and, unless trusted, the peer-proxied marker
// (upstream honours any client's copy, which lets a client switch off
// re-routing).
func (h *httpContext) stripped(name string) bool {
	return strings.HasPrefix(name, prefixRemoteHeaders) || name == h.cfg.RoutingHeader ||
		(name == headerPeerProxied && !h.cfg.TrustPeerProxiedHeader)
}

// forward lets the request continue to server (noServer: the gateway's
// choice), asserting id and marking it re-routed as asked. Stripping and
// asserting write the whole header map back in one call: removing headers one
// by one costs a scan of the map each, quadratic in what a client sends.
func (h *httpContext) forward(server int, id *certIdentity, rerouted bool) types.Action {
	var cluster string
	switch {
	case server == noServer:
	case id != nil:
		cluster = h.cfg.frontProxyClusters[server]
	default:
		cluster = h.cfg.Index.Servers()[server].Cluster
	}
	var err error
	if h.in.strip || id != nil {
		err = proxywasm.ReplaceHttpRequestHeaders(h.rewritten(id, cluster, rerouted))
	} else {
		if cluster != "" {
			err = proxywasm.ReplaceHttpRequestHeader(h.cfg.RoutingHeader, cluster)
		}
		if err == nil && rerouted {
			err = proxywasm.ReplaceHttpRequestHeader(headerPeerProxied, "true")
		}
	}
	if err != nil {
		// Continuing could send what the client must not control, or the
		// front-proxy credential without the identity it vouches for.
		proxywasm.LogErrorf("skewgate: cannot rewrite request headers: %v", err)
		return h.failClosed()
	}
	if cluster != "" {
		// Envoy re-resolves the route after header changes for ABI 0.2.0
		// modules; asking explicitly keeps routing correct on hosts that stop
		// doing that. Hosts without the function answer NotFound, which is fine.
		_, _ = proxywasm.CallForeignFunction("clear_route_cache", nil)
	}
	return types.ActionContinue
}

// rewritten is the request's header map without what the client must not
// control, in its order (pseudo-headers first, as they came), followed by the
// headers the plugin sets.
func (h *httpContext) rewritten(id *certIdentity, cluster string, rerouted bool) [][2]string {
	out := make([][2]string, 0, len(h.headers)+6)
	for _, kv := range h.headers {
		if !h.stripped(kv[0]) && (!rerouted || kv[0] != headerPeerProxied) {
			out = append(out, kv)
		}
	}
	if id != nil {
		out = appendIdentity(out, id)
	}
	if cluster != "" {
		out = append(out, [2]string{h.cfg.RoutingHeader, cluster})
	}
	if rerouted {
		out = append(out, [2]string{headerPeerProxied, "true"})
	}
	return out
}

// appendIdentity adds the headers asserting id, which kube-apiserver's
// request-header authenticator turns back into what its x509 authenticator
// would have made of the certificate. Kept out of line: inlined in both
// callers it costs the module a copy.
//
//go:noinline
func appendIdentity(out [][2]string, id *certIdentity) [][2]string {
	out = append(out, [2]string{headerRemoteUser, id.User}, [2]string{headerCredentialID, id.CredentialID})
	if id.UID != "" {
		out = append(out, [2]string{headerRemoteUID, id.UID})
	}
	for _, g := range id.Groups {
		out = append(out, [2]string{headerRemoteGroup, g})
	}
	return out
}

// clientIdentity is the identity of the client certificate the gateway
// verified, nil without one, as kube-apiserver's x509 authenticator would
// read the certificate itself; ok is false for a certificate that cannot be
// asserted.
func (h *httpContext) clientIdentity() (id *certIdentity, ok bool) {
	subject, err := proxywasm.GetProperty(propertySubjectPeerCertificate)
	if err != nil || len(subject) == 0 {
		return nil, true
	}
	// Absent, the digest is empty and the certificate refused.
	digest, _ := proxywasm.GetProperty(propertySHA256PeerCertificateDigest)
	parsed, err := identityFromCertificate(string(subject), string(digest))
	if err != nil {
		proxywasm.LogWarnf("skewgate: client certificate refused: %v", err)
		return nil, false
	}
	return &parsed, true
}

// unauthorized answers as kube-apiserver does when no authenticator accepts a
// request: a client certificate the gateway verified but cannot assert must
// not reach an API server, where it would count as anonymous or worse.
func (h *httpContext) unauthorized() types.Action {
	h.plugin.metrics.refusedCertificates.Increment(1)
	return h.respond(401, [][2]string{
		{"content-type", "application/json"},
		{"cache-control", "no-cache, private"},
	}, []byte(unauthorizedStatus))
}

const unauthorizedStatus = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`

// serveDocument answers with a merged document. A HEAD answer carries the
// body too: hosts take Content-Length from it and Envoy drops the body of a
// local reply to HEAD itself.
func (h *httpContext) serveDocument(d *discovery.Decision) types.Action {
	doc := d.Document
	headers := make([][2]string, 2, 4)
	headers[0], headers[1] = [2]string{"etag", doc.ETag}, [2]string{"vary", "Accept"}
	if doc.CacheControl != "" {
		headers = append(headers, [2]string{"cache-control", doc.CacheControl})
	}
	if d.Action == discovery.NotModified {
		h.plugin.metrics.notModified.Increment(1)
		return h.respond(304, headers, nil)
	}
	headers = append(headers, [2]string{"content-type", doc.ContentType})
	h.plugin.metrics.discoveryServed.Increment(1)
	return h.respond(200, headers, doc.Body)
}

func (h *httpContext) unavailable(d *discovery.Decision) types.Action {
	return h.serviceUnavailable(discovery.UnavailableStatus(d, h.retryAfterSeconds()))
}

func (h *httpContext) serviceUnavailable(status []byte) types.Action {
	h.plugin.metrics.unavailable.Increment(1)
	return h.respond(503, h.unavailableHeaders(), status)
}

func (h *httpContext) retryAfterSeconds() int {
	if h.cfg == nil {
		return config.DefaultRetryAfterSeconds
	}
	return h.cfg.RetryAfterSeconds
}

func (h *httpContext) unavailableHeaders() [][2]string {
	return [][2]string{
		{"content-type", "application/json"},
		{"retry-after", strconv.Itoa(h.retryAfterSeconds())},
		{"cache-control", "no-store"},
	}
}

// respond sends a local response. Should the host refuse it, the API server
// answers the request itself, stripped of what the client must not control
// and without any asserted identity.
func (h *httpContext) respond(code uint32, headers [][2]string, body []byte) types.Action {
	if err := proxywasm.SendHttpResponse(code, headers, body, -1); err != nil {
		proxywasm.LogErrorf("skewgate: cannot send local response %d: %v", code, err)
		return h.forward(noServer, nil, false)
	}
	return types.ActionPause
}

// failClosed answers 503 for a request that must not continue as it is.
func (h *httpContext) failClosed() types.Action {
	h.plugin.metrics.unavailable.Increment(1)
	status := discovery.ServiceUnavailableStatus("the gateway could not prepare the request; retry shortly", "", "", h.retryAfterSeconds())
	if err := proxywasm.SendHttpResponse(503, h.unavailableHeaders(), status, -1); err != nil {
		proxywasm.LogErrorf("skewgate: cannot send local response 503: %v", err)
	}
	return types.ActionPause
}
