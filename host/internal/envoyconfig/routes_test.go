package envoyconfig

import (
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// firstMatchingRoute picks the route Envoy picks: the first whose match holds
// for the path (with query) and headers, :method among them (GET unless
// given). It knows only the match fields the rendered routes use and fails
// on any other, so a new kind of match cannot pass unexamined.
func firstMatchingRoute(routes []*routev3.Route, target string, headers map[string]string) (*routev3.Route, error) {
	if _, ok := headers[":method"]; !ok {
		headers = maps.Clone(headers)
		headers[":method"] = "GET"
	}
	path, rawQuery, _ := strings.Cut(target, "?")
	// A pair with a malformed escape is left out, as kube-apiserver leaves
	// it out; Envoy keeping it could only make a watch of what is not one.
	query, _ := url.ParseQuery(rawQuery)
	for _, r := range routes {
		ok, err := routeMatches(r.GetMatch(), path, query, headers)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", r.GetName(), err)
		}
		if ok {
			return r, nil
		}
	}
	return nil, fmt.Errorf("no route for %s", target)
}

func routeMatches(m *routev3.RouteMatch, path string, query url.Values, headers map[string]string) (bool, error) {
	if err := onlyFields(m, "prefix", "safe_regex", "headers", "query_parameters"); err != nil {
		return false, err
	}
	var ok bool
	switch {
	case m.GetSafeRegex() != nil:
		// Envoy matches the whole path, without the query string.
		re, err := regexp.Compile(`^(?:` + m.GetSafeRegex().GetRegex() + `)$`)
		if err != nil {
			return false, err
		}
		ok = re.MatchString(path)
	default:
		ok = strings.HasPrefix(path, m.GetPrefix())
	}
	for _, h := range m.GetHeaders() {
		if err := onlyFields(h, "name", "present_match", "string_match"); err != nil {
			return false, err
		}
		value, present := headers[h.GetName()]
		if sm := h.GetStringMatch(); sm != nil {
			if err := onlyFields(sm, "safe_regex"); err != nil {
				return false, err
			}
			re, err := regexp.Compile(`^(?:` + sm.GetSafeRegex().GetRegex() + `)$`)
			if err != nil {
				return false, err
			}
			ok = ok && present && re.MatchString(value)
		} else {
			ok = ok && present == h.GetPresentMatch()
		}
	}
	for _, q := range m.GetQueryParameters() {
		if err := onlyFields(q, "name", "present_match", "string_match"); err != nil {
			return false, err
		}
		values, present := query[q.GetName()]
		if sm := q.GetStringMatch(); sm != nil {
			if err := onlyFields(sm, "safe_regex"); err != nil {
				return false, err
			}
			re, err := regexp.Compile(`^(?:` + sm.GetSafeRegex().GetRegex() + `)$`)
			if err != nil {
				return false, err
			}
			// Envoy, like kube-apiserver, reads the first value only.
			ok = ok && present && re.MatchString(values[0])
		} else {
			ok = ok && present == q.GetPresentMatch()
		}
	}
	return ok, nil
}

func onlyFields(m interface{ ProtoReflect() protoreflect.Message }, allowed ...string) error {
	var err error
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(allowed, string(fd.Name())) {
			err = fmt.Errorf("the route matcher of this test does not know %s", fd.FullName())
		}
		return err == nil
	})
	return err
}

