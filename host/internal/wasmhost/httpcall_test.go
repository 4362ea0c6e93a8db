package wasmhost

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCaller is an HTTPCaller for the clusters it lists. Each call is recorded and announced on started (if
// set) before answer (default: 200 "pong") decides the result.
type fakeCaller struct {
	clusters []string
	answer   func(ctx context.Context, call HTTPCall) (*HTTPCallResponse, error)
	started  chan HTTPCall

	mu    sync.Mutex
	calls []HTTPCall
}

func (f *fakeCaller) HasCluster(cluster string) bool { return slices.Contains(f.clusters, cluster) }

func (f *fakeCaller) HTTPCall(ctx context.Context, call HTTPCall) (*HTTPCallResponse, error) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
	if f.started != nil {
		f.started <- call
	}
	if f.answer != nil {
		return f.answer(ctx, call)
	}
	return &HTTPCallResponse{Headers: [][2]string{{":status", "200"}}, Body: []byte("pong")}, nil
}

func (f *fakeCaller) recorded() []HTTPCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// blockingCaller answers 200 once release is closed, or fails with the context's error; every context error it
// sees is sent to ended.
func blockingCaller() (caller *fakeCaller, release chan struct{}, ended chan error) {
	release, ended = make(chan struct{}), make(chan error, 8)
	caller = &fakeCaller{clusters: []string{"auth"}, started: make(chan HTTPCall, 8)}
	caller.answer = func(ctx context.Context, _ HTTPCall) (*HTTPCallResponse, error) {
		select {
		case <-release:
			return &HTTPCallResponse{Headers: [][2]string{{":status", "200"}}, Body: []byte("late")}, nil
		case <-ctx.Done():
			ended <- ctx.Err()
			return nil, ctx.Err()
		}
	}
	return caller, release, ended
}

func callOptions(t testing.TB, caller HTTPCaller) Options {
	opts := guestOptions(t, nil)
	opts.Instances = 1
	opts.HTTPCalls = caller
	return opts
}

func callRequest(then string, extra ...[2]string) *Request {
	return opRequest("call", append([][2]string{{"x-call-then", then}}, extra...)...)
}

// handleAsync runs a request on its own goroutine.
func handleAsync(ctx context.Context, h *Host, req *Request) <-chan Outcome {
	done := make(chan Outcome, 1)
	go func() { done <- h.HandleRequestHeaders(ctx, req) }()
	return done
}

func waitStarted(t *testing.T, started <-chan HTTPCall) HTTPCall {
	t.Helper()
	select {
	case call := <-started:
		return call
	case <-time.After(10 * time.Second):
		t.Fatal("the HTTP call was never made")
		return HTTPCall{}
	}
}

func waitOutcome(t *testing.T, done <-chan Outcome) Outcome {
	t.Helper()
	select {
	case out := <-done:
		return out
	case <-time.After(10 * time.Second):
		t.Fatal("the request never finished")
		return Outcome{}
	}
}

func liveStreams(h *Host) int {
	s := h.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inst.streams)
}

func summary(out Outcome) string {
	if out.Response != nil {
		if v, ok := header(out.Response.Headers, "x-call-summary"); ok {
			return v
		}
	}
	v, _ := header(out.Headers, "x-call-summary")
	return v
}

