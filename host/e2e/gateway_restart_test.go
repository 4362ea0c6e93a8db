package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const (
	// gatewayShutdownDelay is the restarted gateway's --shutdown-delay-duration.
	gatewayShutdownDelay = 5 * time.Second
	// balancerCheckInterval is how often the test's load balancer checks each gateway's /readyz;
	// it must be well below the shutdown delay, as a load balancer's health check is set up.
	balancerCheckInterval = 200 * time.Millisecond
	balancedWorkers       = 4
	balancedPause         = 10 * time.Millisecond
	// gatewayExitTimeout bounds the restarted gateway's delay and drain (--shutdown-timeout is
	// the suite's 2s).
	gatewayExitTimeout = gatewayShutdownDelay + 30*time.Second
)

// gatewayShutdownFlags are the flags of the gateway the scenario restarts.
var gatewayShutdownFlags = []string{"--shutdown-delay-duration=" + gatewayShutdownDelay.String()}

// TestGatewayRestartRefusesNoRequestAndFreesItsPorts restarts one of two gateways behind a load
// balancer, the way a rolling update of a gateway deployment does, while plain GETs run through
// the balancer and a watch is open through the gateway being restarted. The balancer sends
// requests only to gateways whose /readyz is 200, checked every balancerCheckInterval. On
// SIGTERM the gateway fails /readyz at once and keeps serving for its shutdown delay, so not one
// request is refused or fails, the watch keeps delivering events, and once the process has
// exited a new one binds the very same ports at once.
func TestGatewayRestartRefusesNoRequestAndFreesItsPorts(t *testing.T) {
	cluster := sharedOneCA.get(t)
	restarted := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity, extraArgs: gatewayShutdownFlags})
	steady := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	for _, gw := range []*skewgate{restarted, steady} {
		gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lb := startReadinessBalancer(ctx, restarted, steady)
	lb.waitReady(t, 0, true)
	lb.waitReady(t, 1, true)

	watchClient := restarted.adminClient()
	watchClient.Timeout = 0 // the watch streams; the context ends it
	defer watchClient.CloseIdleConnections()
	watch := openWatchStream(ctx, t, watchClient, restarted.URL+"/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=600")
	objects := newClusterObjects(cluster)
	load := lb.startLoad(ctx, "/api/v1/namespaces/default/configmaps?limit=1")
	time.Sleep(settleTime)

	sigterm := time.Now()
	if err := restarted.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	notReady := lb.waitReady(t, 0, false)
	// The watch still delivers while the gateway delays its shutdown.
	objects.createConfigMap(t, "default", "skewgate-e2e-gateway-restart")
	if err := watch.expect("ADDED", "skewgate-e2e-gateway-restart", watchEventTimeout); err != nil {
		t.Errorf("the watch through the restarted gateway after SIGTERM: %v", err)
	}
	exited := waitExited(t, restarted, gatewayExitTimeout)
	t.Logf("SIGTERM at %s; the balancer saw /readyz fail %s later; the process exited %s later; the watch ended %s later (%v)",
		sigterm.Format("15:04:05.000"), notReady.Sub(sigterm).Round(time.Millisecond), exited.Sub(sigterm).Round(time.Millisecond),
		watchEnd(watch, sigterm), watch.err)
	if exited.Sub(sigterm) < gatewayShutdownDelay {
		t.Errorf("the gateway exited %s after SIGTERM, before its %s shutdown delay", exited.Sub(sigterm).Round(time.Millisecond), gatewayShutdownDelay)
	}

	restarted.restartOnSamePorts(t)
	restartedAt := time.Now()
	lb.waitReady(t, 0, true)
	time.Sleep(settleTime)
	results := load.stop()

	var sentAfterSigterm, servedAfterRestart, failed int
	for _, r := range results {
		if r.gateway == 0 && r.start.After(sigterm) && r.start.Before(exited) {
			sentAfterSigterm++
		}
		if r.gateway == 0 && r.start.After(restartedAt) && r.err == nil && r.status == http.StatusOK {
			servedAfterRestart++
		}
		if r.err != nil || r.status != http.StatusOK {
			if failed < 10 {
				t.Errorf("GET through gateway %d at %s (%s after SIGTERM): HTTP %d %v: %.200s",
					r.gateway, r.start.Format("15:04:05.000"), r.start.Sub(sigterm).Round(time.Millisecond), r.status, r.err, r.body)
			}
			failed++
		}
	}
	t.Logf("%d requests through the balancer, %d failed; %d sent to the restarted gateway between SIGTERM and its exit, %d served by its successor",
		len(results), failed, sentAfterSigterm, servedAfterRestart)
	if servedAfterRestart == 0 {
		t.Error("the restarted gateway served no request once back: the balancer never returned to it")
	}
}

