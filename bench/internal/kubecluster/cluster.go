// Package kubecluster runs the benchmark's control plane: one etcd and
// kube-apiservers of chosen versions on loopback, with a generated PKI, each
// server in its own UTS namespace so that its host name, and with it its
// server ID, is its own (two servers sharing an ID break upstream's mixed
// version proxy). Binaries come from the repository's pinned builds, cached in
// the user cache by host/internal/testcluster/cmd/kubebin.
package kubecluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Binaries are the executables a cluster runs.
type Binaries struct {
	Etcd string
	// KubeAPIServer maps a version (v1.36.3) to its binary.
	KubeAPIServer map[string]string
}

// EnsureBinaries builds or finds the pinned binaries by running kubebin from
// the repository at repoRoot, which prints "component version path" per
// binary. Its progress goes to progress.
func EnsureBinaries(ctx context.Context, repoRoot, etcdVersion string, kubeVersions []string, progress io.Writer) (Binaries, error) {
	only := []string{"etcd@" + etcdVersion}
	for _, v := range kubeVersions {
		only = append(only, "kube-apiserver@"+v)
	}
	cmd := exec.CommandContext(ctx, "go", "run", "./host/internal/testcluster/cmd/kubebin", "-only", strings.Join(only, ","))
	cmd.Dir = repoRoot
	cmd.Stderr = progress
	out, err := cmd.Output()
	if err != nil {
		return Binaries{}, fmt.Errorf("kubebin: %w", err)
	}
	return parseKubebin(out, etcdVersion, kubeVersions)
}

func parseKubebin(out []byte, etcdVersion string, kubeVersions []string) (Binaries, error) {
	bins := Binaries{KubeAPIServer: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			return Binaries{}, fmt.Errorf("kubebin: unexpected line %q", sc.Text())
		}
		switch component, version, path := fields[0], fields[1], fields[2]; {
		case component == "etcd" && version == etcdVersion:
			bins.Etcd = path
		case component == "kube-apiserver":
			bins.KubeAPIServer[version] = path
		}
	}
	if bins.Etcd == "" {
		return Binaries{}, fmt.Errorf("kubebin did not report etcd %s", etcdVersion)
	}
	for _, v := range kubeVersions {
		if bins.KubeAPIServer[v] == "" {
			return Binaries{}, fmt.Errorf("kubebin did not report kube-apiserver %s", v)
		}
	}
	return bins, nil
}

// ServerSpec describes one kube-apiserver.
type ServerSpec struct {
	// Name is the server's host name, from which its server ID derives.
	Name    string
	Version string
	// MVP turns on upstream's mixed version proxy: the feature gates, the peer
	// CA and the peer address.
	MVP bool
	// RuntimeConfig entries are joined into --runtime-config.
	RuntimeConfig []string
}

// Server is a running kube-apiserver.
type Server struct {
	ServerSpec
	// URL is https://127.0.0.1:<port>.
	URL  string
	proc *Process
}

// Cluster is a running etcd and its kube-apiservers.
type Cluster struct {
	Dir     string
	PKI     *PKI
	Servers []*Server
	etcd    *Process
}

const (
	startTimeout = 3 * time.Minute
	stopGrace    = 20 * time.Second
	logTailLines = 30
	startRetries = 3
)

// Start generates the PKI, starts etcd and then every server in parallel, and
// returns once each answers /readyz. On failure everything started is stopped
// and the error carries the failing process's log tail.
func Start(ctx context.Context, bins Binaries, specs []ServerSpec) (_ *Cluster, err error) {
	dir, err := os.MkdirTemp("", "skewgate-bench-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	pkiDir := filepath.Join(dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		return nil, err
	}
	if c.PKI, err = newPKI(pkiDir); err != nil {
		return nil, err
	}
	for _, spec := range specs {
		if bins.KubeAPIServer[spec.Version] == "" {
			return nil, fmt.Errorf("no kube-apiserver %s binary", spec.Version)
		}
		c.Servers = append(c.Servers, &Server{ServerSpec: spec})
	}
	etcdURL, err := c.startEtcd(ctx, bins.Etcd)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Go(func() { errs[i] = c.startServer(ctx, s, bins.KubeAPIServer[s.Version], etcdURL) })
	}
	wg.Wait()
	return c, errors.Join(errs...)
}