func TestHTTPCallCarriesTheGuestRequestToTheNamedCluster(t *testing.T) {
	var deadlines []bool
	caller := &fakeCaller{clusters: []string{"auth"}}
	caller.answer = func(ctx context.Context, _ HTTPCall) (*HTTPCallResponse, error) {
		_, ok := ctx.Deadline()
		deadlines = append(deadlines, ok)
		return &HTTPCallResponse{Headers: [][2]string{{":status", "200"}}}, nil
	}
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	ctx := context.Background()
	out := h.HandleRequestHeaders(ctx, callRequest("respond", [2]string{"authorization", "Bearer t"},
		[2]string{"x-call-timeout", "1500"}, [2]string{"x-call-body", "ping"}))
	if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 200 {
		t.Fatalf("outcome %+v", out)
	}
	out = h.HandleRequestHeaders(ctx, callRequest("respond"))
	if out.Failed != nil || out.Verdict != Respond {
		t.Fatalf("outcome %+v", out)
	}
	calls := caller.recorded()
	if len(calls) != 2 {
		t.Fatalf("%d calls", len(calls))
	}
	want := HTTPCall{
		Cluster: "auth",
		Headers: [][2]string{{":method", "GET"}, {":path", "/check"}, {":authority", "auth.local"},
			{"authorization", "Bearer t"}, {"content-length", "4"}},
		Body:     []byte("ping"),
		Trailers: [][2]string{{"x-call-trailer", "t"}},
		Timeout:  1500 * time.Millisecond,
	}
	got := calls[0]
	if got.Cluster != want.Cluster || !slices.Equal(got.Headers, want.Headers) || string(got.Body) != string(want.Body) ||
		!slices.Equal(got.Trailers, want.Trailers) || got.Timeout != want.Timeout {
		t.Fatalf("call = %+v, want %+v", got, want)
	}
	if calls[1].Timeout != 0 || len(calls[1].Body) != 0 || len(calls[1].Trailers) != 0 {
		t.Fatalf("call without timeout or body = %+v", calls[1])
	}
	if !slices.Equal(deadlines, []bool{true, false}) {
		t.Fatalf("deadlines = %v: the guest's timeout bounds the call's context, no timeout adds none", deadlines)
	}
	if text := prometheusText(t, h); !strings.Contains(text, "skewgate_wasm_http_calls_total 2\n") {
		t.Fatalf("calls not counted:\n%s", text)
	}
}

func TestHTTPCallIsRefusedSynchronouslyLikeEnvoy(t *testing.T) {
	const badArgument = "dispatch: error status returned by host: bad argument"
	tests := []struct {
		name   string
		caller bool
		extra  [][2]string
	}{
		{"unknown cluster", true, [][2]string{{"x-call-cluster", "elsewhere"}}},
		{"no :path", true, [][2]string{{"x-call-omit", ":path"}}},
		{"no :method", true, [][2]string{{"x-call-omit", ":method"}}},
		{"no :authority", true, [][2]string{{"x-call-omit", ":authority"}}},
		{"no caller", false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			caller := &fakeCaller{clusters: []string{"auth"}}
			opts := callOptions(t, caller)
			if !tt.caller {
				opts.HTTPCalls = nil
			}
			h := newHost(t, guestWasm(t), opts)
			out := h.HandleRequestHeaders(context.Background(), callRequest("respond", tt.extra...))
			if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 500 || string(out.Response.Body) != badArgument {
				t.Fatalf("outcome %+v", out)
			}
			if calls := caller.recorded(); len(calls) != 0 {
				t.Fatalf("refused call was made: %+v", calls)
			}
			if text := prometheusText(t, h); !strings.Contains(text, "skewgate_wasm_http_calls_total 0\n") {
				t.Fatalf("a refused call is not made:\n%s", text)
			}
		})
	}
}

func TestHTTPCallResponseIsReadableInTheCallback(t *testing.T) {
	caller := &fakeCaller{clusters: []string{"auth"}}
	caller.answer = func(context.Context, HTTPCall) (*HTTPCallResponse, error) {
		return &HTTPCallResponse{
			Headers:  [][2]string{{":status", "403"}, {"Content-Type", "application/json"}},
			Body:     []byte(`{"kind":"Status"}`),
			Trailers: [][2]string{{"X-Checked", "yes"}},
		}, nil
	}
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	out := h.HandleRequestHeaders(context.Background(), callRequest("respond"))
	if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 200 || string(out.Response.Body) != `{"kind":"Status"}` {
		t.Fatalf("outcome %+v", out)
	}
	want := `counts=2,17,1 headers=:status:403,content-type:application/json body={"kind":"Status"} trailers=x-checked:yes`
	if got := summary(out); got != want {
		t.Fatalf("the guest read %q, want %q", got, want)
	}
}