// TestOnlyNonLongRunningRequestsGetTheRequestTimeout routes requests through
// the rendered routes, steered and balanced, and checks their timeouts
// against kube-apiserver's long-running classification.
func TestOnlyNonLongRunningRequestsGetTheRequestTimeout(t *testing.T) {
	doc, err := Render(exampleSpec())
	if err != nil {
		t.Fatal(err)
	}
	routes := httpConnectionManagerOf(t, decodeBootstrapForTest(t, doc)).GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	timeout, err := time.ParseDuration(requestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		target      string
		upgrade     bool
		longRunning bool
	}{
		{"list", "/api/v1/namespaces/default/pods?limit=500", false, false},
		{"get", "/apis/apps/v1/namespaces/default/deployments/web", false, false},
		{"cluster-scoped get", "/api/v1/nodes/node-1", false, false},
		{"status subresource", "/api/v1/namespaces/default/pods/web-0/status", false, false},
		{"scale subresource", "/apis/apps/v1/namespaces/default/deployments/web/scale", false, false},
		{"a pod named exec", "/api/v1/namespaces/default/pods/exec", false, false},
		{"a namespace named watch", "/apis/apps/v1/namespaces/watch/deployments", false, false},
		{"a configmap whose name starts with log", "/api/v1/namespaces/default/configmaps/logging", false, false},
		{"watch=false", "/api/v1/pods?watch=false", false, false},
		{"watch=0", "/api/v1/pods?watch=0", false, false},
		{"watch=FALSE", "/api/v1/pods?watch=FALSE", false, false},
		{"discovery", "/apis", false, false},
		{"openapi", "/openapi/v3/apis/apps/v1", false, false},
		{"readiness", "/readyz?verbose", false, false},
		{"watch=true", "/api/v1/namespaces/default/pods?watch=true&resourceVersion=10", false, true},
		{"watch=1", "/apis/apps/v1/deployments?watch=1", false, true},
		{"watch=TRUE", "/api/v1/pods?watch=TRUE", false, true},
		{"watch with an empty value", "/api/v1/pods?watch=", false, true},
		{"first watch value decides", "/api/v1/pods?watch=1&watch=false", false, true},
		{"first watch value decides, not watching", "/api/v1/pods?watch=false&watch=1", false, false},
		{"watch path", "/api/v1/watch/namespaces/default/pods", false, true},
		{"watch path of a group", "/apis/apps/v1/watch/deployments", false, true},
		{"watch path with watch=false", "/api/v1/watch/pods?watch=false", false, true},
		{"proxy verb path", "/api/v1/proxy/namespaces/default/pods/web-0/metrics", false, true},
		{"exec", "/api/v1/namespaces/default/pods/web-0/exec?command=sh&stdin=true", false, true},
		{"attach", "/api/v1/namespaces/default/pods/web-0/attach", false, true},
		{"portforward", "/api/v1/namespaces/default/pods/web-0/portforward", false, true},
		{"log", "/api/v1/namespaces/default/pods/web-0/log?follow=true", false, true},
		{"service proxy", "/api/v1/namespaces/default/services/https:web:443/proxy/healthz", false, true},
		{"node proxy", "/api/v1/nodes/node-1/proxy/stats/summary", false, true},
		{"subresource of a group resource", "/apis/example.io/v1/namespaces/default/widgets/w/log", false, true},
		{"profiling", "/debug/pprof/profile?seconds=60", false, true},
		{"upgrade", "/apis/example.io/v1/namespaces/default/widgets/w/shell", true, true},
	} {
		for _, steered := range []bool{true, false} {
			name := tc.name + "/balanced"
			headers := map[string]string{}
			if steered {
				name = tc.name + "/steered"
				headers[DefaultRoutingHeader] = "apiserver-b"
			}
			if tc.upgrade {
				headers["upgrade"] = "websocket"
			}
			t.Run(name, func(t *testing.T) {
				r, err := firstMatchingRoute(routes, tc.target, headers)
				if err != nil {
					t.Fatal(err)
				}
				action := r.GetRoute()
				if steered != (action.GetClusterHeader() == DefaultRoutingHeader) || !steered && action.GetCluster() != DefaultAllServersCluster {
					t.Fatalf("route %s: cluster_header %q, cluster %q", r.GetName(), action.GetClusterHeader(), action.GetCluster())
				}
				got := action.GetTimeout().AsDuration()
				switch {
				case tc.longRunning && (action.GetTimeout() == nil || got != 0 || action.GetIdleTimeout() == nil || action.GetIdleTimeout().AsDuration() != 0):
					t.Errorf("long-running request took route %s with timeout %v and idle timeout %v, want both disabled", r.GetName(), action.GetTimeout(), action.GetIdleTimeout())
				case !tc.longRunning && got != timeout:
					t.Errorf("request took route %s with timeout %v, want %v", r.GetName(), got, timeout)
				}
			})
		}
	}
}

