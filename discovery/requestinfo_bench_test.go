package discovery

import (
	"net/http"
	"net/url"
	"testing"
)

// typicalRequests are the everyday shapes of API traffic; none of them carries
// a query escape, so parsing them must not allocate.
var typicalRequests = []struct {
	name, method, path, rawQuery string
}{
	{"get-namespaced-object", "GET", "/apis/apps/v1/namespaces/default/deployments/web", ""},
	{"watch-core-list", "GET", "/api/v1/pods", "watch=true&resourceVersion=1"},
	{"create-cluster-scoped", "POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", ""},
	{"list-paginated", "GET", "/api/v1/namespaces/kube-system/pods", "limit=500&resourceVersion=0"},
	{"list-by-name", "GET", "/api/v1/namespaces/default/pods", "fieldSelector=metadata.name=web-0&watch=1"},
	{"update-status", "PUT", "/apis/apps/v1/namespaces/default/deployments/web/status", ""},
	{"exec", "POST", "/api/v1/namespaces/default/pods/web-0/exec", "command=sh&stdin=true&stdout=true&tty=true"},
	{"discovery-root", "GET", "/apis", ""},
}

func BenchmarkParseRequestInfo(b *testing.B) {
	for _, req := range typicalRequests {
		b.Run(req.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseRequestInfo(req.method, req.path, req.rawQuery); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkUpstreamNewRequestInfo(b *testing.B) {
	for _, req := range typicalRequests {
		b.Run(req.name, func(b *testing.B) {
			httpReq := &http.Request{Method: req.method, URL: &url.URL{Path: req.path, RawQuery: req.rawQuery}}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := kubeAPIServerRequestInfo.NewRequestInfo(httpReq); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestParseRequestInfoTypicalPathsDoNotAllocate(t *testing.T) {
	for _, req := range typicalRequests {
		t.Run(req.name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() {
				if _, err := ParseRequestInfo(req.method, req.path, req.rawQuery); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("ParseRequestInfo(%q, %q, %q) allocates %v times per call, want 0",
					req.method, req.path, req.rawQuery, allocs)
			}
		})
	}
}
