package discovery

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/klog/v2"
)

// kubeAPIServerRequestInfo is the factory kube-apiserver installs.
var kubeAPIServerRequestInfo = request.RequestInfoFactory{
	APIPrefixes:          sets.NewString("api", "apis"),
	GrouplessAPIPrefixes: sets.NewString("api"),
}

var silenceKlog sync.Once

// upstreamRequestInfo runs the real factory on a request whose URL has exactly
// the given decoded path and raw query, as the HTTP server would build it.
func upstreamRequestInfo(method, path, rawQuery string) (*request.RequestInfo, error) {
	// The factory logs every query it cannot decode; the tests provoke that on purpose.
	silenceKlog.Do(func() { klog.SetLogger(logr.Discard()) })
	req := &http.Request{Method: method, URL: &url.URL{Path: path, RawQuery: rawQuery}}
	return kubeAPIServerRequestInfo.NewRequestInfo(req)
}

// differenceFromUpstream describes every way ParseRequestInfo disagrees with
// upstream on one request, or returns "" when they agree on all fields, Parts
// and the error.
func differenceFromUpstream(method, path, rawQuery string) string {
	want, wantErr := upstreamRequestInfo(method, path, rawQuery)
	got, gotErr := ParseRequestInfo(method, path, rawQuery)

	var diffs []string
	field := func(name string, got, want any) {
		if !reflect.DeepEqual(got, want) {
			diffs = append(diffs, fmt.Sprintf("%s = %#v, upstream %#v", name, got, want))
		}
	}
	field("IsResourceRequest", got.IsResourceRequest, want.IsResourceRequest)
	field("Path", got.Path, want.Path)
	field("Verb", got.Verb, want.Verb)
	field("APIPrefix", got.APIPrefix, want.APIPrefix)
	field("APIGroup", got.APIGroup, want.APIGroup)
	field("APIVersion", got.APIVersion, want.APIVersion)
	field("Namespace", got.Namespace, want.Namespace)
	field("Resource", got.Resource, want.Resource)
	field("Subresource", got.Subresource, want.Subresource)
	field("Name", got.Name, want.Name)
	field("Parts()", got.Parts(), want.Parts)
	field("FieldSelector", got.FieldSelector, want.FieldSelector)
	field("LabelSelector", got.LabelSelector, want.LabelSelector)
	field("error", errorText(gotErr), errorText(wantErr))
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprintf("%q %q ?%q:\n\t%s", method, path, rawQuery, strings.Join(diffs, "\n\t"))
}

func errorText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

type requestCase struct {
	method, path, rawQuery string
}

