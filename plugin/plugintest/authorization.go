package plugintest

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/metricdef"
)

// What kube-apiserver answers GET /apis (Accept: application/json) with, by
// credential.
const (
	goodToken     = "Bearer good"
	otherToken    = "Bearer other"
	wrongToken    = "Bearer wrong"
	groupListBody = `{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`
	forbiddenBody = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"forbidden: User \"system:anonymous\" cannot get path \"/apis\"","reason":"Forbidden","details":{},"code":403}`
)

// allow answers every call as an API server that lets the client read
// discovery.
func allow(HTTPCall) HTTPCallResponse {
	return HTTPCallResponse{Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte(groupListBody)}
}

// apiServer answers as kube-apiserver with default RBAC does: anonymous
// clients are forbidden, known tokens allowed, unknown ones unauthorized.
func apiServer(c HTTPCall) HTTPCallResponse {
	switch c.Header("authorization") {
	case "":
		return HTTPCallResponse{Status: 403, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte(forbiddenBody)}
	case goodToken, otherToken:
		return allow(c)
	}
	return HTTPCallResponse{Status: 401, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte(unauthorizedBody)}
}

func mergedDiscoveryGoesOnlyToClientsTheAPIServersAnswer(t *testing.T, h Harness) {
	servers := discoverytest.SkewedControlPlane()
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, servers), HTTPCalls: apiServer})
	ix := mergedIndex(t, servers)
	accept := [2]string{"accept", AcceptV2}

	res := p.Request("GET", "/apis", accept)
	if res.Forwarded || res.Local == nil || res.Local.Status != 403 || string(res.Local.Body) != forbiddenBody ||
		res.Local.Header("content-type") != "application/json" {
		t.Fatalf("anonymous: forwarded %v, local %+v; want the API server's 403 as it came", res.Forwarded, res.Local)
	}
	if len(res.HTTPCalls) != 1 {
		t.Fatalf("anonymous: %d calls; want 1", len(res.HTTPCalls))
	}
	call := res.HTTPCalls[0]
	if !slices.Contains([]string{"kube-a", "kube-b", "kube-c"}, call.Cluster) {
		t.Errorf("asked cluster %q; want a server's own cluster (no front-proxy credential)", call.Cluster)
	}
	for name, want := range map[string]string{":method": "GET", ":path": "/apis", ":authority": "kube.example", "accept": "application/json", "authorization": ""} {
		if got := call.Header(name); got != want {
			t.Errorf("call %s = %q; want %q", name, got, want)
		}
	}
	// An ETag probe must not tell an anonymous client anything either.
	res = p.Request("GET", "/apis", accept, [2]string{"if-none-match", ix.MergedAPIs().ETag})
	if res.Local == nil || res.Local.Status != 403 {
		t.Errorf("anonymous If-None-Match: %+v; want 403", res.Local)
	}

	res = p.Request("GET", "/apis", accept, [2]string{"authorization", wrongToken})
	if res.Local == nil || res.Local.Status != 401 || string(res.Local.Body) != unauthorizedBody {
		t.Errorf("invalid token: %+v; want the API server's 401", res.Local)
	}
	if len(res.HTTPCalls) != 1 || res.HTTPCalls[0].Header("authorization") != wrongToken {
		t.Errorf("invalid token: calls %+v; want one carrying the token", res.HTTPCalls)
	}

	res = p.Request("GET", "/api?timeout=32s", accept, [2]string{"authorization", goodToken},
		[2]string{"impersonate-user", "bob"}, [2]string{"impersonate-group", "devs"}, [2]string{"impersonate-group", "ops"})
	if res.Local == nil || res.Local.Status != 200 || string(res.Local.Body) != string(ix.MergedCoreAPI().Body) {
		t.Fatalf("valid token: %+v; want 200 and the merged core document", res.Local)
	}
	if len(res.HTTPCalls) != 1 {
		t.Fatalf("valid token: %d calls; want 1", len(res.HTTPCalls))
	}
	call = res.HTTPCalls[0]
	if call.Header(":path") != "/api?timeout=32s" || call.Header("impersonate-user") != "bob" ||
		!slices.Equal(call.Values("impersonate-group"), []string{"devs", "ops"}) {
		t.Errorf("call headers %q; want the client's path and impersonation", call.Headers)
	}
	for name, want := range map[string]uint64{
		metricdef.PluginDiscoveryAuthorizationsChecked.Name:  3,
		metricdef.PluginDiscoveryAuthorizationCacheHits.Name: 1,
		metricdef.PluginDiscoveryAuthorizationsDenied.Name:   3,
		metricdef.PluginMergedDiscoveryServed.Name:           1,
	} {
		if got := p.Counter(name); got != want {
			t.Errorf("%s = %d; want %d", name, got, want)
		}
	}
}

func discoveryAuthorizationIsRememberedPerCredential(t *testing.T, h Harness) {
	servers := discoverytest.SkewedControlPlane()
	p := start(t, h, StartOptions{Config: Config(t, 1, nil, servers), HTTPCalls: apiServer})
	etag := mergedIndex(t, servers).MergedAPIs().ETag
	accept := [2]string{"accept", AcceptV2}
	for _, c := range []struct {
		name    string
		path    string
		headers [][2]string
		status  uint32
		calls   int
	}{
		{"first", "/apis", [][2]string{{"authorization", goodToken}}, 200, 1},
		{"again", "/apis", [][2]string{{"authorization", goodToken}}, 200, 0},
		{"conditional", "/apis", [][2]string{{"authorization", goodToken}, {"if-none-match", etag}}, 304, 0},
		{"head", "/apis", [][2]string{{"authorization", goodToken}}, 200, 0},
		{"another token", "/apis", [][2]string{{"authorization", otherToken}}, 200, 1},
		{"another path", "/api", [][2]string{{"authorization", goodToken}}, 200, 1},
		{"impersonating", "/apis", [][2]string{{"authorization", goodToken}, {"impersonate-user", "bob"}}, 200, 1},
		{"invalid token", "/apis", [][2]string{{"authorization", wrongToken}}, 401, 1},
		{"invalid token again", "/apis", [][2]string{{"authorization", wrongToken}}, 401, 0},
	} {
		method := "GET"
		if c.name == "head" {
			method = "HEAD"
		}
		res := p.Request(method, c.path, append(c.headers, accept)...)
		if res.Local == nil || res.Local.Status != c.status || len(res.HTTPCalls) != c.calls {
			t.Errorf("%s: local %+v after %d calls; want %d after %d", c.name, res.Local, len(res.HTTPCalls), c.status, c.calls)
		}
	}
	if got := p.Counter(metricdef.PluginDiscoveryAuthorizationCacheHits.Name); got != 4 {
		t.Errorf("cache hits %d; want 4", got)
	}
}

func discoveryAuthorizationCacheSecondsZeroAsksEveryTime(t *testing.T, h Harness) {
	config := Config(t, 1, map[string]any{"discoveryAuthorizationCacheSeconds": 0}, discoverytest.SkewedControlPlane())
	p := start(t, h, StartOptions{Config: config, HTTPCalls: apiServer})
	for i := range 2 {
		res := p.Request("GET", "/apis", [2]string{"accept", AcceptV2}, [2]string{"authorization", goodToken})
		if res.Local == nil || res.Local.Status != 200 || len(res.HTTPCalls) != 1 {
			t.Errorf("request %d: local %+v after %d calls; want 200 after 1", i, res.Local, len(res.HTTPCalls))
		}
	}
}

// An API server that does not answer, or answers neither yes nor no, leaves
// the question open: 503 with Retry-After, and the next request asks again.
func discoveryAuthorizationWithoutAnswerGives503AndIsAskedAgain(t *testing.T, h Harness) {
	answers := []HTTPCallResponse{{Failed: true}, {Status: 500, Body: []byte("internal error")}, {Status: 429}, allow(HTTPCall{})}
	p := start(t, h, StartOptions{
		Config: Config(t, 1, map[string]any{"retryAfterSeconds": 7}, discoverytest.SkewedControlPlane()),
		HTTPCalls: func(HTTPCall) HTTPCallResponse {
			a := answers[0]
			answers = answers[1:]
			return a
		},
	})
	for i, want := range []uint32{503, 503, 503, 200} {
		res := p.Request("GET", "/apis", [2]string{"accept", AcceptV2}, [2]string{"authorization", goodToken})
		if res.Local == nil || res.Local.Status != want || len(res.HTTPCalls) != 1 {
			t.Fatalf("request %d: local %+v after %d calls; want %d after 1", i, res.Local, len(res.HTTPCalls), want)
		}
		if want != 503 {
			continue
		}
		var status struct {
			Kind, Reason string
			Code         int
		}
		if err := json.Unmarshal(res.Local.Body, &status); err != nil || status.Kind != "Status" || status.Reason != "ServiceUnavailable" || status.Code != 503 {
			t.Errorf("request %d: body %s (%v); want a ServiceUnavailable Status", i, res.Local.Body, err)
		}
		if got := res.Local.Header("retry-after"); got != "7" {
			t.Errorf("request %d: Retry-After %q; want 7", i, got)
		}
	}
	if got := p.Counter(metricdef.PluginDiscoveryAuthorizationFailures.Name); got != 3 {
		t.Errorf("failures counter %d; want 3", got)
	}
}

func frontProxyDiscoveryAuthorizationCarriesTheAssertedIdentity(t *testing.T, h Harness) {
	config := Config(t, 1, map[string]any{"identityMode": "front-proxy"}, discoverytest.SkewedControlPlane())
	p := start(t, h, StartOptions{Config: config, SubjectPeerCertificate: testSubjectWithUID, SHA256PeerCertificateDigest: testDigest, HTTPCalls: allow})
	res := p.Request("GET", "/apis", [2]string{"accept", AcceptV2},
		[2]string{"x-remote-user", "system:admin"}, [2]string{"x-remote-group", "system:masters"}, [2]string{"authorization", "Bearer abc"})
	if res.Local == nil || res.Local.Status != 200 || len(res.HTTPCalls) != 1 {
		t.Fatalf("local %+v after %d calls; want 200 after 1", res.Local, len(res.HTTPCalls))
	}
	call := res.HTTPCalls[0]
	if cluster, ok := strings.CutSuffix(call.Cluster, FrontProxySuffix); !ok || !slices.Contains([]string{"kube-a", "kube-b", "kube-c"}, cluster) {
		t.Errorf("asked cluster %q; want a server's front-proxy cluster", call.Cluster)
	}
	if got := call.Values("x-remote-user"); !slices.Equal(got, []string{"alice, jr"}) {
		t.Errorf("call x-remote-user %q; want the certificate's [alice, jr]", got)
	}
	if got := call.Values("x-remote-group"); !slices.Equal(got, []string{"system:masters", "dev"}) {
		t.Errorf("call x-remote-group %q; want the certificate's organizations", got)
	}
	if got := call.Values("x-remote-uid"); !slices.Equal(got, []string{testUID}) {
		t.Errorf("call x-remote-uid %q; want the certificate's [%s]", got, testUID)
	}
	if got := call.Values(credentialIDHeader); !slices.Equal(got, []string{"X509SHA256=" + testDigest}) {
		t.Errorf("call %s %q; want the certificate's X509SHA256= digest", credentialIDHeader, got)
	}
	if got := call.Header("authorization"); got != "Bearer abc" {
		t.Errorf("call authorization %q; want what the request carries", got)
	}
}

// In node-local mode the local server answers, as it answers everything else.
func discoveryAuthorizationAsksThePreferredServer(t *testing.T, h Harness) {
	for _, c := range []struct {
		name      string
		localDown bool
		want      []string
	}{
		{"preferred server healthy", false, []string{"kube-a"}},
		{"preferred server down", true, []string{"kube-b", "kube-c"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			servers := discoverytest.SkewedControlPlane()
			servers[0].Healthy = !c.localDown
			p := start(t, h, StartOptions{Config: nodeLocalConfig(t, servers), HTTPCalls: allow})
			res := p.Request("GET", "/apis", [2]string{"accept", AcceptV2})
			if len(res.HTTPCalls) != 1 || !slices.Contains(c.want, res.HTTPCalls[0].Cluster) {
				t.Errorf("calls %+v; want one to %q", res.HTTPCalls, c.want)
			}
		})
	}
}
