// Package loadgen drives a bounded, fixed-concurrency HTTPS load against
// servers on the loopback interface and summarises it: count, errors by
// status, latency percentiles and throughput. It refuses any target that is not
// a loopback IP address, verifies TLS against a given CA and never follows
// redirects or environment proxies, so a benchmark cannot be turned against
// anything but the local machine.
package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/bench/internal/stats"
)

// Protocols the generator speaks.
const (
	HTTP2 = "h2"
	HTTP1 = "http1"
)

// Config describes one load run.
type Config struct {
	// Targets are https URLs on loopback IPs; request i goes to Targets[i mod len].
	Targets []string
	Method  string
	// Headers are sent with every request.
	Headers http.Header
	// Protocol is HTTP2 (one multiplexed connection per target) or HTTP1
	// (keep-alive, up to Concurrency connections per target).
	Protocol    string
	Concurrency int
	// Requests and Duration both bound the run: it stops issuing requests at
	// whichever comes first, and lets the requests in flight finish.
	Requests int
	Duration time.Duration
	// Warmup requests run first with the same concurrency and are not recorded,
	// so that connection set-up and TLS handshakes stay out of the figures.
	Warmup int
	// ExpectStatus is the status of a successful response; any other is an
	// error, counted by status.
	ExpectStatus int
	// RootCAs verify the servers; ServerName, when set, is the name verified
	// instead of the target's IP.
	RootCAs    *x509.CertPool
	ServerName string
	// BearerToken and ClientCertificate authenticate the client (at most one).
	BearerToken       string
	ClientCertificate *tls.Certificate
	// Timeout bounds each request.
	Timeout time.Duration
}

// Result is what a run measured. Latencies are in microseconds, over the
// successful responses only, from sending the request to reading the whole body.
type Result struct {
	Protocol    string `json:"protocol"`
	Concurrency int    `json:"concurrency"`
	// Count is every completed attempt; OK those with ExpectStatus.
	Count int `json:"count"`
	OK    int `json:"ok"`
	// Errors counts failed attempts by status code, or "transport" when no
	// response arrived.
	Errors map[string]int `json:"errors"`
	P50    float64        `json:"p50_us"`
	P90    float64        `json:"p90_us"`
	P99    float64        `json:"p99_us"`
	// RPS is successful responses per second of the measured phase.
	RPS     float64 `json:"rps"`
	Elapsed float64 `json:"elapsed_s"`
	// FirstError describes one failure, for diagnosis.
	FirstError string `json:"first_error,omitempty"`
}

// ErrNotLoopback is returned for a target that is not a loopback IP address.
var ErrNotLoopback = errors.New("loadgen only targets loopback IP addresses")

// ParseTarget checks that raw is an https URL whose host is a literal loopback
// IP address with a port. Host names are refused even if they resolve to
// loopback: resolution can change between the check and the dial.
func ParseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", raw, err)
	}
	if u.Scheme != "https" {
		return nil, fmt.Errorf("target %q: scheme must be https (TLS is always verified)", raw)
	}
	if u.User != nil || u.Opaque != "" {
		return nil, fmt.Errorf("target %q: userinfo and opaque URLs are not supported", raw)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		return nil, fmt.Errorf("target %q: a port is required", raw)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("target %q: bad port %q", raw, port)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" || !addr.Unmap().IsLoopback() {
		return nil, fmt.Errorf("target %q: %w", raw, ErrNotLoopback)
	}
	return u, nil
}

// validate checks the configuration and returns the parsed targets.
func (c *Config) validate() ([]*url.URL, error) {
	var errs []error
	if len(c.Targets) == 0 {
		errs = append(errs, errors.New("no target"))
	}
	var targets []*url.URL
	for _, t := range c.Targets {
		u, err := ParseTarget(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		targets = append(targets, u)
	}
	if c.Protocol != HTTP2 && c.Protocol != HTTP1 {
		errs = append(errs, fmt.Errorf("protocol %q: must be %s or %s", c.Protocol, HTTP2, HTTP1))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: must be at least 1", c.Concurrency))
	}
	if c.Requests < 1 {
		errs = append(errs, fmt.Errorf("requests %d: must be at least 1", c.Requests))
	}
	if c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("duration %v: must be positive", c.Duration))
	}
	if c.Warmup < 0 {
		errs = append(errs, fmt.Errorf("warmup %d: must not be negative", c.Warmup))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("timeout %v: must be positive", c.Timeout))
	}
	if c.RootCAs == nil {
		errs = append(errs, errors.New("no CA: servers are always verified"))
	}
	if c.BearerToken != "" && c.ClientCertificate != nil {
		errs = append(errs, errors.New("give a bearer token or a client certificate, not both"))
	}
	if c.ExpectStatus < 100 || c.ExpectStatus > 599 {
		errs = append(errs, fmt.Errorf("expected status %d: not an HTTP status", c.ExpectStatus))
	}
	if _, err := http.NewRequest(c.Method, "https://127.0.0.1/", nil); err != nil || c.Method == "" {
		errs = append(errs, fmt.Errorf("method %q: not a valid HTTP method", c.Method))
	}
	return targets, errors.Join(errs...)
}

// dialLoopbackOnly refuses, at connect time, any address that is not loopback:
// a second line of defence behind ParseTarget.
func dialLoopbackOnly(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		return fmt.Errorf("dial %s: %w", address, ErrNotLoopback)
	}
	return nil
}