// handwrittenRequestCases each probe one rule of upstream's parser.
var handwrittenRequestCases = []requestCase{
	// Non-resource paths and short paths.
	{"GET", "", ""},
	{"GET", "/", ""},
	{"GET", "//", ""},
	{"GET", "/api", ""},
	{"GET", "/api/", ""},
	{"GET", "/apis", ""},
	{"GET", "/api/v1", ""},
	{"GET", "/api/v1/", ""},
	{"GET", "/apis/apps", ""},
	{"GET", "/apis/apps/v1", ""},
	{"GET", "/apis/apps/v1/", ""},
	{"GET", "/apis/g", ""},
	{"GET", "/apis/g/v", ""},
	{"GET", "/healthz", ""},
	{"GET", "/healthz/etcd", ""},
	{"GET", "/livez/ping", "verbose=1"},
	{"GET", "/readyz", "exclude=etcd"},
	{"GET", "/version", ""},
	{"GET", "/metrics", ""},
	{"GET", "/openapi/v2", ""},
	{"GET", "/openapi/v3", ""},
	{"GET", "/openapi/v3/apis/apps/v1", "hash=ABC"},
	{"GET", "/.well-known/openid-configuration", ""},
	{"GET", "/logs/kube-apiserver.log", ""},
	{"GET", "/apiz/v1/pods", ""},
	{"GET", "/API/v1/pods", ""},
	{"POST", "/healthz", ""},
	{"Get", "/healthz", ""},
	{"", "/healthz", ""},
	{"MKCOL", "/version", ""},
	{"ÄNDERN", "/version", ""},

	// Core and grouped resources.
	{"GET", "/api/v1/pods", ""},
	{"GET", "/api/v1/namespaces", ""},
	{"GET", "/api/v1/namespaces/default", ""},
	{"GET", "/api/v1/namespaces/default/pods", ""},
	{"GET", "/api/v1/namespaces/default/pods/web-0", ""},
	{"GET", "/api/v1/nodes/node-1", ""},
	{"GET", "/apis/apps/v1/deployments", ""},
	{"GET", "/apis/apps/v1/namespaces/default/deployments/web", ""},
	{"POST", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", ""},
	{"GET", "/apis/stable.example.com/v1/namespaces/ns/crontabs", ""},
	{"GET", "/apis/stable.example.com/v1/namespaces/ns/crontabs/my-cron", ""},
	{"PATCH", "/apis/stable.example.com/v1/namespaces/ns/crontabs/my-cron/scale", ""},
	{"GET", "/apis/stable.example.com/v1/crontabs", "labelSelector=tier%3Dfront"},

	// Subresources, including deep ones.
	{"PUT", "/api/v1/namespaces/default/pods/web-0/status", ""},
	{"GET", "/apis/apps/v1/namespaces/default/deployments/web/scale", ""},
	{"POST", "/api/v1/namespaces/default/pods/web-0/exec", "command=sh&stdin=true&tty=true"},
	{"GET", "/api/v1/namespaces/default/pods/web-0/exec", "command=ls"},
	{"POST", "/api/v1/namespaces/default/pods/web-0/attach", "stdout=true"},
	{"POST", "/api/v1/namespaces/default/pods/web-0/portforward", "ports=8080"},
	{"GET", "/api/v1/namespaces/default/pods/web-0/log", "follow=true&container=app"},
	{"POST", "/api/v1/namespaces/default/pods/web-0/eviction", ""},
	{"POST", "/api/v1/namespaces/default/serviceaccounts/default/token", ""},
	{"GET", "/api/v1/namespaces/default/pods/web-0/proxy", ""},
	{"GET", "/api/v1/namespaces/default/pods/web-0/proxy/metrics/a/b", ""},
	{"GET", "/api/v1/namespaces/default/services/http:web:80/proxy/api/v1/x", ""},
	{"GET", "/api/v1/nodes/node-1/proxy/stats/summary", ""},

	// Namespace subresources versus namespaced resources.
	{"PUT", "/api/v1/namespaces/ns/status", ""},
	{"PUT", "/api/v1/namespaces/ns/finalize", ""},
	{"GET", "/api/v1/namespaces/ns/status/extra", ""},
	{"GET", "/api/v1/namespaces/ns/finalize/a/b", ""},
	{"GET", "/api/v1/namespaces/ns/Status", ""},
	{"GET", "/api/v1/namespaces/ns/statuses", ""},
	{"GET", "/apis/g/v1/namespaces/ns/status", ""},
	{"GET", "/api/v1/namespaces/namespaces/namespaces", ""},
	{"DELETE", "/api/v1/namespaces", ""},
	{"DELETE", "/api/v1/namespaces/ns", ""},

	// Verbs from path prefixes.
	{"GET", "/api/v1/watch", ""},
	{"GET", "/api/v1/watch/", ""},
	{"GET", "/api/v1/proxy", ""},
	{"GET", "/apis/apps/v1/watch", "x=1&y=%zz"},
	{"POST", "/apis/apps/v1/proxy", ""},
	{"GET", "/api/v1/watch/pods", ""},
	{"GET", "/api/v1/watch/pods", "fieldSelector=metadata.name%3Dp&labelSelector=a"},
	{"GET", "/api/v1/watch/namespaces", ""},
	{"GET", "/api/v1/watch/namespaces/ns", ""},
	{"GET", "/api/v1/watch/namespaces/ns/pods", "labelSelector=app%3Dweb"},
	{"GET", "/api/v1/watch/namespaces/ns/pods/name", ""},
	{"GET", "/api/v1/watch/namespaces/ns/pods/name/status", ""},
	{"GET", "/api/v1/proxy/namespaces/ns/pods/p/a/b", ""},
	{"GET", "/api/v1/proxy/nodes/n1", ""},
	{"GET", "/api/v1/proxy/nodes/n1/x/y", ""},
	{"DELETE", "/api/v1/proxy/pods", ""},
	{"GET", "/api/v1/watch/watch", ""},
	{"GET", "/api/v1/proxy/watch/pods", ""},
	{"GET", "/api/v1/Watch/pods", ""},

	// Methods.
	{"HEAD", "/api/v1/pods", ""},
	{"HEAD", "/api/v1/pods/p", ""},
	{"OPTIONS", "/api/v1/pods", ""},
	{"TRACE", "/api/v1/pods", ""},
	{"CONNECT", "/api/v1/namespaces/ns/pods/p/exec", ""},
	{"get", "/api/v1/pods", "watch=true"},
	{"post", "/api/v1/pods", ""},
	{"", "/api/v1/pods", ""},
	{"", "/api/v1/watch", ""},
	{"DELETE", "/api/v1/namespaces/ns/pods", "labelSelector=app%3Dweb&fieldSelector=status.phase%3DFailed"},
	{"DELETE", "/api/v1/namespaces/ns/pods/p", "labelSelector=x"},
	{"DELETE", "/apis/apps/v1/deployments", "limit=x"},
	{"PATCH", "/api/v1/pods", "fieldSelector=metadata.name%3Dp"},

	// Watch decoding through the parameter codec.
	{"GET", "/api/v1/pods", "watch=true&resourceVersion=1"},
	{"GET", "/api/v1/pods", "watch=1"},
	{"GET", "/api/v1/pods", "watch=0"},
	{"GET", "/api/v1/pods", "watch=false"},
	{"GET", "/api/v1/pods", "watch=False"},
	{"GET", "/api/v1/pods", "watch=FALSE"},
	{"GET", "/api/v1/pods", "watch=True"},
	{"GET", "/api/v1/pods", "watch="},
	{"GET", "/api/v1/pods", "watch"},
	{"GET", "/api/v1/pods", "watch=no"},
	{"GET", "/api/v1/pods", "watch=00"},
	{"GET", "/api/v1/pods", "watch=+0"},
	{"GET", "/api/v1/pods", "watch=fal%73e"},
	{"GET", "/api/v1/pods", "watch=fal%C5%BFe"},
	{"GET", "/api/v1/pods", "watch=false&watch=true"},
	{"GET", "/api/v1/pods", "watch=true&watch=false"},
	{"GET", "/api/v1/pods", "watch=%zz&watch=false"},
	{"GET", "/api/v1/pods", "%77atch=true"},
	{"GET", "/api/v1/pods", "wat+ch=true"},
	{"GET", "/api/v1/pods", "Watch=true"},
	{"GET", "/api/v1/pods", "watch=true;x=1"},
	{"GET", "/api/v1/pods", "a=1;b=2&watch=1"},
	{"GET", "/api/v1/pods", "&&watch=1&&"},
	{"GET", "/api/v1/pods", "=1&watch=1"},
	{"GET", "/api/v1/pods", "watch=%"},
	{"GET", "/api/v1/pods", "watch=%2"},
	{"GET", "/api/v1/pods", "watch=+"},
	{"GET", "/api/v1/pods", "allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"},

	// Decode failures fall back to reading watch with lowercase comparison.
	{"GET", "/api/v1/pods", "limit=x"},
	{"GET", "/api/v1/pods", "limit=x&watch=true"},
	{"GET", "/api/v1/pods", "limit=x&watch=false"},
	{"GET", "/api/v1/pods", "limit=x&watch=FALSE"},
	{"GET", "/api/v1/pods", "limit=x&watch=0"},
	{"GET", "/api/v1/pods", "limit=x&watch="},
	{"GET", "/api/v1/pods", "limit=x&watch=fal%C5%BFe"},
	{"GET", "/api/v1/pods", "limit=500&watch=1"},
	{"GET", "/api/v1/pods", "limit=-5&watch=1"},
	{"GET", "/api/v1/pods", "limit=%2B5&watch=1"},
	{"GET", "/api/v1/pods", "limit=+5&watch=1"},
	{"GET", "/api/v1/pods", "limit=9223372036854775808&watch=1"},
	{"GET", "/api/v1/pods", "limit=1_000&watch=1"},
	{"GET", "/api/v1/pods", "limit=0x10&watch=1"},
	{"GET", "/api/v1/pods", "limit=&watch=1"},
	{"GET", "/api/v1/pods", "limit=5&limit=x&watch=1"},
	{"GET", "/api/v1/pods", "timeoutSeconds=30&watch=1"},
	{"GET", "/api/v1/pods", "timeoutSeconds=30s&watch=1"},
	{"GET", "/api/v1/pods", "continue=abc&resourceVersion=x&watch=1"},
	{"GET", "/api/v1/pods", "labelSelector=%3D%3D%3D&watch=1"},
	{"GET", "/api/v1/pods", "fieldSelector=nope&watch=1"},

	// Field selectors promoting metadata.name.
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dweb-0"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D%3Dweb-0"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name!%3Dweb-0"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name=web-0&watch=true"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D.."},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D."},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D..."},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%2Fb"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%25b"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3DUPPER_case"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%5C%2Cb"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%5C%3Db"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%5C%5Cb"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%5Cb"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%3Db"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D%3D%3Da"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%5C%FFb"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Da%5C%2C%FFb"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Db,metadata.name%3Da"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3D%3Db,metadata.name%3Da"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=status.phase%3DRunning,metadata.name%3Dp"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=,,metadata.name%3Dp,,"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=%3D"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=%3D,metadata.name%3Dp"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.namespace%3Dns"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=%20metadata.name%3Dp"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dp&fieldSelector=metadata.name%3Dq"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dp&limit=x"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dp&labelSelector=%21%21"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dp,bad"},
	{"GET", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name+%3D+p"},
	{"GET", "/api/v1/namespaces/ns/pods//status", "fieldSelector=metadata.name%3Dp"},
	{"DELETE", "/api/v1/namespaces/ns/pods", "fieldSelector=metadata.name%3Dp"},
	{"GET", "/api/v1/namespaces/ns/pods/p", "fieldSelector=metadata.name%3Dq"},

	// Label selectors: captured raw, but decode failures change the verb rules.
	{"GET", "/api/v1/pods", "labelSelector=app%3Dweb"},
	{"GET", "/api/v1/pods", "labelSelector=app+in+(a,b),!legacy,tier!%3Dfront"},
	{"GET", "/api/v1/pods", "labelSelector=example.com/app%3D%3Dweb"},
	{"GET", "/api/v1/pods", "labelSelector=Example.com/app%3Dweb&watch=false"},
	{"GET", "/api/v1/pods", "labelSelector=x+notin+()&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=x+gt+5&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=x%3E5&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=x%3E-5&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=x%3Cy&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=a,&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=a%00junk&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=a+%00junk%21%21&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=%3Dfoo&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=in+in+(in,notin)&watch=0"},
	{"GET", "/api/v1/pods", "labelSelector=a&labelSelector=%28&watch=0"},

	// Empty segments, trailing slashes and escapes in the decoded path.
	{"GET", "//apis//apps/v1/x", ""},
	{"GET", "/api//v1/pods", ""},
	{"GET", "/api/v1//pods", ""},
	{"GET", "/api/v1/pods//", ""},
	{"GET", "/api/v1/pods/", ""},
	{"GET", "/api/v1/pods/p/", ""},
	{"GET", "///api///v1///pods///", ""},
	{"GET", "/api/v1/namespaces//pods", ""},
	{"GET", "/api/v1/namespaces/ns//p", ""},
	{"GET", "/api/v1/namespaces/ns/pods/", "watch=1"},
	{"GET", "api/v1/pods", ""},
	{"GET", "api/v1/watch", "q=1"},
	{"GET", "/api/v1/pods/a b", ""},
	{"GET", "/api/v1/pods/a%2Fb", ""},
	{"GET", "/api/v1/pods/ü", ""},
	{"GET", "/api/v1/pods/\xff", ""},
	{"GET", "/api/v1/watch", "a b=%"},
	{"GET", "/api:v1/v1/watch", ""},
	{"GET", "/api/v1/watch", "#frag"},
	{"GET", "/api/v1/pods?x=1", ""},
}

