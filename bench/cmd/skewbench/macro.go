package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/skewgate/skewgate/bench/internal/loadgen"
	"github.com/skewgate/skewgate/bench/internal/report"
	"github.com/skewgate/skewgate/host/testcluster"
)

// The cluster harness's pinned versions, so the benchmark runs the binaries the tests run.
const (
	etcdVersion      = testcluster.EtcdVersion
	oldServerVersion = testcluster.KubeVersion135
	newServerVersion = testcluster.KubeVersion136
)

// The control plane mid-upgrade. Path 5 (upstream's in-server proxy) needs a
// server that lacks a resource and runs the mixed version proxy next to one
// that serves it; two v1.36.3 servers that differ only in --runtime-config
// give exactly that, with nothing else differing between them.
const (
	serverOld   = iota // v1.35.4 without the mixed version proxy: a server not yet upgraded
	serverNew          // v1.36.3 with the proxy, default API set: lacks the alpha resource and proxies it
	serverExtra        // v1.36.3 with the proxy and coordination.k8s.io/v1alpha2: the only server of the resource
)

var clusterSpec = []testcluster.ServerSpec{
	serverOld:   {Name: "bench-1-35", Version: oldServerVersion},
	serverNew:   {Name: "bench-1-36", Version: newServerVersion, MVP: true},
	serverExtra: {Name: "bench-1-36-extra", Version: newServerVersion, MVP: true, RuntimeConfig: []string{"coordination.k8s.io/v1alpha2=true"}},
}

// Requests of equal shape: lists of an empty namespace's collection, one that
// every server serves and one that only serverExtra serves.
const (
	commonPath   = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	reroutedPath = "/apis/coordination.k8s.io/v1alpha2/namespaces/default/leasecandidates"
	apisPath     = "/apis"
	// acceptDiscovery is what client-go sends for aggregated discovery.
	acceptDiscovery = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList;q=0.9,application/json;q=0.8"
)

// topology is the set-up as the results file documents it; | stands for a
// Markdown backquote, which a Go raw string cannot hold.
var topology = strings.ReplaceAll(`One etcd and three kube-apiservers on loopback, each in its own UTS namespace (distinct server IDs):
|bench-1-35| v1.35.4 without the mixed version proxy (MVP); |bench-1-36| v1.36.3 with MVP and the default API set;
|bench-1-36-extra| v1.36.3 with MVP and |--runtime-config=coordination.k8s.io/v1alpha2=true|. The re-routed request,
|GET `+reroutedPath+`|, is served only by |bench-1-36-extra|: |bench-1-35| answers 404, and |bench-1-36| lacks it
but runs MVP, so sending it there exercises upstream's in-server proxy (path |mvp-rerouted|). The two v1.36.3 servers
differ only in that runtime config, so MVP and skewgate re-route the same request to the same server. The request
needing no re-route, |GET `+commonPath+`|, has the same shape (a list of an empty namespace) and is
served by every server; the direct floor, the plain reverse proxy and |skewgate serve| all spread it over the three
servers in turn. |skewgate serve| runs as a subprocess in passthrough identity mode, the plain reverse proxy
(|httputil.ReverseProxy|, TLS on both sides, HTTP/2 to the servers, no Wasm) as another, the load generator as a
third. Every client authenticates with the same bearer token (group system:masters) and verifies TLS against the
cluster CA. /apis uses client-go's aggregated-discovery Accept header; the 304 paths send the ETag each side served.
The node-local paths stand for a control-plane node whose own server is |bench-1-35| and send it the request needing
no re-route: |direct-local| straight, |plain-proxy-local| through a second plain reverse proxy with it as the only
backend, |tcp-proxy-local| through |skewbench tcp-proxy| (an L4 proxy copying bytes both ways, TLS end to end, as
node-local load balancers such as Talos KubePrism or k3s's agent load balancer do), and |skewgate-node-local| through
|skewgate serve --local-apiserver| naming |bench-1-35|, with the two v1.36.3 servers as its peers (passthrough
identity mode, one plugin VM). Its footprint is measured once per run: VmRSS, RssAnon and RssFile from
/proc/<pid>/status after the rounds, and the time from starting the process to its first 200 from /readyz (polled
every 20 ms), first with an empty |--compilation-cache-dir| (the plugin is compiled), then restarted with the cache
that start filled.`, "|", "`")

