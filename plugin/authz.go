package plugin

import (
	"encoding/binary"
	"strconv"
	"strings"
	"time"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"

	"github.com/skewgate/skewgate/discovery"
)

// The merged /apis and /api documents are served only to clients the API
// servers would answer: the plugin asks one of them the same question with
// the client's credentials (GET of the same path) and replaces a successful
// answer with the merged document. Answers are remembered per credential for
// a few seconds, so a client polling discovery costs one round-trip per
// period, not one per request.

const (
	// authorizationTimeoutMillis bounds the question; a server that does not
	// answer within it yields 503 like one that is down.
	authorizationTimeoutMillis = 5000
	// authorizationSlots bounds the cache per VM. A credential's answer lives
	// in the slot its key selects, replacing whatever was there: keys are
	// hashes, so credentials spread evenly, and a client that sends many
	// credentials evicts others' answers only as fast as it pays for new
	// questions.
	authorizationSlots = 4096
	// maxRememberedDenialBody bounds what a remembered 401/403 keeps; a larger
	// body is passed on but not remembered.
	maxRememberedDenialBody = 4 << 10
	headerAuthorization     = "authorization"
	prefixImpersonate       = "impersonate-"
)

// credentialKey identifies what an API server authorizes a discovery request
// by: the path, whether it arrives with the front-proxy credential, and the
// credential headers exactly as they are sent. It is a hash so that no token
// stays in memory beyond its request.
type credentialKey [32]byte

// authorization is an API server's answer for one credential until expires
// (Unix nanoseconds): allowed, or denied as denial says.
type authorization struct {
	key     credentialKey
	expires int64
	denial  *denial
}

// denial is a 401 or 403 answer, passed on to the client as it came.
type denial struct {
	status      uint32
	contentType string
	body        []byte
}

// authorizationCache is a direct-mapped table of answers, allocated on first
// use.
type authorizationCache struct {
	slots []authorization
}

func (c *authorizationCache) get(key credentialKey, now int64) (*authorization, bool) {
	if c.slots == nil {
		return nil, false
	}
	a := &c.slots[slotOf(key)]
	return a, a.key == key && now < a.expires
}

func (c *authorizationCache) put(a authorization) {
	if c.slots == nil {
		c.slots = make([]authorization, authorizationSlots)
	}
	c.slots[slotOf(a.key)] = a
}

func slotOf(key credentialKey) uint32 {
	return binary.LittleEndian.Uint32(key[:]) % authorizationSlots
}

// pendingDiscovery is a merged discovery request waiting for its answer.
type pendingDiscovery struct {
	decision discovery.Decision
	key      credentialKey
}

// authorizeDiscovery serves the merged document d to a client the API servers
// let read it, from the cache or after asking one of them.
func (h *httpContext) authorizeDiscovery(d *discovery.Decision, id *certIdentity) types.Action {
	credentials := h.credentials(id)
	key := h.credentialKey(id != nil, credentials)
	if h.cfg.DiscoveryAuthorizationCacheSeconds > 0 {
		if a, ok := h.plugin.authorizations.get(key, time.Now().UnixNano()); ok {
			h.plugin.metrics.authorizationCacheHits.Increment(1)
			return h.answerDiscovery(d, a)
		}
	}
	ix := h.cfg.Index
	server := ix.Preferred()
	if server < 0 || !ix.Healthy().Has(server) {
		server = h.plugin.pick(ix)
	}
	cluster := ix.Servers()[server].Cluster
	if id != nil {
		cluster = h.cfg.frontProxyClusters[server]
	}
	authority := h.in.authority
	if authority == "" {
		// Envoy refuses a call without :authority.
		authority = ix.Servers()[server].Cluster
	}
	headers := append([][2]string{
		{":method", "GET"}, {":path", h.in.path}, {":authority", authority}, {"accept", "application/json"},
	}, credentials...)
	h.pending = pendingDiscovery{decision: *d, key: key}
	if _, err := proxywasm.DispatchHttpCall(cluster, headers, nil, nil, authorizationTimeoutMillis, h.onAuthorization); err != nil {
		// The host has no upstream of that name: in Istio and Envoy Gateway
		// the snapshot's clusters are route match values, not Envoy clusters.
		// The server then answers the request itself, with its own view of
		// discovery but exactly its own authorization, instead of a 503.
		proxywasm.LogWarnf("skewgate: cannot ask %s whether the client may read discovery (%v); letting it answer the request itself", cluster, err)
		h.plugin.metrics.authorizationFailures.Increment(1)
		return h.forward(server, id, false)
	}
	h.plugin.metrics.authorizationsChecked.Increment(1)
	return types.ActionPause
}

