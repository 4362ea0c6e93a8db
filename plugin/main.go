// Command plugin is skewgate's proxy-wasm HTTP filter. Built with upstream Go as
// a wasip1 reactor (GOOS=wasip1 GOARCH=wasm -buildmode=c-shared), it holds a
// discovery snapshot and decides, per request, whether to leave routing to the
// gateway, steer to a server that serves the resource, answer the merged
// discovery document itself, or answer 503.
//
// It never blocks, sleeps, starts goroutines, arms runtime timers or touches
// files: in Envoy's Wasm host a Go runtime timer kills the VM at the next GC.
package main

import (
	"strconv"
	"strings"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/skewgate/skewgate/discovery"
)

const (
	headerPeerProxied   = "x-kubernetes-peer-proxied"
	headerRemoteUser    = "x-remote-user"
	headerRemoteGroup   = "x-remote-group"
	prefixRemoteHeaders = "x-remote-"
	discoveryJSONType   = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
)

// propertySubjectPeerCertificate is the Envoy attribute holding the verified
// client certificate's subject.
var propertySubjectPeerCertificate = []string{"connection", "subject_peer_certificate"}

func main() {}

func init() {
	proxywasm.SetVMContext(&vmContext{})
}

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
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	p.metrics = defineMetrics()
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		p.metrics.rejectedConfigurations.Increment(1)
		proxywasm.LogCriticalf("skewgate: configuration rejected: cannot read it: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg, err := ParseConfig(raw)
	if err != nil {
		p.metrics.rejectedConfigurations.Increment(1)
		proxywasm.LogCriticalf("skewgate: configuration rejected: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.cfg = cfg
	p.metrics.setGeneration(cfg.Index.Snapshot().Generation)
	proxywasm.LogInfof("skewgate: configured snapshot generation %d with %d servers",
		cfg.Index.Snapshot().Generation, len(cfg.Index.Servers()))
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p, cfg: p.cfg}
}

// httpContext keeps the configuration it started with, so a request in flight
// is decided against one snapshot even if a new one arrives meanwhile.
type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	cfg    *Config
}

// inbound is what the plugin reads from the request headers in one pass.
type inbound struct {
	method, path, accept, ifNoneMatch string
	peerProxied                       string
	hasPeerProxied, hasRoutingHeader  bool
	remoteHeaders                     []string
}

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
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
	in := h.scan(headers)
	h.stripInbound(&in)
	if h.cfg.Identity == IdentityFrontProxy {
		h.assertClientCertificate()
	}

	req, ok := h.request(&in)
	if !ok {
		// The API server rejects the malformed path itself.
		return types.ActionContinue
	}
	d := h.cfg.Index.Decide(&req, h.plugin.picks)
	if d.NoPeer {
		h.plugin.metrics.noPeerForwarded.Increment(1)
	}
	switch d.Action {
	case discovery.Route:
		h.plugin.picks++
		return h.route(&d)
	case discovery.ServeDocument, discovery.NotModified:
		return h.serveDocument(&d, in.method == "HEAD")
	case discovery.Unavailable:
		return h.unavailable(&d)
	}
	return types.ActionContinue
}

// request is what Decide needs; ok is false for a malformed request target.
func (h *httpContext) request(in *inbound) (req discovery.Request, ok bool) {
	path, _, ok := discovery.SplitRequestTarget(in.path)
	return discovery.Request{
		Method: in.method, Path: path,
		Accept: in.accept, IfNoneMatch: in.ifNoneMatch,
		PeerProxied: h.cfg.TrustPeerProxiedHeader && in.peerProxied == "true",
	}, ok
}

func (h *httpContext) scan(headers [][2]string) inbound {
	var in inbound
	for _, kv := range headers {
		switch name := kv[0]; {
		case name == ":method":
			in.method = kv[1]
		case name == ":path":
			in.path = kv[1]
		case name == "accept":
			if in.accept == "" {
				in.accept = kv[1]
			}
		case name == "if-none-match":
			if in.ifNoneMatch == "" {
				in.ifNoneMatch = kv[1]
			}
		case name == headerPeerProxied:
			if !in.hasPeerProxied {
				in.peerProxied = kv[1]
			}
			in.hasPeerProxied = true
		case name == h.cfg.RoutingHeader:
			in.hasRoutingHeader = true
		case strings.HasPrefix(name, prefixRemoteHeaders):
			in.remoteHeaders = append(in.remoteHeaders, name)
		}
	}
	return in
}

