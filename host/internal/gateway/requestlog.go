package gateway

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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
	// selector, sorted and without duplicates; each is a field path
	// (IsFieldPath).
	FieldSelector []string `json:"fieldSelector,omitempty"`
	// UserAgent is the User-Agent's first product token, e.g.
	// "kubelet/v1.36.3", at most MaxUserAgentLength bytes of token
	// characters.
	UserAgent string `json:"userAgent"`
	// Count is the requests of this shape since it was first recorded; a
	// shape not seen for the record's window is forgotten, count and all.
	Count uint64 `json:"count"`
	// LastSeen is when the last request of this shape was answered.
	LastSeen time.Time `json:"lastSeen"`
}

// RequestShapes is the record GET /debug/requests serves on the metrics
// listener.
type RequestShapes struct {
	// Limit is the most shapes the record holds.
	Limit int `json:"limit"`
	// WindowSeconds is how long a shape stays without a request: the record
	// holds the shapes of the requests answered within it.
	WindowSeconds float64 `json:"windowSeconds"`
	// Evicted counts the shapes forgotten while still within the window, the
	// least recently seen, to make room for new ones: when it is not zero the
	// record may lack clients of the window.
	Evicted uint64 `json:"evicted"`
	// NotAuthorized counts the resource requests left out because their answer
	// does not show that an API server authenticated and authorized them
	// (RecordsStatus).
	NotAuthorized uint64 `json:"notAuthorized"`
	// RejectedSelectors counts the resource requests left out because their
	// field selector did not parse or had a label that is not a field path.
	RejectedSelectors uint64         `json:"rejectedSelectors"`
	Shapes            []RequestShape `json:"shapes"`
}

// Defaults of a RequestLog: a control plane's clients send a few hundred
// shapes, and an hour holds every informer's relist and every periodic
// controller's requests.
const (
	DefaultRequestShapes    = 2048
	DefaultRequestLogWindow = time.Hour
)

// MaxUserAgentLength bounds the user agent of a shape.
const MaxUserAgentLength = 64

// Bounds of the field selector of a recorded request: Kubernetes' field
// labels are a few words long, and a client selects on one or two.
const (
	MaxFieldPathLength = 128
	MaxSelectorLabels  = 8
)

// shapeKey is a shape without its count; its strings are substrings of the
// request while a request is looked up, and copies once stored.
type shapeKey struct {
	group, version, resource, subresource, verb string
	// fieldSelector is the sorted labels joined by commas.
	fieldSelector string
	userAgent     string
}

// shapeRecord is what the log keeps of a shape; both fields change under the
// read lock, so that a known shape is counted without contention.
type shapeRecord struct {
	count atomic.Uint64
	// lastSeen is in Unix nanoseconds.
	lastSeen atomic.Int64
}

// RequestLog counts the shapes of the resource requests a gateway answers, so
// that `skewgate check --from-skewgate` can name the clients a skew would
// hit. It keeps only what an anonymous client cannot forge: requests an API
// server authenticated and authorized, with field selectors of field paths.
// It holds the shapes seen within its window, at most a limit of them; a new
// shape in a full log evicts the least recently seen. Safe for concurrent
// use.
type RequestLog struct {
	limit  int
	window time.Duration
	now    func() time.Time

	// mu guards the map; a shape already held is counted under the read
	// lock, so concurrent requests only contend when a shape is new.
	mu                sync.RWMutex
	shapes            map[shapeKey]*shapeRecord
	evicted           atomic.Uint64
	notAuthorized     atomic.Uint64
	rejectedSelectors atomic.Uint64
}

// NewRequestLog holds at most limit shapes (DefaultRequestShapes if
// limit is not positive), each for window after its last request
// (DefaultRequestLogWindow if window is not positive).
func NewRequestLog(limit int, window time.Duration) *RequestLog {
	if limit <= 0 {
		limit = DefaultRequestShapes
	}
	if window <= 0 {
		window = DefaultRequestLogWindow
	}
	return &RequestLog{limit: limit, window: window, now: time.Now, shapes: map[shapeKey]*shapeRecord{}}
}

