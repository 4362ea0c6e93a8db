package demo

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
	"github.com/skewgate/skewgate/host/internal/schemafields"
)

const builtPlugin = "../../../build/skewgate.wasm"

func TestDemoSkewgateAnswersNoFalse404sWhereRoundRobinDoes(t *testing.T) {
	if _, err := os.Stat(builtPlugin); err != nil {
		t.Fatalf("the built plugin is missing: run `make build` first (%v)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	report, err := Run(ctx, Options{
		Requests:            300,
		ExitAfterReport:     true,
		WasmPath:            builtPlugin,
		Source:              FixtureSource(fixtures.FS),
		CompilationCacheDir: filepath.Join(t.TempDir(), "wazero"),
		Out:                 &out,
		Logger:              slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if report.Plain.Requests != 300 || report.Skewgate.Requests != 300 {
		t.Errorf("requests: plain %d, skewgate %d, want 300 each", report.Plain.Requests, report.Skewgate.Requests)
	}
	if report.Skewgate.FalseNotFound != 0 || report.Skewgate.OtherErrors != 0 {
		t.Errorf("skewgate answered %d false 404s and %d other errors, want none", report.Skewgate.FalseNotFound, report.Skewgate.OtherErrors)
	}
	if report.Plain.FalseNotFoundRate() <= 0 {
		t.Error("the plain round-robin proxy answered no false 404: the demo does not show the problem")
	}
	if report.Skewgate.DiscoveryRequests == 0 || report.Skewgate.DiscoveryComplete != report.Skewgate.DiscoveryRequests {
		t.Errorf("skewgate /apis complete in %d of %d answers", report.Skewgate.DiscoveryComplete, report.Skewgate.DiscoveryRequests)
	}
	if report.Plain.DiscoveryComplete == report.Plain.DiscoveryRequests {
		t.Error("every /apis answer through the plain proxy was complete: the demo servers are not skewed")
	}
	if len(report.Skewed) == 0 || report.MergedETag == "" {
		t.Errorf("skewed %v, merged ETag %q", report.Skewed, report.MergedETag)
	}
	for _, want := range []string{"false 404s", "plain round robin", "skewgate", report.StatusPageURL} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFakeAPIServerAnswersAsKubeAPIServer(t *testing.T) {
	docs, err := FixtureSource(fixtures.FS)("v1.35.4", false)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newFakeAPIServer("old", "v1.35.4", docs, nil)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, accept, ifNoneMatch string) *http.Response {
		r := httptest.NewRequest("GET", path, nil)
		if accept != "" {
			r.Header.Set("Accept", accept)
		}
		if ifNoneMatch != "" {
			r.Header.Set("If-None-Match", ifNoneMatch)
		}
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		return w.Result()
	}
	body := func(resp *http.Response) string {
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for _, tc := range []struct {
		name, path, accept string
		wantCode           int
		wantType, wantBody string
	}{
		{"served resource lists", "/apis/apps/v1/namespaces/demo/deployments", "", 200, "application/json", `"kind":"DeploymentList"`},
		{"served object", "/api/v1/namespaces/demo/configmaps/settings", "", 200, "application/json", `"name":"settings"`},
		{"resource missing from a served group version", "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies", "", 404, "application/json", notFoundStatus},
		{"group version not served at all", "/apis/coordination.k8s.io/v1alpha2/leasecandidates", "", 404, "text/plain; charset=utf-8", "404 page not found\n"},
		{"own aggregated discovery", "/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;profile=nopeer", 200, discoveryContentType, string(docs.APIs)},
		{"own core discovery", "/api", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList", 200, discoveryContentType, string(docs.API)},
		{"legacy group version document", "/apis/apps/v1", "", 200, "application/json", `"kind":"APIResourceList"`},
		{"version", "/version", "", 200, "application/json", `"gitVersion":"v1.35.4"`},
		{"readiness", "/readyz", "", 200, "text/plain; charset=utf-8", "ok"},
		{"OpenAPI v3 index", "/openapi/v3", "", 200, "application/json", `"apis/apps/v1":{"serverRelativeURL":"/openapi/v3/apis/apps/v1?hash=`},
		{"OpenAPI v3 document", "/openapi/v3/api/v1", "", 200, "application/json", `"x-kubernetes-group-version-kind":[{"group":"","kind":"Pod","version":"v1"}]`},
		{"OpenAPI v3 document of a group version not served", "/openapi/v3/apis/coordination.k8s.io/v1alpha2", "", 404, "text/plain; charset=utf-8", "404 page not found\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := get(tc.path, tc.accept, "")
			got := body(resp)
			if resp.StatusCode != tc.wantCode || resp.Header.Get("Content-Type") != tc.wantType {
				t.Errorf("status %d, Content-Type %q; want %d, %q", resp.StatusCode, resp.Header.Get("Content-Type"), tc.wantCode, tc.wantType)
			}
			if !strings.Contains(got, tc.wantBody) {
				t.Errorf("body %.200q lacks %.200q", got, tc.wantBody)
			}
		})
	}
	first := get("/apis", discoveryContentType, "")
	etag := first.Header.Get("ETag")
	if again := get("/apis", discoveryContentType, etag); etag == "" || again.StatusCode != http.StatusNotModified {
		t.Errorf("revalidation with ETag %q answered %d, want 304", etag, again.StatusCode)
	}
}

// The demo's servers publish OpenAPI v3 as kube-apiserver does, and their
// schemas, reduced as the controller reduces them, differ by exactly the
// fields the captured comparison of their versions found.
func TestFakeAPIServersSchemasDifferAsCaptured(t *testing.T) {
	pairs, err := fixtures.LoadSchemaSkew()
	if err != nil {
		t.Fatal(err)
	}
	const older, newer = "v1.35.4", "v1.36.3"
	fields := schemaFieldsOf(pairs, []string{older, newer})
	reduced := map[string]*schemafields.Document{}
	for _, version := range []string{older, newer} {
		docs, err := FixtureSource(fixtures.FS)(version, false)
		if err != nil {
			t.Fatal(err)
		}
		s, err := newFakeAPIServer(version, version, docs, fields[version])
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) []byte {
			w := httptest.NewRecorder()
			s.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
			if w.Code != http.StatusOK {
				t.Fatalf("%s: GET %s: %d", version, path, w.Code)
			}
			return w.Body.Bytes()
		}
		index, err := discovery.ParseOpenAPIIndex(get("/openapi/v3"))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(index, func(p discovery.OpenAPIPath) bool { return p.Path == "apis/apps/v1" })
		if i < 0 {
			t.Fatalf("%s: the index lacks apps/v1: %v", version, index)
		}
		if reduced[version], err = schemafields.Reduce(get(index[i].URL()), "apps", "v1"); err != nil {
			t.Fatal(err)
		}
	}
	pair := pairs[slices.IndexFunc(pairs, func(p fixtures.SchemaSkew) bool { return p.Older == older && p.Newer == newer })]
	captured := pair.Resources[slices.IndexFunc(pair.Resources, func(r fixtures.SchemaSkewResource) bool { return r.Resource == "apps/v1/deployments" })]
	deployment := discovery.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}
	oldFields, newFields := reduced[older].Kinds[deployment].Fields, reduced[newer].Kinds[deployment].Fields
	onlyInNewer, _ := oldFields.Lacks(newFields, 1000)
	onlyInOlder, _ := newFields.Lacks(oldFields, 1000)
	if !slices.Equal(onlyInNewer, slices.Sorted(slices.Values(captured.OnlyInNewer))) ||
		!slices.Equal(onlyInOlder, slices.Sorted(slices.Values(captured.OnlyInOlder))) {
		t.Errorf("Deployment: only in %s %v, only in %s %v; captured %v and %v", newer, onlyInNewer, older, onlyInOlder, captured.OnlyInNewer, captured.OnlyInOlder)
	}
}
