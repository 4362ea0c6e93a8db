package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/openapi3"
)

// explainRuns is how many times each skewed resource is explained, each run with an empty
// kubectl cache, through skewgate and through the round-robin baseline.
const explainRuns = 20

// skewedExplains are the resources of skewedResources as `kubectl explain` names them.
var skewedExplains = []struct{ resource, apiVersion string }{
	{"mutatingadmissionpolicies", "admissionregistration.k8s.io/v1"},
	{"mutatingadmissionpolicybindings", "admissionregistration.k8s.io/v1"},
	{"leasecandidates", "coordination.k8s.io/v1alpha2"},
}

// TestOpenAPIThroughSkewgate runs the clients that read OpenAPI v3 against the skewed cluster:
// kubectl explain (every skewed resource, explainRuns runs each with an empty cache), client-go's
// openapi3 root fetching every group version's schema, and a client-side kubectl apply that
// patches an object of a skewed resource. Through the round-robin baseline explain fails
// whenever the index or the document comes from a server without the resource; through
// skewgate every run succeeds, and the hashed URLs of the merged index always reach a server
// that serves exactly that document.
func TestOpenAPIThroughSkewgate(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	kubectlBinary := ensureKubectl(t)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy, with its OpenAPI index, in the gateway's snapshot", gatewayReadyTimeout,
		func(v snapshotView) error {
			if err := allHealthy(cluster)(v); err != nil {
				return err
			}
			for _, s := range v.Servers {
				if s.OpenAPI == nil {
					return fmt.Errorf("%s has no /openapi/v3 index in snapshot generation %d", s.ID, v.Generation)
				}
			}
			return nil
		})

	t.Run("the merged index lists every server's paths and its URLs reach their documents", func(t *testing.T) {
		direct := directAdminClient(cluster)
		defer direct.CloseIdleConnections()
		published := map[string]map[string]bool{} // path -> URLs some server lists
		for _, s := range cluster.Servers() {
			for path, url := range openAPIIndex(t, direct, s.URL) {
				if published[path] == nil {
					published[path] = map[string]bool{}
				}
				published[path][url] = true
			}
		}
		client := gw.adminClient()
		defer client.CloseIdleConnections()
		for round := range 6 {
			merged := openAPIIndex(t, client, gw.URL)
			for path := range published {
				url, ok := merged[path]
				if !ok {
					t.Fatalf("round %d: the merged index lacks %s", round, path)
				}
				if !published[path][url] {
					t.Fatalf("round %d: %s points at %s, which no server published", round, path, url)
				}
			}
			if len(merged) != len(published) {
				t.Fatalf("round %d: the merged index lists %d paths, the servers %d", round, len(merged), len(published))
			}
			for path, url := range merged {
				resp := mustDo(t, client, http.MethodGet, gw.URL+url, http.Header{"Accept": {"application/json"}}, nil)
				if resp.status != http.StatusOK || resp.header.Get("Cache-Control") != "public, immutable" {
					t.Fatalf("round %d: GET %s through skewgate: %d, Cache-Control %q; want 200 from a server with exactly that document (immutable)",
						round, path, resp.status, resp.header.Get("Cache-Control"))
				}
			}
		}
		t.Logf("six fetches of the merged index each listed all %d paths of the servers (%d, %d and %d of their own)",
			len(published), len(openAPIIndex(t, direct, cluster.Server(0).URL)), len(openAPIIndex(t, direct, cluster.Server(1).URL)),
			len(openAPIIndex(t, direct, cluster.Server(2).URL)))
	})

	t.Run("kubectl explain of every skewed resource", func(t *testing.T) {
		baseline := newRoundRobinProxy(t, cluster)
		through := map[string]func(t *testing.T) *kubectl{
			"skewgate": func(t *testing.T) *kubectl {
				return newKubectl(t, kubectlBinary, gw, kubeconfigUser{Token: cluster.PKI().AdminToken})
			},
			// The baseline authenticates to the servers itself.
			"round-robin": func(t *testing.T) *kubectl { return newKubectlAt(t, kubectlBinary, baseline.URL, "", kubeconfigUser{}) },
		}
		for _, r := range skewedExplains {
			succeeded := map[string]int{}
			var failures []string
			for _, name := range []string{"round-robin", "skewgate"} {
				var mu sync.Mutex
				var wg sync.WaitGroup
				runs := make(chan struct{}, explainRuns)
				for range explainRuns {
					runs <- struct{}{}
				}
				close(runs)
				for range 2 {
					wg.Go(func() {
						for range runs {
							k := through[name](t) // a fresh kubectl cache for every run
							out, err := k.try(ctx, "explain", r.resource, "--api-version="+r.apiVersion)
							mu.Lock()
							if err == nil && strings.Contains(out, "FIELDS:") {
								succeeded[name]++
							} else if name == "skewgate" {
								failures = append(failures, fmt.Sprintf("%v: %s", err, out))
							}
							mu.Unlock()
						}
					})
				}
				wg.Wait()
			}
			t.Logf("kubectl explain %s --api-version=%s: %d of %d runs succeed through skewgate, %d of %d through the round-robin baseline",
				r.resource, r.apiVersion, succeeded["skewgate"], explainRuns, succeeded["round-robin"], explainRuns)
			if succeeded["skewgate"] != explainRuns {
				t.Errorf("%s: %d of %d explain runs failed through skewgate: %q", r.resource, explainRuns-succeeded["skewgate"], explainRuns, failures)
			}
			if r.resource == "leasecandidates" && succeeded["round-robin"] == explainRuns {
				t.Errorf("%s, served by one server of three, never failed through the round-robin baseline: the cluster does not show the bug", r.resource)
			}
		}
	})

	t.Run("client-go's openapi3 root fetches every group version", func(t *testing.T) {
		client, err := discovery.NewDiscoveryClientForConfig(gw.restConfig())
		if err != nil {
			t.Fatal(err)
		}
		root := openapi3.NewRoot(client.OpenAPIV3())
		gvs, err := root.GroupVersions()
		if err != nil {
			t.Fatal(err)
		}
		want := map[schema.GroupVersion]bool{{Group: "coordination.k8s.io", Version: "v1alpha2"}: false, {Group: "admissionregistration.k8s.io", Version: "v1"}: false}
		for _, gv := range gvs {
			spec, err := root.GVSpec(gv)
			if err != nil {
				t.Errorf("GVSpec(%s): %v", gv, err)
				continue
			}
			if spec.Components == nil || len(spec.Components.Schemas) == 0 {
				t.Errorf("GVSpec(%s) has no schemas", gv)
			}
			if _, ok := want[gv]; ok {
				want[gv] = true
			}
		}
		for gv, seen := range want {
			if !seen {
				t.Errorf("openapi3 root lists %d group versions, not %s", len(gvs), gv)
			}
		}
		t.Logf("client-go's openapi3 root fetched all %d group versions' schemas through skewgate", len(gvs))
	})

	t.Run("client-side kubectl apply of a skewed resource", func(t *testing.T) {
		k := newKubectl(t, kubectlBinary, gw, kubeconfigUser{Token: cluster.PKI().AdminToken})
		name := "skewgate-e2e-apply"
		path := filepath.Join(k.home, "policy.json")
		writeFile(t, path, mutatingAdmissionPolicy(name))
		k.run(t, "apply", "-f", path)
		t.Cleanup(func() { k.try(context.Background(), "delete", "mutatingadmissionpolicies", name, "--ignore-not-found") })
		// The second apply computes a patch from the last applied configuration and the
		// resource's OpenAPI schema.
		changed := bytes.Replace(mutatingAdmissionPolicy(name), []byte(`"reinvocationPolicy": "Never"`), []byte(`"reinvocationPolicy": "IfNeeded"`), 1)
		writeFile(t, path, changed)
		if out := k.run(t, "apply", "-f", path); !strings.Contains(out, "configured") {
			t.Errorf("second kubectl apply printed %q; want the object configured", out)
		}
		if got := k.run(t, "get", "mutatingadmissionpolicies", name, "-o", "jsonpath={.spec.reinvocationPolicy}"); got != "IfNeeded" {
			t.Errorf("after the second apply the policy's reinvocationPolicy is %q; want IfNeeded", got)
		}
	})
}

// openAPIIndex is GET /openapi/v3 from base: path -> serverRelativeURL.
func openAPIIndex(t *testing.T, client *http.Client, base string) map[string]string {
	t.Helper()
	resp := mustDo(t, client, http.MethodGet, base+"/openapi/v3", http.Header{"Accept": {"application/json"}}, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("GET %s/openapi/v3: %d %s", base, resp.status, resp.body)
	}
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(resp.body, &index); err != nil {
		t.Fatalf("GET %s/openapi/v3: %v", base, err)
	}
	out := make(map[string]string, len(index.Paths))
	for path, gv := range index.Paths {
		out[path] = gv.ServerRelativeURL
	}
	return out
}