func TestFailedHTTPCallIsDeliveredWithNoResponse(t *testing.T) {
	const nothing = "counts=0,0,0 headers=error(error status returned by host: bad argument) " +
		"body=error(error status returned by host: not found) trailers=error(error status returned by host: bad argument)"
	tests := []struct {
		name    string
		answer  func(context.Context, HTTPCall) (*HTTPCallResponse, error)
		extra   [][2]string
		callErr error
	}{
		{"upstream error", func(context.Context, HTTPCall) (*HTTPCallResponse, error) {
			return nil, errors.New("connection refused")
		}, nil, nil},
		{"no response and no error", func(context.Context, HTTPCall) (*HTTPCallResponse, error) { return nil, nil }, nil, nil},
		{"guest timeout", func(ctx context.Context, _ HTTPCall) (*HTTPCallResponse, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, [][2]string{{"x-call-timeout", "20"}}, context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen error
			caller := &fakeCaller{clusters: []string{"auth"}, answer: func(ctx context.Context, call HTTPCall) (*HTTPCallResponse, error) {
				resp, err := tt.answer(ctx, call)
				seen = err
				return resp, err
			}}
			h := newHost(t, guestWasm(t), callOptions(t, caller))
			out := h.HandleRequestHeaders(context.Background(), callRequest("respond", tt.extra...))
			if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 200 {
				t.Fatalf("outcome %+v", out)
			}
			if got := summary(out); got != nothing {
				t.Fatalf("the guest read %q, want %q", got, nothing)
			}
			if tt.callErr != nil && !errors.Is(seen, tt.callErr) {
				t.Fatalf("the call ended with %v, want %v", seen, tt.callErr)
			}
			if text := prometheusText(t, h); !strings.Contains(text, "skewgate_wasm_http_call_failures_total 1\n") {
				t.Fatalf("failure not counted:\n%s", text)
			}
		})
	}
}

func TestContinueAfterHTTPCallForwardsTheModifiedHeaders(t *testing.T) {
	caller := &fakeCaller{clusters: []string{"auth"}}
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	req := callRequest("continue", [2]string{"X-Original", "kept"})
	out := h.HandleRequestHeaders(context.Background(), req)
	if out.Failed != nil || out.Verdict != Forward || !out.RouteCacheCleared {
		t.Fatalf("outcome %+v", out)
	}
	want := append(slices.Clone(req.Headers), [2]string{"x-call-summary",
		"counts=1,4,0 headers=:status:200 body=pong trailers="})
	want[len(want)-2][0] = "x-original"
	if !slices.Equal(out.Headers, want) {
		t.Fatalf("forwarded headers %q, want %q", out.Headers, want)
	}
}

func TestSecondHTTPCallFromTheResponseCallbackIsAwaitedToo(t *testing.T) {
	caller := &fakeCaller{clusters: []string{"auth"}}
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	out := h.HandleRequestHeaders(context.Background(), callRequest("again"))
	if out.Failed != nil || out.Verdict != Forward || summary(out) == "" {
		t.Fatalf("outcome %+v", out)
	}
	var paths []string
	for _, call := range caller.recorded() {
		v, _ := header(call.Headers, ":path")
		paths = append(paths, v)
	}
	if !slices.Equal(paths, []string{"/check", "/again"}) {
		t.Fatalf("calls to %q", paths)
	}
}

