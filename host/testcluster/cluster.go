package testcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
)

// Feature gates that the mixed version proxy needs. Before 1.36 the proxy gate is alpha and off.
const (
	gateMixedVersionProxy = "UnknownVersionInteroperabilityProxy"
	gateServerIdentity    = "APIServerIdentity"
)

// ServiceClusterIPRange is the service range every test server is configured with.
const ServiceClusterIPRange = "10.0.0.0/24"

// DefaultStartTimeout bounds how long Start and Restart wait for one server's readiness and
// identity lease.
const DefaultStartTimeout = 3 * time.Minute

const (
	serverStopGrace = 20 * time.Second
	etcdStopGrace   = 10 * time.Second
	logTailLines    = 40
	apiserverStarts = 3
)

// ServerSpec describes one kube-apiserver.
type ServerSpec struct {
	// Name is the server's host name inside its UTS namespace; the server ID derives from it.
	// Defaults to "apiserver-<index>". Must be unique within the cluster.
	Name string
	// Version is a pinned kube-apiserver version such as KubeVersion136.
	Version string
	// RuntimeConfig entries are joined into --runtime-config, e.g. "coordination.k8s.io/v1alpha2=true".
	RuntimeConfig []string
	// FeatureGates are passed to --feature-gates.
	FeatureGates map[string]bool
	// MVP enables the mixed version proxy: --peer-ca-file, --peer-advertise-ip/port and the gates
	// it depends on (required explicitly before 1.36, where the proxy gate is alpha).
	MVP bool
	// ShutdownDelay is --shutdown-delay-duration: after SIGTERM the server reports not ready but
	// keeps serving this long, so that load balancers move away first, as managed control planes
	// run it.
	ShutdownDelay time.Duration
	// ShutdownSendRetryAfter is --shutdown-send-retry-after: while the server drains, requests it
	// receives are answered 429 with Retry-After instead of being served.
	ShutdownSendRetryAfter bool
	// ExtraArgs are appended to the kube-apiserver command line.
	ExtraArgs []string
}

// Spec describes a cluster: one etcd and the listed kube-apiservers.
type Spec struct {
	Servers []ServerSpec
	// StartTimeout bounds the wait for each server; zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// OneCA makes the cluster CA also the request-header CA, as several installers do: the
	// front-proxy client certificate is then also a client certificate every server accepts on its
	// own, as user FrontProxyClientName.
	OneCA bool
	// AuditPolicy, when set, is an audit.k8s.io/v1 Policy (YAML) every server logs by, each to its
	// own file (Cluster.AuditLog).
	AuditPolicy string
}

// Server is a snapshot of one running (or stopped) kube-apiserver.
type Server struct {
	Index   int
	Name    string
	Version string
	// URL is https://127.0.0.1:<port>; the port survives restarts.
	URL string
	// ServerID is the identity lease name, computed from Name and checked against the lease.
	ServerID string
	// HolderIdentity is the identity lease holder seen after the latest start ("<ServerID>_<uuid>").
	HolderIdentity string
	// Args are the kube-apiserver flags of the latest start.
	Args []string
	// Running is false between Stop and the next Restart.
	Running bool
	// PID is the kube-apiserver process's ID since the latest start, for reading what it costs in /proc.
	PID int
}

type apiServer struct {
	spec ServerSpec
	port int
	info Server
	proc *Process
}

// Cluster is a running etcd plus kube-apiservers. All methods are safe for concurrent use.
type Cluster struct {
	log          Logger
	dir          string
	pki          *PKI
	startTimeout time.Duration

	etcd    *Process
	etcdURL string

	// auditPolicyFile is empty when the servers keep no audit log.
	auditPolicyFile string

	adminKubeconfig, tokenKubeconfig string

	mu      sync.Mutex
	servers []*apiServer
	closed  bool
}

var hostnamePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

