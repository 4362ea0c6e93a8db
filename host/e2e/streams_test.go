package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/skewgate/skewgate/host/testcluster"
)

const (
	streamsNamespace = "skewgate-streams"
	streamsNode      = "stand-in-node"
	// streamRoundTimeout bounds one round trip on one stream.
	streamRoundTimeout = 30 * time.Second
	// streamEndTimeout bounds how long a stream may go on once the API server carrying it was
	// restarted (Restart returns after the old process exited).
	streamEndTimeout = 30 * time.Second
	// throughputBytes is what each port-forward of the throughput comparison echoes.
	throughputBytes = 32 << 20
	firstByteRuns   = 5
)

// streamsAuditPolicy audits the requests the stream scenarios make: every stream subresource of
// their pods, and watches of the resource only the 1.36 servers serve.
const streamsAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  namespaces: ["` + streamsNamespace + `"]
  resources:
  - group: ""
    resources: ["pods/exec", "pods/attach", "pods/portforward", "pods/log"]
- level: Metadata
  verbs: ["watch"]
  resources:
  - group: admissionregistration.k8s.io
    resources: ["mutatingadmissionpolicies"]
- level: None
`

// streamTransport is how kubectl carries a stream.
type streamTransport struct {
	name string
	env  []string
	// verb is how the API server audits the request: a WebSocket upgrade is a GET, an SPDY one a
	// POST (create).
	verb string
}

// kubectl 1.36 upgrades exec, attach and port-forward to WebSocket by default and to SPDY when
// told; both are HTTP/1.1 upgrades, which HTTP/2 cannot carry, so kubectl never offers HTTP/2 for
// them.
var upgradeTransports = []streamTransport{
	{name: "WebSocket", verb: "get"},
	{name: "SPDY", env: []string{"KUBECTL_REMOTE_COMMAND_WEBSOCKETS=false", "KUBECTL_PORT_FORWARD_WEBSOCKETS=false"}, verb: "create"},
}

// A followed log is a plain streamed response: HTTP/2 by default (the gateway offers it), HTTP/1.1
// with client-go's DISABLE_HTTP2. http2debug makes kubectl's HTTP/2 transport log its connections.
var logTransports = []streamTransport{
	{name: "HTTP/2", env: []string{"GODEBUG=http2debug=1"}, verb: "get"},
	{name: "HTTP/1.1", env: []string{"GODEBUG=http2debug=1", "DISABLE_HTTP2=1"}, verb: "get"},
}

// checkTransport tells from kubectl's log (-v=4) that the stream went as transport says.
func checkTransport(kind, transport, stderr string) error {
	type evidence struct{ present, absent []string }
	want := map[string]evidence{
		"exec WebSocket":         {[]string{`"Subprotocol negotiated" protocol="v5.channel.k8s.io"`}, []string{"RemoteCommand fallback"}},
		"exec SPDY":              {nil, []string{"Subprotocol negotiated"}},
		"port-forward WebSocket": {[]string{"negotiated protocol: portforward.k8s.io"}, []string{"fallback to secondary dialer"}},
		"port-forward SPDY":      {nil, []string{"negotiated protocol"}},
		"logs HTTP/2":            {[]string{"http2: Transport creating client conn"}, nil},
		"logs HTTP/1.1":          {[]string{"HTTP2 has been explicitly disabled"}, []string{"http2: Transport creating client conn"}},
	}
	if kind == "attach" {
		kind = "exec"
	}
	ev, ok := want[kind+" "+transport]
	if !ok {
		return fmt.Errorf("no evidence known for %s over %s", kind, transport)
	}
	for _, s := range ev.present {
		if !strings.Contains(stderr, s) {
			return fmt.Errorf("kubectl's log lacks %q", s)
		}
	}
	for _, s := range ev.absent {
		if strings.Contains(stderr, s) {
			return fmt.Errorf("kubectl's log has %q", s)
		}
	}
	return nil
}

// streamCredential is how a stream's kubeconfig authenticates at skewgate.
type streamCredential struct {
	name, short string
	user        kubeconfigUser
}

// streamsScenario is the cluster, kubelet and gateway every stream scenario shares.
type streamsScenario struct {
	cluster *testcluster.Cluster
	kubelet *testcluster.Kubelet
	gw      *skewgate
	kubectl string
	creds   []streamCredential
}

// TestStreamsThroughSkewgateKeepTheCallersIdentityAndEndWithTheirAPIServer runs kubectl exec,
// attach, port-forward and logs -f through skewgate to a stand-in kubelet behind the skewed
// cluster's real API servers, with a client-certificate and a token kubeconfig, over each transport
// kubectl offers, and a WebSocket watch of a resource the 1.35 server lacks, which skewgate
// re-routes. Every stream keeps the caller's identity (the API servers' audit logs), survives a
// snapshot change and ends, seen by its client, when the API server carrying it restarts.
func TestStreamsThroughSkewgateKeepTheCallersIdentityAndEndWithTheirAPIServer(t *testing.T) {
	besideOtherScenariosWithOwnClusters(t)
	spec := skewedSpec("streams")
	spec.AuditPolicy = streamsAuditPolicy
	cluster := startCluster(t, spec)
	requireSkew(t, cluster)
	kubectlBinary := ensureKubectl(t)
	kubelet, err := cluster.StartKubelet(t.Context(), streamsNode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kubelet.Close() })
	gw := startSkewgate(t, cluster, gatewayConfig{identityMode: frontProxyIdentity})
	gw.waitSnapshot(t, "every server healthy in the gateway's snapshot", gatewayReadyTimeout, allHealthy(cluster))
	s := &streamsScenario{cluster: cluster, kubelet: kubelet, gw: gw, kubectl: kubectlBinary, creds: []streamCredential{
		{"client certificate", "cert", kubeconfigUser{ClientCertificate: gw.adminCertFile, ClientKey: gw.adminKeyFile}},
		{"token", "token", kubeconfigUser{Token: cluster.PKI().AdminToken}},
	}}

	t.Run("exec and attach end with their command's output and exit code", s.oneShot)
	t.Run("exec's first byte through skewgate and directly", s.firstByte)
	t.Run("port-forward echoes 32 MiB intact through skewgate and directly", s.throughput)
	t.Run("every stream survives a snapshot change and ends with its API server", s.survive)
	t.Run("the kubelet served the API servers alone", func(t *testing.T) {
		requests := kubelet.Requests()
		if len(requests) == 0 {
			t.Fatal("the kubelet received no request")
		}
		for _, r := range requests {
			if r.Client != testcluster.KubeletClientName {
				t.Errorf("the kubelet received %s %s from %q, want only the API servers' %s", r.Method, r.Path, r.Client, testcluster.KubeletClientName)
			}
		}
	})
}

func (s *streamsScenario) runPod(t *testing.T, name string) {
	t.Helper()
	if err := s.kubelet.RunPod(t.Context(), streamsNamespace, name); err != nil {
		t.Fatalf("running pod %s: %v", name, err)
	}
}

// podRequests selects the audited requests for subresource of pod.
func podRequests(pod, subresource string) func(auditEvent) bool {
	return func(ev auditEvent) bool {
		r := ev.ObjectRef
		return r.Resource == "pods" && r.Namespace == streamsNamespace && r.Name == pod && r.Subresource == subresource
	}
}

// newAuditedRequest waits for the one request match selects that is not in before.
func (s *streamsScenario) newAuditedRequest(t *testing.T, what string, before map[string]auditedRequest, match func(auditEvent) bool) auditedRequest {
	t.Helper()
	return waitAudited(t, s.cluster, what, func(ev auditEvent) bool {
		_, old := before[ev.AuditID]
		return !old && match(ev)
	})
}

func (s *streamsScenario) audited(t *testing.T, match func(auditEvent) bool) map[string]auditedRequest {
	t.Helper()
	requests, err := auditedRequests(s.cluster, match)
	if err != nil {
		t.Fatal(err)
	}
	return requests
}

// runKubectl runs kubectl to its end with stdin as its standard input.
func runKubectl(t *testing.T, k *kubectl, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), kubectlTimeout)
	defer cancel()
	cmd := k.command(ctx, args...)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kubectl %s did not end within %s", strings.Join(args, " "), kubectlTimeout)
	}
	return out.String(), errOut.String(), exitCode(err)
}

func (s *streamsScenario) oneShot(t *testing.T) {
	const pod = "oneshot"
	s.runPod(t, pod)
	for _, cred := range s.creds {
		k := newKubectl(t, s.kubectl, s.gw, cred.user)
		for _, tr := range upgradeTransports {
			t.Run(cred.name+" over "+tr.name, func(t *testing.T) {
				for _, tc := range []struct {
					kind, subresource string
					args              []string
					stdin             string
					stderr            string
					code              int
				}{
					{"exec", "exec", []string{"exec", "-i", "-n", streamsNamespace, pod, "--", "sh", "-c", "cat; echo to stderr >&2; exit 3"}, "line one\nline two\n", "to stderr\n", 3},
					{"attach", "attach", []string{"attach", "-i", "-n", streamsNamespace, pod}, "attached\n", "", 0},
				} {
					before := s.audited(t, podRequests(pod, tc.subresource))
					stdout, stderr, code := runKubectl(t, k, tr.env, tc.stdin, append([]string{"-v=4"}, tc.args...)...)
					if code != tc.code || stdout != tc.stdin || !strings.Contains(stderr, tc.stderr) {
						t.Errorf("kubectl %s: exit code %d, stdout %q; want %d and the input %q back, and %q on stderr:\n%s",
							tc.kind, code, stdout, tc.code, tc.stdin, tc.stderr, tailLines(stderr, 20))
					}
					if err := checkTransport(tc.kind, tr.name, stderr); err != nil {
						t.Errorf("kubectl %s over %s: %v", tc.kind, tr.name, err)
					}
					r := s.newAuditedRequest(t, "kubectl "+tc.kind, before, podRequests(pod, tc.subresource))
					if r.event.Verb != tr.verb {
						t.Errorf("kubectl %s over %s reached %s as verb %q, want %q", tc.kind, tr.name, s.cluster.Server(r.server).Name, r.event.Verb, tr.verb)
					}
					if err := checkAdmin(r.event); err != nil {
						t.Errorf("kubectl %s over %s with a %s: %v", tc.kind, tr.name, cred.name, err)
					}
				}
			})
		}
	}
}

// firstByteWriter records when the first byte arrived.
type firstByteWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first time.Time
}

func (w *firstByteWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first.IsZero() && len(p) > 0 {
		w.first = time.Now()
	}
	return w.buf.Write(p)
}

// firstByte measures, with client-go's WebSocket executor (kubectl's, without kubectl's start-up),
// how long an exec takes from the request to the first byte of its output, through skewgate and
// directly to a 1.36 server; the figure is logged, not asserted.
func (s *streamsScenario) firstByte(t *testing.T) {
	const pod = "first-byte"
	s.runPod(t, pod)
	path := "/api/v1/namespaces/" + streamsNamespace + "/pods/" + pod + "/exec?" + url.Values{"command": {"echo", "first"}, "stdout": {"true"}}.Encode()
	direct := s.cluster.AdminRESTConfig(skewedUpgraded)
	configs := []struct {
		name   string
		config *rest.Config
	}{{"through skewgate", s.gw.restConfig()}, {"directly to " + s.cluster.Server(skewedUpgraded).Name, direct}}
	times := make([][]time.Duration, len(configs))
	for range firstByteRuns {
		for i, c := range configs {
			exec, err := remotecommand.NewWebSocketExecutor(c.config, http.MethodGet, c.config.Host+path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), streamRoundTimeout)
			var out firstByteWriter
			start := time.Now()
			err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &out})
			cancel()
			if err != nil || out.buf.String() != "first\n" {
				t.Fatalf("exec %s: %v, output %q; want \"first\\n\"", c.name, err, out.buf.String())
			}
			times[i] = append(times[i], out.first.Sub(start))
		}
	}
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	t.Logf("exec time to first byte (client-go WebSocket v5, median of %d): %s %s, %s %s (through skewgate / directly: %.2f)",
		firstByteRuns, configs[0].name, median(times[0]), configs[1].name, median(times[1]), float64(median(times[0]))/float64(median(times[1])))
}

// forwardedPort waits for kubectl port-forward to announce its local port.
func forwardedPort(p *kubectlProcess) (string, error) {
	const prefix = "Forwarding from 127.0.0.1:"
	line, err := p.nextLine("the forwarded port", streamRoundTimeout, func(l string) bool { return strings.HasPrefix(l, prefix) })
	if err != nil {
		return "", err
	}
	port, _, ok := strings.Cut(strings.TrimPrefix(line, prefix), " ")
	if !ok {
		return "", fmt.Errorf("unexpected port-forward line %q", line)
	}
	return net.JoinHostPort("127.0.0.1", port), nil
}

func portForwardArgs(pod string) []string {
	return []string{"port-forward", "--address=127.0.0.1", "-n", streamsNamespace, "pod/" + pod, ":" + strconv.Itoa(int(testcluster.EchoPort))}
}

// throughput compares a port-forward through skewgate with one directly to the API server that
// carries it, each echoing throughputBytes (checked byte for byte); the rates are logged, not
// asserted.
func (s *streamsScenario) throughput(t *testing.T) {
	const viaGateway, direct = "throughput-gateway", "throughput-direct"
	s.runPod(t, viaGateway)
	s.runPod(t, direct)
	k := newKubectl(t, s.kubectl, s.gw, s.creds[0].user)
	gwForward := k.start(t, nil, portForwardArgs(viaGateway)...)
	gwAddr, err := forwardedPort(gwForward)
	if err != nil {
		t.Fatal(err)
	}
	carrier := waitAudited(t, s.cluster, "the port-forward through skewgate", podRequests(viaGateway, "portforward")).server
	server := s.cluster.Server(carrier)
	dir := t.TempDir()
	kd := &kubectl{binary: s.kubectl, kubeconfig: s.cluster.AdminKubeconfig(), cacheDir: filepath.Join(dir, "cache"), home: dir}
	directForward := kd.start(t, nil, append([]string{"--context=" + server.Name}, portForwardArgs(direct)...)...)
	directAddr, err := forwardedPort(directForward)
	if err != nil {
		t.Fatal(err)
	}
	gwRate := echoThroughput(t, gwAddr)
	directRate := echoThroughput(t, directAddr)
	t.Logf("port-forward (kubectl %s, WebSocket) echoing %d MiB: through skewgate %.1f MiB/s, directly to %s %.1f MiB/s (ratio %.2f)",
		testcluster.KubectlVersion, throughputBytes>>20, gwRate, server.Name, directRate, gwRate/directRate)
}

// echoThroughput sends throughputBytes of pseudo-random data to the echo at addr while reading
// them back, and returns the rate in MiB/s.
func echoThroughput(t *testing.T, addr string) float64 {
	t.Helper()
	block := make([]byte, 1<<20)
	rng := rand.NewChaCha8([32]byte{1})
	_, _ = rng.Read(block)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Minute)); err != nil {
		t.Fatal(err)
	}
	const chunk = 64 << 10
	start := time.Now()
	written := make(chan error, 1)
	go func() {
		for sent := 0; sent < throughputBytes; sent += chunk {
			if _, err := conn.Write(block[sent%len(block) : sent%len(block)+chunk]); err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	got := make([]byte, chunk)
	for received := 0; received < throughputBytes; received += chunk {
		if _, err := io.ReadFull(conn, got); err != nil {
			t.Fatalf("reading the echo at %d of %d bytes: %v", received, throughputBytes, err)
		}
		if !bytes.Equal(got, block[received%len(block):received%len(block)+chunk]) {
			t.Fatalf("the echo differs from what was sent at bytes %d to %d", received, received+chunk)
		}
	}
	elapsed := time.Since(start)
	if err := <-written; err != nil {
		t.Fatalf("sending: %v", err)
	}
	return float64(throughputBytes) / (1 << 20) / elapsed.Seconds()
}

// liveStream is one long-running stream of the survival scenario.
type liveStream struct {
	name string
	// match selects the stream's request in the audit logs; verb is how it must be audited.
	match func(auditEvent) bool
	verb  string
	// kubeletPath is the kubelet request the stream's API server makes ("" for the watch).
	kubeletPath string
	roundTrip   func(round int) error
	// check runs after the first round, once the server carrying the stream is known: the
	// stream went as it says.
	check  func(server int) error
	done   <-chan struct{}
	ending func() string
	server int
}

func (s *streamsScenario) survive(t *testing.T) {
	var streams []*liveStream
	for _, cred := range s.creds {
		k := newKubectl(t, s.kubectl, s.gw, cred.user)
		for _, tr := range upgradeTransports {
			for _, kind := range []string{"exec", "attach"} {
				pod := kind + "-" + cred.short + "-" + strings.ToLower(tr.name)
				s.runPod(t, pod)
				args := []string{"-v=4", kind, "-i", "-n", streamsNamespace, pod}
				if kind == "exec" {
					args = append(args, "--", "cat")
				}
				p := k.start(t, tr.env, args...)
				name := fmt.Sprintf("%s (%s, %s)", kind, cred.name, tr.name)
				streams = append(streams, &liveStream{
					name: name, match: podRequests(pod, kind), verb: tr.verb,
					kubeletPath: "/" + kind + "/" + streamsNamespace + "/" + pod + "/" + testcluster.EchoContainer,
					roundTrip: func(round int) error {
						line := fmt.Sprintf("%s round %d", pod, round)
						if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
							return err
						}
						return p.expectLine(line, streamRoundTimeout)
					},
					check: func(int) error { return checkTransport(kind, tr.name, p.stderr.String()) },
					done:  p.exited, ending: p.describeEnd,
				})
			}
			pod := "port-forward-" + cred.short + "-" + strings.ToLower(tr.name)
			s.runPod(t, pod)
			p := k.start(t, tr.env, append([]string{"-v=4"}, portForwardArgs(pod)...)...)
			streams = append(streams, s.portForwardStream(t, fmt.Sprintf("port-forward (%s, %s)", cred.name, tr.name), pod, tr, p))
		}
		for _, tr := range logTransports {
			pod := "logs-" + cred.short + "-" + strings.ToLower(strings.NewReplacer("/", "", ".", "").Replace(tr.name))
			s.runPod(t, pod)
			p := k.start(t, tr.env, "logs", "-f", "-n", streamsNamespace, pod)
			streams = append(streams, &liveStream{
				name: fmt.Sprintf("logs -f (%s, %s)", cred.name, tr.name), match: podRequests(pod, "log"), verb: tr.verb,
				kubeletPath: "/containerLogs/" + streamsNamespace + "/" + pod + "/" + testcluster.EchoContainer,
				roundTrip: func(round int) error {
					line := fmt.Sprintf("%s round %d", pod, round)
					if err := s.kubelet.WriteLog(streamsNamespace, pod, line); err != nil {
						return err
					}
					return p.expectLine(line, streamRoundTimeout)
				},
				check: func(int) error { return checkTransport("logs", tr.name, p.stderr.String()) },
				done:  p.exited, ending: p.describeEnd,
			})
		}
		streams = append(streams, s.webSocketWatchStream(t, cred))
	}

	for _, st := range streams {
		if err := st.roundTrip(0); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		r := waitAudited(t, s.cluster, st.name, st.match)
		st.server = r.server
		if r.event.Verb != st.verb {
			t.Errorf("%s was audited as verb %q, want %q", st.name, r.event.Verb, st.verb)
		}
		if err := checkAdmin(r.event); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
		if err := st.check(st.server); err != nil {
			t.Errorf("%s: %v", st.name, err)
		}
		if st.kubeletPath != "" && !slices.ContainsFunc(s.kubelet.Requests(), func(r testcluster.KubeletRequest) bool { return r.Path == st.kubeletPath }) {
			t.Errorf("%s: the kubelet never received %s", st.name, st.kubeletPath)
		}
		t.Logf("%s runs on %s", st.name, s.cluster.Server(st.server).Name)
	}

	// A CustomResourceDefinition changes every server's discovery, hence the snapshot.
	before, err := s.gw.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	direct := directAdminClient(s.cluster)
	defer direct.CloseIdleConnections()
	if resp := mustDo(t, direct, http.MethodPost, s.cluster.Server(skewedUpgraded).URL+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions", nil, echoCRD); resp.status != http.StatusCreated {
		t.Fatalf("creating the CustomResourceDefinition: HTTP %d: %s", resp.status, resp.body)
	}
	after := s.gw.waitSnapshot(t, "a snapshot with the new CustomResourceDefinition", healthChangeTimeout, func(v snapshotView) error {
		if v.Generation <= before.Generation {
			return fmt.Errorf("still snapshot generation %d", v.Generation)
		}
		return nil
	})
	round := 1
	for _, st := range streams {
		if err := st.roundTrip(round); err != nil {
			t.Errorf("%s after snapshot generation %d became %d: %v", st.name, before.Generation, after.Generation, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Each API server carrying streams restarts in turn: its streams end, the others go on.
	carriers := map[int]bool{}
	for _, st := range streams {
		carriers[st.server] = true
	}
	restarted := map[int]bool{}
	for i := range s.cluster.Servers() {
		if !carriers[i] {
			continue
		}
		srv := s.cluster.Server(i)
		if err := s.cluster.Restart(t.Context(), i, ""); err != nil {
			t.Fatal(err)
		}
		restarted[i] = true
		for _, st := range streams {
			if st.server != i {
				continue
			}
			select {
			case <-st.done:
				t.Logf("%s ended with %s's restart: %s", st.name, srv.Name, st.ending())
			case <-time.After(streamEndTimeout):
				t.Errorf("%s still runs %s after %s restarted", st.name, streamEndTimeout, srv.Name)
			}
		}
		s.gw.waitSnapshot(t, srv.Name+" healthy again in the snapshot", healthChangeTimeout, serverState(s.cluster.Server(i), true))
		round++
		for _, st := range streams {
			if restarted[st.server] {
				continue
			}
			if err := st.roundTrip(round); err != nil {
				t.Errorf("%s after %s restarted: %v", st.name, srv.Name, err)
			}
		}
	}
}

func (p *kubectlProcess) describeEnd() string {
	return fmt.Sprintf("kubectl exit code %d, last stderr line %q", exitCode(p.err), tailLines(p.stderr.String(), 1))
}

// portForwardStream keeps one connection open across the whole scenario and opens two more
// each round.
func (s *streamsScenario) portForwardStream(t *testing.T, name, pod string, tr streamTransport, p *kubectlProcess) *liveStream {
	t.Helper()
	addr, err := forwardedPort(p)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var kept net.Conn
	t.Cleanup(func() {
		if kept != nil {
			kept.Close()
		}
	})
	return &liveStream{
		name: name, match: podRequests(pod, "portforward"), verb: tr.verb,
		kubeletPath: "/portForward/" + streamsNamespace + "/" + pod,
		roundTrip: func(round int) error {
			if kept == nil {
				conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					return err
				}
				kept = conn
			}
			if err := echoLine(kept, fmt.Sprintf("%s round %d on the kept connection", pod, round), streamRoundTimeout); err != nil {
				return err
			}
			for c := range 2 {
				conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
				if err != nil {
					return err
				}
				err = echoLine(conn, fmt.Sprintf("%s round %d connection %d", pod, round, c), streamRoundTimeout)
				conn.Close()
				if err != nil {
					return err
				}
			}
			return nil
		},
		check: func(int) error { return checkTransport("port-forward", tr.name, p.stderr.String()) },
		done:  p.exited, ending: p.describeEnd,
	}
}

// webSocketWatchStream watches mutatingadmissionpolicies, which only the 1.36 servers serve,
// over a WebSocket through skewgate: an upgraded stream skewgate must re-route.
func (s *streamsScenario) webSocketWatchStream(t *testing.T, cred streamCredential) *liveStream {
	t.Helper()
	const resource = "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
	userAgent := "skewgate-e2e-websocket-watch-" + cred.short
	// kube-apiserver's WebSocket watch refuses a handshake without an Origin, which browsers send.
	header := http.Header{"User-Agent": {userAgent}, "Origin": {s.gw.URL}}
	tlsConfig := &tls.Config{RootCAs: s.gw.ca.Pool(), MinVersion: tls.VersionTLS12}
	if cred.user.Token != "" {
		header.Set("Authorization", "Bearer "+cred.user.Token)
	} else {
		tlsConfig.Certificates = []tls.Certificate{s.cluster.PKI().Admin}
	}
	w := openWebSocketWatch(t, s.gw.URL+resource+"?watch=true", &websocket.Dialer{TLSClientConfig: tlsConfig, HandshakeTimeout: streamRoundTimeout}, header)
	direct := directAdminClient(s.cluster)
	t.Cleanup(direct.CloseIdleConnections)
	name := fmt.Sprintf("WebSocket watch of mutatingadmissionpolicies, re-routed (%s)", cred.name)
	return &liveStream{
		name: name,
		match: func(ev auditEvent) bool {
			return ev.UserAgent == userAgent && ev.ObjectRef.Resource == "mutatingadmissionpolicies"
		},
		verb: "watch",
		roundTrip: func(round int) error {
			policy := fmt.Sprintf("skewgate-e2e-streams-%s-%d", cred.short, round)
			resp, err := do(direct, http.MethodPost, s.cluster.Server(skewedUpgraded).URL+resource, nil, mutatingAdmissionPolicy(policy))
			if err != nil {
				return err
			}
			if resp.status != http.StatusCreated {
				return fmt.Errorf("creating %s: HTTP %d: %s", policy, resp.status, resp.body)
			}
			return w.expect("ADDED", policy, streamRoundTimeout)
		},
		check: func(server int) error {
			// The 1.35 server, healthy all along, lacks the resource: the upgrade was re-routed.
			if server == skewedOld {
				return fmt.Errorf("upgraded on %s, which does not serve mutatingadmissionpolicies", s.cluster.Server(server).Name)
			}
			return nil
		},
		done:   w.done,
		ending: func() string { return fmt.Sprintf("read error %v", w.err) },
	}
}

// echoCRD is a CustomResourceDefinition whose creation changes the cluster's discovery.
var echoCRD = []byte(`{
  "apiVersion": "apiextensions.k8s.io/v1",
  "kind": "CustomResourceDefinition",
  "metadata": {"name": "echoes.streams.skewgate.test"},
  "spec": {
    "group": "streams.skewgate.test",
    "names": {"plural": "echoes", "singular": "echo", "kind": "Echo", "listKind": "EchoList"},
    "scope": "Namespaced",
    "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]
  }
}`)
