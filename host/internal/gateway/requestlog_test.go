package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

func recordRequest(l *RequestLog, method, target, userAgent string) {
	r := httptest.NewRequest(method, "https://gateway.example"+target, nil)
	if userAgent != "" {
		r.Header.Set("User-Agent", userAgent)
	}
	l.Record(r)
}

func TestRequestLogCountsShapesWithoutNamesValuesOrCredentials(t *testing.T) {
	l := NewRequestLog(0)
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
	want := RequestShapes{Limit: DefaultRequestShapes, Shapes: []RequestShape{
		{Group: "", Version: "v1", Resource: "services", Verb: "list", FieldSelector: []string{"spec.clusterIP"}, UserAgent: "kubelet/v1.31.4", Count: 3},
		{Group: "", Version: "v1", Resource: "pods", Verb: "list", FieldSelector: []string{"(invalid)"}, UserAgent: "kubelet/v1.31.4", Count: 1},
		{Group: "", Version: "v1", Resource: "secrets", Verb: "get", UserAgent: "kubectl/v1.36.3", Count: 1},
		{Group: "", Version: "v1", Resource: "services", Verb: "watch", FieldSelector: []string{"metadata.name", "spec.clusterIP"}, UserAgent: "kubelet/v1.31.4", Count: 1},
		{Group: "coordination.k8s.io", Version: "v1alpha2", Resource: "leasecandidates", Subresource: "status", Verb: "update", Count: 1},
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

func TestRequestLogHoldsAtMostItsLimitOfShapes(t *testing.T) {
	l := NewRequestLog(4)
	for i := range 10 {
		recordRequest(l, "GET", fmt.Sprintf("/apis/example.com/v1/resource%d", i), "client/v1")
	}
	recordRequest(l, "GET", "/apis/example.com/v1/resource0", "client/v1") // a shape already held still counts
	recordRequest(l, "GET", "/api/v1/pods", strings.Repeat("x", 1000))
	got := l.Shapes()
	if len(got.Shapes) != 4 || got.Unrecorded != 7 || got.Limit != 4 {
		t.Fatalf("limit 4: %d shapes, %d unrecorded, limit %d", len(got.Shapes), got.Unrecorded, got.Limit)
	}
	if got.Shapes[0].Resource != "resource0" || got.Shapes[0].Count != 2 {
		t.Errorf("most frequent shape %+v, want resource0 twice", got.Shapes[0])
	}
	l = NewRequestLog(1)
	recordRequest(l, "GET", "/api/v1/pods", strings.Repeat("x", 1000))
	if ua := l.Shapes().Shapes[0].UserAgent; len(ua) != MaxUserAgentLength {
		t.Errorf("user agent of %d bytes kept, want %d", len(ua), MaxUserAgentLength)
	}
}

func TestRequestLogServesJSON(t *testing.T) {
	l := NewRequestLog(0)
	recordRequest(l, "GET", "/apis/apps/v1/deployments", "kube-controller-manager/v1.35.4 (linux/amd64)")
	rec := httptest.NewRecorder()
	l.ServeHTTP(rec, httptest.NewRequest("GET", "/debug/requests", nil))
	var got RequestShapes
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s: %s (%v)", rec.Code, rec.Header().Get("Content-Type"), rec.Body, err)
	}
	if !slices.Equal([]string{got.Shapes[0].UserAgent, got.Shapes[0].Resource, got.Shapes[0].Verb}, []string{"kube-controller-manager/v1.35.4", "deployments", "list"}) {
		t.Errorf("served %+v", got)
	}
}