func (s Spec) validate() error {
	if len(s.Servers) == 0 {
		return errors.New("spec lists no servers")
	}
	seen := map[string]bool{}
	for i, srv := range s.Servers {
		if !hostnamePattern.MatchString(srv.Name) {
			return fmt.Errorf("server %d: name %q is not a valid host name label", i, srv.Name)
		}
		if seen[srv.Name] {
			return fmt.Errorf("server %d: duplicate name %q", i, srv.Name)
		}
		seen[srv.Name] = true
		if _, err := parseReleaseVersion(srv.Version); err != nil {
			return fmt.Errorf("server %d: %w", i, err)
		}
		if srv.MVP {
			for _, gate := range []string{gateMixedVersionProxy, gateServerIdentity} {
				if on, set := srv.FeatureGates[gate]; set && !on {
					return fmt.Errorf("server %d: MVP needs feature gate %s, which the spec turns off", i, gate)
				}
			}
		}
	}
	return nil
}

// Start builds or finds the binaries, generates a PKI, starts etcd and every server (in parallel)
// and waits until each serves /readyz and has written its identity lease. ctx bounds only the
// start-up; the processes live until Close. On failure everything started is torn down and the
// failing process's log tail is written to log.
func Start(ctx context.Context, log Logger, spec Spec) (_ *Cluster, err error) {
	spec.Servers = slices.Clone(spec.Servers)
	for i := range spec.Servers {
		if spec.Servers[i].Name == "" {
			spec.Servers[i].Name = "apiserver-" + strconv.Itoa(i)
		}
	}
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if spec.StartTimeout == 0 {
		spec.StartTimeout = DefaultStartTimeout
	}

	// Binaries first: a build failure must not leave half a cluster behind.
	etcdBinary, err := EnsureBinary(ctx, log, Etcd, EtcdVersion)
	if err != nil {
		return nil, err
	}
	binaries := map[string]string{}
	for _, srv := range spec.Servers {
		if binaries[srv.Version] != "" {
			continue
		}
		if binaries[srv.Version], err = EnsureBinary(ctx, log, KubeAPIServer, srv.Version); err != nil {
			return nil, err
		}
	}

	dir, err := os.MkdirTemp("", "skewgate-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{log: log, dir: dir, startTimeout: spec.StartTimeout}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	pkiDir := filepath.Join(dir, "pki")
	if err := os.Mkdir(pkiDir, 0o700); err != nil {
		return nil, err
	}
	if c.pki, err = newPKI(pkiDir, spec.OneCA); err != nil {
		return nil, err
	}
	if spec.AuditPolicy != "" {
		c.auditPolicyFile = filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(c.auditPolicyFile, []byte(spec.AuditPolicy), 0o600); err != nil {
			return nil, err
		}
	}
	if c.etcd, c.etcdURL, err = startEtcd(ctx, log, etcdBinary, dir, spec.StartTimeout); err != nil {
		return nil, err
	}

	ports, err := FreePorts(len(spec.Servers))
	if err != nil {
		return nil, err
	}
	for i, srvSpec := range spec.Servers {
		c.servers = append(c.servers, &apiServer{spec: srvSpec, port: ports[i], info: Server{
			Index:    i,
			Name:     srvSpec.Name,
			Version:  srvSpec.Version,
			ServerID: ServerID(srvSpec.Name),
		}})
	}
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i, s := range c.servers {
		wg.Go(func() { errs[i] = c.launch(ctx, s, binaries[s.spec.Version], true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.writeKubeconfigs(); err != nil {
		return nil, err
	}
	for _, s := range c.servers {
		log.Logf("kube-apiserver %s %s ready at %s as %s", s.info.Name, s.info.Version, s.info.URL, s.info.ServerID)
	}
	return c, nil
}

// launch starts s and waits for readiness and a fresh identity lease. With newPortOnConflict a
// port taken by someone else is replaced; restarts keep their port so the URL stays stable.
func (c *Cluster) launch(ctx context.Context, s *apiServer, binary string, newPortOnConflict bool) error {
	previousHolder := s.info.HolderIdentity
	logPath := filepath.Join(c.dir, s.spec.Name+".log")
	for attempt := 1; ; attempt++ {
		args := c.apiserverArgs(s)
		// The server ID is derived from the host name, so each server gets its own UTS namespace
		// and host name. unshare and sh both exec in place, keeping one process per server.
		argv := append([]string{"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, s.spec.Name, binary}, args...)
		proc, err := StartProcess(s.spec.Name, logPath, argv)
		if err != nil {
			return err
		}
		s.proc = proc
		s.info.PID = proc.PID()
		s.info.URL = "https://127.0.0.1:" + strconv.Itoa(s.port)
		s.info.Args = args
		s.info.Running = true
		err = c.waitReady(ctx, s)
		if err == nil {
			holder, err := c.waitIdentityLease(ctx, s, previousHolder)
			if err != nil {
				return c.startFailure(s, err)
			}
			s.info.HolderIdentity = holder
			return nil
		}
		proc.Stop(5 * time.Second)
		s.info.Running = false
		if !newPortOnConflict || attempt == apiserverStarts || !proc.LogContains(addressInUse) {
			return c.startFailure(s, err)
		}
		ports, perr := FreePorts(1)
		if perr != nil {
			return perr
		}
		c.log.Logf("kube-apiserver %s: port %d was taken, retrying on %d", s.spec.Name, s.port, ports[0])
		s.port = ports[0]
	}
}

func (c *Cluster) startFailure(s *apiServer, err error) error {
	c.log.Logf("kube-apiserver %s %s failed to start; last lines of its log:\n%s", s.spec.Name, s.spec.Version, s.proc.LogTail(logTailLines))
	return fmt.Errorf("kube-apiserver %s %s: %w", s.spec.Name, s.spec.Version, err)
}

func (c *Cluster) apiserverArgs(s *apiServer) []string {
	f := c.pki.Files
	port := strconv.Itoa(s.port)
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + port,
		"--tls-cert-file=" + f.ServingCert,
		"--tls-private-key-file=" + f.ServingKey,
		"--client-ca-file=" + f.CACert,
		"--requestheader-client-ca-file=" + f.FrontProxyCACert,
		"--requestheader-allowed-names=" + FrontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
	}
	// kube-apiserver reads a UID header since 1.32; older ones refuse the flag.
	if v, err := parseReleaseVersion(s.spec.Version); err != nil || v.major > 1 || v.minor >= 32 {
		args = append(args, "--requestheader-uid-headers=X-Remote-Uid")
	}
	args = append(args,
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file="+f.FrontProxyClientCert,
		"--proxy-client-key-file="+f.FrontProxyClientKey,
		"--authorization-mode=RBAC",
		"--token-auth-file="+f.Tokens,
		"--service-account-issuer=https://"+ServingServerName,
		"--service-account-key-file="+f.ServiceAccountPub,
		"--service-account-signing-key-file="+f.ServiceAccountKey,
		"--service-cluster-ip-range="+ServiceClusterIPRange,
		// Since 1.37 the endpoint reconciler of the "kubernetes" Service rejects a loopback advertise
		// address. Nothing here needs that Service; the peer endpoint leases used by the mixed version
		// proxy come from a separate reconciler.
		"--endpoint-reconciler-type=none",
		// Exec, attach, port-forward and logs reach kubelets (Kubelet) over verified TLS, at the
		// node address kubeadm prefers.
		"--kubelet-client-certificate="+f.KubeletClientCert,
		"--kubelet-client-key="+f.KubeletClientKey,
		"--kubelet-certificate-authority="+f.CACert,
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
	)
	gates := maps.Clone(s.spec.FeatureGates)
	if s.spec.MVP {
		if gates == nil {
			gates = map[string]bool{}
		}
		gates[gateMixedVersionProxy] = true
		gates[gateServerIdentity] = true
		args = append(args,
			"--peer-ca-file="+f.CACert,
			"--peer-advertise-ip=127.0.0.1",
			"--peer-advertise-port="+port,
		)
	}
	if len(gates) > 0 {
		var kv []string
		for _, name := range slices.Sorted(maps.Keys(gates)) {
			kv = append(kv, name+"="+strconv.FormatBool(gates[name]))
		}
		args = append(args, "--feature-gates="+strings.Join(kv, ","))
	}
	if len(s.spec.RuntimeConfig) > 0 {
		args = append(args, "--runtime-config="+strings.Join(s.spec.RuntimeConfig, ","))
	}
	if s.spec.ShutdownDelay > 0 {
		args = append(args, "--shutdown-delay-duration="+s.spec.ShutdownDelay.String())
	}
	if s.spec.ShutdownSendRetryAfter {
		args = append(args, "--shutdown-send-retry-after=true")
	}
	if c.auditPolicyFile != "" {
		args = append(args, "--audit-policy-file="+c.auditPolicyFile, "--audit-log-path="+c.auditLogPath(s))
	}
	return append(args, s.spec.ExtraArgs...)
}

func (c *Cluster) auditLogPath(s *apiServer) string {
	return filepath.Join(c.dir, s.spec.Name+"-audit.log")
}

// stopGrace is how long a server may take to exit after SIGTERM: its shutdown delay, then the
// drain.
func (s *apiServer) stopGrace() time.Duration { return s.spec.ShutdownDelay + serverStopGrace }

// adminHTTPClient authenticates as the admin certificate and trusts only the cluster CA.
func (c *Cluster) adminHTTPClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: c.AdminTLSConfig(), DisableCompression: true},
	}
}

func (c *Cluster) waitReady(ctx context.Context, s *apiServer) error {
	ctx, cancel := context.WithTimeout(ctx, c.startTimeout)
	defer cancel()
	client := c.adminHTTPClient()
	defer client.CloseIdleConnections()
	lastStatus := "no response"
	for {
		if done, err := s.proc.Exited(); done {
			return fmt.Errorf("exited before becoming ready: %v", err)
		}
		status, body, err := get(ctx, client, s.info.URL+"/readyz")
		switch {
		case err != nil:
			lastStatus = err.Error()
		case status == http.StatusOK:
			return nil
		default:
			lastStatus = fmt.Sprintf("HTTP %d: %s", status, LastLines(body, 8))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("/readyz not OK after %s (last: %s)", c.startTimeout, lastStatus)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitIdentityLease waits for the server's identity lease in kube-system to name a holder other
// than previousHolder, and checks that the lease confirms the computed server ID and host name.
func (c *Cluster) waitIdentityLease(ctx context.Context, s *apiServer, previousHolder string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.startTimeout)
	defer cancel()
	client := c.adminHTTPClient()
	defer client.CloseIdleConnections()
	url := s.info.URL + "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/" + s.info.ServerID
	last := "no response"
	for {
		status, body, err := get(ctx, client, url)
		switch {
		case err != nil:
			last = err.Error()
		case status != http.StatusOK:
			last = fmt.Sprintf("HTTP %d", status)
		default:
			var lease coordinationv1.Lease
			if err := json.Unmarshal(body, &lease); err != nil {
				return "", fmt.Errorf("decoding identity lease %s: %w", s.info.ServerID, err)
			}
			if got := lease.Labels["kubernetes.io/hostname"]; got != s.spec.Name {
				return "", fmt.Errorf("identity lease %s names host %q, want %q", s.info.ServerID, got, s.spec.Name)
			}
			holder := ""
			if lease.Spec.HolderIdentity != nil {
				holder = *lease.Spec.HolderIdentity
			}
			if strings.HasPrefix(holder, s.info.ServerID+"_") && holder != previousHolder {
				return holder, nil
			}
			last = fmt.Sprintf("holder %q", holder)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no fresh identity lease kube-system/%s after %s (last: %s)", s.info.ServerID, c.startTimeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func get(ctx context.Context, client *http.Client, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// Servers returns a snapshot of every server, in spec order.
func (c *Cluster) Servers() []Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Server, len(c.servers))
	for i, s := range c.servers {
		out[i] = s.info
		out[i].Args = slices.Clone(s.info.Args)
	}
	return out
}

// Server returns a snapshot of server i.
func (c *Cluster) Server(i int) Server {
	return c.Servers()[i]
}

// Stop terminates server i (gracefully, so it removes its peer endpoint lease) and leaves it
// stopped until Restart.
func (c *Cluster) Stop(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("cluster is closed")
	}
	s := c.servers[i]
	if s.proc != nil {
		s.proc.Stop(s.stopGrace())
	}
	s.info.Running = false
	return nil
}

// Restart stops server i if it is running and starts it again at version (empty keeps the
// current version) on the same port and host name, so URL and ServerID are unchanged. It returns
// once the new process is ready and has taken over its identity lease.
func (c *Cluster) Restart(ctx context.Context, i int, version string) error {
	return c.restart(ctx, i, func(spec *ServerSpec) {
		if version != "" {
			spec.Version = version
		}
	})
}

// RestartAs is Restart with a new specification for server i, as an upgrade that also changes a
// server's flags does; its Name stays.
func (c *Cluster) RestartAs(ctx context.Context, i int, spec ServerSpec) error {
	return c.restart(ctx, i, func(s *ServerSpec) {
		spec.Name = s.Name
		*s = spec
	})
}

func (c *Cluster) restart(ctx context.Context, i int, change func(*ServerSpec)) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("cluster is closed")
	}
	s := c.servers[i]
	spec := s.spec
	change(&spec)
	version := spec.Version
	if _, err := parseReleaseVersion(version); err != nil {
		return err
	}
	binary, err := EnsureBinary(ctx, c.log, KubeAPIServer, version)
	if err != nil {
		return err
	}
	if s.proc != nil {
		s.proc.Stop(s.stopGrace())
	}
	s.info.Running = false
	s.spec = spec
	s.info.Version = version
	if err := c.launch(ctx, s, binary, false); err != nil {
		return err
	}
	c.log.Logf("kube-apiserver %s restarted as %s at %s", s.info.Name, version, s.info.URL)
	return nil
}

// Close stops every server and etcd and removes the cluster's temporary directory. It only signals
// processes this cluster started. Calling it again does nothing.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var wg sync.WaitGroup
	for _, s := range c.servers {
		if s.proc != nil {
			wg.Go(func() { s.proc.Stop(s.stopGrace()) })
		}
		s.info.Running = false
	}
	wg.Wait()
	if c.etcd != nil {
		c.etcd.Stop(etcdStopGrace)
	}
	return os.RemoveAll(c.dir)
}

// Pause stops server i with SIGSTOP: it keeps its connections and its port but answers nothing,
// like a server that hangs, until Resume.
func (c *Cluster) Pause(i int) error { return c.signal(i, syscall.SIGSTOP) }

// Resume continues server i after Pause.
func (c *Cluster) Resume(i int) error { return c.signal(i, syscall.SIGCONT) }

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("cluster is closed")
	}
	s := c.servers[i]
	if s.proc == nil || !s.info.Running {
		return fmt.Errorf("kube-apiserver %s is not running", s.spec.Name)
	}
	return s.proc.Signal(sig)
}

