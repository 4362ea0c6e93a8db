package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
)

// testClock is a RequestLog's clock that moves only when told.
type testClock struct{ t time.Time }

func (c *testClock) now() time.Time          { return c.t }
func (c *testClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTestRequestLog is a log of limit shapes and window on a clock of its own.
func newTestRequestLog(limit int, window time.Duration) (*RequestLog, *testClock) {
	clock := &testClock{t: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)}
	l := NewRequestLog(limit, window)
	l.now = clock.now
	return l, clock
}

// recordAnswered records a request of method to target by userAgent, as
// the gateway does once it was answered with status.
func recordAnswered(l *RequestLog, method, target, userAgent string, status int) {
	parsed := discovery.ParseTarget(method, target)
	l.RecordAnswered(&parsed, userAgent, status)
}

func recordRequest(l *RequestLog, method, target, userAgent string) {
	recordAnswered(l, method, target, userAgent, http.StatusOK)
}

// shapeNames lists the resources of the shapes held, most frequent first.
func shapeNames(l *RequestLog) []string {
	var out []string
	for _, s := range l.Shapes().Shapes {
		out = append(out, s.Resource)
	}
	return out
}

func TestRequestLogCountsShapesWithoutNamesValuesOrCredentials(t *testing.T) {
	l, clock := newTestRequestLog(0, 0)
	const kubelet = "kubelet/v1.31.4 (linux/amd64) kubernetes/abcdef0"
	for range 3 {
		recordRequest(l, "GET", "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone&limit=500&resourceVersion=0", kubelet)
	}
	recordRequest(l, "GET", "/api/v1/watch/services?fieldSelector=spec.clusterIP!%3DNone,metadata.name%3Dsecret-name", kubelet)
	recordRequest(l, "GET", "/api/v1/namespaces/team-a/secrets/db-password", "kubectl/v1.36.3 (linux/amd64) kubernetes/1234567")
	recordRequest(l, "PUT", "/apis/coordination.k8s.io/v1alpha2/namespaces/x/leasecandidates/c/status", "")
	recordRequest(l, "GET", "/api/v1/pods?fieldSelector=spec.nodeName", kubelet) // no operator: refused upstream
	recordRequest(l, "GET", "/healthz", kubelet)                                 // not a resource request
	got := l.Shapes()
	seen := clock.t
	want := RequestShapes{Limit: DefaultRequestShapes, WindowSeconds: 3600, RejectedSelectors: 1, Shapes: []RequestShape{
		{Group: "", Version: "v1", Resource: "services", Verb: "list", FieldSelector: []string{"spec.clusterIP"}, UserAgent: "kubelet/v1.31.4", Count: 3, LastSeen: seen},
		{Group: "", Version: "v1", Resource: "secrets", Verb: "get", UserAgent: "kubectl/v1.36.3", Count: 1, LastSeen: seen},
		{Group: "", Version: "v1", Resource: "services", Verb: "watch", FieldSelector: []string{"metadata.name", "spec.clusterIP"}, UserAgent: "kubelet/v1.31.4", Count: 1, LastSeen: seen},
		{Group: "coordination.k8s.io", Version: "v1alpha2", Resource: "leasecandidates", Subresource: "status", Verb: "update", Count: 1, LastSeen: seen},
	}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("shapes\n got %+v\nwant %+v", got, want)
	}
	body, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"team-a", "db-password", "secret-name", "None", "linux/amd64", "abcdef0"} {
		if strings.Contains(string(body), secret) {
			t.Errorf("the record holds %q: %s", secret, body)
		}
	}
}

// Only an answer an API server gives after authenticating and authorizing a
// request records its shape: an anonymous client, refused with 401 or
// forbidden as system:anonymous with 403, or answered by the gateway itself,
// leaves nothing in the record but a count.
func TestRequestLogRecordsOnlyAnswersThatShowAnAPIServerAuthorizedTheRequest(t *testing.T) {
	for _, c := range []struct {
		status   int
		recorded bool
	}{
		{http.StatusOK, true},
		{http.StatusCreated, true},
		{http.StatusSwitchingProtocols, true}, // exec, attach, port-forward
		{http.StatusNotModified, true},
		{http.StatusNotFound, true},
		{http.StatusConflict, true},
		{http.StatusGone, true},
		{http.StatusUnprocessableEntity, true},
		{0, false}, // the client left before an answer
		{http.StatusBadRequest, false},
		{http.StatusUnauthorized, false},
		{http.StatusForbidden, false},
		{http.StatusTooManyRequests, false},
		{http.StatusRequestHeaderFieldsTooLarge, false},
		{http.StatusInternalServerError, false},
		{http.StatusServiceUnavailable, false},
		{http.StatusGatewayTimeout, false},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			l, _ := newTestRequestLog(0, 0)
			recordAnswered(l, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "kube-controller-manager/v1.35.4", c.status)
			recordAnswered(l, "GET", "/readyz", "kube-controller-manager/v1.35.4", c.status) // never counted
			got := l.Shapes()
			if recorded := len(got.Shapes) == 1; recorded != c.recorded {
				t.Fatalf("status %d: recorded %v, want %v: %+v", c.status, recorded, c.recorded, got)
			}
			wantNotAuthorized := uint64(1)
			if c.recorded {
				wantNotAuthorized = 0
			}
			if got.NotAuthorized != wantNotAuthorized {
				t.Errorf("status %d: %d requests counted as not authorized", c.status, got.NotAuthorized)
			}
		})
	}
}

