package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

const (
	// loadPause spaces the requests of each load worker, so the load stays bounded on a small
	// machine that also runs the servers.
	loadPause = 20 * time.Millisecond
	// maxLoadRequests bounds the whole load; reaching it ends the load early.
	maxLoadRequests = 12000
	// settleTime lets the load run against a steady cluster before, between and after restarts.
	settleTime = 2 * time.Second
	// watchSeconds is the server-side timeout of each watch, so watches end and reopen.
	watchSeconds    = 8
	loadCallTimeout = 20 * time.Second
)

// loadResource is one resource the load creates, reads, lists, watches and deletes.
type loadResource struct {
	name       string
	collection string
	manifest   func(name string) []byte
	// servedBy reports whether server serves the resource once the upgrade of the 1.35 server
	// has begun (upgraded) or not.
	servedBy func(server int, upgraded bool) bool
}

// apiserverShutdownDelay is the rolling upgrade's --shutdown-delay-duration: after SIGTERM a
// server fails /readyz but keeps serving this long, so that whatever balances over the servers
// stops sending it requests before it stops listening, as managed control planes run it.
const apiserverShutdownDelay = 10 * time.Second

// undelayedServer restarts without a shutdown delay, as a self-managed control plane may run it
// (kubeadm sets none): it stops listening as soon as it is told to stop, so requests sent to it
// before skewgate notices are refused or sent back unprocessed, and only skewgate's retries on
// another server keep them from failing.
const undelayedServer = skewedUpgraded

// TestRollingUpgradeThroughSkewgate finishes a rolling upgrade behind skewgate while clients
// keep working: under a bounded load of create, get, list, watch and delete on the skewed and on
// common resources, every server restarts in turn, the 1.35 one coming back as 1.36. The servers
// answer 429 with Retry-After while they drain, and all but undelayedServer run with a shutdown
// delay, as managed control planes run them. No request fails, except with a 503 (with
// Retry-After and a Status body) for a resource while no server able to serve it is up: no 404,
// no request lost in flight to a restarting server, no connection error, and no watch cut but
// by undelayedServer, which closes its connections under the watches streaming on them.
func TestRollingUpgradeThroughSkewgate(t *testing.T) {
	besideOtherScenariosWithOwnClusters(t)
	spec := skewedSpec("rolling")
	for i := range spec.Servers {
		if i != undelayedServer {
			spec.Servers[i].ShutdownDelay = apiserverShutdownDelay
		}
		spec.Servers[i].ShutdownSendRetryAfter = true
	}
	cluster := startCluster(t, spec)
	requireSkew(t, cluster)
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))

	resources := []loadResource{
		{
			name:       "mutatingadmissionpolicies",
			collection: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
			manifest:   mutatingAdmissionPolicy,
			servedBy:   func(server int, upgraded bool) bool { return server != skewedOld || upgraded },
		},
		{
			name:       "leasecandidates",
			collection: "/apis/coordination.k8s.io/v1alpha2/namespaces/default/leasecandidates",
			manifest:   leaseCandidate,
			servedBy:   func(server int, _ bool) bool { return server == skewedWithExtra },
		},
		{
			name:       "configmaps",
			collection: "/api/v1/namespaces/default/configmaps",
			manifest:   configMap,
			servedBy:   func(int, bool) bool { return true },
		},
	}

	client := gw.adminClient()
	client.Timeout = 0 // watches stream; every call has its own deadline
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	load := startLoad(ctx, client, gw.URL, resources)
	defer load.stop()

	timeline := &downtimes{}
	time.Sleep(settleTime)
	for _, step := range []struct {
		server  int
		version string
	}{
		{skewedOld, testcluster.KubeVersion136},
		{skewedUpgraded, testcluster.KubeVersion136},
		{skewedWithExtra, testcluster.KubeVersion136},
	} {
		before := cluster.Server(step.server)
		from := time.Now()
		if err := cluster.Restart(ctx, step.server, step.version); err != nil {
			t.Fatalf("restarting %s: %v", before.Name, err)
		}
		after := cluster.Server(step.server)
		gw.waitSnapshot(t, after.Name+" back in the snapshot at "+after.Version, healthChangeTimeout, serverState(after, true))
		timeline.add(downtime{server: step.server, cluster: clusterName(after.URL), from: from, to: time.Now()})
		t.Logf("%s (%s -> %s) was out of service for %s", after.Name, before.Version, after.Version, time.Since(from).Round(time.Millisecond))
		time.Sleep(settleTime)
	}
	results := load.stop()

	analyzeRollingUpgrade(t, resources, len(cluster.Servers()), timeline, results)
}