// generatedRequestCases crosses methods with paths and list queries so that
// every verb rule meets every path shape.
func generatedRequestCases() []requestCase {
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get"}
	paths := []string{
		"/api/v1/pods",
		"/api/v1/pods/p",
		"/api/v1/pods/p/status",
		"/api/v1/namespaces",
		"/api/v1/namespaces/ns",
		"/api/v1/namespaces/ns/status",
		"/api/v1/namespaces/ns/pods",
		"/api/v1/namespaces/ns/pods/p/log",
		"/apis/apps/v1/namespaces/ns/deployments/d/scale",
		"/apis/batch/v1/jobs",
		"/api/v1/watch/pods",
		"/api/v1/proxy/nodes/n/metrics",
		"/apis/apps/v1",
		"/healthz",
	}
	queries := []string{
		"",
		"watch=true",
		"limit=x&watch=False",
		"fieldSelector=metadata.name%3Dp&labelSelector=app%3Dweb",
	}
	var cases []requestCase
	for _, method := range methods {
		for _, path := range paths {
			for _, query := range queries {
				cases = append(cases, requestCase{method, path, query})
			}
		}
	}
	// url.ParseQuery gives up on more than 10000 parameters; kube then sees no query.
	for _, ampersands := range []int{maxQueryParams - 1, maxQueryParams} {
		query := "watch=1&fieldSelector=metadata.name%3Dp" + strings.Repeat("&", ampersands-1)
		cases = append(cases, requestCase{"GET", "/api/v1/pods", query})
	}
	return cases
}