// A recorded selector label is a field path: nothing else a client can put
// there (escapes, control characters, spaces, quotes, non-ASCII, a label of
// any length or any number of labels) reaches the record.
func TestRequestLogRecordsOnlyFieldPathSelectorLabels(t *testing.T) {
	for _, c := range []struct {
		name, selector string
		want           []string // nil: the request is not recorded
	}{
		{"node name", "spec.nodeName=node-1", []string{"spec.nodeName"}},
		{"three segments", "involvedObject.fieldPath=x,type=Normal", []string{"involvedObject.fieldPath", "type"}},
		{"inequality", "spec.clusterIP!=None", []string{"spec.clusterIP"}},
		{"underscore and hyphen", "spec._my-field=1", []string{"spec._my-field"}},
		{"escape sequences", "\x1b]0;owned\x07\x1b[2J\x1b[1;31mspec.nodeName=x", nil},
		{"newline", "spec.nodeName\nKIND=x", nil},
		{"C1 control", "spec.\u009bnodeName=x", nil},
		{"invalid UTF-8", "spec.\xffnodeName=x", nil},
		{"non-ASCII letter", "spec.nöde=x", nil},
		{"space", "spec.node Name=x", nil},
		{"quote", `spec."nodeName"=x`, nil},
		{"bracket", "metadata.labels[app]=x", nil},
		{"empty segment", "spec..nodeName=x", nil},
		{"trailing dot", "spec.=x", nil},
		{"leading digit", "spec.1nodeName=x", nil},
		{"too long", strings.Repeat("a", MaxFieldPathLength+1) + "=x", nil},
		{"longest", strings.Repeat("a", MaxFieldPathLength) + "=x", []string{strings.Repeat("a", MaxFieldPathLength)}},
		{"too many labels", "a=1,b=1,c=1,d=1,e=1,f=1,g=1,h=1,i=1", nil},
		{"no operator", "spec.nodeName", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, _ := newTestRequestLog(0, 0)
			recordRequest(l, "GET", "/api/v1/pods?fieldSelector="+urlQueryEscape(c.selector), "kubelet/v1.36.3")
			got := l.Shapes()
			switch {
			case c.want == nil && (len(got.Shapes) != 0 || got.RejectedSelectors != 1):
				t.Errorf("%q: recorded %+v, %d rejected; want it rejected", c.selector, got.Shapes, got.RejectedSelectors)
			case c.want != nil && (len(got.Shapes) != 1 || !slices.Equal(got.Shapes[0].FieldSelector, c.want)):
				t.Errorf("%q: recorded %+v, want labels %q", c.selector, got.Shapes, c.want)
			}
		})
	}
}

func urlQueryEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// The user agent of a shape is the User-Agent's first product token, token
// characters only: whatever else a client sends is cut off.
func TestRequestLogKeepsOnlyTheUserAgentsProductToken(t *testing.T) {
	for _, c := range []struct{ sent, kept string }{
		{"kubelet/v1.36.3 (linux/amd64) kubernetes/abcdef0", "kubelet/v1.36.3"},
		{"  kubectl/v1.36.3", "kubectl/v1.36.3"},
		{"evil/1\x1b[2J\x1b[1;31m", "evil/1"},
		{"evil/1\u009b2J", "evil/1"},
		{"evil/1\xff", "evil/1"},
		{"évil/1", ""},
		{strings.Repeat("x", 1000), strings.Repeat("x", MaxUserAgentLength)},
		{"", ""},
	} {
		if got := userAgentProduct(c.sent); got != c.kept {
			t.Errorf("User-Agent %q: kept %q, want %q", c.sent, got, c.kept)
		}
	}
}

