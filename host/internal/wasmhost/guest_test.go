package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// handleOn runs a request that needs no HTTP call on one specific instance, bypassing the pool.
func handleOn(h *Host, slotIndex int, req *Request) Outcome {
	s := h.slots[slotIndex]
	s.mu.Lock()
	defer s.mu.Unlock()
	var out Outcome
	if paused := s.inst.startStream(context.Background(), req, &out); paused != nil {
		panic("handleOn: the stream waits for an HTTP call")
	}
	return out
}

func opRequest(op string, extra ...[2]string) *Request {
	return &Request{
		Headers:     append([][2]string{{":method", "GET"}, {":path", "/api"}, {"x-test-op", op}}, extra...),
		EndOfStream: true,
	}
}

func prometheusText(t testing.TB, h *Host) string {
	t.Helper()
	var buf bytes.Buffer
	if err := h.WritePrometheus(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestGuestSimplePathRoutesByTenantOrAnswers403(t *testing.T) {
	logs := &logRecorder{}
	h := newHost(t, guestWasm(t), guestOptions(t, logs))
	ctx := context.Background()
	out := h.HandleRequestHeaders(ctx, &Request{Headers: [][2]string{{":path", "/"}, {"X-Tenant", "acme"}}, EndOfStream: true})
	if out.Failed != nil || out.Verdict != Forward || !out.RouteCacheCleared {
		t.Fatalf("outcome %+v", out)
	}
	if v, _ := header(out.Headers, "x-upstream-cluster"); v != "blue-acme" {
		t.Fatalf("x-upstream-cluster = %q", v)
	}
	if v, _ := header(out.Headers, "x-tenant"); v != "acme" {
		t.Fatal("header keys must be lower-cased as Envoy stores them")
	}
	out = h.HandleRequestHeaders(ctx, &Request{Headers: [][2]string{{":path", "/"}}, EndOfStream: true})
	if out.Verdict != Respond || out.Response.Status != 403 || string(out.Response.Body) != "missing x-tenant" ||
		out.Response.GRPCStatus != -1 || out.RouteCacheCleared {
		t.Fatalf("outcome %+v response %+v", out, out.Response)
	}
	if !slices.Equal(out.Response.Headers, [][2]string{{"content-type", "text/plain"}}) {
		t.Fatalf("response headers %q", out.Response.Headers)
	}
	if logs.contains("unreadable in log phase") {
		t.Fatal("request headers must stay readable in proxy_on_log, where the SDK runs OnHttpStreamDone")
	}
}

func TestGuestHeaderOperations(t *testing.T) {
	h := newHost(t, guestWasm(t), guestOptions(t, nil))
	out := h.HandleRequestHeaders(context.Background(), opRequest("headers",
		[2]string{"x-remove-me", "a"}, [2]string{"x-replace", "old1"}, [2]string{"X-Replace", "old2"}, [2]string{"X-Mixed-Case", "M"}))
	if out.Failed != nil || out.Verdict != Forward {
		t.Fatalf("outcome %+v", out)
	}
	checks := map[string][]string{
		"x-added":                 {"one", "two"},
		"x-remove-me":             nil,
		"x-replace":               {"new"},
		"x-mixed-seen":            {"M"},
		"x-header-count":          {"7"},
		"x-response-header-error": {"error status returned by host: bad argument"},
	}
	for key, want := range checks {
		if got := headerValues(out.Headers, key); !slices.Equal(got, want) {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
}

func TestGuestLocalResponseForcesPause(t *testing.T) {
	h := newHost(t, guestWasm(t), guestOptions(t, nil))
	out := h.HandleRequestHeaders(context.Background(), opRequest("local"))
	if out.Verdict != Respond || out.Response.Status != 418 || string(out.Response.Body) != "short and stout" {
		t.Fatalf("outcome %+v", out)
	}
	if !slices.Equal(out.Response.Headers, [][2]string{{"x-teapot", "yes"}}) {
		t.Fatalf("headers %q", out.Response.Headers)
	}
}

func TestGuestPauseWithoutResumeFollowsTheFailurePolicy(t *testing.T) {
	tests := []struct {
		op      string
		policy  FailurePolicy
		verdict Verdict
		failed  error
	}{
		{"pause", FailClosed, Respond, ErrStreamPaused},
		{"pause", FailOpen, Forward, ErrStreamPaused},
		{"pause-resume", FailClosed, Forward, nil},
	}
	for _, tt := range tests {
		t.Run(tt.op, func(t *testing.T) {
			opts := guestOptions(t, nil)
			opts.FailurePolicy = tt.policy
			h := newHost(t, guestWasm(t), opts)
			out := h.HandleRequestHeaders(context.Background(), opRequest(tt.op))
			if out.Verdict != tt.verdict || !errors.Is(out.Failed, tt.failed) {
				t.Fatalf("outcome %+v", out)
			}
		})
	}
}

func TestGuestReadsPropertiesAsInEnvoy(t *testing.T) {
	h := newHost(t, guestWasm(t), guestOptions(t, nil))
	req := opRequest("props")
	req.Properties = Properties{
		SourceAddress:   "192.0.2.10:40000",
		RequestProtocol: "HTTP/1.1",
		TLS:             &TLSProperties{PeerCertificatePresented: true, SubjectPeerCertificate: "CN=alice,O=dev"},
	}
	out := h.HandleRequestHeaders(context.Background(), req)
	want := map[string]string{
		"x-prop-plugin_name":                         "test-plugin",
		"x-prop-plugin_root_id":                      "test-root",
		"x-prop-plugin_vm_id":                        "test-vm",
		"x-prop-source.address":                      "192.0.2.10:40000",
		"x-prop-request.protocol":                    "HTTP/1.1",
		"x-prop-connection.subject_peer_certificate": "CN=alice,O=dev",
		"x-prop-request.path":                        "/api",
		"x-prop-xds.cluster_name":                    "error: error status returned by host: not found",
		"x-prop-connection.mtls":                     "[1]",
	}
	for key, value := range want {
		if got, _ := header(out.Headers, key); got != value {
			t.Errorf("%s = %q, want %q", key, got, value)
		}
	}
}

func TestGuestForeignFunctions(t *testing.T) {
	h := newHost(t, guestWasm(t), guestOptions(t, nil))
	ctx := context.Background()
	out := h.HandleRequestHeaders(ctx, opRequest("foreign"))
	if out.Failed != nil || out.Verdict != Forward || !out.RouteCacheCleared {
		t.Fatalf("clear_route_cache without header changes must still clear the route: %+v", out)
	}
	out = h.HandleRequestHeaders(ctx, opRequest("foreign-unknown"))
	if out.Response == nil || string(out.Response.Body) != "error status returned by host: not found" {
		t.Fatalf("unknown foreign function outcome %+v", out)
	}
}

func TestGuestMetricsAreExportedInPrometheusFormat(t *testing.T) {
	h := newHost(t, guestWasm(t), guestOptions(t, nil))
	for i := range 6 {
		if out := handleOn(h, i%2, opRequest("metrics")); out.Failed != nil {
			t.Fatal(out.Failed)
		}
	}
	if err := h.Configure(context.Background(), []byte("cluster=blue;generation=7")); err != nil {
		t.Fatal(err)
	}
	text := prometheusText(t, h)
	for _, want := range []string{
		"# TYPE guest_requests counter\nguest_requests 6\n",
		"# TYPE guest_config_generation gauge\nguest_config_generation 7\n",
		"skewgate_wasm_configurations_applied_total 1\n",
		"skewgate_wasm_instances_live 2\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
}

func TestSanitizeMetricName(t *testing.T) {
	tests := map[string]string{
		"guest.requests":      "guest_requests",
		"a-b c:d":             "a_b_c_d",
		"9lives":              "_9lives",
		"":                    "_",
		"ok_name_1":           "ok_name_1",
		"wasm.ñ":              "wasm___",
		"skewgate.upstream.x": "skewgate_upstream_x",
	}
	for in, want := range tests {
		t.Run(in, func(t *testing.T) {
			if got := sanitizeMetricName(in); got != want {
				t.Fatalf("sanitizeMetricName(%q) = %q, want %q", in, got, want)
			}
		})
	}
}

func TestConfigureRejectedByOneInstanceKeepsThePreviousConfigurationEverywhere(t *testing.T) {
	logs := &logRecorder{}
	opts := guestOptions(t, logs)
	opts.Instances = 3
	h := newHost(t, guestWasm(t), opts)
	ctx := context.Background()
	tenantRequest := &Request{Headers: [][2]string{{":path", "/"}, {"x-tenant", "t"}}, EndOfStream: true}

	err := h.Configure(ctx, []byte("cluster=green;reject-nth=2"))
	var cfgErr *ConfigError
	if !errors.As(err, &cfgErr) || !errors.Is(err, ErrConfigurationRejected) {
		t.Fatalf("Configure error = %v", err)
	}
	if cfgErr.Instance != 1 || cfgErr.Callback != "proxy_on_configure" || cfgErr.LastGuestError != "instance number 2 refuses the configuration" {
		t.Fatalf("ConfigError = %+v", cfgErr)
	}
	if !strings.Contains(err.Error(), "instance number 2 refuses the configuration") {
		t.Fatalf("the error must carry the guest's last error line: %v", err)
	}
	for i := range opts.Instances {
		if v, _ := header(handleOn(h, i, tenantRequest).Headers, "x-upstream-cluster"); v != "blue-t" {
			t.Fatalf("instance %d uses %q after a rejected configuration", i, v)
		}
		if roots := len(h.slots[i].inst.roots); roots != 1 {
			t.Fatalf("instance %d keeps %d root contexts; the staged root must be shut down", i, roots)
		}
	}

	if err := h.Configure(ctx, []byte("cluster=green")); err != nil {
		t.Fatal(err)
	}
	for i := range opts.Instances {
		if v, _ := header(handleOn(h, i, tenantRequest).Headers, "x-upstream-cluster"); v != "green-t" {
			t.Fatalf("instance %d uses %q after an accepted configuration", i, v)
		}
	}
	err = h.Configure(ctx, []byte("reject=bad upstream list"))
	if !errors.As(err, &cfgErr) || cfgErr.Instance != 0 || cfgErr.LastGuestError != "bad upstream list" {
		t.Fatalf("Configure error = %v", err)
	}
}

func TestConfigureIsSafeWithConcurrentRequests(t *testing.T) {
	opts := guestOptions(t, nil)
	h := newHost(t, guestWasm(t), opts)
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				out := h.HandleRequestHeaders(context.Background(), &Request{Headers: [][2]string{{"x-tenant", "t"}}, EndOfStream: true})
				v, _ := header(out.Headers, "x-upstream-cluster")
				if out.Failed != nil || (v != "blue-t" && v != "green-t" && v != "red-t") {
					errs <- fmt.Errorf("unexpected outcome during reconfiguration: %q %+v", v, out)
					return
				}
			}
		})
	}
	for _, cluster := range []string{"green", "red", "blue", "green"} {
		if err := h.Configure(context.Background(), []byte("cluster="+cluster)); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestGuestTrapAnswers503AndTheInstanceIsRecreated(t *testing.T) {
	logs := &logRecorder{}
	opts := guestOptions(t, logs)
	opts.Instances = 1
	h := newHost(t, guestWasm(t), opts)
	ctx := context.Background()
	out := h.HandleRequestHeaders(ctx, opRequest("trap"))
	if out.Failed == nil || out.Verdict != Respond || out.Response.Status != 503 || out.Response.Details != "wasm_fail_stream" {
		t.Fatalf("outcome %+v", out)
	}
	eventually(t, "instance recreation", func() bool { return h.counters.recreations.Load() == 1 })
	out = h.HandleRequestHeaders(ctx, &Request{Headers: [][2]string{{"x-tenant", "t"}}})
	if out.Failed != nil || out.Verdict != Forward {
		t.Fatalf("recreated instance outcome %+v", out)
	}
	if v, _ := header(out.Headers, "x-upstream-cluster"); v != "blue-t" {
		t.Fatalf("recreated instance must use the current configuration, got %q", v)
	}

	// A second crash soon after creation is a crash loop: counted and delayed by a longer backoff.
	h.HandleRequestHeaders(ctx, opRequest("trap"))
	eventually(t, "second recreation", func() bool { return h.counters.recreations.Load() == 2 })
	text := prometheusText(t, h)
	for _, want := range []string{"skewgate_wasm_traps_total 2\n", "skewgate_wasm_crash_loop_backoffs_total 1\n",
		"skewgate_wasm_instance_recreations_total 2\n", "skewgate_wasm_failed_requests_total 2\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q", want)
		}
	}
}

// TestGuestPanicReportDependsOnTheEnvoyProfile shows why Envoy 1.39 matters for Go plugins: on 1.33 the Go
// runtime cannot even print its panic report, because it sleeps while freezing the world and poll_oneoff fails.
func TestGuestPanicReportDependsOnTheEnvoyProfile(t *testing.T) {
	tests := []struct {
		envoy envoyabi.Version
		want  string
	}{
		{envoyabi.Envoy133, "fatal error: wasi_snapshot_preview1.poll_oneoff"},
		{envoyabi.Envoy139, "panic: deliberate trap requested by x-test-op"},
	}
	for _, tt := range tests {
		t.Run(tt.envoy.String(), func(t *testing.T) {
			logs := &logRecorder{}
			opts := guestOptions(t, logs)
			opts.Envoy = tt.envoy
			opts.Instances = 1
			h := newHost(t, guestWasm(t), opts)
			if out := h.HandleRequestHeaders(context.Background(), opRequest("trap")); out.Failed == nil {
				t.Fatalf("outcome %+v", out)
			}
			if !logs.contains(tt.want) {
				t.Fatalf("log lacks %q:\n%s", tt.want, strings.Join(logs.messages(), "\n"))
			}
		})
	}
}

func TestGuestTrapFailOpenForwardsOriginalHeaders(t *testing.T) {
	opts := guestOptions(t, nil)
	opts.FailurePolicy = FailOpen
	h := newHost(t, guestWasm(t), opts)
	req := opRequest("trap")
	out := h.HandleRequestHeaders(context.Background(), req)
	if out.Failed == nil || out.Verdict != Forward || !slices.Equal(out.Headers, req.Headers) {
		t.Fatalf("outcome %+v", out)
	}
}

func TestSleepingGuestTrapsOnEnvoy133AndSpinsOnEnvoy139(t *testing.T) {
	tests := []struct {
		envoy   envoyabi.Version
		wantErr bool
	}{
		{envoyabi.Envoy133, true},
		{envoyabi.Envoy139, false},
	}
	for _, tt := range tests {
		t.Run(tt.envoy.String(), func(t *testing.T) {
			opts := guestOptions(t, nil)
			opts.Envoy = tt.envoy
			opts.Instances = 1
			h := newHost(t, guestWasm(t), opts)
			out := h.HandleRequestHeaders(context.Background(), opRequest("sleep"))
			if (out.Failed != nil) != tt.wantErr {
				t.Fatalf("outcome %+v", out)
			}
		})
	}
}

func TestPoolTimeoutAnswersPerFailurePolicy(t *testing.T) {
	opts := guestOptions(t, nil)
	opts.Instances = 1
	opts.PoolTimeout = 20 * time.Millisecond
	h := newHost(t, guestWasm(t), opts)
	s, err := h.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := h.HandleRequestHeaders(context.Background(), opRequest("metrics"))
	h.putBack(s)
	if !errors.Is(out.Failed, ErrNoInstance) || out.Verdict != Respond || out.Response.Status != 503 {
		t.Fatalf("outcome %+v", out)
	}
	text := prometheusText(t, h)
	if !strings.Contains(text, "skewgate_wasm_pool_timeouts_total 1\n") || !strings.Contains(text, "skewgate_wasm_pool_waits_total 1\n") {
		t.Fatalf("pool wait not counted:\n%s", text)
	}
	if out := h.HandleRequestHeaders(context.Background(), opRequest("metrics")); out.Failed != nil {
		t.Fatalf("instance not returned to the pool: %+v", out)
	}
}

func TestClientGoneWhileWaitingForAnInstanceIsNotAPluginFailure(t *testing.T) {
	opts := guestOptions(t, nil)
	opts.Instances = 1
	h := newHost(t, guestWasm(t), opts)
	s, err := h.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Outcome, 1)
	go func() { done <- h.HandleRequestHeaders(ctx, opRequest("metrics")) }()
	cancel()
	out := <-done
	h.putBack(s)
	if !errors.Is(out.Failed, context.Canceled) || out.Verdict != Reset {
		t.Fatalf("outcome %+v", out)
	}
	if text := prometheusText(t, h); !strings.Contains(text, "skewgate_wasm_failed_requests_total 0\n") {
		t.Fatalf("a client that left is counted as a failed request:\n%s", text)
	}
}