type macroConfig struct {
	skewgate, wasm, loadgen, self string
	rounds, concurrency, requests int
	warmup                        int
	duration                      time.Duration
	protocol                      string
	progress                      io.Writer
	// profileDir, when set, receives CPU and allocation profiles of skewgate
	// serve under load, taken after the rounds.
	profileDir string
}

func (macroConfig) kubeVersions() []string { return []string{oldServerVersion, newServerVersion} }

// macroEnv is the running set-up.
type macroEnv struct {
	cfg     macroConfig
	cluster *testcluster.Cluster
	client  *http.Client
	// serverURLs are the kube-apiservers' URLs, in clusterSpec order.
	serverURLs  []string
	skewgateURL string
	// skewgateMetricsURL is skewgate's metrics listener, which serves its
	// profiles when -profile-dir is given.
	skewgateMetricsURL string
	plainURL           string
	// The node-local paths' hops: the plain and the TCP proxy in front of
	// serverOld alone, and node-local skewgate, whose local server it is.
	plainLocalURL, tcpLocalURL, nodeLocalURL string
	// nodeLocal is node-local skewgate's process, nodeLocalMetricsURL its
	// metrics listener.
	nodeLocal           *testcluster.Process
	nodeLocalMetricsURL string
	footprint           report.NodeLocalFootprint
	procs               []*testcluster.Process
	// meters say, by path ID, where to read what the process serving the
	// path spends.
	meters map[string]meter
	// costs are the measured paths' costs, one per round.
	costs []report.RoundCosts
	// etags are the /apis ETags each side serves, for the 304 paths.
	skewgateETag, apiserverETag string
}

// runMacro starts the cluster and measures everything that runs in front of
// it: the macro paths' rounds and node-local skewgate's footprint.
func runMacro(ctx context.Context, cfg macroConfig) ([]report.Round, []report.RoundCosts, report.NodeLocalFootprint, error) {
	fmt.Fprintf(cfg.progress, "skewbench: starting etcd %s and three kube-apiservers %v (binaries are built on first use)\n",
		etcdVersion, cfg.kubeVersions())
	cluster, err := testcluster.Start(ctx, progressLogger{cfg.progress}, testcluster.Spec{Servers: clusterSpec})
	if err != nil {
		return nil, nil, report.NodeLocalFootprint{}, err
	}
	env := &macroEnv{cfg: cfg, cluster: cluster, client: tokenClient(cluster), meters: map[string]meter{}}
	defer env.close()
	for _, s := range cluster.Servers() {
		env.serverURLs = append(env.serverURLs, s.URL)
	}
	rounds, err := env.run(ctx)
	return rounds, env.costs, env.footprint, err
}

// run starts every hop, timing node-local skewgate's start, waits until every
// path answers as it should, measures the paths in interleaved rounds, then
// reads node-local skewgate's resident memory.
func (e *macroEnv) run(ctx context.Context) ([]report.Round, error) {
	if err := e.startHops(ctx); err != nil {
		return nil, err
	}
	if err := e.waitUntilEveryPathAnswers(ctx); err != nil {
		return nil, err
	}
	var rounds []report.Round
	for r := 1; r <= e.cfg.rounds; r++ {
		round, costs := report.Round{}, report.RoundCosts{}
		for _, spec := range report.MacroPaths {
			res, cost, measured, err := e.measure(ctx, spec.ID)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r, spec.ID, err)
			}
			perRequest := ""
			if measured {
				costs[spec.ID] = cost
				perRequest = fmt.Sprintf("  %6.1f µs CPU/request", float64(cost.CPUSeconds)*1e6/float64(cost.Requests))
			}
			fmt.Fprintf(e.cfg.progress, "skewbench: round %d/%d %-20s p50 %8.0f µs  p99 %8.0f µs  %7.0f rps%s  (%d ok, errors %v)\n",
				r, e.cfg.rounds, spec.ID, res.P50, res.P99, res.RPS, perRequest, res.OK, res.Errors)
			round[spec.ID] = res
		}
		rounds = append(rounds, round)
		e.costs = append(e.costs, costs)
	}
	if err := e.readNodeLocalMemory(); err != nil {
		return nil, err
	}
	if e.cfg.profileDir != "" {
		if err := e.profile(ctx); err != nil {
			return nil, err
		}
	}
	return rounds, nil
}