// The record holds the shapes of the last window: one not seen for longer is
// gone, and one that comes back after it starts its count anew.
func TestRequestLogForgetsShapesNotSeenWithinTheWindow(t *testing.T) {
	l, clock := newTestRequestLog(0, time.Hour)
	recordRequest(l, "GET", "/api/v1/pods", "old-client/v1")
	recordRequest(l, "GET", "/api/v1/nodes", "kubelet/v1.36.3")
	clock.advance(40 * time.Minute)
	recordRequest(l, "GET", "/api/v1/nodes", "kubelet/v1.36.3")
	clock.advance(30 * time.Minute) // pods last seen 70 minutes ago, nodes 30
	if got := shapeNames(l); !slices.Equal(got, []string{"nodes"}) {
		t.Fatalf("after 70 minutes: shapes %v, want nodes only", got)
	}
	recordRequest(l, "GET", "/api/v1/pods", "old-client/v1")
	got := l.Shapes().Shapes
	if len(got) != 2 || got[0].Resource != "nodes" || got[0].Count != 2 || got[1].Resource != "pods" || got[1].Count != 1 {
		t.Fatalf("pods back after the window: %+v, want nodes twice and pods once", got)
	}
	if !got[1].LastSeen.Equal(clock.t) || !got[0].LastSeen.Equal(clock.t.Add(-30*time.Minute)) {
		t.Errorf("last seen %v and %v, want now (%v) and 30 minutes ago", got[1].LastSeen, got[0].LastSeen, clock.t)
	}
	clock.advance(time.Hour + time.Nanosecond)
	if got := l.Shapes(); len(got.Shapes) != 0 || got.Evicted != 0 {
		t.Errorf("an hour after the last request: %+v, want no shape and none evicted", got)
	}
}

// A flood of new shapes cannot keep a real client out: a full record evicts
// the least recently seen shape for a new one, and a shape seen during the
// flood outlives older ones.
func TestFullRequestLogEvictsTheLeastRecentlySeenShape(t *testing.T) {
	const limit = 64
	l, clock := newTestRequestLog(limit, time.Hour)
	recordRequest(l, "GET", "/api/v1/nodes", "kubelet/v1.36.3")
	for i := range 2 * limit {
		clock.advance(time.Millisecond)
		recordRequest(l, "GET", fmt.Sprintf("/apis/example.com/v1/flood%d", i), fmt.Sprintf("flooder/%d", i))
		if i%(limit/2) == 0 { // a client that keeps sending
			recordRequest(l, "GET", "/api/v1/nodes", "kubelet/v1.36.3")
		}
	}
	clock.advance(time.Millisecond)
	recordRequest(l, "GET", "/apis/apps/v1/deployments", "kube-controller-manager/v1.35.4")
	got := l.Shapes()
	names := shapeNames(l)
	if len(got.Shapes) != limit || !slices.Contains(names, "deployments") || !slices.Contains(names, "nodes") {
		t.Fatalf("%d shapes %v; want %d with deployments and nodes", len(got.Shapes), names, limit)
	}
	if slices.Contains(names, "flood0") || !slices.Contains(names, fmt.Sprintf("flood%d", 2*limit-1)) {
		t.Errorf("shapes %v: want the oldest flood shapes evicted and the newest kept", names)
	}
	if i := slices.Index(names, "nodes"); got.Shapes[i].Count != 5 {
		t.Errorf("nodes counted %d times, want 5: never evicted while it kept coming", got.Shapes[i].Count)
	}
	// 2*limit+2 shapes came into room for limit: every other one was evicted.
	if got.Evicted != limit+2 {
		t.Errorf("%d shapes evicted, want %d", got.Evicted, limit+2)
	}
}

// A shape the record holds is counted without allocating: recording costs
// the requests of known clients nothing beyond a map lookup.
func TestRequestLogCountsAKnownShapeWithoutAllocating(t *testing.T) {
	l := NewRequestLog(0, 0)
	r := kubectlRequest()
	target := discovery.ParseTarget(r.Method, requestTarget(r))
	userAgent := r.Header.Get("User-Agent")
	l.RecordAnswered(&target, userAgent, http.StatusOK)
	allocs := testing.AllocsPerRun(1000, func() { l.RecordAnswered(&target, userAgent, http.StatusOK) })
	if allocs != 0 {
		t.Errorf("counting a known shape allocates %v times", allocs)
	}
	if got := l.Shapes().Shapes; len(got) != 1 || got[0].Count < 1000 {
		t.Errorf("shapes %+v, want one counted every time", got)
	}
}

func TestRequestLogServesJSON(t *testing.T) {
	l := NewRequestLog(0, 0)
	recordRequest(l, "GET", "/apis/apps/v1/deployments", "kube-controller-manager/v1.35.4 (linux/amd64)")
	rec := httptest.NewRecorder()
	l.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/requests", nil))
	var got RequestShapes
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s: %s (%v)", rec.Code, rec.Header().Get("Content-Type"), rec.Body, err)
	}
	if !slices.Equal([]string{got.Shapes[0].UserAgent, got.Shapes[0].Resource, got.Shapes[0].Verb}, []string{"kube-controller-manager/v1.35.4", "deployments", "list"}) ||
		got.Limit != DefaultRequestShapes || got.WindowSeconds != DefaultRequestLogWindow.Seconds() {
		t.Errorf("served %+v", got)
	}
}