func TestParseRequestInfoMatchesUpstreamOnTable(t *testing.T) {
	cases := append(append([]requestCase(nil), handwrittenRequestCases...), generatedRequestCases()...)
	if len(cases) < 200 {
		t.Fatalf("table has %d cases, want at least 200", len(cases))
	}
	for _, c := range cases {
		name := c.method + " " + c.path + "?" + c.rawQuery
		if len(name) > 120 {
			name = name[:120]
		}
		t.Run(name, func(t *testing.T) {
			if diff := differenceFromUpstream(c.method, c.path, c.rawQuery); diff != "" {
				t.Error(diff)
			}
		})
	}
}

// randomRequestPiece draws from pieces chosen to collide with upstream's rules.
func randomRequestPiece(r *rand.Rand, pieces []string) string {
	return pieces[r.IntN(len(pieces))]
}

func TestParseRequestInfoMatchesUpstreamOnRandomRequests(t *testing.T) {
	r := rand.New(rand.NewPCG(20260721, 4020))
	methods := []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get", ""}
	segments := []string{
		"", "api", "apis", "v1", "apps", "namespaces", "ns", "status", "finalize",
		"watch", "proxy", "pods", "p", "exec", "log", "scale", ".", "..", "a%b", "é",
	}
	keys := []string{
		"watch", "limit", "timeoutSeconds", "fieldSelector", "labelSelector",
		"resourceVersion", "%77atch", "wat;ch", "", "watch%",
	}
	values := []string{
		"", "true", "false", "FALSE", "0", "1", "x", "-1", "%zz", "+",
		"metadata.name%3Dp", "metadata.name%3D%3Dq", "metadata.name%3D..", "a%3Db,metadata.name%3Dz",
		"app%3Dweb", "a+in+(b,c)", "%21a", "a%3E1", "((", "metadata.name%3Dx%5C%2Cy",
	}
	for i := range 20000 {
		var path strings.Builder
		if r.IntN(8) != 0 {
			path.WriteByte('/')
		}
		for j := range r.IntN(8) {
			if j > 0 {
				path.WriteByte('/')
			}
			path.WriteString(randomRequestPiece(r, segments))
		}
		if r.IntN(4) == 0 {
			path.WriteByte('/')
		}
		var query strings.Builder
		for j := range r.IntN(4) {
			if j > 0 {
				query.WriteByte('&')
			}
			query.WriteString(randomRequestPiece(r, keys))
			if r.IntN(6) != 0 {
				query.WriteByte('=')
				query.WriteString(randomRequestPiece(r, values))
			}
		}
		if diff := differenceFromUpstream(randomRequestPiece(r, methods), path.String(), query.String()); diff != "" {
			t.Fatalf("random request %d: %s", i, diff)
		}
	}
}

