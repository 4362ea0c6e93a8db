package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// backendHeader tells the test which backend the round-robin proxy picked for a response.
const backendHeader = "X-Baseline-Backend"

// newRoundRobinProxy is the load balancer skewgate replaces: it spreads requests over the
// backends in turn, knowing nothing about which server serves which resource. It verifies the
// backends against the cluster CA as kubernetes.default.svc, authenticates as the admin client
// certificate, and drops every identity header a client sent.
func newRoundRobinProxy(t *testing.T, cluster *testcluster.Cluster) *httptest.Server {
	t.Helper()
	var backends []*url.URL
	for _, s := range cluster.Servers() {
		u, err := url.Parse(s.URL)
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, u)
	}
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			i := int((next.Add(1) - 1) % uint64(len(backends)))
			pr.SetURL(backends[i])
			for name := range pr.Out.Header {
				if lower := strings.ToLower(name); lower == "authorization" ||
					strings.HasPrefix(lower, "impersonate-") || strings.HasPrefix(lower, "x-remote-") {
					pr.Out.Header.Del(name)
				}
			}
			pr.Out.Header.Del(backendHeader)
			pr.Out = pr.Out.WithContext(context.WithValue(pr.Out.Context(), backendKey{}, i))
		},
		ModifyResponse: func(resp *http.Response) error {
			resp.Header.Set(backendHeader, strconv.Itoa(resp.Request.Context().Value(backendKey{}).(int)))
			return nil
		},
		Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs:      cluster.CAPool(),
			ServerName:   testcluster.ServingServerName,
			Certificates: []tls.Certificate{cluster.PKI().Admin},
			MinVersion:   tls.VersionTLS12,
		}},
	}
	srv := httptest.NewServer(proxy)
	t.Cleanup(srv.Close)
	return srv
}

type backendKey struct{}

func get(t *testing.T, client *http.Client, url string) (status int, backend string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header.Get(backendHeader)
}

// TestBaselineRoundRobinReturnsFalse404s reproduces the problem skewgate solves: during a
// rolling upgrade without the mixed version proxy, a plain round-robin load balancer sends
// requests for resources that only some servers serve to servers that answer 404, although the
// cluster as a whole serves them.
func TestBaselineRoundRobinReturnsFalse404s(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)

	proxy := newRoundRobinProxy(t, cluster)
	client := &http.Client{Timeout: 10 * time.Second}
	backends := len(cluster.Servers())
	// Each resource is requested in consecutive runs of len(backends), so round robin hands it to
	// every backend the same number of times.
	const rounds = skewedTrafficRounds
	total, notFound := 0, 0
	for _, r := range skewedResources {
		t.Run(path.Base(r.path), func(t *testing.T) {
			falseNotFound := 0
			for range rounds * backends {
				status, backendText := get(t, client, proxy.URL+r.path)
				backend, err := strconv.Atoi(backendText)
				if err != nil {
					t.Fatalf("response without a backend (status %d)", status)
				}
				total++
				want := http.StatusNotFound
				if slices.Contains(r.servedBy, backend) {
					want = http.StatusOK
				}
				if status != want {
					t.Errorf("backend %d answered %d, want %d", backend, status, want)
				}
				if status == http.StatusNotFound {
					falseNotFound++
				}
			}
			notFound += falseNotFound
			if want := rounds * (backends - len(r.servedBy)); falseNotFound != want {
				t.Errorf("%d false 404s out of %d requests, want %d", falseNotFound, rounds*backends, want)
			}
		})
	}
	t.Logf("round robin over %d servers answered %d of %d requests for served resources with 404 (%.0f%%)",
		backends, notFound, total, 100*float64(notFound)/float64(total))
	if notFound == 0 {
		t.Error("no false 404s: the skewed cluster does not reproduce the bug")
	}
}
