package e2e

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/controller"
	"github.com/skewgate/skewgate/host/internal/devpki"
	"github.com/skewgate/skewgate/host/testcluster"
)

// Identity modes of `skewgate serve --identity-mode`.
const (
	frontProxyIdentity  = "front-proxy"
	passthroughIdentity = "passthrough"
)

const (
	// gatewayPollInterval is short so that scenarios see health changes within a second.
	gatewayPollInterval = 500 * time.Millisecond
	// gatewayReadyTimeout covers compiling the plugin module on a busy machine.
	gatewayReadyTimeout = 2 * time.Minute
	gatewayStopGrace    = 15 * time.Second
	gatewayStarts       = 3
	gatewayLogTailLines = 200
)

// gatewayConfig is what a scenario chooses about its gateway.
type gatewayConfig struct {
	identityMode string
	// extraAPIServers are added to the cluster's servers in --apiserver.
	extraAPIServers []string
	// kubeconfig, when set, lets the controller discover servers (and their server IDs) from
	// the identity leases.
	kubeconfig string
	// extraArgs are appended to the command line (later flags win).
	extraArgs []string
}

// skewgate is one `skewgate serve` process in front of a test cluster.
type skewgate struct {
	// URL is the gateway, https://127.0.0.1:<port>; metricsURL its plain-HTTP operator listener.
	URL, metricsURL   string
	port, metricsPort int
	// ca signs the gateway's serving certificate; servingCAFile holds it for kubeconfigs.
	ca            *devpki.CA
	servingCAFile string
	// adminCertFile and adminKeyFile are the cluster's admin client certificate.
	adminCertFile, adminKeyFile string
	// The files the gateway reads its serving certificate and its front-proxy client certificate
	// from.
	servingCertFile, servingKeyFile         string
	proxyClientCertFile, proxyClientKeyFile string
	cluster                                 *testcluster.Cluster

	logPath string
	proc    *testcluster.Process
	// argv is the command line for a gateway port and a metrics port.
	argv func(gatewayPort, metricsPort int) []string
	// started is when the process was started; readyAfter how long it then took to be ready.
	started    time.Time
	readyAfter time.Duration
}