func TestCallTimeoutInterruptsARunawayCallback(t *testing.T) {
	opts := guestOptions(t, nil)
	opts.Instances = 1
	opts.CompilationCacheDir = ""
	opts.CallTimeout = 100 * time.Millisecond
	h := newHost(t, guestWasm(t), opts)
	ctx := context.Background()
	if out := h.HandleRequestHeaders(ctx, opRequest("metrics")); out.Failed != nil {
		t.Fatalf("a quick callback is within the timeout: %+v", out)
	}
	start := time.Now()
	out := h.HandleRequestHeaders(ctx, opRequest("spin"))
	if out.Failed == nil || out.Verdict != Respond || out.Response.Status != 503 {
		t.Fatalf("outcome %+v", out)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("the runaway callback ran for %v", elapsed)
	}
	eventually(t, "instance recreation", func() bool { return h.counters.recreations.Load() == 1 })
	if out := h.HandleRequestHeaders(ctx, opRequest("metrics")); out.Failed != nil {
		t.Fatalf("recreated instance: %+v", out)
	}
}

func TestRecreationRetriesWhenTheNewInstanceRejectsTheConfiguration(t *testing.T) {
	opts := guestOptions(t, nil)
	opts.Instances = 1
	// The first instance accepts, the recreated second one refuses, the third accepts.
	opts.PluginConfiguration = []byte("cluster=blue;reject-nth=2")
	h := newHost(t, guestWasm(t), opts)
	if out := h.HandleRequestHeaders(context.Background(), opRequest("trap")); out.Failed == nil {
		t.Fatalf("outcome %+v", out)
	}
	eventually(t, "recreation after one failed attempt", func() bool { return h.counters.recreations.Load() == 1 })
	if got := h.counters.recreationFailures.Load(); got != 1 {
		t.Fatalf("recreation failures = %d", got)
	}
	if out := h.HandleRequestHeaders(context.Background(), &Request{Headers: [][2]string{{"x-tenant", "t"}}}); out.Failed != nil {
		t.Fatalf("outcome %+v", out)
	}
}