// envoyTarget is the request target as the rendered connection manager
// hands it to the routes, the plugin and the API servers: escaped slashes
// and backslashes unescaped (path_with_escaped_slashes_action), then
// normalize_path's RFC 3986 normalization: escapes of unreserved characters
// decoded, the others' hex digits upper-cased, dot segments removed.
func envoyTarget(hcm *hcmv3.HttpConnectionManager, target string) string {
	path, query, hasQuery := strings.Cut(target, "?")
	unescapeSlashes := hcm.GetPathWithEscapedSlashesAction() == hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
	normalize := hcm.GetNormalizePath().GetValue()
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		decoded, err := strconv.ParseUint(path[min(i+1, len(path)):min(i+3, len(path))], 16, 8)
		if path[i] != '%' || i+2 >= len(path) || err != nil {
			b.WriteByte(path[i])
			continue
		}
		d := byte(decoded)
		slash := d == '/' || d == '\\'
		unreserved := d >= 'a' && d <= 'z' || d >= 'A' && d <= 'Z' || d >= '0' && d <= '9' || strings.IndexByte("-._~", d) >= 0
		switch {
		case slash && unescapeSlashes, unreserved && normalize:
			b.WriteByte(d)
		case normalize:
			b.WriteString(strings.ToUpper(path[i : i+3]))
		default:
			b.WriteString(path[i : i+3])
		}
		i += 2
	}
	path = b.String()
	if normalize {
		path = removeDotSegments(path)
	}
	if hasQuery {
		path += "?" + query
	}
	return path
}

// removeDotSegments is RFC 3986 section 5.2.4, which keeps empty segments.
func removeDotSegments(in string) string {
	var out []string
	segments := strings.Split(in, "/")
	for i, s := range segments {
		last := i == len(segments)-1
		switch s {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, "/")
}

// routeIsLongRunning reports whether the route Envoy picks for the probe,
// steered or balanced, withholds the request timeout, and the route's name.
func routeIsLongRunning(t *testing.T, routes []*routev3.Route, p discoverytest.Probe, target string, steered bool) (bool, string) {
	t.Helper()
	headers := map[string]string{":method": p.Method}
	if steered {
		headers[DefaultRoutingHeader] = "apiserver-b"
	}
	if p.Upgrade {
		headers["upgrade"] = "websocket"
	}
	r, err := firstMatchingRoute(routes, target, headers)
	if err != nil {
		t.Fatalf("%s %s: %v", p.Method, target, err)
	}
	_, long, err := routeTimeouts(r)
	if err != nil {
		t.Fatal(err)
	}
	return long, r.GetName()
}

// The Envoy routes are rendered from discovery's long-running
// classification and agree with it on the probes that test it against
// kube-apiserver's: exactly on every request as Kubernetes clients send it,
// and on any other request they never give a deadline to a long-running one
// (they may withhold it from a request that is not).
func TestRoutesClassifyLongRunningRequestsAsDiscoveryDoes(t *testing.T) {
	doc, err := Render(exampleSpec())
	if err != nil {
		t.Fatal(err)
	}
	hcm := httpConnectionManagerOf(t, decodeBootstrapForTest(t, doc))
	routes := hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	var canonical, over int
	for _, p := range discoverytest.LongRunningProbes() {
		if _, err := url.ParseRequestURI(p.Target); err != nil {
			continue // no HTTP server accepts it
		}
		// Behind Envoy, the API server classifies the path Envoy forwards.
		target := envoyTarget(hcm, p.Target)
		parsed := discovery.ParseTarget(p.Method, target)
		want := parsed.Class(p.Method, p.Upgrade).LongRunning
		for _, steered := range []bool{true, false} {
			got, route := routeIsLongRunning(t, routes, p, target, steered)
			switch {
			case want && !got:
				t.Errorf("%s %s (upgrade %v) is long-running, but route %s times it out", p.Method, target, p.Upgrade, route)
			case p.Canonical && got != want:
				t.Errorf("%s %s (upgrade %v) as clients send it: route %s long-running %v, discovery %v", p.Method, target, p.Upgrade, route, got, want)
			case got && !want && steered:
				over++
			}
		}
		if p.Canonical {
			canonical++
		}
	}
	if canonical < 1000 {
		t.Fatalf("%d canonical probes; the captured resources should give more", canonical)
	}
	t.Logf("%d canonical probes agree; %d other requests get no deadline though kube-apiserver would give one", canonical, over)
}
