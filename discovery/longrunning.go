package discovery

import (
	"slices"
	"strings"
)

// Long-running requests are those kube-apiserver exempts from its
// --request-timeout: its BasicLongRunningRequestCheck as the control plane
// configures it. Both gateways bound every other request by the same
// timeout; skewgate serve classifies with ClassifyRequest, and the Envoy
// routes are rendered from LongRunning. The plugin does not need it.
var (
	longRunningVerbs        = [...]string{"proxy", "watch"}
	longRunningSubresources = [...]string{"attach", "exec", "log", "portforward", "proxy"}
)

// longRunningPathPrefix starts the non-resource paths that are long-running
// (Go's profiles, which stream for as long as asked).
const longRunningPathPrefix = "/debug/pprof/"

// LongRunningRequests is the classification as lists, for a host that
// writes it in its own terms.
type LongRunningRequests struct {
	// Verbs are RequestInfo verbs: each is a word of the path before the
	// resource (IsPathVerb), and "watch" is also what a list becomes with its
	// watch query parameter (WatchParameter).
	Verbs []string
	// Subresources are RequestInfo subresources.
	Subresources []string
	// PathPrefix starts the non-resource paths that are long-running.
	PathPrefix string
}

// LongRunning is the classification IsLongRunning applies.
func LongRunning() LongRunningRequests {
	return LongRunningRequests{
		Verbs:        slices.Clone(longRunningVerbs[:]),
		Subresources: slices.Clone(longRunningSubresources[:]),
		PathPrefix:   longRunningPathPrefix,
	}
}

// RequestClass is how kube-apiserver sorts a request for its
// --request-timeout and its max-in-flight filter.
type RequestClass struct {
	// LongRunning requests are exempt from both: BasicLongRunningRequestCheck
	// as the control plane configures it, or a protocol upgrade (exec, attach
	// and port-forward are, and an upgraded connection is a session that no
	// response deadline can bound, whatever its path).
	LongRunning bool
	// Mutating requests count against --max-mutating-requests-inflight: every
	// verb but get, list and watch.
	Mutating bool
}

// ClassifyRequest sorts a request from its method and request target, as
// kube-apiserver sorts the RequestInfo it derives from them.
func ClassifyRequest(method, target string, upgrade bool) RequestClass {
	path, rawQuery, ok := SplitRequestTarget(target)
	if !ok {
		// The API server answers a malformed target at once.
		return RequestClass{LongRunning: upgrade, Mutating: method != "GET"}
	}
	// The error case (a verb-only path) is answered at once upstream; what
	// was parsed still classifies it, as upstream's filters would.
	info, _ := ParseRequestInfo(method, path, rawQuery)
	c := RequestClass{LongRunning: upgrade}
	switch info.Verb {
	case "get", "list", "watch":
	default:
		c.Mutating = true
	}
	switch {
	case slices.Contains(longRunningVerbs[:], info.Verb):
		c.LongRunning = true
	case info.IsResourceRequest:
		c.LongRunning = c.LongRunning || slices.Contains(longRunningSubresources[:], info.Subresource)
	default:
		c.LongRunning = c.LongRunning || strings.HasPrefix(info.Path, longRunningPathPrefix)
	}
	return c
}

// WatchParameter is the query parameter that makes a list a watch (verb
// "watch") unless its value is "0" or "false" in any case.
const WatchParameter = "watch"

// IsPathVerb reports whether word, as the path segment after the group
// version (/api/v1/watch/pods), is the request's verb.
func IsPathVerb(word string) bool { return word == "proxy" || word == "watch" }
