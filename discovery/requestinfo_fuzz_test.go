package discovery

import (
	"testing"
)

// FuzzParseRequestInfo checks ParseRequestInfo against the API server's own
// RequestInfoFactory on arbitrary methods, decoded paths and raw queries. The
// upstream request's URL is assembled from Path and RawQuery directly, so every
// input forms a request and none is skipped.
func FuzzParseRequestInfo(f *testing.F) {
	f.Add("GET", "/apis/apps/v1/namespaces/default/deployments/web", "")
	f.Add("GET", "/api/v1/pods", "watch=true&resourceVersion=1")
	f.Fuzz(func(t *testing.T, method, path, rawQuery string) {
		if diff := differenceFromUpstream(method, path, rawQuery); diff != "" {
			t.Error(diff)
		}
	})
}