// startHops starts every process a path goes through on its way to the
// servers.
func (e *macroEnv) startHops(ctx context.Context) error {
	var err error
	if e.plainURL, err = e.startPlainProxy(ctx, report.PathPlainProxy, e.serverURLs); err != nil {
		return err
	}
	if e.plainLocalURL, err = e.startPlainProxy(ctx, report.PathPlainProxyLocal, []string{e.serverURL(serverOld)}); err != nil {
		return err
	}
	if e.tcpLocalURL, err = e.startTCPProxy(ctx, report.PathTCPProxyLocal, e.serverURL(serverOld)); err != nil {
		return err
	}
	fmt.Fprintln(e.cfg.progress, "skewbench: starting skewgate serve")
	var servers []string
	for _, u := range e.serverURLs {
		servers = append(servers, "--apiserver="+u)
	}
	sg, err := e.startSkewgate(ctx, "skewgate", servers)
	if err != nil {
		return err
	}
	e.skewgateURL, e.skewgateMetricsURL = "https://"+loopback(sg.ports[0]), "http://"+loopback(sg.ports[1])
	gateway := meter{pid: sg.proc.PID(), metricsURL: e.skewgateMetricsURL + "/metrics"}
	for _, id := range []string{report.PathSkewgate, report.PathSkewgateRerouted, report.PathSkewgateAPIs, report.PathSkewgateAPIs304} {
		e.meters[id] = gateway
	}
	// The /apis paths of the API server: the one server answering them.
	apiserver := meter{pid: e.cluster.Server(serverNew).PID, metricsURL: e.serverURL(serverNew) + "/metrics"}
	e.meters[report.PathAPIServerAPIs], e.meters[report.PathAPIServerAPIs304] = apiserver, apiserver
	return e.startNodeLocalSkewgate(ctx)
}

// stop ends one of the started processes before the set-up closes.
func (e *macroEnv) stop(proc *testcluster.Process) {
	proc.Stop(30 * time.Second)
	e.procs = slices.DeleteFunc(e.procs, func(p *testcluster.Process) bool { return p == proc })
}

func (e *macroEnv) close() {
	for i := len(e.procs) - 1; i >= 0; i-- {
		e.procs[i].Stop(30 * time.Second)
	}
	e.client.CloseIdleConnections()
	e.cluster.Close()
}

// progressLogger prints the cluster harness's messages as progress lines.
type progressLogger struct{ w io.Writer }

func (l progressLogger) Logf(format string, args ...any) {
	fmt.Fprintf(l.w, "skewbench: %s\n", fmt.Sprintf(format, args...))
}

// tokenClient authenticates as loadgen does, with the admin bearer token and no
// client certificate. Every endpoint serves the cluster's serving certificate,
// valid for the name the client verifies.
func tokenClient(cluster *testcluster.Cluster) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{RootCAs: cluster.CAPool(), ServerName: testcluster.ServingServerName, MinVersion: tls.VersionTLS12},
		DisableCompression: true,
	}}
}

func (e *macroEnv) serverURL(i int) string { return e.serverURLs[i] }

// loopback is 127.0.0.1:port.
func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// How often a wait polls: a starting process finely, since node-local
// skewgate's readiness is timed by that wait; routes settling in the running
// set-up coarsely.
const (
	readyPoll = 20 * time.Millisecond
	routePoll = 500 * time.Millisecond
)

// started is a subprocess that passed its readiness check.
type started struct {
	proc  *testcluster.Process
	ports []int
	// readyAfter is the time from starting the process to its first ready
	// answer.
	readyAfter time.Duration
}