// RecordsStatus reports whether an answer of this status shows that an API
// server authenticated and authorized the request: any status below 400 (a
// switched protocol, a success, a redirect or not-modified), and the
// refusals kube-apiserver's handlers make, which run only after its
// authentication and authorization filters: 404, 405, 406, 409, 410, 415 and
// 422. Not 401 (no authenticator accepted it), not 403 (kube-apiserver
// authenticates a request without credentials as system:anonymous and
// forbids it), and none of the statuses the gateway or its plugin answer
// with themselves before an API server saw the request (400, 429, 431, 503,
// 504), nor 0 (no answer).
func RecordsStatus(status int) bool {
	switch {
	case status >= 100 && status < 400:
		return true
	case status == http.StatusNotFound, status == http.StatusMethodNotAllowed, status == http.StatusNotAcceptable,
		status == http.StatusConflict, status == http.StatusGone, status == http.StatusUnsupportedMediaType,
		status == http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// RecordAnswered counts the shape of a request to target by userAgent, once it was answered with status (what
// the client got: the final status written, 101 for a switched protocol, 0
// for none), if it is a resource request, RecordsStatus(status) holds and its
// field selector, if any, names only field paths. A shape already held is
// counted without allocating.
func (l *RequestLog) RecordAnswered(target *discovery.Target, userAgent string, status int) {
	info := &target.Info
	if !target.Valid || target.InfoErr != nil || !info.IsResourceRequest {
		return
	}
	if !RecordsStatus(status) {
		l.notAuthorized.Add(1)
		return
	}
	key := shapeKey{
		group: info.APIGroup, version: info.APIVersion, resource: info.Resource, subresource: info.Subresource,
		verb: info.Verb, userAgent: userAgentProduct(userAgent),
	}
	// The query is read here rather than taken from info: a watch through
	// the /watch/ path prefix carries its selector too, which RequestInfo
	// leaves out as upstream's does.
	if (info.Verb == "list" || info.Verb == "watch") && strings.Contains(target.RawQuery, "fieldSelector") {
		// As r.URL.Query() reads it: the first value, malformed pairs skipped.
		query, _ := url.ParseQuery(target.RawQuery)
		if selector := query.Get("fieldSelector"); selector != "" {
			labels, ok := fieldSelectorLabels(selector)
			if !ok {
				l.rejectedSelectors.Add(1)
				return
			}
			key.fieldSelector = labels
		}
	}
	now := l.now().UnixNano()
	l.mu.RLock()
	rec := l.shapes[key]
	l.mu.RUnlock()
	if rec != nil && !l.expired(rec, now) {
		rec.count.Add(1)
		rec.lastSeen.Store(now)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if rec := l.shapes[key]; rec != nil {
		if l.expired(rec, now) {
			rec.count.Store(0) // gone for a window: a new shape
		}
		rec.count.Add(1)
		rec.lastSeen.Store(now)
		return
	}
	if len(l.shapes) >= l.limit {
		l.makeRoom(now)
	}
	key.group, key.version, key.resource = strings.Clone(key.group), strings.Clone(key.version), strings.Clone(key.resource)
	key.subresource, key.verb, key.userAgent = strings.Clone(key.subresource), strings.Clone(key.verb), strings.Clone(key.userAgent)
	rec = new(shapeRecord)
	rec.count.Store(1)
	rec.lastSeen.Store(now)
	l.shapes[key] = rec
}

func (l *RequestLog) expired(rec *shapeRecord, now int64) bool {
	return now-rec.lastSeen.Load() > int64(l.window)
}

// makeRoom forgets every shape past the window, or if there is none, the
// least recently seen. l.mu is held for writing. It walks the whole map:
// shapes are new rarely, and each comes from a request an API server
// authorized.
func (l *RequestLog) makeRoom(now int64) {
	var oldest shapeKey
	oldestSeen, found, freed := int64(0), false, false
	for k, rec := range l.shapes {
		seen := rec.lastSeen.Load()
		if now-seen > int64(l.window) {
			delete(l.shapes, k)
			freed = true
			continue
		}
		if !found || seen < oldestSeen {
			oldest, oldestSeen, found = k, seen, true
		}
	}
	if !freed && found {
		delete(l.shapes, oldest)
		l.evicted.Add(1)
	}
}

// userAgentProduct is a User-Agent's first product token ("kubelet/v1.36.3"
// of "kubelet/v1.36.3 (linux/amd64) kubernetes/abcdef0"): its leading token
// characters and slashes, at most MaxUserAgentLength of them. It cannot hold
// a control character, a space or anything but ASCII.
func userAgentProduct(ua string) string {
	ua = strings.TrimLeft(ua, " \t")
	n := 0
	for n < len(ua) && n < MaxUserAgentLength && (isTokenChar(ua[n]) || ua[n] == '/') {
		n++
	}
	return ua[:n]
}

// isTokenChar reports whether c may appear in an HTTP token (RFC 9110
// section 5.6.2).
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// IsFieldPath reports whether label is a field path as Kubernetes' field
// selectors name fields ("spec.nodeName", "metadata.name", "type",
// "involvedObject.kind", a CRD's selectable "spec.color"): one or more
// segments joined by single dots, each an ASCII letter or underscore followed
// by ASCII letters, digits, underscores or hyphens, at most
// MaxFieldPathLength bytes in all. Anything else (spaces, quotes, escapes,
// control characters, non-ASCII) is not.
func IsFieldPath(label string) bool {
	if label == "" || len(label) > MaxFieldPathLength {
		return false
	}
	for segment := range strings.SplitSeq(label, ".") {
		if segment == "" || !(isLetter(segment[0]) || segment[0] == '_') {
			return false
		}
		for i := 1; i < len(segment); i++ {
			if c := segment[i]; !isLetter(c) && !('0' <= c && c <= '9') && c != '_' && c != '-' {
				return false
			}
		}
	}
	return true
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// fieldSelectorLabels parses a field selector as the API server does
// (k8s.io/apimachinery's fields.ParseSelector) and returns its labels,
// sorted, joined by commas; ok is false for a selector the server would
// refuse to parse, one with a label that is not a field path, or one of more
// than MaxSelectorLabels labels.
func fieldSelectorLabels(selector string) (labels string, ok bool) {
	sel, err := fields.ParseSelector(selector)
	if err != nil {
		return "", false
	}
	var names []string
	for _, req := range sel.Requirements() {
		if !IsFieldPath(req.Field) {
			return "", false
		}
		names = append(names, req.Field)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > MaxSelectorLabels {
		return "", false
	}
	return strings.Join(names, ","), true
}

// Shapes returns the shapes seen within the window, most frequent first.
func (l *RequestLog) Shapes() RequestShapes {
	now := l.now()
	l.mu.RLock()
	out := RequestShapes{
		Limit: l.limit, WindowSeconds: l.window.Seconds(), Evicted: l.evicted.Load(),
		NotAuthorized: l.notAuthorized.Load(), RejectedSelectors: l.rejectedSelectors.Load(),
		Shapes: make([]RequestShape, 0, len(l.shapes)),
	}
	for k, rec := range l.shapes {
		if l.expired(rec, now.UnixNano()) {
			continue
		}
		s := RequestShape{Group: k.group, Version: k.version, Resource: k.resource, Subresource: k.subresource,
			Verb: k.verb, UserAgent: k.userAgent, Count: rec.count.Load(), LastSeen: time.Unix(0, rec.lastSeen.Load()).UTC()}
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