// waitExited waits for the gateway process to end and returns when it was seen ended.
func waitExited(t *testing.T, g *skewgate, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if exited, _ := g.proc.Exited(); exited {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("skewgate did not exit within %s of SIGTERM", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func watchEnd(w *watchStream, since time.Time) string {
	if w.running() {
		return "(still open)"
	}
	return w.ended.Sub(since).Round(time.Millisecond).String()
}

// readinessBalancer is a load balancer in front of gateways: it checks each one's /readyz every
// balancerCheckInterval and sends each request to the next gateway that passed its last check.
type readinessBalancer struct {
	gateways []*skewgate
	clients  []*http.Client
	ready    []atomic.Bool
	next     atomic.Uint64
}

func startReadinessBalancer(ctx context.Context, gateways ...*skewgate) *readinessBalancer {
	b := &readinessBalancer{gateways: gateways, ready: make([]atomic.Bool, len(gateways))}
	for i, g := range gateways {
		b.clients = append(b.clients, g.adminClient())
		go func() {
			check := &http.Client{Timeout: time.Second}
			for ctx.Err() == nil {
				resp, err := doContext(ctx, check, http.MethodGet, g.metricsURL+"/readyz", nil, nil)
				b.ready[i].Store(err == nil && resp.status == http.StatusOK)
				time.Sleep(balancerCheckInterval)
			}
		}()
	}
	return b
}

// waitReady waits until the balancer's view of gateway i is ready and returns when it was.
func (b *readinessBalancer) waitReady(t *testing.T, i int, ready bool) time.Time {
	t.Helper()
	eventually(t, fmt.Sprintf("the balancer sees gateway %d with ready=%v", i, ready), gatewayReadyTimeout, 10*time.Millisecond, func() error {
		if b.ready[i].Load() != ready {
			return fmt.Errorf("ready=%v", !ready)
		}
		return nil
	})
	return time.Now()
}

// pick returns the next ready gateway, or -1.
func (b *readinessBalancer) pick() int {
	for range b.gateways {
		i := int((b.next.Add(1) - 1) % uint64(len(b.gateways)))
		if b.ready[i].Load() {
			return i
		}
	}
	return -1
}

type balancedResult struct {
	gateway    int
	start, end time.Time
	status     int
	err        error
	body       []byte
}

type balancedLoad struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []balancedResult
}

// startLoad GETs path through the balancer from balancedWorkers workers until stop.
func (b *readinessBalancer) startLoad(ctx context.Context, path string) *balancedLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &balancedLoad{cancel: cancel}
	for range balancedWorkers {
		l.wg.Go(func() {
			for ctx.Err() == nil {
				i := b.pick()
				if i < 0 {
					time.Sleep(balancedPause)
					continue
				}
				r := balancedResult{gateway: i, start: time.Now()}
				resp, err := doContext(ctx, b.clients[i], http.MethodGet, b.gateways[i].URL+path, nil, nil)
				if ctx.Err() != nil {
					return
				}
				r.end, r.status, r.err, r.body = time.Now(), resp.status, err, resp.body
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
				time.Sleep(balancedPause)
			}
		})
	}
	return l
}

func (l *balancedLoad) stop() []balancedResult {
	l.cancel()
	l.wg.Wait()
	return l.results
}
