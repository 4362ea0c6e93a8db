package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestLongRunningRequestsAreClassifiedAsKubeAPIServerDoes(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		upgrade        bool
		want           bool
	}{
		{"GET", "/api/v1/namespaces/default/pods?watch=true", false, true},
		{"GET", "/api/v1/namespaces/default/pods?watch=1&resourceVersion=5", false, true},
		{"GET", "/api/v1/watch/namespaces/default/pods", false, true},
		{"GET", "/apis/apps/v1/watch/deployments", false, true},
		{"POST", "/api/v1/namespaces/default/pods/web/exec?command=sh", false, true},
		{"POST", "/api/v1/namespaces/default/pods/web/attach", false, true},
		{"POST", "/api/v1/namespaces/default/pods/web/portforward", false, true},
		{"GET", "/api/v1/namespaces/default/pods/web/log?follow=true", false, true},
		{"GET", "/api/v1/namespaces/default/pods/web/proxy/metrics", false, true},
		{"GET", "/api/v1/namespaces/default/services/web:80/proxy/", false, true},
		{"GET", "/api/v1/proxy/namespaces/default/pods/web", false, true},
		{"GET", "/debug/pprof/profile?seconds=30", false, true},
		{"GET", "/api/v1/namespaces/default/pods/web/exec", true, true},
		{"GET", "/apis/example.com/v1/widgets", true, true},
		{"GET", "/api/v1/namespaces/default/pods?watch=false", false, false},
		{"GET", "/api/v1/namespaces/default/pods?watch=0", false, false},
		{"GET", "/api/v1/namespaces/default/pods", false, false},
		{"GET", "/api/v1/namespaces/default/pods/web", false, false},
		{"PUT", "/api/v1/namespaces/default/pods/web/status", false, false},
		{"POST", "/api/v1/namespaces/default/pods/web/eviction", false, false},
		{"GET", "/apis", false, false},
		{"GET", "/api/v1/watch", false, false},
		{"GET", "/debug/pprof", false, false},
		{"GET", "/logs/kube-apiserver.log", false, false},
	} {
		name := fmt.Sprintf("%s %s upgrade=%v", tc.method, tc.target, tc.upgrade)
		t.Run(name, func(t *testing.T) {
			target := parseTarget(tc.method, tc.target)
			if got := target.Class(tc.method, tc.upgrade).LongRunning; got != tc.want {
				t.Errorf("long-running = %v, want %v", got, tc.want)
			}
		})
	}
}

// stalledBackend never answers short requests; watches answer after the
// request timeout and stream; ?partial=1 starts an answer and then stalls.
func stalledBackend(timeout time.Duration) func(string) http.Handler {
	return func(string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.URL.Query().Get("watch") == "true":
				time.Sleep(2 * timeout)
				fmt.Fprintln(w, `{"type":"ADDED"}`)
				http.NewResponseController(w).Flush()
				time.Sleep(2 * timeout)
				fmt.Fprintln(w, `{"type":"MODIFIED"}`)
			case r.URL.Query().Get("partial") == "1":
				fmt.Fprint(w, `{"kind":"PodList","items":[`)
				http.NewResponseController(w).Flush()
				<-r.Context().Done()
			default:
				<-r.Context().Done()
			}
		})
	}
}

func TestRequestTimeoutAppliesToShortRequestsOnly(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := newHarness(t, harnessConfig{handler: stalledBackend(timeout), options: func(o *Options) { o.RequestTimeout = timeout }})
	for _, http2 := range []bool{false, true} {
		client := h.client(nil, http2)
		t.Run(fmt.Sprintf("a request without an answer gets kube-apiserver's 504 http2=%v", http2), func(t *testing.T) {
			resp, body := do(t, client, "GET", h.front.URL+commonPods, nil, nil)
			if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			var s struct {
				Kind, APIVersion, Status, Message, Reason string
				Code                                      int
			}
			if err := json.Unmarshal(body, &s); err != nil {
				t.Fatal(err)
			}
			want := "Timeout: request did not complete within the allotted timeout"
			if s.Kind != "Status" || s.APIVersion != "v1" || s.Status != "Failure" || s.Message != want || s.Reason != "Timeout" || s.Code != 504 {
				t.Errorf("Status %+v", s)
			}
		})
		t.Run(fmt.Sprintf("a small body that stops arriving is answered 504 within the deadline http2=%v", http2), func(t *testing.T) {
			status := sendStalledBody(t, h, client, http2, commonPods, 20*timeout)
			if status != http.StatusGatewayTimeout {
				t.Errorf("status %d; want 504", status)
			}
		})
		t.Run(fmt.Sprintf("a short answer stalling past the deadline is cut http2=%v", http2), func(t *testing.T) {
			// The client's own deadline is far beyond the gateway's.
			ctx, cancel := context.WithTimeout(context.Background(), 20*timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", h.front.URL+commonPods+"?partial=1", nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			body, err := io.ReadAll(resp.Body)
			if err == nil || ctx.Err() != nil {
				t.Errorf("the stalled answer was not cut by the gateway: %q, %v", body, err)
			}
		})
		t.Run(fmt.Sprintf("a watch answers and streams past the deadline http2=%v", http2), func(t *testing.T) {
			resp, err := client.Get(h.front.URL + commonPods + "?watch=true")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			lines := bufio.NewReader(resp.Body)
			for _, want := range []string{"ADDED", "MODIFIED"} {
				line, err := lines.ReadString('\n')
				if err != nil || !strings.Contains(line, want) {
					t.Fatalf("status %d, event %q, %v; want %s", resp.StatusCode, line, err, want)
				}
			}
		})
	}
	if m := scrape(t, h); !strings.Contains(m, `kind="timeout"`) {
		t.Errorf("timeouts not counted as upstream errors:\n%s", m)
	}
}

// sendStalledBody sends a POST to target announcing 1 KiB of body, sends 8
// bytes of it and no more, and returns the status of the answer that arrives within
// wait. Go's HTTP/1.1 client returns an answer only once it has finished
// sending, so on HTTP/1.1 the request is written by hand.
func sendStalledBody(t *testing.T, h *harness, client *http.Client, http2 bool, target string, wait time.Duration) int {
	t.Helper()
	const partial = `{"kind":`
	if http2 {
		body, stall := io.Pipe()
		defer stall.Close()
		go func() { _, _ = stall.Write([]byte(partial)) }()
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", h.front.URL+target, body)
		req.ContentLength = 1024
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("no answer within %v: %v", wait, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	cfg := client.Transport.(*http.Transport).TLSClientConfig.Clone()
	cfg.NextProtos = []string{"http/1.1"}
	conn, err := tls.Dial("tcp", strings.TrimPrefix(h.front.URL, "https://"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(wait))
	if _, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: kube\r\nContent-Type: application/json\r\nContent-Length: 1024\r\n\r\n%s", target, partial); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", wait, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