// labelSelectorCases cover the lexer's symbol and NUL handling and the key and
// value validation rules behind labels.Parse.
var labelSelectorCases = []string{
	"", " ", "a", "!a", "! a", "!!a", "a,", ",a", "a,,b", "a b", "a=b", "a==b", "a!=b", "a===b", "a!==b",
	"a=", "a==", "a=,b", "a=b,c!=d", "a in (b)", "a in(b,c)", "a in ()", "a in (,)", "a in (,b)",
	"a in (b,)", "a in (b,,c)", "a in b", "a in (b", "a in (b c)", "a notin (b)", "a notin ()",
	"a in ((b))", "a in (!)", "a > 1", "a<1", "a>-1", "a>+1", "a>1.5", "a>", "a>b", "a >= 1", "a<=1",
	"in", "notin", "in in (in)", "notin notin (notin)", "in=in", "!in", "a=in", "a=notin", "a in (in, notin)",
	"a=(", "a=)", "(", ")", "=", "!", "!=", "==", "!a=b", "!a in (b)", "a!", "a=b=c", "a=b!c",
	"-a", "a-", "a_b", "a.b", "_a", "A", "0", "a/b", "example.com/a", "Example.com/a", "/a", "a/", "a/b/c",
	"-example.com/a", "example-.com/a", "ex..com/a", "example.com./a", "1.2.3/a", "a=-b", "a=b_", "a=B.c",
	"a=" + strings.Repeat("v", 63), "a=" + strings.Repeat("v", 64), strings.Repeat("k", 63), strings.Repeat("k", 64),
	strings.Repeat("d", 253) + "/k", strings.Repeat("d", 254) + "/k",
	"a\tb", "a\n,b", "a\r", "a\x00", "a\x00b", "a\x00,b", "a,\x00b", "a=\x00", "a=\x00b", "a!=\x00b",
	"a==\x00b", "a=\x00\x00b", "\x00", "\x00!!", " \x00 ((", "a \x00 ))", "a=b\x00!!", "a in (b\x00)",
	"a in (\x00)", "a\x00in (b)", "é", "a=é", "a=\xff",
}