func TestStreamLeftPausedAfterItsCallsFollowsTheFailurePolicy(t *testing.T) {
	caller := &fakeCaller{clusters: []string{"auth"}}
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	out := h.HandleRequestHeaders(context.Background(), callRequest("pause"))
	if !errors.Is(out.Failed, ErrStreamPaused) || out.Verdict != Respond || out.Response.Status != 503 {
		t.Fatalf("outcome %+v", out)
	}
	if n := liveStreams(h); n != 0 {
		t.Fatalf("%d streams still live", n)
	}
	if text := prometheusText(t, h); !strings.Contains(text, "guest_streams_done 1\n") {
		t.Fatalf("the stream's context was not finished:\n%s", text)
	}
}

func TestInstanceServesOtherRequestsWhileACallIsOutstanding(t *testing.T) {
	caller, release, _ := blockingCaller()
	opts := callOptions(t, caller)
	opts.PoolTimeout = 2 * time.Second
	h := newHost(t, guestWasm(t), opts)
	ctx := context.Background()
	waiting := handleAsync(ctx, h, callRequest("respond"))
	waitStarted(t, caller.started)
	for range 3 {
		out := h.HandleRequestHeaders(ctx, &Request{Headers: [][2]string{{"x-tenant", "t"}}, EndOfStream: true})
		if out.Failed != nil || out.Verdict != Forward {
			t.Fatalf("a request behind an outstanding call: %+v", out)
		}
	}
	select {
	case out := <-waiting:
		t.Fatalf("the paused request finished before its call returned: %+v", out)
	default:
	}
	close(release)
	out := waitOutcome(t, waiting)
	if out.Failed != nil || out.Verdict != Respond || string(out.Response.Body) != "late" {
		t.Fatalf("outcome %+v", out)
	}
}

func TestClientCancellationDuringHTTPCallFinishesTheStream(t *testing.T) {
	caller, release, ended := blockingCaller()
	defer close(release)
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	ctx, cancel := context.WithCancel(context.Background())
	waiting := handleAsync(ctx, h, callRequest("respond"))
	waitStarted(t, caller.started)
	cancel()
	out := waitOutcome(t, waiting)
	if !errors.Is(out.Failed, context.Canceled) || out.Verdict != Reset {
		t.Fatalf("outcome %+v", out)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the call ended with %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call was not cancelled")
	}
	if n := liveStreams(h); n != 0 {
		t.Fatalf("%d streams still live", n)
	}
	text := prometheusText(t, h)
	for _, want := range []string{"guest_streams_done 1\n", "skewgate_wasm_http_calls_cancelled_total 1\n",
		"skewgate_wasm_failed_requests_total 0\n", "skewgate_wasm_traps_total 0\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %q in\n%s", want, text)
		}
	}
	// The guest forgot the cancelled call: the instance serves the next one normally.
	caller.answer = nil
	caller.started = nil
	if out := h.HandleRequestHeaders(context.Background(), callRequest("respond")); out.Failed != nil || out.Verdict != Respond {
		t.Fatalf("next request: %+v", out)
	}
}

func TestInstanceFailureDuringHTTPCallAppliesTheFailurePolicy(t *testing.T) {
	tests := []struct {
		policy  FailurePolicy
		verdict Verdict
	}{
		{FailClosed, Respond},
		{FailOpen, Forward},
	}
	for _, tt := range tests {
		t.Run(tt.verdict.String(), func(t *testing.T) {
			caller, release, _ := blockingCaller()
			opts := callOptions(t, caller)
			opts.FailurePolicy = tt.policy
			h := newHost(t, guestWasm(t), opts)
			req := callRequest("respond")
			waiting := handleAsync(context.Background(), h, req)
			waitStarted(t, caller.started)
			if out := h.HandleRequestHeaders(context.Background(), opRequest("trap")); out.Failed == nil {
				t.Fatalf("trap outcome %+v", out)
			}
			eventually(t, "instance recreation", func() bool { return h.counters.recreations.Load() == 1 })
			close(release)
			out := waitOutcome(t, waiting)
			if !errors.Is(out.Failed, ErrStreamLost) || out.Verdict != tt.verdict {
				t.Fatalf("outcome %+v", out)
			}
			if tt.verdict == Forward && !slices.Equal(out.Headers, req.Headers) {
				t.Fatalf("fail-open forwards the original headers, got %q", out.Headers)
			}
		})
	}
}

