package discovery

import (
	"fmt"
	"strconv"
	"strings"
)

// Request is what Decide needs to know about an HTTP request.
type Request struct {
	Method string
	// Path is the decoded URL path.
	Path string
	// Query is the raw query; only the hash of an OpenAPI v3 document URL
	// and the first fieldSelector are read from it (a query never changes
	// which resource a request addresses, only which servers can answer it).
	Query string
	// Accept and IfNoneMatch are the header values ("" when absent).
	Accept, IfNoneMatch string
	// PeerProxied is true only when the operator trusts an inbound
	// x-kubernetes-peer-proxied header and the request carries "true": the request
	// was already routed by a peer and must be served where it lands, as upstream
	// does.
	PeerProxied bool
	// ContentType and ContentLength are the body's media type ("" when
	// absent) and declared length (-1 when unknown); a write whose fields
	// matter is routed by its body only when the plugin reads that type and
	// the length is at most MaxInspectedBody.
	ContentType   string
	ContentLength int64
	// Body is the request body once read, nil before. BodyAwaitable says
	// that the caller can wait for the body and decide again with it: a
	// write whose body would change the decision is then answered
	// AwaitBody. Without it, or with the body, the decision is final.
	Body          []byte
	BodyAwaitable bool
}

// Action is what the gateway must do with a request.
type Action uint8

const (
	// Forward leaves the choice of server to the gateway's normal load balancing.
	// In node-local mode it happens only when no server is healthy.
	Forward Action = iota
	// Route sends the request to Decision.Server.
	Route
	// ServeDocument answers with Decision.Document (200).
	ServeDocument
	// NotModified answers 304 with Decision.Document's ETag and no body.
	NotModified
	// Unavailable answers 503: servers that serve the request exist, none of
	// them is healthy, and other servers are; or no server is known to serve
	// it while one is unhealthy, whose documents may be stale (see decide).
	// When no server at all is healthy, requests go to the servers that serve
	// them as if every server were (Envoy's panic threshold): a burst that
	// times out every health probe at once says more about the prober than
	// about the servers.
	Unavailable
	// AwaitBody asks for the request body: the servers differ in the fields
	// of what the write addresses, and only its body says which it sets.
	// Decide again with Request.Body set.
	AwaitBody
)

var actionNames = [...]string{"Forward", "Route", "ServeDocument", "NotModified", "Unavailable", "AwaitBody"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return fmt.Sprintf("Action(%d)", a)
}

// Decision is the outcome of Decide. Its strings are substrings of the request,
// so a Decision costs no allocation.
type Decision struct {
	Action Action
	// Server indexes Index.Servers() when Action is Route.
	Server int
	// Rerouted marks a resource request sent to a capable server because not
	// every server serves it; the gateway adds x-kubernetes-peer-proxied: true so
	// the target serves it locally, as an upstream peer would.
	Rerouted bool
	// NoPeer marks an aggregated discovery request that asked for one server's
	// own view (profile=nopeer) and is therefore forwarded.
	NoPeer bool
	// Document is set for ServeDocument and NotModified.
	Document *Document
	// Body tells whether the decision depended on the body, and whether it
	// was read.
	Body BodyUse
	// Group, Version and Resource name what was looked up (Resource is empty for
	// discovery documents); used for the 503 body and for metrics.
	Group, Version, Resource string
}

// Decide classifies a request against the index. pick chooses among several
// capable healthy servers (pick modulo their number): the plugin passes a
// running counter, which spreads re-routed requests uniformly over candidates.
//
// With a preferred server (node-local mode) every request goes to it while it
// is healthy and serves the request; only what it cannot serve is re-routed to
// a capable peer, and while it is down any healthy server takes its place.
func (ix *Index) Decide(req *Request, pick uint64) Decision {
	d, _ := ix.decide(req, ix.choiceWithout(0, pick))
	return d
}

// Capable is the set of servers Decide may send req to when the servers in
// excluded are left out, as a retry leaves out those it tried: the one it
// routes to, the set it picks from, or, when it forwards, every routable
// server (the gateway's balancing picks from Routable); empty when the
// request is answered without a server. Decide and Capable are one
// decision, so a retry goes only where the decision could have sent the
// request had the tried servers been down.
func (ix *Index) Capable(req *Request, excluded ServerSet) ServerSet {
	_, from := ix.decide(req, ix.choiceWithout(excluded, 0))
	return from
}

// Routable is where requests may go: the healthy servers, or every server
// while none is healthy (Envoy's panic threshold): a real server's answer
// beats a certain 503, and a burst that times out every health probe at
// once says more about the prober than about the servers. Every choice of a
// server, here and in the hosts, picks from this set.
func (ix *Index) Routable() ServerSet { return ix.routable }

