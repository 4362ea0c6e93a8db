package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/hostileclient"
	"github.com/skewgate/skewgate/host/testcluster"
)

const (
	// hostileInterval is how often the attacker sends its three requests to each of its paths.
	hostileInterval = 500 * time.Millisecond
	// hostileAnswerWait bounds the wait for the answer to one hostile request.
	hostileAnswerWait = 10 * time.Second
	// legitimateInterval and legitimateDuration pace the legitimate client: about 10 requests a
	// second for 15 s.
	legitimateInterval = 100 * time.Millisecond
	legitimateDuration = 15 * time.Second
	// snapshotWatchInterval is how often the snapshot is checked while the attack runs; a server
	// marked lost stays out of the snapshot until the next probe, several times longer.
	snapshotWatchInterval = 100 * time.Millisecond
	// markedUnhealthyLog is what the controller logs when a request's failure marks a server.
	markedUnhealthyLog = "API server marked unhealthy"
)

// hostileRequest is one of the requests an anonymous client used to mark healthy API servers
// lost with (issue 38, finding 1).
type hostileRequest struct {
	name string
	send func(addr string, anonymous *tls.Config, path string) (int, error)
}

var hostileRequests = []hostileRequest{
	{"HTTP/2 GET with :authority \"a b\"", func(addr string, anonymous *tls.Config, path string) (int, error) {
		return hostileclient.H2Stream(addr, anonymous, hostileAnswerWait, func(c *hostileclient.H2Conn) (uint32, error) { return c.Get("a b", path) })
	}},
	{"HTTP/1.1 POST with a malformed chunked body", func(addr string, anonymous *tls.Config, path string) (int, error) {
		return hostileclient.HTTP1(addr, anonymous, hostileclient.MalformedChunkedBody(path), hostileAnswerWait)
	}},
	{"HTTP/2 POST announcing 2,000,000 bytes and sending 10", func(addr string, anonymous *tls.Config, path string) (int, error) {
		return hostileclient.H2Stream(addr, anonymous, hostileAnswerWait, func(c *hostileclient.H2Conn) (uint32, error) {
			return c.ShortBody(path, 2_000_000, []byte(`{"kind":1}`))
		})
	}},
}

// statusCounts counts answers by status; 0 is no answer.
type statusCounts struct {
	mu     sync.Mutex
	counts map[int]int
	// firstFailures keeps a few of the unexpected answers for the test's report.
	firstFailures []string
}

func (c *statusCounts) add(status int, failure string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[int]int{}
	}
	c.counts[status]++
	if failure != "" && len(c.firstFailures) < 5 {
		c.firstFailures = append(c.firstFailures, failure)
	}
}

func (c *statusCounts) snapshot() (map[int]int, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counts := map[int]int{}
	for status, n := range c.counts {
		counts[status] = n
	}
	return counts, append([]string(nil), c.firstFailures...)
}

