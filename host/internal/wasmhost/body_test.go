package wasmhost

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// fakeBody is a BodyReader answering body, or err. With gate set, it announces on reading that it started and
// answers once gate is closed.
type fakeBody struct {
	body    []byte
	err     error
	gate    chan struct{}
	reading chan struct{}
	reads   atomic.Int32
}

func (f *fakeBody) ReadBody() ([]byte, error) {
	f.reads.Add(1)
	if f.gate != nil {
		f.reading <- struct{}{}
		<-f.gate
	}
	return f.body, f.err
}

// gatedBody is a fakeBody answering body only once its gate is closed.
func gatedBody(body []byte) *fakeBody {
	return &fakeBody{body: body, gate: make(chan struct{}), reading: make(chan struct{}, 1)}
}

func waitReading(t *testing.T, f *fakeBody) {
	t.Helper()
	select {
	case <-f.reading:
	case <-time.After(10 * time.Second):
		t.Fatal("the body was never asked for")
	}
}

// bodyRequest is a POST with a body that the guest pauses for, then treats as x-body-then says.
func bodyRequest(then string, body BodyReader) *Request {
	req := opRequest("body", [2]string{"x-body-then", then})
	req.Headers[0][1] = "POST"
	req.EndOfStream = false
	req.Body = body
	return req
}

func summaryOf(body []byte) string {
	sum := sha256.Sum256(body)
	return fmt.Sprintf("size=%d end=true read=%d sha256=%s", len(body), len(body), hex.EncodeToString(sum[:]))
}