// choice is what a decision picks from: the routable servers (less any a
// retry excludes), those of them that are not draining (all of them when
// every one is), the preferred server (-1 for none, or when excluded) and
// the pick counter.
type choice struct {
	routable, active ServerSet
	preferred        int
	pick             uint64
}

// choiceWithout is the choice of a decision that leaves out the servers in
// excluded.
func (ix *Index) choiceWithout(excluded ServerSet, pick uint64) choice {
	c := choice{routable: ix.routable &^ excluded, preferred: ix.preferred, pick: pick}
	c.active = c.routable &^ ix.draining
	if c.active == 0 {
		c.active = c.routable
	}
	if c.preferred >= 0 && excluded.Has(c.preferred) {
		c.preferred = -1
	}
	return c
}

// prefer narrows set to its servers that are not draining, when it has any:
// a draining server takes only what no other routable server can.
func (c *choice) prefer(set ServerSet) ServerSet {
	if active := set & c.active; active != 0 {
		return active
	}
	return set
}

// decide is Decide, also returning the set the decision picked from (see
// Capable).
func (ix *Index) decide(req *Request, c choice) (Decision, ServerSet) {
	if isDiscoveryRoot(req) {
		d := ix.decideDiscoveryRoot(req)
		if d.Action != Forward {
			return d, 0
		}
		a, from := ix.anyServer(c)
		a.NoPeer = d.NoPeer
		return a, from
	}
	if req.PeerProxied {
		return ix.anyServer(c)
	}
	if d, from, ok := ix.decideOpenAPI(req, c); ok {
		return d, from
	}
	target, capable, unknown := ix.lookup(req)
	if target.Action == AwaitBody {
		return target, 0
	}
	if unknown && ix.routable != ix.all {
		// Nobody serves it as far as the snapshot knows, but an unhealthy
		// server's documents are those it had before it went down: back from
		// a restart as a newer version, it may be the one server that does.
		// Until it is probed healthy again, with what it serves now, the
		// others' 404 or 400 would be a lie; 503 with Retry-After is not.
		// While none is healthy every server is routable (Routable), and
		// they answer.
		target.Action = Unavailable
		return target, 0
	}
	d, from := ix.route(capable, c)
	// Only resource requests carry the peer-proxied mark; discovery documents
	// are never proxied upstream.
	d.Rerouted = d.Rerouted && target.Resource != ""
	d.Group, d.Version, d.Resource, d.Body = target.Group, target.Version, target.Resource, target.Body
	return d, from
}

func isDiscoveryRoot(req *Request) bool {
	return (req.Method == "GET" || req.Method == "HEAD") && (req.Path == "/apis" || req.Path == "/api")
}

// lookup finds what a request addresses and who serves it. A request the
// index has no opinion on (malformed, not tied to a group) gets an empty
// set; one it names a group version or resource of that no server is known
// to serve as asked (an unknown resource, a field selector none accepts) is
// unknown.
func (ix *Index) lookup(req *Request) (target Decision, capable ServerSet, unknown bool) {
	info, ok := parsePath(req.Method, req.Path)
	switch {
	case !ok:
		// The real server answers the same malformed request with its own error.
		return target, 0, false
	case info.IsResourceRequest:
		target.Group, target.Version, target.Resource = info.APIGroup, info.APIVersion, info.Resource
		gvr := groupVersionResource{info.APIGroup, info.APIVersion, info.Resource}
		capable = ix.gvr[gvr]
		if f := ix.fields[gvr]; f != nil && capable != 0 {
			var await bool
			capable, unknown, target.Body, await = ix.narrowForFields(f, req, &info, capable)
			if await {
				target.Action = AwaitBody
			}
		}
		return target, capable, unknown || capable == 0
	case req.Method != "GET" && req.Method != "HEAD":
		return target, 0, false
	}
	target, capable = ix.lookupLegacyDocument(req.Path)
	return target, capable, capable == 0 && target.Group != ""
}

func (ix *Index) decideDiscoveryRoot(req *Request) Decision {
	neg := NegotiateDiscovery(req.Accept)
	aggregated := neg.Format == FormatAggregatedJSON ||
		(neg.Format == FormatAggregatedOther && neg.AcceptsAggregatedJSON)
	if !aggregated {
		return Decision{Action: Forward}
	}
	if neg.NoPeer {
		return Decision{Action: Forward, NoPeer: true}
	}
	doc := &ix.apis
	if req.Path == "/api" {
		doc = &ix.api
	}
	if req.IfNoneMatch == doc.ETag {
		return Decision{Action: NotModified, Document: doc}
	}
	return Decision{Action: ServeDocument, Document: doc}
}

