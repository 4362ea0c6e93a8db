package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseTargetAcceptsOnlyHTTPSOnLoopbackIPs(t *testing.T) {
	cases := []struct {
		target string
		ok     bool
	}{
		{"https://127.0.0.1:6443/apis", true},
		{"https://127.3.4.5:443/api/v1/pods?limit=1", true},
		{"https://[::1]:6443/", true},
		{"https://[::ffff:127.0.0.1]:6443/", true},
		{"https://localhost:6443/", false},
		{"https://10.0.0.1:6443/", false},
		{"https://0.0.0.0:6443/", false},
		{"https://[::]:6443/", false},
		{"https://192.168.1.10:6443/", false},
		{"https://kubernetes.default.svc:443/", false},
		{"https://127.0.0.1.nip.io:6443/", false},
		{"https://[fe80::1%25lo]:6443/", false},
		{"http://127.0.0.1:6443/", false},
		{"https://127.0.0.1/", false},
		{"https://127.0.0.1:0/", false},
		{"https://127.0.0.1:70000/", false},
		{"https://user:pass@127.0.0.1:6443/", false},
		{"127.0.0.1:6443", false},
		{"", false},
	}
	for _, c := range cases {
		t.Run(c.target, func(t *testing.T) {
			_, err := ParseTarget(c.target)
			if (err == nil) != c.ok {
				t.Errorf("ParseTarget(%q) error %v; want ok=%v", c.target, err, c.ok)
			}
		})
	}
}

func TestParseTargetNamesTheLoopbackRule(t *testing.T) {
	for _, target := range []string{"https://10.0.0.1:6443/", "https://localhost:6443/"} {
		if _, err := ParseTarget(target); !errors.Is(err, ErrNotLoopback) {
			t.Errorf("ParseTarget(%q) = %v; want ErrNotLoopback", target, err)
		}
	}
}

func TestDialRefusesNonLoopbackAddresses(t *testing.T) {
	cases := []struct {
		address string
		ok      bool
	}{
		{"127.0.0.1:6443", true},
		{"[::1]:6443", true},
		{"10.1.2.3:6443", false},
		{"[2001:db8::1]:443", false},
		{"not-an-address", false},
	}
	for _, c := range cases {
		t.Run(c.address, func(t *testing.T) {
			if err := dialLoopbackOnly("tcp", c.address, nil); (err == nil) != c.ok {
				t.Errorf("dialLoopbackOnly(%q) = %v; want ok=%v", c.address, err, c.ok)
			}
		})
	}
}

// validConfig is a configuration that passes validation, for tests to break.
func validConfig() Config {
	return Config{
		Targets: []string{"https://127.0.0.1:6443/apis"}, Method: "GET", Protocol: HTTP2,
		Concurrency: 1, Requests: 1, Duration: time.Second, Timeout: time.Second,
		ExpectStatus: 200, RootCAs: x509.NewCertPool(),
	}
}

func TestRunRejectsInvalidConfigurationsBeforeSendingAnything(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"non-loopback among targets", func(c *Config) { c.Targets = append(c.Targets, "https://203.0.113.7:443/") }, "loopback"},
		{"no target", func(c *Config) { c.Targets = nil }, "no target"},
		{"unknown protocol", func(c *Config) { c.Protocol = "h3" }, "protocol"},
		{"no concurrency", func(c *Config) { c.Concurrency = 0 }, "concurrency"},
		{"no request bound", func(c *Config) { c.Requests = 0 }, "requests"},
		{"no time bound", func(c *Config) { c.Duration = 0 }, "duration"},
		{"negative warm-up", func(c *Config) { c.Warmup = -1 }, "warmup"},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, "timeout"},
		{"no CA", func(c *Config) { c.RootCAs = nil }, "CA"},
		{"token and certificate", func(c *Config) { c.BearerToken, c.ClientCertificate = "t", &tls.Certificate{} }, "not both"},
		{"bad expected status", func(c *Config) { c.ExpectStatus = 42 }, "status"},
		{"bad method", func(c *Config) { c.Method = "GE T" }, "method"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := validConfig()
			c.mutate(&cfg)
			_, err := Run(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Run error %v; want one mentioning %q", err, c.want)
			}
		})
	}
}

// testServer is a TLS server on 127.0.0.1 speaking HTTP/1.1 and HTTP/2.
func testServer(t *testing.T, handler http.HandlerFunc) (*httptest.Server, *x509.CertPool) {
	t.Helper()
	srv := httptest.NewUnstartedServer(handler)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return srv, pool
}

