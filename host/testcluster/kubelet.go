package testcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/portforward"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// The one container of every pod a Kubelet runs.
const (
	// EchoContainer is its name.
	EchoContainer = "echo"
	// EchoPort is the port it echoes on: every byte forwarded to it comes back.
	EchoPort int32 = 8080
)

// kubeletAPITimeout bounds each API request the kubelet makes (registration, pods).
const kubeletAPITimeout = 30 * time.Second

// kubeletShutdownTimeout bounds how long Close waits for responses to finish.
const kubeletShutdownTimeout = 5 * time.Second

// streamPathPrefix is where the streaming server's token URLs live; the kubelet dispatches to
// them in process, as a kubelet proxies to its runtime's streaming server.
const streamPathPrefix = "/cri/"

// Kubelet is a stand-in kubelet: a registered Node whose status points at an HTTPS listener that
// serves exec, attach, port-forward (k8s.io/cri-streaming, the streaming server container
// runtimes build on) and container logs for the pods it runs, each with one EchoContainer. Like a
// kubelet it requires a client certificate of the cluster CA, and it serves only the API servers'
// (KubeletClientName); API servers verify its serving certificate against the cluster CA.
//
// The echo container's "processes": exec runs a tiny command language (see runCommand), attach
// echoes stdin to stdout, port EchoPort echoes, and the log is what WriteLog appended.
type Kubelet struct {
	// NodeName is the Node's name; URL is the kubelet's https://127.0.0.1:<port>.
	NodeName, URL string

	cluster *Cluster
	port    int
	server  *http.Server
	streams streaming.Server
	conns   *trackedConns
	closed  chan struct{}
	once    sync.Once
	served  chan struct{}

	mu sync.Mutex
	// logs holds the log of every container it runs, by container ID ("<namespace>/<pod>/<container>").
	logs     map[string]*containerLog
	requests []KubeletRequest
}

// KubeletRequest is one request the kubelet received.
type KubeletRequest struct {
	Method string
	// Path is the URL path, without the query.
	Path string
	// Client is the common name of the client certificate.
	Client string
}

// StartKubelet registers node nodeName with the cluster and serves it until Close. The Node's
// status carries the kubelet's address (InternalIP 127.0.0.1 and its host name) and port, as a
// kubelet reports them.
func (c *Cluster) StartKubelet(ctx context.Context, nodeName string) (*Kubelet, error) {
	k, err := serveKubelet(c.pki, nodeName)
	if err != nil {
		return nil, err
	}
	k.cluster = c
	if err := k.register(ctx); err != nil {
		k.Close()
		return nil, fmt.Errorf("registering node %s: %w", nodeName, err)
	}
	c.log.Logf("kubelet %s serving at %s", nodeName, k.URL)
	return k, nil
}

// serveKubelet starts the kubelet's listener, with a serving certificate of pki's CA.
func serveKubelet(pki *PKI, nodeName string) (*Kubelet, error) {
	if !hostnamePattern.MatchString(nodeName) {
		return nil, fmt.Errorf("node name %q is not a valid host name label", nodeName)
	}
	serving, err := pki.ca.Serving("system:node:"+nodeName, "127.0.0.1", nodeName)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	k := &Kubelet{
		NodeName: nodeName,
		URL:      "https://" + ln.Addr().String(),
		port:     ln.Addr().(*net.TCPAddr).Port,
		conns:    &trackedConns{conns: map[*trackedConn]struct{}{}},
		closed:   make(chan struct{}),
		served:   make(chan struct{}),
		logs:     map[string]*containerLog{},
	}
	config := streaming.DefaultConfig
	config.Addr = ln.Addr().String()
	config.BaseURL = &url.URL{Scheme: "https", Host: config.Addr, Path: streamPathPrefix}
	if k.streams, err = streaming.NewServer(config, echoRuntime{k}); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		mux.HandleFunc(method+" /exec/{namespace}/{pod}/{container}", k.serveExec)
		mux.HandleFunc(method+" /attach/{namespace}/{pod}/{container}", k.serveAttach)
		mux.HandleFunc(method+" /portForward/{namespace}/{pod}", k.servePortForward)
	}
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", k.serveLogs)
	k.server = &http.Server{
		Handler: k.authorize(mux),
		TLSConfig: &tls.Config{
			Certificates: []tls.Certificate{serving.TLSCertificate()},
			ClientCAs:    pki.CAPool(),
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		defer close(k.served)
		_ = k.server.ServeTLS(k.conns.listener(ln), "", "")
	}()
	return k, nil
}

// Close stops serving and ends every open session; the Node stays registered.
func (k *Kubelet) Close() error {
	var err error
	k.once.Do(func() {
		// Followed logs end on closed, so that Shutdown sees them finish their responses;
		// exec, attach and port-forward connections are hijacked, which Shutdown does not wait
		// for, so the tracked connections end those.
		close(k.closed)
		ctx, cancel := context.WithTimeout(context.Background(), kubeletShutdownTimeout)
		defer cancel()
		if err = k.server.Shutdown(ctx); err != nil {
			err = k.server.Close()
		}
		k.conns.closeAll()
		<-k.served
	})
	return err
}