// What the body callback does counts as what the headers callback does: its header changes are forwarded, its
// clear_route_cache clears the route, its local response is sent, its HTTP calls are awaited (with the body
// still readable in their callback), and a pause or a trap in it gets the failure policy. The body the plugin
// read is forwarded in the client's place, whoever forwards it.
func TestBodyCallbackDecidesTheRequestPausedForItsBody(t *testing.T) {
	body := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"k":"` + strings.Repeat("v", 3000) + `"}}`)
	tests := []struct {
		then   string
		policy FailurePolicy
		check  func(t *testing.T, req *Request, out Outcome)
	}{
		{"summary", FailClosed, func(t *testing.T, _ *Request, out Outcome) {
			forwardsBody(t, out, body)
			if got, _ := header(out.Headers, "x-body-summary"); got != summaryOf(body) {
				t.Errorf("the guest read %q, want %q", got, summaryOf(body))
			}
			if got, _ := header(out.Headers, "x-body-in-headers"); got != "error status returned by host: not found" {
				t.Errorf("reading the body in the headers callback gave %q, want NotFound", got)
			}
			if !out.RouteCacheCleared {
				t.Error("header changes in the body callback must clear the route cache")
			}
		}},
		{"plain", FailClosed, func(t *testing.T, req *Request, out Outcome) {
			forwardsBody(t, out, body)
			if out.RouteCacheCleared || !slices.Equal(out.Headers, req.Headers) {
				t.Errorf("an untouched request changed: cleared %v, headers %q", out.RouteCacheCleared, out.Headers)
			}
		}},
		{"foreign", FailClosed, func(t *testing.T, req *Request, out Outcome) {
			forwardsBody(t, out, body)
			if !out.RouteCacheCleared || !slices.Equal(out.Headers, req.Headers) {
				t.Errorf("clear_route_cache in the body callback: cleared %v, headers %q", out.RouteCacheCleared, out.Headers)
			}
		}},
		{"respond", FailClosed, func(t *testing.T, _ *Request, out Outcome) {
			if out.Failed != nil || out.Verdict != Respond || out.Response.Status != 201 || !bytes.Equal(out.Response.Body, body) {
				t.Fatalf("outcome %+v", out)
			}
			if got, _ := header(out.Response.Headers, "x-body-size"); got != fmt.Sprint(len(body)) {
				t.Errorf("x-body-size = %q", got)
			}
			if out.Body != nil {
				t.Error("a local response forwards no body")
			}
		}},
		{"call", FailClosed, func(t *testing.T, _ *Request, out Outcome) {
			forwardsBody(t, out, body)
			if got, _ := header(out.Headers, "x-call-request-body"); got != summaryOf(body) {
				t.Errorf("the body read in the HTTP call's callback: %q, want %q", got, summaryOf(body))
			}
		}},
		{"pause", FailClosed, func(t *testing.T, _ *Request, out Outcome) {
			if !errors.Is(out.Failed, ErrStreamPaused) || out.Verdict != Respond || out.Response.Status != 503 {
				t.Fatalf("outcome %+v", out)
			}
		}},
		{"trap", FailClosed, func(t *testing.T, _ *Request, out Outcome) {
			if out.Failed == nil || errors.Is(out.Failed, ErrStreamPaused) || out.Verdict != Respond || out.Response.Status != 503 {
				t.Fatalf("outcome %+v", out)
			}
		}},
		{"trap", FailOpen, func(t *testing.T, req *Request, out Outcome) {
			if out.Failed == nil || out.Verdict != Forward || !slices.Equal(out.Headers, req.Headers) || !bytes.Equal(out.Body, body) {
				t.Fatalf("fail-open after the body was read must forward the original headers and the body: %+v", out)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.then+"/"+policyNames[tt.policy], func(t *testing.T) {
			logs := &logRecorder{}
			opts := callOptions(t, &fakeCaller{clusters: []string{"auth"}})
			opts.Logger = slog.New(logs)
			opts.FailurePolicy = tt.policy
			h := newHost(t, guestWasm(t), opts)
			reader := &fakeBody{body: body}
			req := bodyRequest(tt.then, reader)
			out := h.HandleRequestHeaders(context.Background(), req)
			tt.check(t, req, out)
			if n := reader.reads.Load(); n != 1 {
				t.Errorf("the body was read %d times, want once", n)
			}
			if out.BodyFailed != nil {
				t.Errorf("BodyFailed = %v for a body that was read", out.BodyFailed)
			}
			if tt.then != "trap" {
				if n := liveStreams(h); n != 0 {
					t.Errorf("%d streams still live", n)
				}
				if text := prometheusText(t, h); !strings.Contains(text, "guest_streams_done 1\n") {
					t.Errorf("the stream's context was not finished:\n%s", text)
				}
			}
			if logs.contains("request body readable in log phase") {
				t.Error("the request body must not be readable once the request is forwarded or answered")
			}
		})
	}
}

var policyNames = map[FailurePolicy]string{FailClosed: "fail-closed", FailOpen: "fail-open"}

func forwardsBody(t *testing.T, out Outcome, body []byte) {
	t.Helper()
	if out.Failed != nil || out.Verdict != Forward {
		t.Fatalf("outcome %+v", out)
	}
	if !bytes.Equal(out.Body, body) {
		t.Fatalf("forwarded body of %d bytes, want the %d read", len(out.Body), len(body))
	}
}

// An empty body read is forwarded as an empty body, not mistaken for a body nobody read.
func TestAnEmptyBodyReadIsForwardedEmpty(t *testing.T) {
	h := newHost(t, guestWasm(t), guestOptions(t, nil))
	out := h.HandleRequestHeaders(context.Background(), bodyRequest("summary", &fakeBody{}))
	if out.Failed != nil || out.Verdict != Forward || out.Body == nil || len(out.Body) != 0 {
		t.Fatalf("outcome %+v", out)
	}
	if got, _ := header(out.Headers, "x-body-summary"); got != summaryOf(nil) {
		t.Fatalf("the guest read %q", got)
	}
}

// A body that takes its time holds no VM instance: with a pool of one, other requests are served while it is
// read, and the paused stream then resumes on its own instance.
func TestABodyBeingReadHoldsNoInstance(t *testing.T) {
	opts := guestOptions(t, nil)
	opts.Instances = 1
	opts.PoolTimeout = 2 * time.Second
	h := newHost(t, guestWasm(t), opts)
	ctx := context.Background()
	reader := gatedBody([]byte("slow body"))
	waiting := handleAsync(ctx, h, bodyRequest("summary", reader))
	waitReading(t, reader)
	for range 3 {
		out := h.HandleRequestHeaders(ctx, &Request{Headers: [][2]string{{"x-tenant", "t"}}, EndOfStream: true})
		if out.Failed != nil || out.Verdict != Forward {
			t.Fatalf("a request while a body is read: %+v", out)
		}
	}
	if n := liveStreams(h); n != 1 {
		t.Fatalf("%d streams live while the body is read, want the paused one", n)
	}
	close(reader.gate)
	out := waitOutcome(t, waiting)
	forwardsBody(t, out, []byte("slow body"))
	if got, _ := header(out.Headers, "x-body-summary"); got != summaryOf([]byte("slow body")) {
		t.Fatalf("the guest read %q", got)
	}
}

// A body that cannot be read ends the stream as Envoy ends a reset one (its context gets log, done and
// delete), reported as the client's failure, never the plugin's; the instance serves the next request.
func TestAnUnreadableBodyEndsTheStreamAsAReset(t *testing.T) {
	errBroken := errors.New("the client broke off its body")
	tests := []struct {
		name       string
		cancel     bool
		failed     error
		bodyFailed error
	}{
		{"reader error", false, nil, errBroken},
		{"client gone", true, context.Canceled, errBroken},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, guestWasm(t), callOptions(t, nil))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			reader := gatedBody(nil)
			reader.err = errBroken
			waiting := handleAsync(ctx, h, bodyRequest("summary", reader))
			waitReading(t, reader)
			if tt.cancel {
				cancel()
			}
			close(reader.gate)
			out := waitOutcome(t, waiting)
			if out.Verdict != Reset || !errors.Is(out.Failed, tt.failed) || !errors.Is(out.BodyFailed, tt.bodyFailed) ||
				(tt.failed == nil) != (out.Failed == nil) || (tt.bodyFailed == nil) != (out.BodyFailed == nil) || out.Body != nil {
				t.Fatalf("outcome %+v", out)
			}
			if n := liveStreams(h); n != 0 {
				t.Fatalf("%d streams still live", n)
			}
			text := prometheusText(t, h)
			for _, want := range []string{"guest_streams_done 1\n", "skewgate_wasm_failed_requests_total 0\n", "skewgate_wasm_traps_total 0\n"} {
				if !strings.Contains(text, want) {
					t.Errorf("missing %q in\n%s", want, text)
				}
			}
			if out := h.HandleRequestHeaders(context.Background(), bodyRequest("plain", &fakeBody{body: []byte("next")})); out.Failed != nil {
				t.Fatalf("next request: %+v", out)
			}
		})
	}
}

// Only a pause of a request that has a body, which the caller can supply and the module has a callback for,
// waits for the body: any other pause with nothing outstanding is answered by the failure policy as before,
// without the body being read.
func TestAPauseThatCannotWaitForABodyFollowsTheFailurePolicy(t *testing.T) {
	withoutBodyCallback := probeSpec{imports: implementedImports(envoyabi.Envoy133, envoyabi.ABI020), requestHeadersAction: actionPause}.build()
	tests := []struct {
		name        string
		wasm        func(t testing.TB) []byte
		endOfStream bool
		noReader    bool
	}{
		{"request without a body", guestWasm, true, false},
		{"body the caller cannot supply", guestWasm, false, true},
		{"module without proxy_on_request_body", func(testing.TB) []byte { return withoutBodyCallback }, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, tt.wasm(t), guestOptions(t, nil))
			reader := &fakeBody{body: []byte("never read")}
			req := bodyRequest("summary", reader)
			req.EndOfStream = tt.endOfStream
			if tt.noReader {
				req.Body = nil
			}
			out := h.HandleRequestHeaders(context.Background(), req)
			if !errors.Is(out.Failed, ErrStreamPaused) || out.Verdict != Respond || out.Response.Status != 503 || out.Body != nil {
				t.Fatalf("outcome %+v", out)
			}
			if n := reader.reads.Load(); n != 0 {
				t.Fatalf("the body was read %d times", n)
			}
		})
	}
}

func TestStreamCallbacksRunInEnvoyOrderWithTheBodyBetweenHeadersAndLog(t *testing.T) {
	logs := &logRecorder{}
	wasm := probeSpec{imports: implementedImports(envoyabi.Envoy133, envoyabi.ABI020), markers: true,
		requestHeadersAction: actionPause, requestBody: true}.build()
	h := newHost(t, wasm, Options{Envoy: envoyabi.Envoy133, Instances: 1, Logger: slog.New(logs)})
	logs.records = nil
	out := h.HandleRequestHeaders(context.Background(), &Request{Headers: [][2]string{{":path", "/"}}, Body: &fakeBody{body: []byte("b")}})
	if out.Failed != nil || out.Verdict != Forward || string(out.Body) != "b" {
		t.Fatalf("outcome %+v", out)
	}
	want := []string{"context_create", "request_headers", "request_body", "log", "done", "delete"}
	if got := callbackMarkers(logs); !slices.Equal(got, want) {
		t.Fatalf("stream callbacks = %v, want Envoy's order %v", got, want)
	}
}

// The request body is buffer type 0 from its callback for as long as the request is open, as cpp-host keeps the
// buffer it was handed; not before the body is read, not once the request is forwarded or answered, not from a
// root context.
func TestRequestBodyBufferIsReadableOnlyWhileTheRequestIsOpen(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	s := p.beginStream([][2]string{{":method", "POST"}}, Properties{})
	expectStatus(t, "before the body is read", p.env("proxy_get_buffer_bytes", bufferTypeRequestBody, 0, 100, outPtr, outSize), statusNotFound)
	s.body, s.bodyRead = []byte("hello body"), true
	expectStatus(t, "whole body", p.env("proxy_get_buffer_bytes", bufferTypeRequestBody, 0, 100, outPtr, outSize), statusOK)
	if got := p.returned(); got != "hello body" {
		t.Fatalf("body = %q", got)
	}
	expectStatus(t, "slice", p.env("proxy_get_buffer_bytes", bufferTypeRequestBody, 6, 4, outPtr, outSize), statusOK)
	if got := p.returned(); got != "body" {
		t.Fatalf("slice = %q", got)
	}
	expectStatus(t, "start past the end", p.env("proxy_get_buffer_bytes", bufferTypeRequestBody, 11, 1, outPtr, outSize), statusBadArgument)
	expectStatus(t, "response body", p.env("proxy_get_buffer_bytes", 1, 0, 100, outPtr, outSize), statusNotFound)
	p.useRoot()
	expectStatus(t, "from a root context", p.env("proxy_get_buffer_bytes", bufferTypeRequestBody, 0, 100, outPtr, outSize), statusNotFound)
	p.inst.effective = s.guestContext()
	s.requestOpen, s.inLog = false, true
	expectStatus(t, "in the log phase", p.env("proxy_get_buffer_bytes", bufferTypeRequestBody, 0, 100, outPtr, outSize), statusNotFound)
}

// An instance that fails while a body is read takes the paused stream's context with it: the failure policy
// answers, and fail-open forwards the original headers with the body, which the client can no longer resend.
func TestInstanceFailureWhileTheBodyIsReadAppliesTheFailurePolicy(t *testing.T) {
	for _, policy := range []FailurePolicy{FailClosed, FailOpen} {
		t.Run(policyNames[policy], func(t *testing.T) {
			opts := guestOptions(t, nil)
			opts.Instances = 1
			opts.FailurePolicy = policy
			h := newHost(t, guestWasm(t), opts)
			reader := gatedBody([]byte("body"))
			req := bodyRequest("summary", reader)
			waiting := handleAsync(context.Background(), h, req)
			waitReading(t, reader)
			if out := h.HandleRequestHeaders(context.Background(), opRequest("trap")); out.Failed == nil {
				t.Fatalf("trap outcome %+v", out)
			}
			eventually(t, "instance recreation", func() bool { return h.counters.recreations.Load() == 1 })
			close(reader.gate)
			out := waitOutcome(t, waiting)
			if !errors.Is(out.Failed, ErrStreamLost) || out.BodyFailed != nil {
				t.Fatalf("outcome %+v", out)
			}
			switch policy {
			case FailOpen:
				if out.Verdict != Forward || !slices.Equal(out.Headers, req.Headers) || string(out.Body) != "body" {
					t.Fatalf("fail-open outcome %+v", out)
				}
			default:
				if out.Verdict != Respond || out.Body != nil {
					t.Fatalf("fail-closed outcome %+v", out)
				}
			}
		})
	}
}