func TestRunCountsSuccessesAndErrorsByStatusAcrossTargets(t *testing.T) {
	srv, pool := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(`{"kind":"List"}`))
	})
	cfg := validConfig()
	cfg.Targets = []string{srv.URL + "/ok", srv.URL + "/missing"}
	cfg.RootCAs, cfg.Concurrency, cfg.Requests, cfg.Duration = pool, 4, 200, time.Minute
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count != 200 || res.OK != 100 || res.Errors["404"] != 100 || len(res.Errors) != 1 {
		t.Errorf("count %d, ok %d, errors %v; want 200 requests alternating 100 OK and 100 404", res.Count, res.OK, res.Errors)
	}
	if !(res.P50 > 0 && res.P50 <= res.P90 && res.P90 <= res.P99) {
		t.Errorf("percentiles p50 %v, p90 %v, p99 %v; want 0 < p50 <= p90 <= p99", res.P50, res.P90, res.P99)
	}
	if res.RPS <= 0 || res.Elapsed <= 0 || !strings.Contains(res.FirstError, "404") {
		t.Errorf("rps %v, elapsed %v, first error %q", res.RPS, res.Elapsed, res.FirstError)
	}
}

func TestRunStopsAtTheTimeBoundAndLetsRequestsInFlightFinish(t *testing.T) {
	var inFlight, maxInFlight atomic.Int64
	srv, pool := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		time.Sleep(20 * time.Millisecond)
	})
	cfg := validConfig()
	cfg.Targets = []string{srv.URL + "/slow"}
	cfg.RootCAs, cfg.Concurrency, cfg.Requests, cfg.Duration = pool, 3, 1_000_000, 300*time.Millisecond
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Count == 0 || res.Count > 3*(300/20+2) || len(res.Errors) != 0 {
		t.Errorf("count %d, errors %v; want a few dozen requests, all successful", res.Count, res.Errors)
	}
	if res.Elapsed > 2 {
		t.Errorf("the run took %.2fs; want it to stop after the 300ms bound", res.Elapsed)
	}
	if m := maxInFlight.Load(); m > 3 {
		t.Errorf("%d requests in flight at once; want at most the concurrency, 3", m)
	}
}

func TestRunSpeaksTheChosenProtocolAndSendsCredentialsAndHeaders(t *testing.T) {
	for _, c := range []struct {
		protocol   string
		protoMajor int
	}{{HTTP2, 2}, {HTTP1, 1}} {
		t.Run(c.protocol, func(t *testing.T) {
			var wrong atomic.Int64
			srv, pool := testServer(t, func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor != c.protoMajor || r.Header.Get("Authorization") != "Bearer s3cret" ||
					r.Header.Get("Accept") != "application/json" {
					wrong.Add(1)
				}
				w.WriteHeader(http.StatusNotModified)
			})
			cfg := validConfig()
			cfg.Targets = []string{srv.URL + "/apis"}
			cfg.RootCAs, cfg.Protocol, cfg.Requests, cfg.Warmup = pool, c.protocol, 20, 5
			cfg.BearerToken, cfg.ExpectStatus = "s3cret", http.StatusNotModified
			cfg.Headers = http.Header{}
			if err := ParseHeader(cfg.Headers, "Accept: application/json"); err != nil {
				t.Fatal(err)
			}
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != 20 || wrong.Load() != 0 {
				t.Errorf("ok %d of 20, %d requests with the wrong protocol or headers", res.OK, wrong.Load())
			}
		})
	}
}

func TestRunVerifiesTheServerCertificate(t *testing.T) {
	srv, _ := testServer(t, func(http.ResponseWriter, *http.Request) {})
	cfg := validConfig()
	cfg.Targets = []string{srv.URL + "/"}
	cfg.Requests = 3
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK != 0 || res.Errors["transport"] != 3 || !strings.Contains(res.FirstError, "certificate") {
		t.Errorf("ok %d, errors %v, first error %q; want every request refused for an unknown CA", res.OK, res.Errors, res.FirstError)
	}
}

func TestRunDoesNotFollowRedirects(t *testing.T) {
	srv, pool := testServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://203.0.113.7:443/elsewhere", http.StatusFound)
	})
	cfg := validConfig()
	cfg.Targets = []string{srv.URL + "/"}
	cfg.RootCAs, cfg.Requests = pool, 4
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors["302"] != 4 {
		t.Errorf("errors %v; want every redirect reported as a 302", res.Errors)
	}
}

func TestParseHeader(t *testing.T) {
	cases := []struct {
		line       string
		name, want string
		ok         bool
	}{
		{"Accept: application/json", "Accept", "application/json", true},
		{"if-none-match:\"abc\"", "If-None-Match", `"abc"`, true},
		{"X-Empty:", "X-Empty", "", true},
		{"no colon", "", "", false},
		{": value", "", "", false},
		{"Bad Name: v", "", "", false},
	}
	for _, c := range cases {
		t.Run(c.line, func(t *testing.T) {
			h := http.Header{}
			err := ParseHeader(h, c.line)
			if (err == nil) != c.ok {
				t.Fatalf("ParseHeader(%q) = %v; want ok=%v", c.line, err, c.ok)
			}
			if c.ok && h.Get(c.name) != c.want {
				t.Errorf("%s = %q; want %q", c.name, h.Get(c.name), c.want)
			}
		})
	}
}