func TestValidLabelSelectorMatchesLabelsParse(t *testing.T) {
	for _, selector := range labelSelectorCases {
		t.Run(fmt.Sprintf("%q", selector), func(t *testing.T) {
			_, err := labels.Parse(selector)
			if got, want := validLabelSelector(selector), err == nil; got != want {
				t.Errorf("validLabelSelector(%q) = %v, labels.Parse error %v", selector, got, err)
			}
		})
	}
}

func TestValidLabelSelectorMatchesLabelsParseOnRandomSelectors(t *testing.T) {
	r := rand.New(rand.NewPCG(63, 253))
	pieces := []string{
		"a", "b1", "in", "notin", "x.y/z", "Ex/z", "-", "_", ".", "/", " ", "\t", "\x00",
		"=", "==", "!=", "!", "(", ")", ",", ">", "<", "5", "-5", "é",
	}
	for i := range 50000 {
		var selector strings.Builder
		for range r.IntN(9) {
			selector.WriteString(randomRequestPiece(r, pieces))
		}
		s := selector.String()
		_, err := labels.Parse(s)
		if got, want := validLabelSelector(s), err == nil; got != want {
			t.Fatalf("selector %d %q: validLabelSelector = %v, labels.Parse error %v", i, s, got, err)
		}
	}
}

