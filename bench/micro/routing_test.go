package micro

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/skewgate/skewgate/discovery"
)

// routingRequests are everyday API requests against the captured plane: two
// that every server serves and two that only the newer servers serve; then
// lists with field selectors (escaped as client-go escapes them, or not)
// that every server accepts or only v1.37.2 does, and a write of a kind only
// v1.37.2 knows every field of (capturedFieldData). fieldSkew marks those
// the field-level data re-routes.
var routingRequests = []struct {
	name, method, path, rawQuery string
	want                         discovery.Action
	fieldSkew                    bool
}{
	{"get-object", "GET", "/apis/apps/v1/namespaces/default/deployments/web", "", discovery.Forward, false},
	{"list-pods", "GET", "/api/v1/namespaces/kube-system/pods", "limit=500&resourceVersion=0", discovery.Forward, false},
	{"create-rerouted", "POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "", discovery.Route, false},
	{"watch-rerouted", "GET", "/apis/certificates.k8s.io/v1/clustertrustbundles", "watch=true&resourceVersion=1", discovery.Route, false},
	{"list-field-selector", "GET", "/apis/resource.k8s.io/v1/resourceslices", "fieldSelector=spec.nodeName=node-1,spec.driver=dra.example.com&limit=500", discovery.Forward, false},
	{"list-field-selector-escaped", "GET", "/apis/resource.k8s.io/v1/resourceslices", "fieldSelector=spec.nodeName%3Dnode-1%2Cspec.driver%3Ddra.example.com&limit=500", discovery.Forward, false},
	{"watch-field-selector-rerouted", "GET", "/apis/resource.k8s.io/v1/resourceslices", "fieldSelector=spec.pool.name=pool-1&watch=true", discovery.Route, true},
	{"watch-field-selector-escaped-rerouted", "GET", "/apis/resource.k8s.io/v1/resourceslices", "fieldSelector=spec.pool.name%3Dpool-1&watch=true", discovery.Route, true},
	{"create-schema-skew-rerouted", "POST", "/apis/batch/v1/namespaces/default/jobs", "", discovery.Route, true},
}

// kubeAPIServerRequestInfo is the factory kube-apiserver installs.
var kubeAPIServerRequestInfo = request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

// upstreamCapabilities maps every resource of the captured plane to the servers
// serving it (bit i: server i of capturedPlane), keyed by the GVR as upstream's
// peer proxy keys its discovery cache, decoded with upstream's types.
func upstreamCapabilities(tb testing.TB) map[schema.GroupVersionResource]discovery.ServerSet {
	tb.Helper()
	capable := map[schema.GroupVersionResource]discovery.ServerSet{}
	for i, s := range capturedPlane(tb) {
		for _, doc := range [][]byte{s.APIs, s.API} {
			var list apidiscoveryv2.APIGroupDiscoveryList
			if err := json.Unmarshal(doc, &list); err != nil {
				tb.Fatal(err)
			}
			for _, g := range list.Items {
				for _, v := range g.Versions {
					for _, r := range v.Resources {
						capable[schema.GroupVersionResource{Group: g.Name, Version: v.Version, Resource: r.Resource}] |= 1 << i
					}
				}
			}
		}
	}
	return capable
}

func upstreamLookup(capable map[schema.GroupVersionResource]discovery.ServerSet, req *http.Request) (discovery.ServerSet, error) {
	info, err := kubeAPIServerRequestInfo.NewRequestInfo(req)
	if err != nil {
		return 0, err
	}
	return capable[schema.GroupVersionResource{Group: info.APIGroup, Version: info.APIVersion, Resource: info.Resource}], nil
}

func TestRoutingBenchmarkSidesAnswerTheSameQuestion(t *testing.T) {
	ix := capturedIndex(t)
	capable := upstreamCapabilities(t)
	every := ix.Healthy()
	for _, r := range routingRequests {
		t.Run(r.name, func(t *testing.T) {
			info, err := discovery.ParseRequestInfo(r.method, r.path, r.rawQuery)
			if err != nil || !info.IsResourceRequest {
				t.Fatalf("ParseRequestInfo: %+v, %v; want a resource request", info, err)
			}
			d := ix.Decide(&discovery.Request{Method: r.method, Path: r.path, Query: r.rawQuery}, 0)
			if d.Action != r.want {
				t.Fatalf("Decide: %v; want %v", d.Action, r.want)
			}
			set, err := upstreamLookup(capable, &http.Request{Method: r.method, URL: &url.URL{Path: r.path, RawQuery: r.rawQuery}})
			if err != nil {
				t.Fatal(err)
			}
			if want := ix.ServersForResource(info.APIGroup, info.APIVersion, info.Resource); set != want {
				t.Errorf("upstream lookup finds servers %b; the index %b", set, want)
			}
			if rerouted := set != every || r.fieldSkew; rerouted != (r.want == discovery.Route) {
				t.Errorf("upstream lookup: servers %b of %b; decision %v", set, every, r.want)
			}
		})
	}
}

var (
	routingSinkAction discovery.Action
	routingSinkSet    discovery.ServerSet
)

// BenchmarkRequestRouting is the per-request routing work: skewgate's
// ParseRequestInfo and Decide against upstream's RequestInfoFactory and a map
// lookup of the GVR, on the same requests and the same captured servers.
func BenchmarkRequestRouting(b *testing.B) {
	ix := capturedIndex(b)
	capable := upstreamCapabilities(b)
	for _, r := range routingRequests {
		b.Run(r.name, func(b *testing.B) {
			b.Run("skewgate", func(b *testing.B) {
				req := discovery.Request{Method: r.method, Path: r.path, Query: r.rawQuery}
				b.ReportAllocs()
				for i := range b.N {
					if _, err := discovery.ParseRequestInfo(r.method, r.path, r.rawQuery); err != nil {
						b.Fatal(err)
					}
					routingSinkAction = ix.Decide(&req, uint64(i)).Action
				}
			})
			b.Run("upstream", func(b *testing.B) {
				req := &http.Request{Method: r.method, URL: &url.URL{Path: r.path, RawQuery: r.rawQuery}}
				b.ReportAllocs()
				for b.Loop() {
					set, err := upstreamLookup(capable, req)
					if err != nil {
						b.Fatal(err)
					}
					routingSinkSet = set
				}
			})
		})
	}
}

const acceptAggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

// BenchmarkDecide is the plugin's per-request decision alone on the captured
// plane: the routing requests plus client-go's aggregated discovery request
// revalidating a cached /apis.
func BenchmarkDecide(b *testing.B) {
	ix := capturedIndex(b)
	requests := map[string]discovery.Request{
		"discovery-not-modified": {Method: "GET", Path: "/apis", Accept: acceptAggregated + ",application/json", IfNoneMatch: ix.MergedAPIs().ETag},
	}
	names := []string{}
	for _, r := range routingRequests {
		requests[r.name] = discovery.Request{Method: r.method, Path: r.path, Query: r.rawQuery}
		names = append(names, r.name)
	}
	names = append(names, "discovery-not-modified")
	for _, name := range names {
		req := requests[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				routingSinkAction = ix.Decide(&req, uint64(i)).Action
			}
		})
	}
}