// TestHostileRequestsMarkNoRealAPIServer sends, twice a second for 15 s, the three requests an
// anonymous client used to take healthy API servers out of routing with (an HTTP/2 GET whose
// :authority is "a b", an HTTP/1.1 POST with malformed chunked framing, an HTTP/2 POST that
// announces 2,000,000 bytes and sends 10), to a resource only the 1.36 servers serve and to one
// every server serves. Meanwhile a client with the admin certificate lists, ten times a second,
// resources only some servers serve. Every one of its requests is answered 200, every server
// stays healthy in every snapshot the gateway applies, the controller never logs a server
// marked unhealthy, and every hostile request gets an answer: the gateway's 400, or the API
// server's refusal of an anonymous client.
func TestHostileRequestsMarkNoRealAPIServer(t *testing.T) {
	cluster := sharedSkewed.get(t)
	requireSkew(t, cluster)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	addr := strings.TrimPrefix(gw.URL, "https://")
	anonymous := &tls.Config{RootCAs: gw.ca.Pool(), MinVersion: tls.VersionTLS12}
	hostilePaths := []string{skewedResources[0].path, "/api/v1/namespaces/default/configmaps"}
	started := time.Now()

	stop := make(chan struct{})
	var background sync.WaitGroup
	hostile := map[string]*statusCounts{}
	for _, r := range hostileRequests {
		hostile[r.name] = &statusCounts{}
	}
	background.Go(func() {
		ticker := time.NewTicker(hostileInterval)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
			for _, path := range hostilePaths {
				for _, r := range hostileRequests {
					status, err := r.send(addr, anonymous, path)
					failure := ""
					if err != nil {
						failure = fmt.Sprintf("%s %s: %v", r.name, path, err)
					}
					hostile[r.name].add(status, failure)
				}
			}
		}
	})

	var snapshotPolls, snapshotErrors atomic.Int64
	var unhealthyMu sync.Mutex
	var unhealthy []string
	background.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(snapshotWatchInterval):
			}
			v, err := gw.snapshot()
			snapshotPolls.Add(1)
			if err != nil {
				snapshotErrors.Add(1)
				continue
			}
			if err := allHealthy(cluster)(v); err != nil {
				unhealthyMu.Lock()
				unhealthy = append(unhealthy, err.Error())
				unhealthyMu.Unlock()
			}
		}
	})

	admin := gw.adminClient()
	defer admin.CloseIdleConnections()
	legitimatePaths := []string{skewedResources[2].path, skewedResources[0].path, skewedResources[1].path}
	var legitimate statusCounts
	for i, end := 0, time.Now().Add(legitimateDuration); time.Now().Before(end); i++ {
		sent := time.Now()
		path := legitimatePaths[i%len(legitimatePaths)]
		resp, err := do(admin, http.MethodGet, gw.URL+path, nil, nil)
		switch {
		case err != nil:
			legitimate.add(0, fmt.Sprintf("GET %s: %v", path, err))
		case resp.status != http.StatusOK:
			legitimate.add(resp.status, fmt.Sprintf("GET %s: HTTP %d: %s", path, resp.status, resp.body))
		default:
			legitimate.add(resp.status, "")
		}
		time.Sleep(legitimateInterval - time.Since(sent))
	}
	close(stop)
	background.Wait()
	elapsed := time.Since(started)

	legitimateCounts, legitimateFailures := legitimate.snapshot()
	t.Logf("in %s the legitimate client's answers by status: %v", elapsed.Round(100*time.Millisecond), legitimateCounts)
	if len(legitimateCounts) != 1 || legitimateCounts[http.StatusOK] < int(legitimateDuration/legitimateInterval)/2 {
		t.Errorf("the legitimate client's answers by status: %v; want every one 200 (first failures: %q)", legitimateCounts, legitimateFailures)
	}
	hostileTotal := 0
	for _, r := range hostileRequests {
		counts, failures := hostile[r.name].snapshot()
		t.Logf("%s, answers by status: %v", r.name, counts)
		for status, n := range counts {
			hostileTotal += n
			switch status {
			case http.StatusBadRequest:
			case http.StatusUnauthorized, http.StatusForbidden:
				// The API server refused the anonymous client before reading the body.
			default:
				t.Errorf("%s: %d answered %d, want the gateway's 400 or the API server's 401 or 403 (first failures: %q)", r.name, n, status, failures)
			}
		}
	}
	// Twice a second, both paths, every request: about 6 a tick.
	if minimum := int(legitimateDuration/hostileInterval) * len(hostilePaths) * len(hostileRequests) / 2; hostileTotal < minimum {
		t.Errorf("only %d hostile requests were sent, want at least %d", hostileTotal, minimum)
	}
	unhealthyMu.Lock()
	defer unhealthyMu.Unlock()
	t.Logf("%d snapshot polls (%d failed), %d with a server not healthy", snapshotPolls.Load(), snapshotErrors.Load(), len(unhealthy))
	if len(unhealthy) > 0 {
		t.Errorf("servers were not all healthy in %d snapshots during the attack, the first: %s", len(unhealthy), unhealthy[0])
	}
	if n := snapshotErrors.Load(); n > 0 {
		t.Errorf("%d of %d snapshot polls failed", n, snapshotPolls.Load())
	}
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot after the attack", 5*time.Second, allHealthy(cluster))
	if gw.proc.LogContains(markedUnhealthyLog) {
		t.Errorf("the skewgate log says %q during the attack", markedUnhealthyLog)
	}
	metrics := gw.metrics(t)
	t.Logf("gateway metrics after the attack:\n%s", metricLines(metrics, "skewgate_gateway_requests_total", "skewgate_gateway_upstream_errors_total", "skewgate_controller_servers_healthy"))
	if healthy, _ := metricValue(metrics, "skewgate_controller_servers_healthy"); int(healthy) != len(cluster.Servers()) {
		t.Errorf("skewgate_controller_servers_healthy = %v after the attack, want %d", healthy, len(cluster.Servers()))
	}
}