// AuditLog is the path of server i's audit log (JSON lines), or "" without Spec.AuditPolicy.
func (c *Cluster) AuditLog(i int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.auditPolicyFile == "" {
		return ""
	}
	return c.auditLogPath(c.servers[i])
}

// Dir is the cluster's temporary directory (PKI, logs, kubeconfigs, etcd data).
func (c *Cluster) Dir() string { return c.dir }

// PKI returns the cluster's credentials.
func (c *Cluster) PKI() *PKI { return c.pki }

// CAPool trusts the cluster CA, which signs every server's serving certificate.
func (c *Cluster) CAPool() *x509.CertPool { return c.pki.CAPool() }

// FrontProxyClientCertificate is the certificate servers accept X-Remote-* identities from.
func (c *Cluster) FrontProxyClientCertificate() tls.Certificate { return c.pki.FrontProxyClient }

// AdminTLSConfig verifies servers as ServingServerName against the cluster CA and presents the
// admin (system:masters) client certificate.
func (c *Cluster) AdminTLSConfig() *tls.Config {
	return &tls.Config{
		RootCAs:      c.pki.CAPool(),
		ServerName:   ServingServerName,
		Certificates: []tls.Certificate{c.pki.Admin},
		MinVersion:   tls.VersionTLS12,
	}
}

// AdminRESTConfig is a client-go configuration for server i as the admin certificate.
func (c *Cluster) AdminRESTConfig(i int) *rest.Config {
	return &rest.Config{
		Host: c.Server(i).URL,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: ServingServerName,
			CAData:     c.pki.caPEM,
			CertData:   c.pki.adminCertPEM,
			KeyData:    c.pki.adminKeyPEM,
		},
	}
}

// AdminKubeconfig is the path of a kubeconfig with one context per server (named after it),
// authenticating with the admin client certificate.
func (c *Cluster) AdminKubeconfig() string { return c.adminKubeconfig }

// AdminTokenKubeconfig is like AdminKubeconfig but authenticates with the admin bearer token.
func (c *Cluster) AdminTokenKubeconfig() string { return c.tokenKubeconfig }

// EtcdURL is the etcd client URL.
func (c *Cluster) EtcdURL() string { return c.etcdURL }
