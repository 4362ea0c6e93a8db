package discoverytest

import (
	"math/rand/v2"
	"strings"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
)

// Probe is a request to classify as a gateway sees it: method, request
// target (path and query as sent) and whether it asks for a protocol
// upgrade.
type Probe struct {
	Method, Target string
	Upgrade        bool
	// Canonical marks a request as Kubernetes clients send it: resources
	// the captured servers serve, names without escapes, a watch parameter
	// only on a list, exec, attach and port-forward as upgrades.
	Canonical bool
}

// LongRunningProbes are the requests the long-running classification is
// tested on, in every host that applies it: for every resource and
// subresource the captured kube-apiservers serve, each verb a client sends;
// the non-resource paths API servers serve; and seeded random requests made
// of the words each rule looks at, which need not be canonical.
func LongRunningProbes() []Probe {
	probes := capturedProbes()
	canonical := func(method, target string, upgrade bool) {
		probes = append(probes, Probe{Method: method, Target: target, Upgrade: upgrade, Canonical: true})
	}
	for _, target := range []string{"/healthz", "/readyz?verbose", "/livez", "/version", "/metrics", "/openapi/v2",
		"/openapi/v3", "/openapi/v3/apis/apps/v1?hash=ABC", "/apis", "/api", "/apis/apps", "/apis/apps/v1", "/api/v1",
		"/.well-known/openid-configuration", "/debug/pprof/", "/debug/pprof/profile?seconds=30", "/debug/pprof/goroutine?debug=2"} {
		canonical("GET", target, false)
	}
	return append(probes, randomProbes(rand.New(rand.NewPCG(20261207, 22)), 6000)...)
}

// capturedProbes are canonical requests for what the captured servers serve.
func capturedProbes() []Probe {
	servers, err := fixtures.Servers("default", "v1.35.4", "v1.36.3", "v1.37.2")
	if err != nil {
		panic("discoverytest: " + err.Error())
	}
	seen := map[string]bool{}
	var probes []Probe
	add := func(method, target string, upgrade bool) {
		key := method + " " + target + " " + map[bool]string{true: "upgrade"}[upgrade]
		if !seen[key] {
			seen[key] = true
			probes = append(probes, Probe{Method: method, Target: target, Upgrade: upgrade, Canonical: true})
		}
	}
	for _, s := range servers {
		for _, doc := range [][]byte{s.API, s.APIs} {
			list, err := discovery.ParseGroupList(doc)
			if err != nil {
				panic("discoverytest: " + err.Error())
			}
			for _, g := range list.Items {
				for _, v := range g.Versions {
					prefix := "/apis/" + g.Name() + "/" + v.Version
					if g.Name() == "" {
						prefix = "/api/" + v.Version
					}
					for _, r := range v.Resources {
						collections := []string{prefix + "/" + r.Resource}
						if r.Scope == "Namespaced" {
							collections = append(collections, prefix+"/namespaces/default/"+r.Resource)
						}
						for _, c := range collections {
							for _, query := range []string{"", "?limit=500", "?watch=true", "?watch=1&resourceVersion=10",
								"?watch=false", "?watch=0", "?labelSelector=app%3Dweb&watch=true"} {
								add("GET", c+query, false)
							}
							add("GET", c+"?watch=true", true) // a WebSocket watch
							add("POST", c, false)
							add("DELETE", c, false)
							add("GET", c+"/web-0", false)
							add("PUT", c+"/web-0", false)
							add("PATCH", c+"/web-0", false)
							add("DELETE", c+"/web-0", false)
							watchPath := strings.Replace(c, v.Version+"/", v.Version+"/watch/", 1)
							add("GET", watchPath, false)
							add("GET", watchPath+"/web-0", false)
							for _, sub := range r.Subresources {
								target := c + "/web-0/" + sub.Subresource
								switch sub.Subresource {
								case "exec", "attach":
									add("POST", target+"?command=sh&stdin=true&tty=true", true)
									add("GET", target+"?command=sh&stdout=true", true)
								case "portforward":
									add("GET", target+"?ports=8080", true)
								case "proxy":
									add("GET", target+"/metrics", false)
									add("POST", target+"/api/run", false)
								case "log":
									add("GET", target+"?follow=true&container=app", false)
								default:
									add("GET", target, false)
									add("PUT", target, false)
									add("PATCH", target, false)
								}
							}
						}
					}
				}
			}
		}
	}
	return probes
}

// randomProbes draw each part of a request from words chosen to collide
// with the rules: path and query words, escapes and values that read as
// false to one parser and true to another.
func randomProbes(rng *rand.Rand, n int) []Probe {
	methods := []string{"GET", "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "get", "CONNECT", "WATCH", "Proxy"}
	segments := []string{
		"", "api", "apis", "v1", "apps", "namespaces", "ns", "status", "finalize", "watch", "proxy", "pods", "p",
		"exec", "attach", "log", "portforward", "scale", "debug", "pprof", "profile", ".", "..", "a%2Fb", "log%2Fx",
		"%77atch", "p%20q", "web-0",
	}
	keys := []string{"watch", "%77atch", "Watch", "limit", "timeoutSeconds", "fieldSelector", "labelSelector", "follow", ""}
	values := []string{"", "true", "false", "FALSE", "False", "0", "1", "no", "x", "-1", "%zz", "+", "fal%C5%BFe",
		"metadata.name%3Dp", "app%3Dweb", "a+in+(b,c)"}
	probes := make([]Probe, 0, n)
	for range n {
		var b strings.Builder
		for i := range rng.IntN(9) {
			if i > 0 || rng.IntN(12) != 0 {
				b.WriteByte('/')
			}
			b.WriteString(segments[rng.IntN(len(segments))])
		}
		if rng.IntN(5) == 0 {
			b.WriteByte('/')
		}
		for i := range rng.IntN(4) {
			b.WriteByte("?&"[min(i, 1)])
			b.WriteString(keys[rng.IntN(len(keys))])
			if rng.IntN(6) != 0 {
				b.WriteByte('=')
				b.WriteString(values[rng.IntN(len(values))])
			}
		}
		target := b.String()
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		probes = append(probes, Probe{Method: methods[rng.IntN(len(methods))], Target: target, Upgrade: rng.IntN(10) == 0})
	}
	return probes
}