const (
	// heldWatchesOffered is how many watches the one address asks to hold, on
	// heldWatchConnections HTTP/2 connections of heldWatchStreamsPerConnection streams (the
	// gateway's stream limit per connection).
	heldWatchesOffered            = 4_000
	heldWatchStreamsPerConnection = 100
	heldWatchConnections          = heldWatchesOffered / heldWatchStreamsPerConnection
	// heldWatchesAdmitted is skewgate's default --max-long-running-requests-per-client.
	heldWatchesAdmitted = 1_000
	// The memory bound of the held watches, the README's: a fixed allowance for what the
	// gateway's runtime keeps after the burst of 4,000 requests (garbage not yet collected, grown
	// heap arenas), and the resident cost of a long-running request (its live heap, its
	// goroutines' stacks and the collector's headroom) and of a client connection.
	heldWatchFixedAllowance     = 64 << 20
	heldWatchPerWatchAllowance  = 128 << 10
	heldWatchPerConnAllowance   = 96 << 10
	heldWatchAnswerTimeout      = 2 * time.Minute
	heldWatchSettle             = 3 * time.Second
	heldWatchMemorySamples      = 5
	heldWatchReleaseTimeout     = 30 * time.Second
	heldWatchConfigMap          = "skewgate-e2e-held-watches"
	longRunningInFlightSeries   = `skewgate_gateway_requests_in_flight{request_kind="longRunning"}`
	longRunningPerClientRefusal = `skewgate_gateway_rejected_requests_total{reason="max_long_running_requests_per_client"}`
)