// stripInbound removes what a client must never control: identity assertions,
// the backend choice and, unless trusted, the peer-proxied marker (upstream
// honours any client's copy, which lets a client switch off re-routing).
func (h *httpContext) stripInbound(in *inbound) {
	for _, name := range in.remoteHeaders {
		h.remove(name)
	}
	if in.hasRoutingHeader {
		h.remove(h.cfg.RoutingHeader)
	}
	if in.hasPeerProxied && !h.cfg.TrustPeerProxiedHeader {
		h.remove(headerPeerProxied)
	}
}

func (h *httpContext) remove(name string) {
	if err := proxywasm.RemoveHttpRequestHeader(name); err != nil {
		proxywasm.LogErrorf("skewgate: cannot remove request header %s: %v", name, err)
	}
}

// assertClientCertificate turns a client certificate the gateway verified into
// front-proxy identity headers, as kube-apiserver's x509 authenticator would
// read the certificate itself.
func (h *httpContext) assertClientCertificate() {
	subject, err := proxywasm.GetProperty(propertySubjectPeerCertificate)
	if err != nil || len(subject) == 0 {
		return
	}
	id, err := identityFromSubject(string(subject))
	if err != nil {
		proxywasm.LogWarnf("skewgate: client certificate not asserted: %v", err)
		return
	}
	if err := proxywasm.ReplaceHttpRequestHeader(headerRemoteUser, id.User); err != nil {
		proxywasm.LogErrorf("skewgate: cannot set %s: %v", headerRemoteUser, err)
		return
	}
	for _, g := range id.Groups {
		if err := proxywasm.AddHttpRequestHeader(headerRemoteGroup, g); err != nil {
			proxywasm.LogErrorf("skewgate: cannot add %s: %v", headerRemoteGroup, err)
		}
	}
}

func (h *httpContext) route(d *discovery.Decision) types.Action {
	server := &h.cfg.Index.Servers()[d.Server]
	if err := proxywasm.ReplaceHttpRequestHeader(h.cfg.RoutingHeader, server.Cluster); err != nil {
		proxywasm.LogErrorf("skewgate: cannot set %s: %v", h.cfg.RoutingHeader, err)
		return h.unavailable(d)
	}
	if d.Rerouted {
		if err := proxywasm.ReplaceHttpRequestHeader(headerPeerProxied, "true"); err != nil {
			proxywasm.LogErrorf("skewgate: cannot set %s: %v", headerPeerProxied, err)
		}
		h.plugin.metrics.rerouted.Increment(1)
	}
	// Envoy re-resolves the route after header changes for ABI 0.2.0 modules;
	// asking explicitly keeps routing correct on hosts that stop doing that.
	// Hosts without the function answer NotFound, which is fine.
	_, _ = proxywasm.CallForeignFunction("clear_route_cache", nil)
	return types.ActionContinue
}

func (h *httpContext) serveDocument(d *discovery.Decision, head bool) types.Action {
	doc := d.Document
	headers := [][2]string{
		{"etag", doc.ETag},
		{"vary", "Accept"},
		{"cache-control", "public"},
	}
	if d.Action == discovery.NotModified {
		h.plugin.metrics.notModified.Increment(1)
		return h.respond(304, headers, nil)
	}
	headers = append(headers, [2]string{"content-type", discoveryJSONType})
	h.plugin.metrics.discoveryServed.Increment(1)
	if head {
		return h.respond(200, headers, nil)
	}
	return h.respond(200, headers, doc.Body)
}

func (h *httpContext) unavailable(d *discovery.Decision) types.Action {
	h.plugin.metrics.unavailable.Increment(1)
	seconds := defaultRetryAfterSeconds
	if h.cfg != nil {
		seconds = h.cfg.RetryAfterSeconds
	}
	return h.respond(503, [][2]string{
		{"content-type", "application/json"},
		{"retry-after", strconv.Itoa(seconds)},
		{"cache-control", "no-store"},
	}, discovery.UnavailableStatus(d, seconds))
}

func (h *httpContext) respond(code uint32, headers [][2]string, body []byte) types.Action {
	if err := proxywasm.SendHttpResponse(code, headers, body, -1); err != nil {
		proxywasm.LogErrorf("skewgate: cannot send local response %d: %v", code, err)
		return types.ActionContinue
	}
	return types.ActionPause
}
