package discovery

import (
	"fmt"
	"strconv"
	"strings"
)

// Request is what Decide needs to know about an HTTP request.
type Request struct {
	Method string
	// Path is the decoded URL path. The query is not needed: it never changes
	// which resource a request addresses.
	Path string
	// Accept and IfNoneMatch are the header values ("" when absent).
	Accept, IfNoneMatch string
	// PeerProxied is true only when the operator trusts an inbound
	// x-kubernetes-peer-proxied header and the request carries "true": the request
	// was already routed by a peer and must be served where it lands, as upstream
	// does.
	PeerProxied bool
}

// Action is what the gateway must do with a request.
type Action uint8

const (
	// Forward leaves the choice of server to the gateway's normal load balancing.
	Forward Action = iota
	// Route sends the request to Decision.Server.
	Route
	// ServeDocument answers with Decision.Document (200).
	ServeDocument
	// NotModified answers 304 with Decision.Document's ETag and no body.
	NotModified
	// Unavailable answers 503: servers that serve the request exist, but none is
	// healthy.
	Unavailable
)

var actionNames = [...]string{"Forward", "Route", "ServeDocument", "NotModified", "Unavailable"}

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
	// Group, Version and Resource name what was looked up (Resource is empty for
	// discovery documents); used for the 503 body and for metrics.
	Group, Version, Resource string
}

// Decide classifies a request against the index. pick chooses among several
// capable healthy servers (pick modulo their number): the plugin passes a
// running counter, which spreads re-routed requests uniformly over candidates.
func (ix *Index) Decide(req *Request, pick uint64) Decision {
	isRead := req.Method == "GET" || req.Method == "HEAD"
	if isRead && (req.Path == "/apis" || req.Path == "/api") {
		return ix.decideDiscoveryRoot(req)
	}
	if req.PeerProxied {
		return Decision{Action: Forward}
	}
	info, ok := parsePath(req.Method, req.Path)
	if !ok {
		// The real server answers the same malformed request with its own error.
		return Decision{Action: Forward}
	}
	if info.IsResourceRequest {
		d := ix.route(ix.gvr[groupVersionResource{info.APIGroup, info.APIVersion, info.Resource}], pick)
		d.Rerouted = d.Action == Route
		d.Group, d.Version, d.Resource = info.APIGroup, info.APIVersion, info.Resource
		return d
	}
	if !isRead {
		return Decision{Action: Forward}
	}
	return ix.decideLegacyDocument(req.Path, pick)
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

// decideLegacyDocument routes the per-group and per-group-version discovery
// documents, which upstream never proxies (it answers 404 for a group version
// only a peer serves), to a server that has them.
func (ix *Index) decideLegacyDocument(path string, pick uint64) Decision {
	const apisPrefix, openAPIPrefix = "/apis/", "/openapi/v3/apis/"
	var rest string
	var openAPI bool
	switch {
	case strings.HasPrefix(path, apisPrefix):
		rest = path[len(apisPrefix):]
	case strings.HasPrefix(path, openAPIPrefix):
		rest, openAPI = path[len(openAPIPrefix):], true
	default:
		return Decision{Action: Forward}
	}
	rest = strings.TrimSuffix(rest, "/")
	group, version, hasVersion := strings.Cut(rest, "/")
	if group == "" || strings.Contains(version, "/") || (hasVersion && version == "") {
		return Decision{Action: Forward}
	}
	var d Decision
	switch {
	case hasVersion:
		d = ix.route(ix.gv[groupVersion{group, version}], pick)
	case openAPI:
		// /openapi/v3/apis/<group> is not a document.
		return Decision{Action: Forward}
	default:
		d = ix.route(ix.group[group], pick)
	}
	d.Group, d.Version = group, version
	return d
}

// route turns the set of servers able to answer into an action.
func (ix *Index) route(capable ServerSet, pick uint64) Decision {
	if capable == 0 {
		// Nobody serves it: a real server gives the honest 404.
		return Decision{Action: Forward}
	}
	candidates := capable & ix.healthy
	if candidates == 0 {
		return Decision{Action: Unavailable}
	}
	if candidates == ix.healthy {
		return Decision{Action: Forward}
	}
	return Decision{Action: Route, Server: candidates.nth(int(pick % uint64(candidates.Len())))}
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