// TestHeldWatchesFromOneAddressStopAtTheClientsShareWithinTheMemoryBound opens 4,000 watches of
// the admin client certificate from one address, 100 streams on each of 40 HTTP/2 connections,
// against a gateway with the default bounds. Exactly 1,000 (the per-client share of long-running
// requests) are 200 and held open; the other 3,000 are 429 with Retry-After. The gateway's
// resident memory grows by at most 64 MiB plus 128 KiB per held watch and 96 KiB per connection,
// and once the client lets go the long-running gauge returns to 0.
func TestHeldWatchesFromOneAddressStopAtTheClientsShareWithinTheMemoryBound(t *testing.T) {
	cluster := sharedSkewed.get(t)
	// --profiling only adds /debug/pprof/, whose heap profile collects garbage on request: the
	// live heap a held watch costs is reported next to the resident memory.
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity, extraArgs: []string{"--profiling"}})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	ensureHeldWatchConfigMap(t, gw)
	// The ConfigMap's ADDED event is the first byte of every watch, which sends its headers
	// through the gateway's proxy: an empty watch would answer nothing for its whole life.
	watchURL := gw.URL + "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=600&fieldSelector=" +
		url.QueryEscape("metadata.name="+heldWatchConfigMap)

	before := residentMemory(t, gw.proc)
	beforeMetrics := gw.metrics(t)
	liveHeapBefore := liveHeap(t, gw)
	peak := sampleResidentMemoryPeak(t, gw.proc)

	transports := make([]*http.Transport, heldWatchConnections)
	for i := range transports {
		transports[i] = heldWatchTransport(gw)
	}
	t.Cleanup(func() {
		for _, tr := range transports {
			tr.CloseIdleConnections()
		}
	})
	for i := range transports {
		// One request first, so that each transport's 100 watches share its one connection.
		if resp, err := do(&http.Client{Transport: transports[i], Timeout: 30 * time.Second}, http.MethodGet,
			gw.URL+"/api/v1/namespaces/default/configmaps/"+heldWatchConfigMap, nil, nil); err != nil || resp.status != http.StatusOK {
			t.Fatalf("connection %d: GET the ConfigMap: %v, HTTP %d", i, err, resp.status)
		}
	}

	held, release := context.WithCancel(context.Background())
	defer release()
	var endedWhileHeld atomic.Int64
	var streams sync.WaitGroup
	type answer struct {
		status     int
		retryAfter string
		body       string
		err        error
	}
	answers := make(chan answer, heldWatchesOffered)
	opening := time.Now()
	for i := range heldWatchesOffered {
		go func() {
			req, err := http.NewRequestWithContext(held, http.MethodGet, watchURL, nil)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			resp, err := transports[i/heldWatchStreamsPerConnection].RoundTrip(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answers <- answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: string(body)}
				return
			}
			// Reading keeps the stream from stalling; it ends when the test lets go. It is
			// counted before its answer, so that waiting for the streams waits for it.
			streams.Go(func() {
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				if held.Err() == nil {
					endedWhileHeld.Add(1)
				}
			})
			answers <- answer{status: resp.StatusCode}
		}()
	}

	statuses := map[int]int{}
	var withoutRetryAfter, notTooManyRequestsStatus int
	var failures []string
	timeout := time.After(heldWatchAnswerTimeout)
	for range heldWatchesOffered {
		var a answer
		select {
		case a = <-answers:
		case <-timeout:
			t.Fatalf("%d of %d watches answered within %s: %v", sumCounts(statuses), heldWatchesOffered, heldWatchAnswerTimeout, statuses)
		}
		statuses[a.status]++
		switch {
		case a.err != nil:
			failures = append(failures, a.err.Error())
		case a.status == http.StatusTooManyRequests:
			if seconds, err := strconv.Atoi(a.retryAfter); err != nil || seconds <= 0 {
				withoutRetryAfter++
			}
			var status apiStatus
			if json.Unmarshal([]byte(a.body), &status) != nil || status.Reason != "TooManyRequests" {
				notTooManyRequestsStatus++
			}
		case a.status != http.StatusOK:
			failures = append(failures, fmt.Sprintf("HTTP %d: %s", a.status, a.body))
		}
	}
	answeredIn := time.Since(opening)
	time.Sleep(heldWatchSettle)
	var heldMemory testcluster.ResidentMemory
	for range heldWatchMemorySamples {
		if m := residentMemory(t, gw.proc); m.VmRSS > heldMemory.VmRSS {
			heldMemory = m
		}
		time.Sleep(time.Second)
	}
	heldMetrics := gw.metrics(t)
	peakRSS := peak()
	liveHeapHeld := liveHeap(t, gw)

	admitted := statuses[http.StatusOK]
	growth := heldMemory.VmRSS - before.VmRSS
	perWatchKiB := float64(growth) / 1024 / float64(max(admitted, 1))
	goroutinesBefore, _ := metricValue(beforeMetrics, "go_goroutines")
	goroutinesHeld, _ := metricValue(heldMetrics, "go_goroutines")
	heapBefore, _ := metricValue(beforeMetrics, "go_memstats_heap_alloc_bytes")
	heapHeld, _ := metricValue(heldMetrics, "go_memstats_heap_alloc_bytes")
	stacksBefore, _ := metricValue(beforeMetrics, "go_memstats_stack_inuse_bytes")
	stacksHeld, _ := metricValue(heldMetrics, "go_memstats_stack_inuse_bytes")
	inFlight, _ := metricValue(heldMetrics, longRunningInFlightSeries)
	refused, _ := metricValue(heldMetrics, longRunningPerClientRefusal)
	connections, _ := metricValue(heldMetrics, "skewgate_gateway_open_connections")
	t.Logf("%d watches on %d connections from one address answered in %s: %v; the gateway counts %v open connections",
		heldWatchesOffered, heldWatchConnections, answeredIn.Round(time.Millisecond), statuses, connections)
	t.Logf("skewgate VmRSS %.1f MiB before, %.1f MiB while %d watches are held (RssAnon %.1f -> %.1f MiB), peak %.1f MiB; growth %.1f MiB, %.1f KiB per held watch",
		mibOf(before.VmRSS), mibOf(heldMemory.VmRSS), admitted, mibOf(before.RssAnon), mibOf(heldMemory.RssAnon), mibOf(peakRSS), mibOf(growth), perWatchKiB)
	t.Logf("goroutine stacks %.1f MiB before, %.1f MiB held (%.1f KiB per held watch)", stacksBefore/(1<<20), stacksHeld/(1<<20),
		(stacksHeld-stacksBefore)/1024/float64(max(admitted, 1)))
	t.Logf("go_goroutines %v before, %v held (%.1f per held watch); heap allocated %.1f MiB before, %.1f MiB held; live heap after a collection %.1f MiB before, %.1f MiB held (%.1f KiB per held watch); %s = %v, %s = %v",
		goroutinesBefore, goroutinesHeld, (goroutinesHeld-goroutinesBefore)/float64(max(admitted, 1)), heapBefore/(1<<20), heapHeld/(1<<20),
		liveHeapBefore/(1<<20), liveHeapHeld/(1<<20), (liveHeapHeld-liveHeapBefore)/1024/float64(max(admitted, 1)),
		longRunningInFlightSeries, inFlight, longRunningPerClientRefusal, refused)

	if statuses[http.StatusOK] != heldWatchesAdmitted || statuses[http.StatusTooManyRequests] != heldWatchesOffered-heldWatchesAdmitted {
		t.Errorf("watches answered by status: %v; want exactly %d 200 and %d 429 (first failures: %q)",
			statuses, heldWatchesAdmitted, heldWatchesOffered-heldWatchesAdmitted, firstOf(failures, 5))
	}
	if withoutRetryAfter > 0 || notTooManyRequestsStatus > 0 {
		t.Errorf("of the 429s, %d lack a positive Retry-After and %d a TooManyRequests Status body", withoutRetryAfter, notTooManyRequestsStatus)
	}
	if int(inFlight) != admitted || int(refused) != statuses[http.StatusTooManyRequests] {
		t.Errorf("%s = %v and %s = %v, want %d and %d", longRunningInFlightSeries, inFlight, longRunningPerClientRefusal, refused, admitted, statuses[http.StatusTooManyRequests])
	}
	// The memory bound allows for this many connections.
	if int(connections) != heldWatchConnections {
		t.Errorf("skewgate_gateway_open_connections = %v while the watches are held, want %d", connections, heldWatchConnections)
	}
	if n := endedWhileHeld.Load(); n > 0 {
		t.Errorf("%d held watches ended before the client let go", n)
	}
	bound := int64(heldWatchFixedAllowance + heldWatchesAdmitted*heldWatchPerWatchAllowance + heldWatchConnections*heldWatchPerConnAllowance)
	if growth > bound {
		t.Errorf("skewgate's resident memory grew by %.1f MiB (%.1f KiB per held watch; live heap %.1f KiB per held watch) while %d watches were held; the bound is %.1f MiB (64 MiB + 128 KiB a watch + 96 KiB a connection)",
			mibOf(growth), perWatchKiB, (liveHeapHeld-liveHeapBefore)/1024/float64(max(admitted, 1)), admitted, mibOf(bound))
	}

	letGo := time.Now()
	release()
	streams.Wait()
	for _, tr := range transports {
		tr.CloseIdleConnections()
	}
	eventually(t, "the long-running requests released", heldWatchReleaseTimeout, 200*time.Millisecond, func() error {
		if v, _ := metricValue(gw.metrics(t), longRunningInFlightSeries); v != 0 {
			return fmt.Errorf("%s = %v", longRunningInFlightSeries, v)
		}
		return nil
	})
	goroutinesAfter, _ := metricValue(gw.metrics(t), "go_goroutines")
	t.Logf("%s back to 0 %s after the client let go; go_goroutines %v", longRunningInFlightSeries, time.Since(letGo).Round(time.Millisecond), goroutinesAfter)
}