// upstreamExactName is what RequestInfo reads from a parsed field selector.
func upstreamExactName(selector string) (name string, pinned, valid bool) {
	parsed, err := fields.ParseSelector(selector)
	if err != nil {
		return "", false, false
	}
	name, pinned = parsed.RequiresExactMatch("metadata.name")
	return name, pinned, true
}

var fieldSelectorCases = []string{
	"", ",", ",,", "=", "==", "!=", "a", "a=b", "a==b", "a!=b", "a!b=c", "a=!=b", "a===b", "a=b=c",
	"metadata.name=p", "metadata.name==p", "metadata.name!=p", "metadata.name=", "metadata.name",
	"metadata.name=b,metadata.name=a", "metadata.name==b,metadata.name=a", "metadata.name=a,metadata.name==b",
	"metadata.name!=a,metadata.name=b", "x=1,metadata.name=p,y=2", "metadata.name=a\\,b", "metadata.name=a\\=b",
	"metadata.name=a\\\\b", "metadata.name=a\\b", "metadata.name=a\\", "metadata.name=a,b", "metadata.name\\,x=p",
	"metadata\\=name=p", "metadata.name=\\\xff", "metadata.name=\\,\xff", "metadata.name=\xff", " metadata.name=p",
	"metadata.name =p", "METADATA.NAME=p", "=,metadata.name=p", "metadata.name=p,", "metadata.name=é\\,",
}

func TestParseFieldSelectorMatchesFieldsParseSelector(t *testing.T) {
	for _, selector := range fieldSelectorCases {
		t.Run(fmt.Sprintf("%q", selector), func(t *testing.T) {
			name, pinned, valid := parseFieldSelector(selector)
			wantName, wantPinned, wantValid := upstreamExactName(selector)
			if name != wantName || pinned != wantPinned || valid != wantValid {
				t.Errorf("parseFieldSelector(%q) = %q, %v, %v; upstream %q, %v, %v",
					selector, name, pinned, valid, wantName, wantPinned, wantValid)
			}
		})
	}
}

func TestParseFieldSelectorMatchesFieldsParseSelectorOnRandomSelectors(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"metadata.name", "spec.nodeName", "a", "=", "==", "!=", "!", ",", "\\", "\\,", "\\=", "\xff", "é", ""}
	for i := range 50000 {
		var selector strings.Builder
		for range r.IntN(8) {
			selector.WriteString(randomRequestPiece(r, pieces))
		}
		s := selector.String()
		name, pinned, valid := parseFieldSelector(s)
		wantName, wantPinned, wantValid := upstreamExactName(s)
		if name != wantName || pinned != wantPinned || valid != wantValid {
			t.Fatalf("selector %d %q: got %q, %v, %v; upstream %q, %v, %v",
				i, s, name, pinned, valid, wantName, wantPinned, wantValid)
		}
	}
}
