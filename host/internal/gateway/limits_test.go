package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/skewgate/skewgate/host/internal/wasmhost"
)

func TestTooManyHeaderFieldsAreRefusedBeforeThePlugin(t *testing.T) {
	for _, tc := range []struct {
		name       string
		limit      int
		fields     int
		wantStatus int
	}{
		{"the default limit admits 100 fields", 0, 100, http.StatusOK},
		{"the default limit refuses 101 fields", 0, 101, http.StatusRequestHeaderFieldsTooLarge},
		{"a configured limit refuses one field more", 5, 6, http.StatusRequestHeaderFieldsTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			plugin := pluginFunc(func(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
				calls.Add(1)
				return routeTo("")(ctx, req)
			})
			h := newHarness(t, harnessConfig{plugin: plugin, options: func(o *Options) { o.MaxRequestHeaders = tc.limit }})
			r := httptest.NewRequest("GET", "https://gateway"+commonPods, nil)
			for i := range tc.fields - 1 {
				r.Header.Add(fmt.Sprintf("X-Field-%d", i%7), "v")
			}
			r.Header.Add("Accept", "application/json")
			rec := httptest.NewRecorder()
			h.gw.ServeHTTP(rec, r)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.wantStatus, rec.Body)
			}
			if tc.wantStatus == http.StatusOK {
				return
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("the plugin ran %d times", n)
			}
			var s status
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || s.Kind != "Status" || s.Code != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("body %s is not a 431 Status (%v)", rec.Body, err)
			}
			if m := scrape(t, h); !strings.Contains(m, `skewgate_gateway_requests_total{code="431",verdict="none"} 1`) {
				t.Errorf("refusal not counted:\n%s", m)
			}
		})
	}
}

func TestLocalResponseToHEADAnnouncesTheBodyLengthAndSendsNoBody(t *testing.T) {
	const document = `{"kind":"APIGroupDiscoveryList"}`
	plugin := pluginFunc(func(context.Context, *wasmhost.Request) wasmhost.Outcome {
		return wasmhost.Outcome{Verdict: wasmhost.Respond, Response: &wasmhost.LocalResponse{
			Status: 200, Headers: [][2]string{{"content-type", "application/json"}}, Body: []byte(document),
		}}
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	t.Run("handler", func(t *testing.T) {
		rec := httptest.NewRecorder()
		h.gw.ServeHTTP(rec, httptest.NewRequest("HEAD", "https://gateway/apis", nil))
		if got := rec.Header().Get("Content-Length"); got != fmt.Sprint(len(document)) {
			t.Errorf("Content-Length %q, want %d", got, len(document))
		}
		if rec.Body.Len() != 0 {
			t.Errorf("a HEAD answer carried a body: %q", rec.Body)
		}
	})
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("http2=%v", http2), func(t *testing.T) {
			resp, body := do(t, h.client(nil, http2), "HEAD", h.front.URL+"/apis", nil, nil)
			if resp.ContentLength != int64(len(document)) || len(body) != 0 {
				t.Errorf("Content-Length %d and %d body bytes, want %d and none", resp.ContentLength, len(body), len(document))
			}
		})
	}
}

func TestClientLeavingWhileThePluginRunsIsNotAPluginFailure(t *testing.T) {
	plugin := pluginFunc(func(ctx context.Context, _ *wasmhost.Request) wasmhost.Outcome {
		<-ctx.Done()
		// What wasmhost reports when the stream's context ends during a call.
		return wasmhost.Outcome{
			Verdict:  wasmhost.Respond,
			Response: &wasmhost.LocalResponse{Status: http.StatusServiceUnavailable},
			Failed:   fmt.Errorf("wasmhost: the plugin's HTTP call was cancelled: %w", context.Canceled),
		}
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	h.gw.ServeHTTP(rec, httptest.NewRequest("GET", "https://gateway/apis", nil).WithContext(ctx))
	m := scrape(t, h)
	if !strings.Contains(m, "skewgate_gateway_plugin_failures_total 0\n") {
		t.Errorf("a client leaving was counted as a plugin failure:\n%s", m)
	}
	if !strings.Contains(m, `skewgate_gateway_requests_total{code="499",verdict="respond"} 1`) {
		t.Errorf("a client leaving is not counted as 499:\n%s", m)
	}
	if body, _ := io.ReadAll(rec.Result().Body); len(body) != 0 {
		t.Errorf("answered a client that left: %s", body)
	}
}

func TestInvalidConnectionNominationIsRefusedBeforeThePlugin(t *testing.T) {
	var calls atomic.Int64
	plugin := pluginFunc(func(ctx context.Context, req *wasmhost.Request) wasmhost.Outcome {
		calls.Add(1)
		return routeTo("")(ctx, req)
	})
	h := newHarness(t, harnessConfig{plugin: plugin})
	r := httptest.NewRequest("GET", "https://gateway"+commonPods, nil)
	r.Header.Set("Connection", "X-Forwarded-For")
	r.Header.Set("X-Forwarded-For", "203.0.113.9")
	rec := httptest.NewRecorder()
	h.gw.ServeHTTP(rec, r)
	var s status
	if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil || rec.Code != http.StatusBadRequest || s.Reason != "BadRequest" {
		t.Errorf("status %d, body %s (%v); want a 400 BadRequest Status", rec.Code, rec.Body, err)
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("the plugin ran %d times", n)
	}
}