// startProcess starts the command argv builds for fresh loopback ports and
// waits until the URL ready builds answers 200, retrying with other ports if
// one was taken meanwhile.
func (e *macroEnv) startProcess(ctx context.Context, name string, nPorts int, argv func(ports []int) []string,
	ready func(ports []int) string) (*started, error) {
	var lastErr error
	for attempt := 1; attempt <= 3; attempt++ {
		ports, err := testcluster.FreePorts(nPorts)
		if err != nil {
			return nil, err
		}
		begun := time.Now()
		proc, err := testcluster.StartProcess(name, filepath.Join(e.cluster.Dir(), name+".log"), argv(ports))
		if err != nil {
			return nil, err
		}
		if lastErr = e.waitStatus(ctx, proc, ready(ports), nil, http.StatusOK, readyPoll); lastErr == nil {
			e.procs = append(e.procs, proc)
			return &started{proc: proc, ports: ports, readyAfter: time.Since(begun)}, nil
		}
		lastErr = fmt.Errorf("%w\n%s", lastErr, proc.LogTail(30))
		proc.Stop(10 * time.Second)
	}
	return nil, fmt.Errorf("%s did not start: %w", name, lastErr)
}

// startPlainProxy starts the plain reverse proxy as name in front of the
// backends and returns its URL.
func (e *macroEnv) startPlainProxy(ctx context.Context, name string, backends []string) (string, error) {
	files := e.cluster.PKI().Files
	s, err := e.startProcess(ctx, name, 2, func(ports []int) []string {
		argv := []string{e.cfg.self, "plain-proxy", "-listen", loopback(ports[0]), "-metrics-listen", loopback(ports[1]),
			"-tls-cert-file", files.ServingCert, "-tls-private-key-file", files.ServingKey, "-peer-ca-file", files.CACert}
		for _, u := range backends {
			argv = append(argv, "-backend", u)
		}
		return argv
	}, func(ports []int) string { return "https://" + loopback(ports[0]) + commonPath })
	if err != nil {
		return "", err
	}
	e.meters[name] = meter{pid: s.proc.PID(), metricsURL: "http://" + loopback(s.ports[1]) + "/metrics"}
	return "https://" + loopback(s.ports[0]), nil
}

// startTCPProxy starts the L4 proxy as name in front of the server at
// serverURL and returns the URL that reaches the server through it.
func (e *macroEnv) startTCPProxy(ctx context.Context, name, serverURL string) (string, error) {
	server, err := loadgen.ParseTarget(serverURL)
	if err != nil {
		return "", err
	}
	s, err := e.startProcess(ctx, name, 2, func(ports []int) []string {
		return []string{e.cfg.self, "tcp-proxy", "-listen", loopback(ports[0]), "-metrics-listen", loopback(ports[1]),
			"-backend", server.Host}
	}, func(ports []int) string { return "https://" + loopback(ports[0]) + commonPath })
	if err != nil {
		return "", err
	}
	e.meters[name] = meter{pid: s.proc.PID(), metricsURL: "http://" + loopback(s.ports[1]) + "/metrics"}
	return "https://" + loopback(s.ports[0]), nil
}

// startSkewgate starts skewgate serve as name with the TLS files and identity
// mode every instance shares; servers are the flags naming its API servers.
// ports[0] of the result is the gateway's, ports[1] the metrics listener's.
func (e *macroEnv) startSkewgate(ctx context.Context, name string, servers []string) (*started, error) {
	files := e.cluster.PKI().Files
	return e.startProcess(ctx, name, 2, func(ports []int) []string {
		argv := []string{e.cfg.skewgate, "serve",
			"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[0]),
			"--tls-cert-file=" + files.ServingCert, "--tls-private-key-file=" + files.ServingKey,
			"--peer-ca-file=" + files.CACert,
			"--proxy-client-cert-file=" + files.FrontProxyClientCert, "--proxy-client-key-file=" + files.FrontProxyClientKey,
			"--identity-mode=passthrough",
			"--metrics-bind-address=" + loopback(ports[1]),
			"--wasm=" + e.cfg.wasm,
			// The harness waits for the routing it measures in /debug/snapshot.
			"--debug-handlers",
		}
		if e.cfg.profileDir != "" {
			argv = append(argv, "--profiling")
		}
		return append(argv, servers...)
	}, func(ports []int) string { return "http://" + loopback(ports[1]) + "/readyz" })
}