// Requests returns every request the kubelet received, in order.
func (k *Kubelet) Requests() []KubeletRequest {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]KubeletRequest(nil), k.requests...)
}

// authorize records every request and serves only the API servers' client certificate; TLS has
// already verified it against the cluster CA, which signs other clients' certificates too.
func (k *Kubelet) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := ""
		if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
			client = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		k.mu.Lock()
		k.requests = append(k.requests, KubeletRequest{Method: r.Method, Path: r.URL.Path, Client: client})
		k.mu.Unlock()
		if client != KubeletClientName {
			http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource=proxy)", client, r.Method), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// api is a client of the first running API server, as the admin.
func (k *Kubelet) api() (kubernetes.Interface, error) {
	for i, s := range k.cluster.Servers() {
		if s.Running {
			return kubernetes.NewForConfig(k.cluster.AdminRESTConfig(i))
		}
	}
	return nil, errors.New("no API server is running")
}

// register creates the Node (or takes over one of the same name) and reports its status.
func (k *Kubelet) register(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kubeletAPITimeout)
	defer cancel()
	client, err := k.api()
	if err != nil {
		return err
	}
	nodes := client.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   k.NodeName,
		Labels: map[string]string{corev1.LabelHostname: k.NodeName, corev1.LabelOSStable: "linux"},
	}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = nodes.Get(ctx, k.NodeName, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: k.NodeName},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(k.port)}},
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "stand-in kubelet is posting ready status", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion:  KubeVersion136,
			OperatingSystem: "linux",
			Architecture:    runtime.GOARCH,
		},
	}
	_, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{})
	return err
}