// credentials are the request headers an API server authenticates and
// authorizes the client by, as they would reach it: the bearer token or
// basic credentials, impersonation, and the identity the plugin asserts.
func (h *httpContext) credentials(id *certIdentity) [][2]string {
	var out [][2]string
	for _, kv := range h.headers {
		if kv[0] == headerAuthorization || strings.HasPrefix(kv[0], prefixImpersonate) {
			out = append(out, kv)
		}
	}
	if id != nil {
		out = appendIdentity(out, id)
	}
	return out
}

// credentialKey hashes every input of the answer, each length-prefixed so that
// no two different inputs hash the same bytes.
func (h *httpContext) credentialKey(frontProxy bool, credentials [][2]string) credentialKey {
	digest := discovery.NewSHA512()
	var length [4]byte
	field := func(f string) {
		binary.BigEndian.PutUint32(length[:], uint32(len(f)))
		digest.Write(length[:])
		digest.Write([]byte(f))
	}
	path, _, _ := discovery.SplitRequestTarget(h.in.path)
	field(path)
	if frontProxy {
		field(discovery.FrontProxyClusterSuffix)
	} else {
		field("")
	}
	for _, kv := range credentials {
		field(kv[0])
		field(kv[1])
	}
	sum := digest.Sum()
	return credentialKey(sum[:32])
}

// onAuthorization takes the API server's answer: success serves the merged
// document, 401 and 403 are passed on as they are, both are remembered;
// anything else, or no answer, is 503 and asked again next time.
func (h *httpContext) onAuthorization(numHeaders, bodySize, _ int) {
	var status int
	var contentType string
	if numHeaders > 0 {
		headers, err := proxywasm.GetHttpCallResponseHeaders()
		if err != nil {
			proxywasm.LogErrorf("skewgate: cannot read the discovery authorization response: %v", err)
		}
		for _, kv := range headers {
			switch {
			case kv[0] == ":status":
				status, _ = strconv.Atoi(kv[1])
			case kv[0] == "content-type" && contentType == "":
				contentType = kv[1]
			}
		}
	}
	a := authorization{key: h.pending.key}
	switch {
	case status >= 200 && status < 300:
	case status == 401 || status == 403:
		a.denial = &denial{status: uint32(status), contentType: contentType}
		if bodySize > 0 {
			body, err := proxywasm.GetHttpCallResponseBody(0, bodySize)
			if err != nil {
				proxywasm.LogErrorf("skewgate: cannot read the discovery authorization response body: %v", err)
			}
			a.denial.body = body
		}
	default:
		proxywasm.LogWarnf("skewgate: discovery authorization got status %d (0: no response); answering 503", status)
		h.resume(h.authorizationFailed())
		return
	}
	if ttl := h.cfg.DiscoveryAuthorizationCacheSeconds; ttl > 0 && (a.denial == nil || len(a.denial.body) <= maxRememberedDenialBody) {
		a.expires = time.Now().UnixNano() + int64(ttl)*int64(time.Second)
		h.plugin.authorizations.put(a)
	}
	h.resume(h.answerDiscovery(&h.pending.decision, &a))
}

// answerDiscovery serves d if a allows it, else passes the denial on.
func (h *httpContext) answerDiscovery(d *discovery.Decision, a *authorization) types.Action {
	if a.denial == nil {
		return h.serveDocument(d)
	}
	h.plugin.metrics.authorizationsDenied.Increment(1)
	headers := [][2]string{{"cache-control", "no-cache, private"}}
	if a.denial.contentType != "" {
		headers = append(headers, [2]string{"content-type", a.denial.contentType})
	}
	return h.respond(a.denial.status, headers, a.denial.body)
}

func (h *httpContext) authorizationFailed() types.Action {
	h.plugin.metrics.authorizationFailures.Increment(1)
	return h.serviceUnavailable(discovery.ServiceUnavailableStatus(
		"no API server answered whether this client may read discovery; retry shortly", "", "", h.retryAfterSeconds()))
}

// resume lets the paused request continue when what the plugin did after the
// call asks for that (a local response keeps it paused).
func (h *httpContext) resume(a types.Action) {
	if a == types.ActionContinue {
		if err := proxywasm.ResumeHttpRequest(); err != nil {
			proxywasm.LogErrorf("skewgate: cannot resume the request: %v", err)
		}
	}
}
