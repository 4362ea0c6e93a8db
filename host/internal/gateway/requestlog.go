package gateway

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/fields"

	"github.com/skewgate/skewgate/discovery"
)

// RequestShape is one kind of resource request the gateway received, with how
// many it received: what a request asks for, never whom or which object. It
// carries no object names, no selector values, no credentials and no
// addresses, only the resource, the verb, the labels of a field selector and
// the product/version of the client's User-Agent.
type RequestShape struct {
	Group       string `json:"group"`
	Version     string `json:"version"`
	Resource    string `json:"resource"`
	Subresource string `json:"subresource,omitempty"`
	Verb        string `json:"verb"`
	// FieldSelector lists the labels (left-hand sides) of the request's field
	// selector, sorted and without duplicates.
	FieldSelector []string `json:"fieldSelector,omitempty"`
	// UserAgent is the User-Agent's first product token, e.g.
	// "kubelet/v1.36.3", at most MaxUserAgentLength bytes.
	UserAgent string `json:"userAgent"`
	Count     uint64 `json:"count"`
}

// RequestShapes is the record GET /debug/requests serves on the metrics
// listener.
type RequestShapes struct {
	// Limit is the most shapes the record holds.
	Limit int `json:"limit"`
	// Unrecorded counts the requests of shapes first seen after the record
	// was full.
	Unrecorded uint64         `json:"unrecorded"`
	Shapes     []RequestShape `json:"shapes"`
}

// DefaultRequestShapes is the most request shapes a RequestLog holds by
// default: a control plane's clients send a few hundred.
const DefaultRequestShapes = 2048

// MaxUserAgentLength bounds the user agent of a shape.
const MaxUserAgentLength = 64

// shapeKey is a shape without its count; its strings are substrings of the
// request while a request is looked up, and copies once stored.
type shapeKey struct {
	group, version, resource, subresource, verb string
	// fieldSelector is the sorted labels joined by commas.
	fieldSelector string
	userAgent     string
}

// RequestLog counts the shapes of the resource requests a gateway receives,
// up to a limit of distinct shapes, so that `skewgate check --from-skewgate`
// can name the clients a skew would hit. Safe for concurrent use.
type RequestLog struct {
	limit int

	// mu guards the map; a shape already held is counted under the read
	// lock, so concurrent requests only contend when a shape is new.
	mu         sync.RWMutex
	counts     map[shapeKey]*atomic.Uint64
	unrecorded atomic.Uint64
}

// NewRequestLog holds at most limit shapes (DefaultRequestShapes if limit is
// not positive).
func NewRequestLog(limit int) *RequestLog {
	if limit <= 0 {
		limit = DefaultRequestShapes
	}
	return &RequestLog{limit: limit, counts: map[shapeKey]*atomic.Uint64{}}
}

// Record counts r's shape if it is a resource request.
func (l *RequestLog) Record(r *http.Request) {
	info, err := discovery.ParseRequestInfo(r.Method, r.URL.Path, r.URL.RawQuery)
	if err != nil || !info.IsResourceRequest {
		return
	}
	key := shapeKey{
		group: info.APIGroup, version: info.APIVersion, resource: info.Resource, subresource: info.Subresource,
		verb: info.Verb, userAgent: userAgentProduct(r.Header.Get("User-Agent")),
	}
	// The query is read here rather than taken from info: a watch through
	// the /watch/ path prefix carries its selector too, which RequestInfo
	// leaves out as upstream's does.
	if (info.Verb == "list" || info.Verb == "watch") && strings.Contains(r.URL.RawQuery, "fieldSelector") {
		if selector := r.URL.Query().Get("fieldSelector"); selector != "" {
			key.fieldSelector = fieldSelectorLabels(selector)
		}
	}
	l.mu.RLock()
	n := l.counts[key]
	l.mu.RUnlock()
	if n != nil {
		n.Add(1)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.counts[key]; n != nil {
		n.Add(1)
		return
	}
	if len(l.counts) >= l.limit {
		l.unrecorded.Add(1)
		return
	}
	key.group, key.version, key.resource = strings.Clone(key.group), strings.Clone(key.version), strings.Clone(key.resource)
	key.subresource, key.verb, key.userAgent = strings.Clone(key.subresource), strings.Clone(key.verb), strings.Clone(key.userAgent)
	n = new(atomic.Uint64)
	n.Store(1)
	l.counts[key] = n
}

// userAgentProduct is a User-Agent's first product token ("kubelet/v1.36.3"
// of "kubelet/v1.36.3 (linux/amd64) kubernetes/abcdef0"), bounded in length.
func userAgentProduct(ua string) string {
	product, _, _ := strings.Cut(strings.TrimSpace(ua), " ")
	if len(product) > MaxUserAgentLength {
		product = product[:MaxUserAgentLength]
	}
	return product
}

// fieldSelectorLabels parses a field selector as the API server does
// (k8s.io/apimachinery's fields.ParseSelector) and returns its labels, sorted,
// joined by commas; a selector the server would refuse yields "(invalid)".
func fieldSelectorLabels(selector string) string {
	sel, err := fields.ParseSelector(selector)
	if err != nil {
		return "(invalid)"
	}
	var labels []string
	for _, req := range sel.Requirements() {
		labels = append(labels, req.Field)
	}
	slices.Sort(labels)
	return strings.Join(slices.Compact(labels), ",")
}

// Shapes returns the record, most frequent shapes first.
func (l *RequestLog) Shapes() RequestShapes {
	l.mu.RLock()
	out := RequestShapes{Limit: l.limit, Unrecorded: l.unrecorded.Load(), Shapes: make([]RequestShape, 0, len(l.counts))}
	for k, n := range l.counts {
		s := RequestShape{Group: k.group, Version: k.version, Resource: k.resource, Subresource: k.subresource,
			Verb: k.verb, UserAgent: k.userAgent, Count: n.Load()}
		if k.fieldSelector != "" {
			s.FieldSelector = strings.Split(k.fieldSelector, ",")
		}
		out.Shapes = append(out.Shapes, s)
	}
	l.mu.RUnlock()
	slices.SortFunc(out.Shapes, func(a, b RequestShape) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Group, b.Group), cmp.Compare(a.Resource, b.Resource),
			cmp.Compare(a.Version, b.Version), cmp.Compare(a.Verb, b.Verb), cmp.Compare(a.UserAgent, b.UserAgent),
			slices.Compare(a.FieldSelector, b.FieldSelector), cmp.Compare(a.Subresource, b.Subresource))
	})
	return out
}

// ServeHTTP serves the record as JSON.
func (l *RequestLog) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	body, err := json.Marshal(l.Shapes())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(body)
}
