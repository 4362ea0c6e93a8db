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
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/fixtures"
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
	s, err := newFakeAPIServer("old", "v1.35.4", docs)
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
