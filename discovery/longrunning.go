package discovery

import (
	"slices"
	"strings"
)

// Long-running requests are those kube-apiserver exempts from its
// --request-timeout: its BasicLongRunningRequestCheck as the control plane
// configures it. Both gateways bound every other request by the same
// timeout; skewgate serve classifies with Target.Class, and the Envoy
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

// Target is a request target parsed once, as kube-apiserver derives its
// RequestInfo: what a host classifies, records and retries a request by.
type Target struct {
	// Path is the decoded path and RawQuery the query as sent; Valid is
	// false for a malformed percent-escape (SplitRequestTarget), which the
	// API server answers at once.
	Path, RawQuery string
	Valid          bool
	// Info is what ParseRequestInfo made of it; InfoErr its error (a
	// verb-only path), whose partial Info still classifies the request as
	// upstream's filters would.
	Info    RequestInfo
	InfoErr error
}

// ParseTarget parses a request's method and origin-form target.
func ParseTarget(method, target string) Target {
	path, rawQuery, ok := SplitRequestTarget(target)
	if !ok {
		return Target{}
	}
	info, err := ParseRequestInfo(method, path, rawQuery)
	return Target{Path: path, RawQuery: rawQuery, Valid: true, Info: info, InfoErr: err}
}

// Class sorts the request as kube-apiserver sorts the RequestInfo it
// derives; upgrade is a protocol upgrade.
func (t *Target) Class(method string, upgrade bool) RequestClass {
	if !t.Valid {
		return RequestClass{LongRunning: upgrade, Mutating: method != "GET"}
	}
	c := RequestClass{LongRunning: upgrade}
	switch t.Info.Verb {
	case "get", "list", "watch":
	default:
		c.Mutating = true
	}
	switch {
	case slices.Contains(longRunningVerbs[:], t.Info.Verb):
		c.LongRunning = true
	case t.Info.IsResourceRequest:
		c.LongRunning = c.LongRunning || slices.Contains(longRunningSubresources[:], t.Info.Subresource)
	default:
		c.LongRunning = c.LongRunning || strings.HasPrefix(t.Info.Path, longRunningPathPrefix)
	}
	return c
}

// WatchParameter is the query parameter that makes a list a watch (verb
// "watch") unless its value is "0" or "false" in any case.
const WatchParameter = "watch"

// IsPathVerb reports whether word, as the path segment after the group
// version (/api/v1/watch/pods), is the request's verb.
func IsPathVerb(word string) bool { return word == "proxy" || word == "watch" }