// lookupLegacyDocument finds the servers with the per-group and
// per-group-version discovery documents, which upstream never proxies (it
// answers 404 for a group version only a peer serves).
func (ix *Index) lookupLegacyDocument(path string) (target Decision, capable ServerSet) {
	const apisPrefix, openAPIPrefix = "/apis/", "/openapi/v3/apis/"
	var rest string
	var openAPI bool
	switch {
	case strings.HasPrefix(path, apisPrefix):
		rest = path[len(apisPrefix):]
	case strings.HasPrefix(path, openAPIPrefix):
		rest, openAPI = path[len(openAPIPrefix):], true
	default:
		return target, 0
	}
	rest = strings.TrimSuffix(rest, "/")
	group, version, hasVersion := strings.Cut(rest, "/")
	if group == "" || strings.Contains(version, "/") || (hasVersion && version == "") {
		return target, 0
	}
	target.Group, target.Version = group, version
	switch {
	case hasVersion:
		return target, ix.gv[groupVersion{group, version}]
	case openAPI:
		// Any server documents a group's discovery endpoint alike; the
		// servers' OpenAPI indexes, when the snapshot has them, route it first.
		return Decision{}, 0
	default:
		return target, ix.group[group]
	}
}

// route turns the set of servers able to answer into an action and the set
// it picked from. A request is re-routed when it goes where it does because
// not every routable server serves it.
func (ix *Index) route(capable ServerSet, c choice) (Decision, ServerSet) {
	if capable == 0 {
		// Nobody serves it: a real server gives the honest 404.
		return ix.anyServer(c)
	}
	routable := capable & c.routable
	candidates := c.prefer(routable)
	switch {
	case candidates == 0:
		return Decision{Action: Unavailable}, 0
	case c.preferred >= 0 && candidates.Has(c.preferred):
		return Decision{Action: Route, Server: c.preferred}, 1 << uint(c.preferred)
	case routable == c.routable:
		return ix.anyServer(c)
	}
	return Decision{Action: Route, Server: candidates.Pick(c.pick), Rerouted: true}, candidates
}

// anyServer is where a request that every server answers alike goes: to the
// gateway's load balancing (over every routable server), or in node-local
// mode to the preferred server, to a healthy peer while it is down, and to
// the load balancing when none is healthy. While a routable server drains,
// and another does not, the request is routed to one that does not, since
// the gateway's load balancing knows nothing of draining.
func (ix *Index) anyServer(c choice) (Decision, ServerSet) {
	switch {
	case (c.preferred < 0 || ix.healthy == 0) && c.active == c.routable:
		return Decision{Action: Forward}, c.routable
	case c.preferred >= 0 && c.active.Has(c.preferred):
		return Decision{Action: Route, Server: c.preferred}, 1 << uint(c.preferred)
	case c.active == 0:
		return Decision{Action: Unavailable}, 0
	}
	return Decision{Action: Route, Server: c.active.Pick(c.pick)}, c.active
}

// UnavailableStatus is the body of the 503 answer: a Kubernetes Status object
// (reason ServiceUnavailable) that clients decode like any API error, with the
// same retry hint the Retry-After header carries.
func UnavailableStatus(d *Decision, retryAfterSeconds int) []byte {
	what := d.Group + "/" + d.Version
	if d.Group == "" {
		what = d.Version
	}
	if d.Resource != "" {
		what = d.Resource + " in " + what
	}
	return ServiceUnavailableStatus("no healthy API server serves "+what+"; retry when one is back",
		d.Group, d.Resource, retryAfterSeconds)
}

// ServiceUnavailableStatus is a metav1.Status with reason ServiceUnavailable
// and code 503, fields in metav1.Status order; group and kind go into details
// when not empty.
func ServiceUnavailableStatus(message, group, kind string, retryAfterSeconds int) []byte {
	b := []byte(`{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":`)
	b = appendJSONString(b, message)
	b = append(b, `,"reason":"ServiceUnavailable","details":{`...)
	if group != "" {
		b = append(b, `"group":`...)
		b = appendJSONString(b, group)
		b = append(b, ',')
	}
	if kind != "" {
		b = append(b, `"kind":`...)
		b = appendJSONString(b, kind)
		b = append(b, ',')
	}
	b = append(b, `"retryAfterSeconds":`...)
	b = strconv.AppendInt(b, int64(retryAfterSeconds), 10)
	return append(b, `},"code":503}`...)
}