// startSkewgate runs `skewgate serve` in front of every server of cluster and waits until it
// has applied its first snapshot. The process is stopped, and its log printed if the test
// failed, when the test ends.
func startSkewgate(t *testing.T, cluster *testcluster.Cluster, cfg gatewayConfig) *skewgate {
	t.Helper()
	requireSkewgate(t)
	dir := t.TempDir()
	ca, err := devpki.NewCA("skewgate-e2e-gateway-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Serving("skewgate", "127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	servingCert, servingKey := writeCertificate(t, dir, "serving", serving.TLSCertificate())
	clusterCA := writeCA(t, dir, "cluster-ca", cluster.PKI().CA)
	frontProxyCert, frontProxyKey := writeCertificate(t, dir, "front-proxy-client", cluster.FrontProxyClientCertificate())
	g := &skewgate{ca: ca, servingCAFile: writeCA(t, dir, "gateway-ca", ca.Cert), cluster: cluster, logPath: filepath.Join(dir, "skewgate.log"),
		servingCertFile: servingCert, servingKeyFile: servingKey, proxyClientCertFile: frontProxyCert, proxyClientKeyFile: frontProxyKey}
	g.adminCertFile, g.adminKeyFile = writeCertificate(t, dir, "admin", cluster.PKI().Admin)

	if cfg.identityMode == "" {
		cfg.identityMode = frontProxyIdentity
	}
	args := []string{"serve",
		"--bind-address=127.0.0.1",
		"--tls-cert-file=" + servingCert,
		"--tls-private-key-file=" + servingKey,
		// The admin certificate is signed by the cluster CA; in front-proxy mode the gateway
		// verifies it and asserts its subject.
		"--client-ca-file=" + clusterCA,
		"--peer-ca-file=" + clusterCA,
		"--peer-server-name=" + testcluster.ServingServerName,
		"--proxy-client-cert-file=" + frontProxyCert,
		"--proxy-client-key-file=" + frontProxyKey,
		"--identity-mode=" + cfg.identityMode,
		"--wasm=" + skewgateBuild.wasm,
		"--compilation-cache-dir=" + skewgateBuild.compileCache,
		"--poll-interval=" + gatewayPollInterval.String(),
		"--shutdown-timeout=2s",
		// The scenarios read /debug/snapshot, and check reads /debug/requests.
		"--debug-handlers",
	}
	for _, s := range cluster.Servers() {
		args = append(args, "--apiserver="+s.URL)
	}
	for _, u := range cfg.extraAPIServers {
		args = append(args, "--apiserver="+u)
	}
	if cfg.kubeconfig != "" {
		args = append(args, "--kubeconfig="+cfg.kubeconfig)
	}

	g.launch(t, func(gatewayPort, metricsPort int) []string {
		return slices.Concat([]string{skewgateBuild.binary}, args,
			[]string{"--secure-port=" + strconv.Itoa(gatewayPort), "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metricsPort)},
			cfg.extraArgs)
	})
	t.Logf("skewgate serving at %s (metrics %s) in %s identity mode", g.URL, g.metricsURL, cfg.identityMode)
	return g
}

// launch starts the command line argv gives for two free ports (the gateway's and the
// metrics listener's), retrying with other ports if one was taken meanwhile, and waits until
// skewgate is ready. The process is stopped, and its log printed if the test failed, when the
// test ends.
func (g *skewgate) launch(t *testing.T, argv func(gatewayPort, metricsPort int) []string) {
	t.Helper()
	g.argv = argv
	for attempt := 1; ; attempt++ {
		ports, err := testcluster.FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		err = g.start(t, ports[0], ports[1])
		if err == nil {
			break
		}
		g.stop()
		if attempt == gatewayStarts || !g.proc.LogContains("address already in use") {
			t.Fatalf("skewgate did not become ready: %v\nlast lines of its log:\n%s", err, g.proc.LogTail(gatewayLogTailLines))
		}
	}
	t.Cleanup(func() {
		g.stop()
		if t.Failed() {
			t.Logf("last lines of the skewgate log:\n%s", g.proc.LogTail(gatewayLogTailLines))
		}
	})
}

// start runs the gateway's command line on the given ports and waits until it is ready.
func (g *skewgate) start(t *testing.T, gatewayPort, metricsPort int) error {
	t.Helper()
	g.port, g.metricsPort = gatewayPort, metricsPort
	g.URL = "https://127.0.0.1:" + strconv.Itoa(gatewayPort)
	g.metricsURL = "http://127.0.0.1:" + strconv.Itoa(metricsPort)
	g.started = time.Now()
	var err error
	if g.proc, err = testcluster.StartProcess("skewgate", g.logPath, g.argv(gatewayPort, metricsPort)); err != nil {
		t.Fatal(err)
	}
	if err := g.waitReady(); err != nil {
		return err
	}
	g.readyAfter = time.Since(g.started)
	return nil
}

// restartOnSamePorts starts the gateway again, once the previous process has exited, on the
// ports it had: what a restart in place (a static pod, a systemd unit) does.
func (g *skewgate) restartOnSamePorts(t *testing.T) {
	t.Helper()
	if exited, _ := g.proc.Exited(); !exited {
		t.Fatal("restartOnSamePorts: the previous skewgate process is still running")
	}
	if err := g.start(t, g.port, g.metricsPort); err != nil {
		t.Fatalf("skewgate did not start again on ports %d and %d: %v\nlast lines of its log:\n%s", g.port, g.metricsPort, err, g.proc.LogTail(gatewayLogTailLines))
	}
}

// waitReady polls /readyz, which answers 200 once the plugin accepted a first snapshot.
func (g *skewgate) waitReady() error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(gatewayReadyTimeout)
	last := "no answer"
	for {
		if exited, err := g.proc.Exited(); exited {
			return fmt.Errorf("skewgate exited: %v", err)
		}
		resp, err := do(client, http.MethodGet, g.metricsURL+"/readyz", nil, nil)
		switch {
		case err != nil:
			last = err.Error()
		case resp.status == http.StatusOK:
			return nil
		default:
			last = fmt.Sprintf("HTTP %d: %s", resp.status, bytes.TrimSpace(resp.body))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("/readyz not OK after %s (last: %s)", gatewayReadyTimeout, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop sends SIGTERM, waits for the drain, then SIGKILL. It signals only the process it started.
func (g *skewgate) stop() { g.proc.Stop(gatewayStopGrace) }

// client talks to the gateway, verifying it against its CA and presenting certs; it offers
// HTTP/2 as kubectl and client-go do.
func (g *skewgate) client(certs ...tls.Certificate) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: g.ca.Pool(), Certificates: certs, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2: true,
		},
	}
}

// adminClient authenticates at the gateway with the cluster's admin client certificate.
func (g *skewgate) adminClient() *http.Client { return g.client(g.cluster.PKI().Admin) }

// restConfig is a client-go configuration for the gateway as the admin client certificate.
func (g *skewgate) restConfig() *rest.Config {
	return &rest.Config{
		Host: g.URL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   g.ca.CertPEM(),
			CertFile: g.adminCertFile,
			KeyFile:  g.adminKeyFile,
		},
	}
}

// snapshotView is the snapshot the plugin runs with, as /debug/snapshot
// shows it.
type snapshotView struct{ *discovery.Snapshot }

// server returns the entry of the cluster's server at url, if the snapshot has one.
func (v snapshotView) server(serverURL string) (discovery.Server, bool) {
	name := clusterName(serverURL)
	for _, s := range v.Servers {
		if s.Cluster == name {
			return s, true
		}
	}
	return discovery.Server{}, false
}

// clusterName is the gateway's upstream name for the API server at url.
func clusterName(serverURL string) string {
	u, err := url.Parse(serverURL)
	if err != nil {
		return ""
	}
	return controller.ClusterName(u.Host)
}

// snapshot returns the snapshot the plugin currently runs with.
func (g *skewgate) snapshot() (snapshotView, error) {
	resp, err := do(&http.Client{Timeout: 5 * time.Second}, http.MethodGet, g.metricsURL+"/debug/snapshot", nil, nil)
	if err != nil {
		return snapshotView{}, err
	}
	if resp.status != http.StatusOK {
		return snapshotView{}, fmt.Errorf("/debug/snapshot: HTTP %d: %s", resp.status, resp.body)
	}
	snap, err := discovery.ParseSnapshot(resp.body)
	if err != nil {
		return snapshotView{}, fmt.Errorf("/debug/snapshot: %w", err)
	}
	return snapshotView{snap}, nil
}

// waitSnapshot waits until the applied snapshot satisfies check and returns it.
func (g *skewgate) waitSnapshot(t *testing.T, what string, timeout time.Duration, check func(snapshotView) error) snapshotView {
	t.Helper()
	var v snapshotView
	eventually(t, what, timeout, 100*time.Millisecond, func() error {
		var err error
		if v, err = g.snapshot(); err != nil {
			return err
		}
		return check(v)
	})
	return v
}

// serverState is what waitServerState expects of one server in the snapshot.
func serverState(srv testcluster.Server, healthy bool) func(snapshotView) error {
	return func(v snapshotView) error {
		s, ok := v.server(srv.URL)
		switch {
		case !ok:
			return fmt.Errorf("%s is not in snapshot generation %d", srv.Name, v.Generation)
		case s.Healthy != healthy:
			return fmt.Errorf("%s has healthy=%v in snapshot generation %d", srv.Name, s.Healthy, v.Generation)
		case healthy && s.Version != srv.Version:
			return fmt.Errorf("%s has version %s in snapshot generation %d, want %s", srv.Name, s.Version, v.Generation, srv.Version)
		}
		return nil
	}
}

// allHealthy checks that every server of the cluster is in the snapshot, healthy, at its version.
func allHealthy(cluster *testcluster.Cluster) func(snapshotView) error {
	return func(v snapshotView) error {
		var errs []error
		for _, s := range cluster.Servers() {
			errs = append(errs, serverState(s, true)(v))
		}
		return errors.Join(errs...)
	}
}

// metrics returns the gateway's Prometheus text.
func (g *skewgate) metrics(t *testing.T) string {
	t.Helper()
	resp := mustDo(t, &http.Client{Timeout: 5 * time.Second}, http.MethodGet, g.metricsURL+"/metrics", nil, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("/metrics: HTTP %d", resp.status)
	}
	return string(resp.body)
}