// heldWatchTransport is an HTTP/2 client of the gateway with the admin client certificate and
// one connection.
func heldWatchTransport(gw *skewgate) *http.Transport {
	return &http.Transport{
		TLSClientConfig:       &tls.Config{RootCAs: gw.ca.Pool(), Certificates: []tls.Certificate{gw.cluster.PKI().Admin}, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxConnsPerHost:       1,
		ResponseHeaderTimeout: heldWatchAnswerTimeout,
	}
}

// ensureHeldWatchConfigMap creates the ConfigMap the held watches select, and deletes it when the
// test ends.
func ensureHeldWatchConfigMap(t *testing.T, gw *skewgate) {
	t.Helper()
	admin := gw.adminClient()
	defer admin.CloseIdleConnections()
	resp := mustDo(t, admin, http.MethodPost, gw.URL+"/api/v1/namespaces/default/configmaps", nil,
		[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"`+heldWatchConfigMap+`"}}`))
	if resp.status != http.StatusCreated && resp.status != http.StatusConflict {
		t.Fatalf("creating the ConfigMap %s: HTTP %d: %s", heldWatchConfigMap, resp.status, resp.body)
	}
	t.Cleanup(func() {
		direct := directAdminClient(gw.cluster)
		defer direct.CloseIdleConnections()
		resp, err := do(direct, http.MethodDelete, gw.cluster.Server(0).URL+"/api/v1/namespaces/default/configmaps/"+heldWatchConfigMap, nil, nil)
		if err != nil || (resp.status != http.StatusOK && resp.status != http.StatusNotFound) {
			t.Errorf("deleting the ConfigMap %s: %v, HTTP %d", heldWatchConfigMap, err, resp.status)
		}
	})
}

func residentMemory(t *testing.T, p *testcluster.Process) testcluster.ResidentMemory {
	t.Helper()
	m, err := p.ResidentMemory()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// sampleResidentMemoryPeak samples the process's VmRSS every 50 ms until the returned function is
// called, which returns the highest sample.
func sampleResidentMemoryPeak(t *testing.T, p *testcluster.Process) (stop func() int64) {
	var peak atomic.Int64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for {
			if m, err := p.ResidentMemory(); err == nil && m.VmRSS > peak.Load() {
				peak.Store(m.VmRSS)
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	var once sync.Once
	stop = func() int64 {
		once.Do(func() {
			close(done)
			sampler.Wait()
		})
		return peak.Load()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// liveHeap collects the gateway's garbage (a heap profile asked for with gc=1 does) and returns the
// heap then allocated.
func liveHeap(t *testing.T, gw *skewgate) float64 {
	t.Helper()
	resp := mustDo(t, &http.Client{Timeout: 30 * time.Second}, http.MethodGet, gw.metricsURL+"/debug/pprof/heap?gc=1", nil, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("/debug/pprof/heap: HTTP %d", resp.status)
	}
	v, ok := metricValue(gw.metrics(t), "go_memstats_heap_alloc_bytes")
	if !ok {
		t.Fatal("no go_memstats_heap_alloc_bytes in the gateway's metrics")
	}
	return v
}

func mibOf(n int64) float64 { return float64(n) / (1 << 20) }

// metricValue is the value of series, written as the Prometheus text format writes it (name, then
// labels if any), in metrics.
func metricValue(metrics, series string) (float64, bool) {
	for line := range strings.SplitSeq(metrics, "\n") {
		if value, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// metricLines are the samples of the named metrics in metrics.
func metricLines(metrics string, names ...string) string {
	var lines []string
	for line := range strings.SplitSeq(metrics, "\n") {
		for _, name := range names {
			if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
				lines = append(lines, line)
			}
		}
	}
	return strings.Join(lines, "\n")
}

func sumCounts(counts map[int]int) int {
	total := 0
	for _, n := range counts {
		total += n
	}
	return total
}

func firstOf(s []string, n int) []string { return s[:min(n, len(s))] }