func (c *Cluster) startEtcd(ctx context.Context, binary string) (string, error) {
	var lastErr error
	for attempt := 1; attempt <= startRetries; attempt++ {
		ports, err := FreePorts(2)
		if err != nil {
			return "", err
		}
		clientURL, peerURL := "http://"+LoopbackAddress(ports[0]), "http://"+LoopbackAddress(ports[1])
		proc, err := StartProcess("etcd", filepath.Join(c.Dir, "etcd.log"), []string{binary,
			"--name=bench",
			"--data-dir=" + filepath.Join(c.Dir, "etcd-data-"+strconv.Itoa(attempt)),
			"--listen-client-urls=" + clientURL, "--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=bench=" + peerURL, "--initial-cluster-state=new",
			// Benchmark data is thrown away; fsync latency would only add noise.
			"--unsafe-no-fsync", "--log-level=warn",
		}, nil)
		if err != nil {
			return "", err
		}
		c.etcd = proc
		plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
		if lastErr = waitFor(ctx, proc, plain, clientURL+"/health", ""); lastErr == nil {
			return clientURL, nil
		}
		proc.Stop(5 * time.Second)
		if !strings.Contains(proc.Tail(logTailLines), "address already in use") {
			break
		}
	}
	return "", fmt.Errorf("etcd: %w\n%s", lastErr, c.etcd.Tail(logTailLines))
}

func (c *Cluster) startServer(ctx context.Context, s *Server, binary, etcdURL string) error {
	var lastErr error
	for attempt := 1; attempt <= startRetries; attempt++ {
		ports, err := FreePorts(1)
		if err != nil {
			return err
		}
		s.URL = "https://" + LoopbackAddress(ports[0])
		// unshare and sh exec in place: the server runs under its own host name
		// and is still the process this harness started.
		argv := append([]string{"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, s.Name, binary},
			c.serverArgs(s, ports[0], etcdURL)...)
		if s.proc, err = StartProcess(s.Name, filepath.Join(c.Dir, s.Name+".log"), argv, nil); err != nil {
			return err
		}
		if lastErr = waitFor(ctx, s.proc, c.Client(), s.URL+"/readyz", c.PKI.AdminToken); lastErr == nil {
			return nil
		}
		s.proc.Stop(5 * time.Second)
		if !strings.Contains(s.proc.Tail(logTailLines), "address already in use") {
			break
		}
	}
	return fmt.Errorf("kube-apiserver %s %s: %w\n%s", s.Name, s.Version, lastErr, s.proc.Tail(logTailLines))
}

func (c *Cluster) serverArgs(s *Server, port int, etcdURL string) []string {
	p := c.PKI
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + p.ServingCert,
		"--tls-private-key-file=" + p.ServingKey,
		"--client-ca-file=" + p.CA,
		"--requestheader-client-ca-file=" + p.FrontProxyCA,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p.FrontProxyClientCert,
		"--proxy-client-key-file=" + p.FrontProxyClientKey,
		"--authorization-mode=RBAC",
		"--token-auth-file=" + p.Tokens,
		"--service-account-issuer=https://" + ServingServerName,
		"--service-account-key-file=" + p.ServiceAccountPub,
		"--service-account-signing-key-file=" + p.ServiceAccountKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		// The kubernetes Service's endpoint reconciler rejects a loopback
		// advertise address; nothing here needs that Service.
		"--endpoint-reconciler-type=none",
	}
	if s.MVP {
		args = append(args,
			"--feature-gates=APIServerIdentity=true,UnknownVersionInteroperabilityProxy=true",
			"--peer-ca-file="+p.CA,
			"--peer-advertise-ip=127.0.0.1",
			"--peer-advertise-port="+strconv.Itoa(port),
		)
	}
	if len(s.RuntimeConfig) > 0 {
		args = append(args, "--runtime-config="+strings.Join(s.RuntimeConfig, ","))
	}
	return args
}

// waitFor polls url until it answers 200, the process exits, or the start
// timeout passes.
func waitFor(ctx context.Context, proc *Process, client *http.Client, url, token string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	last := "no answer"
	for {
		if exited, err := proc.Exited(); exited {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready (last: %s): %w", url, last, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Client verifies the servers against the cluster CA as ServingServerName.
func (c *Cluster) Client() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:    &tls.Config{RootCAs: c.CAPool(), ServerName: ServingServerName, MinVersion: tls.VersionTLS12},
		DisableCompression: true,
	}}
}

// CAPool holds the cluster CA.
func (c *Cluster) CAPool() *x509.CertPool {
	pool := x509.NewCertPool()
	if raw, err := os.ReadFile(c.PKI.CA); err == nil {
		pool.AppendCertsFromPEM(raw)
	}
	return pool
}

// Close stops every server, then etcd, and removes the cluster directory.
func (c *Cluster) Close() error {
	var wg sync.WaitGroup
	for _, s := range c.Servers {
		if s.proc != nil {
			wg.Go(func() { s.proc.Stop(stopGrace) })
		}
	}
	wg.Wait()
	if c.etcd != nil {
		c.etcd.Stop(stopGrace)
	}
	return os.RemoveAll(c.Dir)
}