// loadResult is one request of the load, or one watch stream's end.
type loadResult struct {
	resource   string
	op         string
	start, end time.Time
	status     int
	err        error
	retryAfter string
	body       []byte
	// watchCut marks a watch stream that ended with an error instead of the server's timeout.
	watchCut bool
	events   int
}

type loadRun struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	results []loadResult
	sent    atomic.Int64
}

// startLoad runs, for each resource, a worker that creates, gets, lists and deletes objects and a
// worker that keeps a watch open, until stop or maxLoadRequests.
func startLoad(ctx context.Context, client *http.Client, base string, resources []loadResource) *loadRun {
	ctx, cancel := context.WithCancel(ctx)
	l := &loadRun{cancel: cancel}
	for _, r := range resources {
		l.wg.Go(func() { l.crud(ctx, client, base, r) })
		l.wg.Go(func() { l.watch(ctx, client, base, r) })
	}
	return l
}

// stop ends the load and returns every result; calling it again returns them again.
func (l *loadRun) stop() []loadResult {
	l.cancel()
	l.wg.Wait()
	return l.results
}

func (l *loadRun) record(r loadResult) {
	l.mu.Lock()
	l.results = append(l.results, r)
	l.mu.Unlock()
}

// call sends one request and records it; it reports false once the load is over.
func (l *loadRun) call(ctx context.Context, client *http.Client, r loadResource, op, method, url string, body []byte) (loadResult, bool) {
	if ctx.Err() != nil || l.sent.Add(1) > maxLoadRequests {
		return loadResult{}, false
	}
	callCtx, cancel := context.WithTimeout(ctx, loadCallTimeout)
	defer cancel()
	res := loadResult{resource: r.name, op: op, start: time.Now()}
	resp, err := doContext(callCtx, client, method, url, nil, body)
	res.end = time.Now()
	if ctx.Err() != nil {
		// Cut short by the end of the load, not by the cluster.
		return loadResult{}, false
	}
	res.status, res.err, res.body = resp.status, err, resp.body
	if resp.header != nil {
		res.retryAfter = resp.header.Get("Retry-After")
	}
	l.record(res)
	time.Sleep(loadPause)
	return res, true
}

func (l *loadRun) crud(ctx context.Context, client *http.Client, base string, r loadResource) {
	for i := 0; ; i++ {
		name := fmt.Sprintf("rolling-%s-%d", r.name, i)
		created, ok := l.call(ctx, client, r, "create", http.MethodPost, base+r.collection, r.manifest(name))
		if !ok {
			return
		}
		if created.status == http.StatusCreated {
			if _, ok := l.call(ctx, client, r, "get", http.MethodGet, base+r.collection+"/"+name, nil); !ok {
				return
			}
		}
		if _, ok := l.call(ctx, client, r, "list", http.MethodGet, base+r.collection+"?limit=20", nil); !ok {
			return
		}
		if created.status == http.StatusCreated {
			if _, ok := l.call(ctx, client, r, "delete", http.MethodDelete, base+r.collection+"/"+name, nil); !ok {
				return
			}
		}
	}
}

// watch keeps a watch on the resource open, reopening it whenever it ends.
func (l *loadRun) watch(ctx context.Context, client *http.Client, base string, r loadResource) {
	target := base + r.collection + "?watch=true&timeoutSeconds=" + strconv.Itoa(watchSeconds)
	for {
		if ctx.Err() != nil || l.sent.Add(1) > maxLoadRequests {
			return
		}
		res := loadResult{resource: r.name, op: "watch", start: time.Now()}
		res.status, res.retryAfter, res.body, res.events, res.err = openWatch(ctx, client, target)
		res.end = time.Now()
		if ctx.Err() != nil {
			return
		}
		res.watchCut = res.status == http.StatusOK && res.err != nil
		l.record(res)
		time.Sleep(loadPause)
	}
}

