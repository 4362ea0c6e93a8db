package discovery

import (
	"math/rand/v2"
	"net/url"
	"reflect"
	"testing"
	"unsafe"
)

// wantRequestInfo is a RequestInfo with Parts spelled out.
type wantRequestInfo struct {
	RequestInfo
	parts []string
}

func TestParseRequestInfoClassifiesRequestsAsKubeAPIServer(t *testing.T) {
	tests := []struct {
		name                   string
		method, path, rawQuery string
		want                   wantRequestInfo
	}{
		{
			name: "namespaced object get", method: "GET", path: "/apis/apps/v1/namespaces/default/deployments/web",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/apis/apps/v1/namespaces/default/deployments/web",
				Verb: "get", APIPrefix: "apis", APIGroup: "apps", APIVersion: "v1", Namespace: "default",
				Resource: "deployments", Name: "web"}, []string{"deployments", "web"}},
		},
		{
			name: "core watch from query keeps selectors", method: "GET", path: "/api/v1/pods",
			rawQuery: "watch=true&labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/pods", Verb: "watch",
				APIPrefix: "api", APIVersion: "v1", Resource: "pods",
				FieldSelector: "spec.nodeName=n1", LabelSelector: "app=web"}, []string{"pods"}},
		},
		{
			name: "create cluster-scoped", method: "POST", path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
				Verb: "create", APIPrefix: "apis", APIGroup: "admissionregistration.k8s.io", APIVersion: "v1",
				Resource: "mutatingadmissionpolicies"}, []string{"mutatingadmissionpolicies"}},
		},
		{
			name: "namespace is its own name", method: "GET", path: "/api/v1/namespaces/ns",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/namespaces/ns", Verb: "get",
				APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "namespaces", Name: "ns"},
				[]string{"namespaces", "ns"}},
		},
		{
			name: "namespace finalize is a subresource", method: "PUT", path: "/api/v1/namespaces/ns/finalize",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/namespaces/ns/finalize", Verb: "update",
				APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "namespaces", Name: "ns",
				Subresource: "finalize"}, []string{"namespaces", "ns", "finalize"}},
		},
		{
			name: "proxy verb has no subresource", method: "GET", path: "/api/v1/proxy/namespaces/ns/pods/p/a/b",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/proxy/namespaces/ns/pods/p/a/b",
				Verb: "proxy", APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "p"},
				[]string{"pods", "p", "a", "b"}},
		},
		{
			name: "proxy subresource keeps the method verb", method: "GET", path: "/api/v1/namespaces/ns/pods/p/proxy/a/b",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/namespaces/ns/pods/p/proxy/a/b",
				Verb: "get", APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "p",
				Subresource: "proxy"}, []string{"pods", "p", "proxy", "a", "b"}},
		},
		{
			name: "watch prefix drops selectors", method: "GET", path: "/api/v1/watch/namespaces/ns/pods",
			rawQuery: "labelSelector=app%3Dweb",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/watch/namespaces/ns/pods",
				Verb: "watch", APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "pods"},
				[]string{"pods"}},
		},
		{
			name: "nameless delete is deletecollection", method: "DELETE", path: "/api/v1/namespaces/ns/pods",
			rawQuery: "labelSelector=a&labelSelector=b",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/namespaces/ns/pods",
				Verb: "deletecollection", APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "pods",
				LabelSelector: "a"}, []string{"pods"}},
		},
		{
			name: "exact metadata.name field selector names the object", method: "GET", path: "/api/v1/namespaces/ns/pods",
			rawQuery: "fieldSelector=metadata.name%3D%3Dweb-0",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/namespaces/ns/pods", Verb: "list",
				APIPrefix: "api", APIVersion: "v1", Namespace: "ns", Resource: "pods", Name: "web-0",
				FieldSelector: "metadata.name==web-0"}, []string{"pods"}},
		},
		{
			name: "dot-dot is no object name", method: "GET", path: "/api/v1/pods",
			rawQuery: "fieldSelector=metadata.name%3D..",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/pods", Verb: "list",
				APIPrefix: "api", APIVersion: "v1", Resource: "pods", FieldSelector: "metadata.name=.."},
				[]string{"pods"}},
		},
		{
			name: "undecodable query falls back to lowercase watch check", method: "GET", path: "/api/v1/pods",
			rawQuery: "limit=x&watch=FALSE&fieldSelector=metadata.name%3Dp",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/pods", Verb: "list",
				APIPrefix: "api", APIVersion: "v1", Resource: "pods", FieldSelector: "metadata.name=p"},
				[]string{"pods"}},
		},
		{
			name: "empty segments are kept", method: "GET", path: "//apis//apps/v1/x",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "//apis//apps/v1/x", Verb: "get",
				APIPrefix: "apis", APIVersion: "apps", Resource: "v1", Name: "x"}, []string{"v1", "x"}},
		},
		{
			name: "group and version alone are not a resource", method: "GET", path: "/apis/apps/v1",
			want: wantRequestInfo{RequestInfo{Path: "/apis/apps/v1", Verb: "get", APIPrefix: "apis"}, nil},
		},
		{
			name: "non-resource verb is the lowercased method", method: "OPTIONS", path: "/openapi/v3",
			want: wantRequestInfo{RequestInfo{Path: "/openapi/v3", Verb: "options"}, nil},
		},
		{
			name: "unknown method on a resource has no verb", method: "TRACE", path: "/api/v1/pods",
			want: wantRequestInfo{RequestInfo{IsResourceRequest: true, Path: "/api/v1/pods", APIPrefix: "api",
				APIVersion: "v1", Resource: "pods"}, []string{"pods"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRequestInfo(tt.method, tt.path, tt.rawQuery)
			if err != nil {
				t.Fatalf("ParseRequestInfo: %v", err)
			}
			if parts := got.Parts(); !reflect.DeepEqual(parts, tt.want.parts) {
				t.Errorf("Parts() = %#v, want %#v", parts, tt.want.parts)
			}
			got.partsPath = ""
			if got != tt.want.RequestInfo {
				t.Errorf("ParseRequestInfo(%q, %q, %q)\n got %+v\nwant %+v", tt.method, tt.path, tt.rawQuery, got, tt.want.RequestInfo)
			}
		})
	}
}

