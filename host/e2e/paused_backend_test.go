package e2e

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"
)

const (
	// backendPause is how long the paused API server answers nothing.
	backendPause = 20 * time.Second
	// pausedRequestTimeout is the gateway's --request-timeout in the scenario.
	pausedRequestTimeout = 5 * time.Second
	// pausedClientTimeout is longer than the request timeout and shorter than the pause: a
	// request that waits for the paused server to resume fails at the client.
	pausedClientTimeout = 15 * time.Second
	pausedWorkers       = 3
)

// TestPausedAPIServerGetsRequestsAnsweredAndKeepsWatches stops one API server with SIGSTOP for
// backendPause, a server that hangs without closing its connections, while clients keep listing
// through a gateway run with a short --request-timeout: the server is the only one serving
// leasecandidates, so requests are routed to it until the gateway sees it fail. Every request
// gets an answer before the client gives up: 504 when it waited on the paused server for the
// request timeout, 503 with Retry-After once no server able to serve it looks healthy. A watch
// through the paused server, long-running and so under no timeout, survives the pause and
// delivers the events that follow it.
func TestPausedAPIServerGetsRequestsAnsweredAndKeepsWatches(t *testing.T) {
	cluster := sharedOneCA.get(t)
	requireSkew(t, cluster)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity, extraArgs: []string{"--request-timeout=" + pausedRequestTimeout.String()}})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	paused := cluster.Server(skewedWithExtra)
	const collection = "/apis/coordination.k8s.io/v1alpha2/namespaces/default/leasecandidates"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watcher := gw.adminClient()
	watcher.Timeout = 0 // the watch streams; the context ends it
	defer watcher.CloseIdleConnections()
	watch := openWatchStream(ctx, t, watcher, gw.URL+collection+"?watch=true")

	client := gw.adminClient()
	client.Timeout = pausedClientTimeout
	defer client.CloseIdleConnections()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results []bystanderAnswer
		took    []time.Duration
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for range pausedWorkers {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				a := bystanderAnswer{at: time.Now()}
				resp, err := doContext(loadCtx, client, http.MethodGet, gw.URL+collection+"?limit=5", nil, nil)
				if loadCtx.Err() != nil {
					return
				}
				a.status, a.err, a.body = resp.status, err, resp.body
				if a.status == http.StatusServiceUnavailable {
					if seconds, err := strconv.Atoi(resp.header.Get("Retry-After")); err != nil || seconds <= 0 {
						a.status = 0 // a 503 without Retry-After is no answer a client can act on
					}
				}
				mu.Lock()
				results, took = append(results, a), append(took, time.Since(a.at))
				mu.Unlock()
				time.Sleep(bystanderPause)
			}
		})
	}
	time.Sleep(settleTime)

	// A list still in flight when the signal lands waits on the stopped server like one sent
	// after it, so lists are told apart by when they ended, against a time taken before the signal.
	pausedAt := time.Now()
	if err := cluster.Pause(skewedWithExtra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Resume(skewedWithExtra) })
	time.Sleep(backendPause)
	if err := cluster.Resume(skewedWithExtra); err != nil {
		t.Fatal(err)
	}
	resumedAt := time.Now()
	gw.waitSnapshot(t, paused.Name+" healthy again in the snapshot", healthChangeTimeout, serverState(paused, true))
	healthyAt := time.Now()
	stopLoad()
	wg.Wait()

	counts := map[int]int{}
	var slowest504 time.Duration
	cutOff := 0
	for i, a := range results {
		if a.at.Add(took[i]).Before(pausedAt) {
			if a.err != nil || a.status != http.StatusOK {
				t.Errorf("list at %s, answered before the pause: HTTP %d %v: %.200s", a.at.Format("15:04:05.000"), a.status, a.err, a.body)
			}
			continue
		}
		if a.at.Before(pausedAt) && a.err != nil && !isTimeout(a.err) {
			// The server stopped after its headers had gone out: the gateway can only end
			// the response, and the client sees that at once rather than waiting.
			cutOff++
			continue
		}
		counts[a.status]++
		switch a.status {
		case http.StatusOK, http.StatusServiceUnavailable:
		case http.StatusGatewayTimeout:
			slowest504 = max(slowest504, took[i])
		default:
			t.Errorf("list at %s (%s into the pause), after %s: HTTP %d %v: %.200s",
				a.at.Format("15:04:05.000"), a.at.Sub(pausedAt).Round(time.Millisecond), took[i].Round(time.Millisecond), a.status, a.err, a.body)
		}
	}
	t.Logf("answers to lists in flight or sent from the pause until the server was healthy again %s after it: %v (0: no answer within %s, or a 503 without Retry-After), %d cut off mid-body; the slowest 504 took %s",
		healthyAt.Sub(resumedAt).Round(time.Millisecond), counts, pausedClientTimeout, cutOff, slowest504.Round(time.Millisecond))
	if counts[http.StatusGatewayTimeout] == 0 {
		t.Error("no list waited on the paused server: the scenario did not exercise the request timeout")
	}

	const name = "skewgate-e2e-after-pause"
	creator := gw.adminClient()
	defer creator.CloseIdleConnections()
	created := mustDo(t, creator, http.MethodPost, gw.URL+collection, nil, leaseCandidate(name))
	if created.status != http.StatusCreated {
		t.Fatalf("creating %s after the pause: HTTP %d: %s", name, created.status, created.body)
	}
	if err := watch.expect("ADDED", name, watchEventTimeout); err != nil {
		t.Errorf("the watch opened before the pause: %v", err)
	}
}

// isTimeout reports whether err is the client giving up, as opposed to the response being ended.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) && netErr.Timeout()
}