// openWatch runs one watch to its end: the status it opened with and, for 200, how many events
// arrived and how the stream ended (nil for the server's own timeout).
func openWatch(ctx context.Context, client *http.Client, target string) (status int, retryAfter string, body []byte, events int, err error) {
	ctx, cancel := context.WithTimeout(ctx, watchSeconds*time.Second+loadCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, "", nil, 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), body, 0, err
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct {
			Type string `json:"type"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return http.StatusOK, "", nil, events, err
		}
		if ev.Type == "ERROR" {
			return http.StatusOK, "", nil, events, errors.New("watch ERROR event")
		}
		events++
	}
}

// downtime is when one server was out of service, from the moment its restart began until the
// gateway's snapshot showed it healthy again.
type downtime struct {
	server   int
	cluster  string
	from, to time.Time
}

type downtimes struct{ list []downtime }

func (d *downtimes) add(w downtime) { d.list = append(d.list, w) }

func (d *downtimes) down(server int, at time.Time) bool {
	return slices.ContainsFunc(d.list, func(w downtime) bool {
		return w.server == server && !at.Before(w.from) && !at.After(w.to)
	})
}

// overlapsServer reports whether [from, to] overlaps a downtime of server.
func (d *downtimes) overlapsServer(server int, from, to time.Time) bool {
	return slices.ContainsFunc(d.list, func(w downtime) bool {
		return w.server == server && !to.Before(w.from) && !from.After(w.to)
	})
}

// namedIn returns the cluster name of the restarted server that message names.
func (d *downtimes) namedIn(message string) (string, bool) {
	for _, w := range d.list {
		// The name ends in the port, so a longer port must not match a shorter one.
		for rest := message; ; {
			i := strings.Index(rest, w.cluster)
			if i < 0 {
				break
			}
			rest = rest[i+len(w.cluster):]
			if rest == "" || rest[0] < '0' || rest[0] > '9' {
				return w.cluster, true
			}
		}
	}
	return "", false
}

// noCapableServerUp reports whether, at some moment of [from, to], every server able to serve r
// was out of service. Service changes only where a downtime begins, so checking from and every
// such moment inside the interval is enough.
func (d *downtimes) noCapableServerUp(r loadResource, servers int, from, to time.Time) bool {
	upgradeBegan := time.Time{}
	for _, w := range d.list {
		if w.server == skewedOld {
			upgradeBegan = w.from
		}
	}
	instants := []time.Time{from}
	for _, w := range d.list {
		if w.from.After(from) && !w.from.After(to) {
			instants = append(instants, w.from)
		}
	}
	for _, at := range instants {
		upgraded := !upgradeBegan.IsZero() && !at.Before(upgradeBegan)
		allDown := true
		for s := range servers {
			if r.servedBy(s, upgraded) && !d.down(s, at) {
				allDown = false
			}
		}
		if allDown {
			return true
		}
	}
	return false
}

// serverShuttingDownMessage is kube-apiserver's own 503 for a request that arrives while it
// drains (k8s.io/apiserver/pkg/server/filters WithWaitGroup).
const serverShuttingDownMessage = "apiserver is shutting down"

// loadCounts are the outcomes of the load, for the report.
type loadCounts struct {
	success, notFound, noCapableServer, inFlight, connectionErrors, watchCuts, other, watchEvents int
}

func analyzeRollingUpgrade(t *testing.T, resources []loadResource, servers int, timeline *downtimes, results []loadResult) {
	byName := map[string]loadResource{}
	for _, r := range resources {
		byName[r.name] = r
	}
	total := loadCounts{}
	per := map[string]*loadCounts{}
	var failures []string
	fail := func(res loadResult, why string) {
		if len(why) > 300 {
			why = why[:300] + "..."
		}
		failures = append(failures, fmt.Sprintf("%s %s at %s: %s", res.op, res.resource, res.start.Format("15:04:05.000"), why))
	}
	for _, res := range results {
		c := per[res.resource]
		if c == nil {
			c = &loadCounts{}
			per[res.resource] = c
		}
		c.watchEvents += res.events
		switch {
		case res.watchCut:
			c.watchCuts++
			// Without a shutdown delay a server closes its connections while watches still
			// stream on them; no proxy can carry those on. With one, watches end before it stops.
			if !timeline.overlapsServer(undelayedServer, res.start, res.end) {
				fail(res, "watch stream cut: "+res.err.Error())
			}
		case res.err != nil:
			c.connectionErrors++
			fail(res, "connection error: "+res.err.Error())
		case res.status == http.StatusNotFound:
			c.notFound++
			fail(res, "false 404: "+string(res.body))
		case res.status == http.StatusServiceUnavailable:
			var status apiStatus
			if err := json.Unmarshal(res.body, &status); err != nil || status.Kind != "Status" ||
				status.Code != http.StatusServiceUnavailable || status.Reason != "ServiceUnavailable" {
				fail(res, fmt.Sprintf("503 without a ServiceUnavailable Status body: %q", res.body))
				continue
			}
			if seconds, err := strconv.Atoi(res.retryAfter); err != nil || seconds <= 0 {
				fail(res, fmt.Sprintf("503 with Retry-After %q", res.retryAfter))
			}
			shuttingDown := status.Message == serverShuttingDownMessage
			if !shuttingDown && status.Details.RetryAfterSeconds <= 0 {
				fail(res, fmt.Sprintf("skewgate's 503 Status has no retryAfterSeconds: %q", res.body))
			}
			if timeline.noCapableServerUp(byName[res.resource], servers, res.start, res.end) {
				c.noCapableServer++
				continue
			}
			c.inFlight++
			switch w, named := timeline.namedIn(status.Message); {
			case shuttingDown:
				fail(res, "an API server's own 503 as it shut down, while another server able to serve it was up")
			case named:
				fail(res, "503 for the restarted server "+w+", while another server able to serve it was up: "+status.Message)
			default:
				fail(res, "503 while a server able to serve it was up: "+status.Message)
			}
		case res.status >= 200 && res.status < 300:
			c.success++
		default:
			c.other++
			fail(res, fmt.Sprintf("HTTP %d: %s", res.status, res.body))
		}
	}

	for _, r := range resources {
		c := per[r.name]
		if c == nil {
			t.Errorf("no load on %s", r.name)
			continue
		}
		t.Logf("%-26s 2xx %5d | 404 %d | 503 no capable server %3d | 503 while a capable server was up %3d | connection errors %3d | watch cuts %2d | other failures %3d | watch events %5d",
			r.name, c.success, c.notFound, c.noCapableServer, c.inFlight, c.connectionErrors, c.watchCuts, c.other, c.watchEvents)
		total.success += c.success
		total.notFound += c.notFound
		total.noCapableServer += c.noCapableServer
		total.inFlight += c.inFlight
		total.connectionErrors += c.connectionErrors
		total.watchCuts += c.watchCuts
		total.other += c.other
		total.watchEvents += c.watchEvents
		if c.success == 0 {
			t.Errorf("no request for %s succeeded", r.name)
		}
	}
	t.Logf("%d requests: 2xx %d, 404 %d, 503 no capable server %d, 503 while a capable server was up %d, connection errors %d, watch cuts %d, other failures %d",
		len(results), total.success, total.notFound, total.noCapableServer, total.inFlight, total.connectionErrors, total.watchCuts, total.other)
	// The 1.36 server with the extra API is the only one serving leasecandidates: while it
	// restarts, the answer must be 503, never 404.
	if per["leasecandidates"] == nil || per["leasecandidates"].noCapableServer == 0 {
		t.Error("no 503 for leasecandidates while its only server restarted: the scenario did not exercise that case")
	}
	for _, w := range timeline.list {
		during := 0
		for _, res := range results {
			if res.err == nil && res.status/100 == 2 && !res.start.Before(w.from) && !res.end.After(w.to) {
				during++
			}
		}
		if during == 0 {
			t.Errorf("no request succeeded while server %d was out of service: the load did not cover the restart", w.server)
		}
	}
	for i, f := range failures {
		if i == 20 {
			t.Errorf("... and %d more", len(failures)-20)
			break
		}
		t.Error(f)
	}
}

func leaseCandidate(name string) []byte {
	return []byte(`{"apiVersion":"coordination.k8s.io/v1alpha2","kind":"LeaseCandidate","metadata":{"name":"` + name + `"},` +
		`"spec":{"leaseName":"skewgate-e2e","binaryVersion":"1.36.3","emulationVersion":"1.36.0","strategy":"OldestEmulationVersion"}}`)
}

func configMap(name string) []byte {
	return []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `"},"data":{"written-by":"skewgate-e2e"}}`)
}