func TestTrapInHTTPCallResponseCallbackAppliesTheFailurePolicy(t *testing.T) {
	h := newHost(t, guestWasm(t), callOptions(t, &fakeCaller{clusters: []string{"auth"}}))
	out := h.HandleRequestHeaders(context.Background(), callRequest("trap"))
	if out.Failed == nil || out.Verdict != Respond || out.Response.Status != 503 {
		t.Fatalf("outcome %+v", out)
	}
	eventually(t, "instance recreation", func() bool { return h.counters.recreations.Load() == 1 })
}

// TestCallTimeoutDoesNotCountTimeSpentWaitingForACall: no guest code runs while the host waits for a call, so
// a call slower than CallTimeout must not look like a runaway callback.
func TestCallTimeoutDoesNotCountTimeSpentWaitingForACall(t *testing.T) {
	caller := &fakeCaller{clusters: []string{"auth"}, answer: func(context.Context, HTTPCall) (*HTTPCallResponse, error) {
		time.Sleep(time.Second)
		return &HTTPCallResponse{Headers: [][2]string{{":status", "200"}}}, nil
	}}
	opts := callOptions(t, caller)
	opts.CompilationCacheDir = ""
	opts.CallTimeout = 250 * time.Millisecond
	h := newHost(t, guestWasm(t), opts)
	out := h.HandleRequestHeaders(context.Background(), callRequest("respond"))
	if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 200 {
		t.Fatalf("outcome %+v", out)
	}
	if traps := h.counters.traps.Load(); traps != 0 {
		t.Fatalf("%d traps", traps)
	}
}

func TestHTTPCallFromARootContextIsDeliveredToThatRoot(t *testing.T) {
	tests := []struct {
		cluster string
		want    string
	}{
		{"auth", "200"},
		{"elsewhere", "dispatch: error status returned by host: bad argument"},
	}
	for _, tt := range tests {
		t.Run(tt.cluster, func(t *testing.T) {
			logs := &logRecorder{}
			opts := callOptions(t, &fakeCaller{clusters: []string{"auth"}})
			opts.Logger = slog.New(logs)
			opts.PluginConfiguration = []byte("cluster=blue;configure-call=" + tt.cluster)
			newHost(t, guestWasm(t), opts)
			eventually(t, "the root's call result", func() bool { return logs.contains("configure-call: " + tt.want) })
		})
	}
}

func TestConfigurationChangeKeepsTheRootOfAWaitingStreamUntilItEnds(t *testing.T) {
	caller, release, _ := blockingCaller()
	h := newHost(t, guestWasm(t), callOptions(t, caller))
	ctx := context.Background()
	waiting := handleAsync(ctx, h, callRequest("respond"))
	waitStarted(t, caller.started)
	if err := h.Configure(ctx, []byte("cluster=green")); err != nil {
		t.Fatal(err)
	}
	roots := func() int {
		s := h.slots[0]
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.inst.roots)
	}
	if n := roots(); n != 2 {
		t.Fatalf("%d roots while a stream of the old one waits", n)
	}
	out := h.HandleRequestHeaders(ctx, &Request{Headers: [][2]string{{"x-tenant", "t"}}})
	if v, _ := header(out.Headers, "x-upstream-cluster"); v != "green-t" {
		t.Fatalf("new streams use the new configuration, got %q", v)
	}
	close(release)
	if out := waitOutcome(t, waiting); out.Failed != nil || out.Verdict != Respond || string(out.Response.Body) != "late" {
		t.Fatalf("outcome %+v", out)
	}
	if n := roots(); n != 1 {
		t.Fatalf("%d roots after the last stream of the old one ended", n)
	}
}