func (c *Config) client() *http.Client {
	tlsConfig := &tls.Config{RootCAs: c.RootCAs, ServerName: c.ServerName, MinVersion: tls.VersionTLS12}
	if c.ClientCertificate != nil {
		tlsConfig.Certificates = []tls.Certificate{*c.ClientCertificate}
	}
	protocols := &http.Protocols{}
	if c.Protocol == HTTP2 {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetHTTP1(true)
	}
	dialer := &net.Dialer{Timeout: c.Timeout, KeepAlive: 30 * time.Second, Control: dialLoopbackOnly}
	transport := &http.Transport{
		Proxy:               nil,
		DialContext:         dialer.DialContext,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: c.Timeout,
		Protocols:           protocols,
		MaxIdleConnsPerHost: c.Concurrency,
		DisableCompression:  true,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   c.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// Run validates cfg, runs the warm-up and then the measured load.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	targets, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	client := cfg.client()
	defer client.CloseIdleConnections()
	if cfg.Warmup > 0 {
		warm := newRun(&cfg, client, targets, cfg.Warmup, cfg.Duration)
		if res := warm.execute(ctx); res.OK == 0 {
			return nil, fmt.Errorf("warm-up: no successful response of %d (%v; first error: %s)", res.Count, res.Errors, res.FirstError)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return newRun(&cfg, client, targets, cfg.Requests, cfg.Duration).execute(ctx), nil
}

// run is one bounded load phase.
type run struct {
	cfg      *Config
	client   *http.Client
	targets  []*url.URL
	limit    int64
	duration time.Duration
	issued   atomic.Int64
}

func newRun(cfg *Config, client *http.Client, targets []*url.URL, limit int, duration time.Duration) *run {
	return &run{cfg: cfg, client: client, targets: targets, limit: int64(limit), duration: duration}
}

// worker is one client loop's tally; merged after the run.
type worker struct {
	latencies  []float64
	count      int
	errors     map[string]int
	firstError string
}

func (r *run) execute(ctx context.Context) *Result {
	start := time.Now()
	deadline := start.Add(r.duration)
	workers := make([]worker, r.cfg.Concurrency)
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		w.errors = map[string]int{}
		w.latencies = make([]float64, 0, int(r.limit)/len(workers)+1)
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				n := r.issued.Add(1)
				if n > r.limit {
					return
				}
				r.attempt(ctx, w, r.targets[int(n-1)%len(r.targets)])
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	return summarize(r.cfg, workers, elapsed)
}

// attempt sends one request and records its outcome in w.
func (r *run) attempt(ctx context.Context, w *worker, target *url.URL) {
	req, err := http.NewRequestWithContext(ctx, r.cfg.Method, target.String(), nil)
	if err != nil {
		w.fail("transport", err.Error())
		return
	}
	for name, values := range r.cfg.Headers {
		req.Header[name] = values
	}
	if r.cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+r.cfg.BearerToken)
	}
	begin := time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		w.fail("transport", err.Error())
		return
	}
	_, copyErr := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	latency := time.Since(begin)
	switch {
	case copyErr != nil:
		w.fail("transport", copyErr.Error())
	case resp.StatusCode != r.cfg.ExpectStatus:
		w.fail(strconv.Itoa(resp.StatusCode), fmt.Sprintf("%s %s: status %d", r.cfg.Method, target, resp.StatusCode))
	default:
		w.count++
		w.latencies = append(w.latencies, float64(latency.Nanoseconds())/1e3)
	}
}

func (w *worker) fail(key, message string) {
	w.count++
	w.errors[key]++
	if w.firstError == "" {
		w.firstError = message
	}
}

func summarize(cfg *Config, workers []worker, elapsed time.Duration) *Result {
	res := &Result{Protocol: cfg.Protocol, Concurrency: cfg.Concurrency, Errors: map[string]int{}, Elapsed: elapsed.Seconds()}
	var latencies []float64
	for i := range workers {
		w := &workers[i]
		res.Count += w.count
		latencies = append(latencies, w.latencies...)
		for k, v := range w.errors {
			res.Errors[k] += v
		}
		if res.FirstError == "" {
			res.FirstError = w.firstError
		}
	}
	res.OK = len(latencies)
	slices.Sort(latencies)
	res.P50 = finiteOrZero(stats.Percentile(latencies, 50))
	res.P90 = finiteOrZero(stats.Percentile(latencies, 90))
	res.P99 = finiteOrZero(stats.Percentile(latencies, 99))
	if elapsed > 0 {
		res.RPS = float64(res.OK) / elapsed.Seconds()
	}
	return res
}

// finiteOrZero keeps JSON encodable: a run without a successful response has
// no percentiles, which its OK count of 0 already says.
func finiteOrZero(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// ParseHeader parses "Name: value".
func ParseHeader(h http.Header, line string) error {
	name, value, ok := strings.Cut(line, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("header %q: want \"Name: value\"", line)
	}
	h.Add(name, strings.TrimSpace(value))
	return nil
}

// ReadCAFile reads a PEM bundle into a pool.
func ReadCAFile(path string) (*x509.CertPool, error) {
	pemBytes, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		return nil, fmt.Errorf("%s: no PEM certificate", path)
	}
	return pool, nil
}