// RunPod creates pod namespace/name bound to the kubelet's node, with one EchoContainer, and
// reports it running. The namespace and its default service account are created when missing:
// the service account admission plugin refuses pods without one, and no controller manager runs
// here to create it.
func (k *Kubelet) RunPod(ctx context.Context, namespace, name string) error {
	ctx, cancel := context.WithTimeout(ctx, kubeletAPITimeout)
	defer cancel()
	client, err := k.api()
	if err != nil {
		return err
	}
	core := client.CoreV1()
	if _, err := core.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	if _, err := core.ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	id, err := k.startContainer(namespace, name)
	if err != nil {
		return err
	}
	noToken := false
	pod, err := core.Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeName:                     k.NodeName,
			AutomountServiceAccountToken: &noToken,
			Containers: []corev1.Container{{
				Name:  EchoContainer,
				Image: EchoContainer,
				Ports: []corev1.ContainerPort{{ContainerPort: EchoPort, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	started := true
	ready := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	pod.Status = corev1.PodStatus{
		Phase: corev1.PodRunning,
		Conditions: []corev1.PodCondition{
			ready(corev1.PodScheduled), ready(corev1.PodInitialized), ready(corev1.ContainersReady), ready(corev1.PodReady),
		},
		HostIP:    "127.0.0.1",
		HostIPs:   []corev1.HostIP{{IP: "127.0.0.1"}},
		PodIP:     "127.0.0.1",
		PodIPs:    []corev1.PodIP{{IP: "127.0.0.1"}},
		StartTime: &now,
		ContainerStatuses: []corev1.ContainerStatus{{
			Name:        EchoContainer,
			Ready:       true,
			Started:     &started,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			Image:       EchoContainer,
			ImageID:     EchoContainer,
			ContainerID: "stand-in://" + id,
		}},
	}
	_, err = core.Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// WriteLog appends line to the log of pod namespace/name's container; followers get it at once.
func (k *Kubelet) WriteLog(namespace, pod, line string) error {
	l, ok := k.containerLog(containerID(namespace, pod, EchoContainer))
	if !ok {
		return fmt.Errorf("pod %s/%s does not run on %s", namespace, pod, k.NodeName)
	}
	l.append(line)
	return nil
}

// startContainer starts pod namespace/name's EchoContainer and returns its ID.
func (k *Kubelet) startContainer(namespace, pod string) (string, error) {
	id := containerID(namespace, pod, EchoContainer)
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.logs[id]; ok {
		return "", fmt.Errorf("pod %s/%s already runs on %s", namespace, pod, k.NodeName)
	}
	k.logs[id] = newContainerLog()
	return id, nil
}

func containerID(namespace, pod, container string) string {
	return namespace + "/" + pod + "/" + container
}

func (k *Kubelet) containerLog(id string) (*containerLog, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	l, ok := k.logs[id]
	return l, ok
}

// container is the ID of the container a request addresses, answering 404 when the kubelet does
// not run it.
func (k *Kubelet) container(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	id := containerID(r.PathValue("namespace"), r.PathValue("pod"), name)
	if _, ok := k.containerLog(id); !ok {
		http.Error(w, fmt.Sprintf("container %s is not running on %s", id, k.NodeName), http.StatusNotFound)
		return "", false
	}
	return id, true
}

func (k *Kubelet) serveExec(w http.ResponseWriter, r *http.Request) {
	id, ok := k.container(w, r, r.PathValue("container"))
	if !ok {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := k.streams.GetExec(&runtimeapi.ExecRequest{
		ContainerId: id, Cmd: r.URL.Query()[corev1.ExecCommandParam],
		Tty: opts.TTY, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.serveStream(w, r, resp.Url)
}

func (k *Kubelet) serveAttach(w http.ResponseWriter, r *http.Request) {
	id, ok := k.container(w, r, r.PathValue("container"))
	if !ok {
		return
	}
	opts, err := remotecommand.NewOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := k.streams.GetAttach(&runtimeapi.AttachRequest{
		ContainerId: id, Tty: opts.TTY, Stdin: opts.Stdin, Stdout: opts.Stdout, Stderr: opts.Stderr,
	})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.serveStream(w, r, resp.Url)
}

func (k *Kubelet) servePortForward(w http.ResponseWriter, r *http.Request) {
	// The pod sandbox is the echo container's pod.
	id, ok := k.container(w, r, EchoContainer)
	if !ok {
		return
	}
	opts, err := portforward.NewV4Options(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := k.streams.GetPortForward(&runtimeapi.PortForwardRequest{PodSandboxId: id, Port: opts.Ports})
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	k.serveStream(w, r, resp.Url)
}

// serveStream hands the request to the streaming server at the token URL it issued.
func (k *Kubelet) serveStream(w http.ResponseWriter, r *http.Request, streamURL string) {
	u, err := url.Parse(streamURL)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	r = r.Clone(r.Context())
	r.URL.Path, r.URL.RawPath = u.Path, ""
	k.streams.ServeHTTP(w, r)
}

// serveLogs writes the container's log and, with follow=true, every line appended later as it
// comes, until the client leaves or the kubelet closes. The other log options are refused: the
// stand-in keeps no timestamps and no previous containers.
func (k *Kubelet) serveLogs(w http.ResponseWriter, r *http.Request) {
	id, ok := k.container(w, r, r.PathValue("container"))
	if !ok {
		return
	}
	follow := false
	for name, values := range r.URL.Query() {
		if name != "follow" {
			http.Error(w, fmt.Sprintf("log option %q is not supported by the stand-in kubelet", name), http.StatusBadRequest)
			return
		}
		var err error
		if follow, err = strconv.ParseBool(values[0]); err != nil {
			http.Error(w, fmt.Sprintf("follow=%q: %v", values[0], err), http.StatusBadRequest)
			return
		}
	}
	l, _ := k.containerLog(id)
	w.Header().Set("Content-Type", "text/plain")
	rc := http.NewResponseController(w)
	for sent := 0; ; {
		lines, changed := l.since(sent)
		for _, line := range lines {
			if _, err := w.Write(line); err != nil {
				return
			}
		}
		sent += len(lines)
		if err := rc.Flush(); err != nil || !follow {
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-k.closed:
			return
		}
	}
}

// containerLog is a container's output, line by line; changed is closed and replaced on every
// append.
type containerLog struct {
	mu      sync.Mutex
	lines   [][]byte
	changed chan struct{}
}

func newContainerLog() *containerLog { return &containerLog{changed: make(chan struct{})} }

func (l *containerLog) append(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, []byte(line+"\n"))
	close(l.changed)
	l.changed = make(chan struct{})
}

// since returns the lines after the first n and a channel closed on the next append.
func (l *containerLog) since(n int) ([][]byte, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines[n:], l.changed
}

// trackedConns are the kubelet's open connections, hijacked ones included, which http.Server
// forgets.
type trackedConns struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	owner *trackedConns
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.owner.mu.Lock()
		delete(c.owner.conns, c)
		c.owner.mu.Unlock()
	})
	return c.Conn.Close()
}

func (t *trackedConns) listener(ln net.Listener) net.Listener { return &trackingListener{ln, t} }

func (t *trackedConns) closeAll() {
	t.mu.Lock()
	open := make([]*trackedConn, 0, len(t.conns))
	for c := range t.conns {
		open = append(open, c)
	}
	t.mu.Unlock()
	for _, c := range open {
		_ = c.Close()
	}
}

type trackingListener struct {
	net.Listener
	owner *trackedConns
}

func (l *trackingListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &trackedConn{Conn: conn, owner: l.owner}
	l.owner.mu.Lock()
	l.owner.conns[c] = struct{}{}
	l.owner.mu.Unlock()
	return c, nil
}