func TestParseRequestInfoRejectsVerbPrefixWithoutResource(t *testing.T) {
	tests := []struct {
		method, path, rawQuery string
		wantErr                string
		want                   RequestInfo
	}{
		{"GET", "/api/v1/watch", "", "unable to determine kind and namespace from url, /api/v1/watch",
			RequestInfo{IsResourceRequest: true, Path: "/api/v1/watch", Verb: "get", APIPrefix: "api", APIVersion: "v1"}},
		{"POST", "/apis/g/v/proxy/", "a=b c", "unable to determine kind and namespace from url, /apis/g/v/proxy/?a=b c",
			RequestInfo{IsResourceRequest: true, Path: "/apis/g/v/proxy/", Verb: "post", APIPrefix: "apis", APIGroup: "g", APIVersion: "v"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			got, err := ParseRequestInfo(tt.method, tt.path, tt.rawQuery)
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
			if got != tt.want || got.Parts() != nil {
				t.Errorf("got %+v with Parts %v, want %+v and no Parts", got, got.Parts(), tt.want)
			}
		})
	}
}

func TestParseRequestInfoReturnsSubstringsOfItsInputs(t *testing.T) {
	path := "/apis/apps/v1/namespaces/default/deployments/web/scale"
	query := "ignored=1"
	got, err := ParseRequestInfo("GET", path, query)
	if err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{
		"APIGroup": got.APIGroup, "APIVersion": got.APIVersion, "Namespace": got.Namespace,
		"Resource": got.Resource, "Name": got.Name, "Subresource": got.Subresource,
	} {
		if value == "" || !sharesMemory(path, value) {
			t.Errorf("%s = %q is not a substring of the path's memory", name, value)
		}
	}
}

// sharesMemory reports whether part lies inside whole's backing array.
func sharesMemory(whole, part string) bool {
	start := uintptr(unsafe.Pointer(unsafe.StringData(whole)))
	at := uintptr(unsafe.Pointer(unsafe.StringData(part)))
	return at >= start && at+uintptr(len(part)) <= start+uintptr(len(whole))
}

func TestRequestURLIsWhatNetURLPrints(t *testing.T) {
	cases := [][2]string{{"/api/v1/watch", ""}, {"*", ""}, {"a:b/c", "x=1"}, {"/a b/%/ü", "q=%20"}, {"", "watch=1"}, {"", ""}}
	rng := rand.New(rand.NewPCG(20261201, 15))
	for range 5000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = byte(rng.IntN(256))
			if rng.IntN(2) == 0 {
				b[i] = "/:*?a%"[rng.IntN(6)]
			}
		}
		cases = append(cases, [2]string{string(b), "x=" + string(b[:len(b)/2])})
	}
	for _, c := range cases {
		want := (&url.URL{Path: c[0], RawQuery: c[1]}).String()
		if got := requestURL(c[0], c[1]); got != want {
			t.Errorf("requestURL(%q, %q) = %q; net/url prints %q", c[0], c[1], got, want)
		}
	}
}