// waitFor calls check every interval until it reports done, the process
// (when given) exits, or three minutes pass; check also describes what it saw,
// for the error.
func waitFor(ctx context.Context, proc *testcluster.Process, every time.Duration, what string,
	check func(context.Context) (done bool, saw string)) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		if proc != nil {
			if exited, err := proc.Exited(); exited {
				return err
			}
		}
		done, saw := check(ctx)
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s (last: %s): %w", what, saw, ctx.Err())
		case <-time.After(every):
		}
	}
}

// waitStatus polls url every interval until it answers want.
func (e *macroEnv) waitStatus(ctx context.Context, proc *testcluster.Process, url string, header http.Header, want int,
	every time.Duration) error {
	return waitFor(ctx, proc, every, fmt.Sprintf("%s did not answer %d", url, want), func(ctx context.Context) (bool, string) {
		status, _, _, err := e.get(ctx, url, header)
		if err != nil {
			return false, err.Error()
		}
		return status == want, strconv.Itoa(status)
	})
}

// get sends one request as the benchmark client does: TLS verified against
// the cluster CA, the bearer token on https only (the metrics listener is
// plain HTTP).
func (e *macroEnv) get(ctx context.Context, url string, header http.Header) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if req.URL.Scheme == "https" {
		req.Header.Set("Authorization", "Bearer "+e.cluster.PKI().AdminToken)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// waitUntilEveryPathAnswers waits for upstream's proxy to learn its peers'
// resources, for skewgate to hold a snapshot of every server and for
// node-local skewgate to prefer its local server, checks the skew the
// benchmark relies on, and records each side's /apis ETag.
func (e *macroEnv) waitUntilEveryPathAnswers(ctx context.Context) error {
	fmt.Fprintln(e.cfg.progress, "skewbench: waiting for the mixed version proxy and skewgate to route the alpha resource, "+
		"and for node-local skewgate to prefer its own server")
	if err := e.waitStatus(ctx, nil, e.serverURL(serverNew)+reroutedPath, nil, http.StatusOK, routePoll); err != nil {
		return fmt.Errorf("upstream's mixed version proxy: %w", err)
	}
	if err := e.waitStatus(ctx, nil, e.skewgateURL+reroutedPath, nil, http.StatusOK, routePoll); err != nil {
		return fmt.Errorf("skewgate: %w", err)
	}
	if err := e.waitLocalPreferred(ctx); err != nil {
		return err
	}
	if status, _, _, err := e.get(ctx, e.serverURL(serverOld)+reroutedPath, nil); err != nil || status != http.StatusNotFound {
		return fmt.Errorf("%s on the v1.35.4 server: status %d, %v; want 404 (the skew the benchmark relies on)", reroutedPath, status, err)
	}
	discovery := http.Header{"Accept": {acceptDiscovery}}
	for _, side := range []struct {
		url  string
		etag *string
	}{{e.skewgateURL, &e.skewgateETag}, {e.serverURL(serverNew), &e.apiserverETag}} {
		status, header, _, err := e.get(ctx, side.url+apisPath, discovery)
		if err != nil || status != http.StatusOK || header.Get("ETag") == "" {
			return fmt.Errorf("GET %s%s: status %d, ETag %q, %v; want 200 with an ETag", side.url, apisPath, status, header.Get("ETag"), err)
		}
		*side.etag = header.Get("ETag")
	}
	for _, spec := range report.MacroPaths {
		target := e.target(spec.ID)
		header := http.Header{}
		for _, h := range target.headers {
			if err := loadgen.ParseHeader(header, h); err != nil {
				return err
			}
		}
		for _, url := range target.urls {
			if status, _, _, err := e.get(ctx, url, header); err != nil || status != target.status {
				return fmt.Errorf("path %s: GET %s: status %d, %v; want %d", spec.ID, url, status, err, target.status)
			}
		}
	}
	return nil
}

// pathTarget is what loadgen sends for one path.
type pathTarget struct {
	urls    []string
	headers []string
	status  int
}

func (e *macroEnv) target(id string) pathTarget {
	every := func(path string) []string {
		var urls []string
		for _, u := range e.serverURLs {
			urls = append(urls, u+path)
		}
		return urls
	}
	accept := "Accept: " + acceptDiscovery
	switch id {
	case report.PathDirect:
		return pathTarget{urls: every(commonPath), status: http.StatusOK}
	case report.PathPlainProxy:
		return pathTarget{urls: []string{e.plainURL + commonPath}, status: http.StatusOK}
	case report.PathSkewgate:
		return pathTarget{urls: []string{e.skewgateURL + commonPath}, status: http.StatusOK}
	case report.PathDirectLocal:
		return pathTarget{urls: []string{e.serverURL(serverOld) + commonPath}, status: http.StatusOK}
	case report.PathPlainProxyLocal:
		return pathTarget{urls: []string{e.plainLocalURL + commonPath}, status: http.StatusOK}
	case report.PathTCPProxyLocal:
		return pathTarget{urls: []string{e.tcpLocalURL + commonPath}, status: http.StatusOK}
	case report.PathSkewgateNodeLocal:
		return pathTarget{urls: []string{e.nodeLocalURL + commonPath}, status: http.StatusOK}
	case report.PathDirectCapable:
		return pathTarget{urls: []string{e.serverURL(serverExtra) + reroutedPath}, status: http.StatusOK}
	case report.PathSkewgateRerouted:
		return pathTarget{urls: []string{e.skewgateURL + reroutedPath}, status: http.StatusOK}
	case report.PathMVPRerouted:
		return pathTarget{urls: []string{e.serverURL(serverNew) + reroutedPath}, status: http.StatusOK}
	case report.PathSkewgateAPIs:
		return pathTarget{urls: []string{e.skewgateURL + apisPath}, headers: []string{accept}, status: http.StatusOK}
	case report.PathAPIServerAPIs:
		return pathTarget{urls: []string{e.serverURL(serverNew) + apisPath}, headers: []string{accept}, status: http.StatusOK}
	case report.PathSkewgateAPIs304:
		return pathTarget{urls: []string{e.skewgateURL + apisPath}, headers: []string{accept, "If-None-Match: " + e.skewgateETag},
			status: http.StatusNotModified}
	case report.PathAPIServerAPIs304:
		return pathTarget{urls: []string{e.serverURL(serverNew) + apisPath}, headers: []string{accept, "If-None-Match: " + e.apiserverETag},
			status: http.StatusNotModified}
	}
	panic("unknown macro path " + id)
}

// measure runs loadgen once for a path and, when the harness meters the
// process serving it, what that process spent.
func (e *macroEnv) measure(ctx context.Context, id string) (res *loadgen.Result, c report.Cost, measured bool, err error) {
	load := func() (int, error) {
		res, err = e.load(ctx, id, e.cfg.requests, e.cfg.duration)
		if err != nil {
			return 0, err
		}
		return e.cfg.warmup + res.Count, nil
	}
	m, measured := e.meters[id]
	if !measured {
		_, err = load()
		return res, c, false, err
	}
	c, err = e.measureCost(ctx, m, load)
	return res, c, true, err
}

// load runs loadgen for a path, bounded by requests and duration.
func (e *macroEnv) load(ctx context.Context, id string, requests int, duration time.Duration) (*loadgen.Result, error) {
	t := e.target(id)
	files := e.cluster.PKI().Files
	args := []string{"-ca-file", files.CACert, "-token-file", files.AdminToken,
		"-protocol", e.cfg.protocol, "-concurrency", strconv.Itoa(e.cfg.concurrency),
		"-requests", strconv.Itoa(requests), "-duration", duration.String(),
		"-warmup", strconv.Itoa(e.cfg.warmup), "-expect-status", strconv.Itoa(t.status)}
	for _, u := range t.urls {
		args = append(args, "-url", u)
	}
	for _, h := range t.headers {
		args = append(args, "-header", h)
	}
	ctx, cancel := context.WithTimeout(ctx, duration+2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, e.cfg.loadgen, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("loadgen: %w: %s", err, stderr.String())
	}
	var res loadgen.Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("loadgen output %q: %w", stdout.String(), err)
	}
	if res.OK == 0 {
		return nil, errors.New("no successful response: " + res.FirstError)
	}
	return &res, nil
}
