package envoyconfig

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// firstMatchingRoute picks the route Envoy picks: the first whose match holds
// for the path (with query) and headers. It knows only the match fields the
// rendered routes use and fails on any other, so a new kind of match cannot
// pass unexamined.
func firstMatchingRoute(routes []*routev3.Route, target string, headers map[string]string) (*routev3.Route, error) {
	path, rawQuery, _ := strings.Cut(target, "?")
	query, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, err
	}
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
		if err := onlyFields(h, "name", "present_match"); err != nil {
			return false, err
		}
		_, present := headers[h.GetName()]
		ok = ok && present == h.GetPresentMatch()
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
