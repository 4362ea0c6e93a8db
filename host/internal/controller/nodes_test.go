package controller

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/logtest"
)

// controlPlaneNode is a node whose InternalIP is ip, as kubeadm's nodes
// register with --node-ip.
func controlPlaneNode(name, ip string, cordoned bool) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Unschedulable: cordoned},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}},
	}
}

func setCordon(t *testing.T, client *fake.Clientset, name string, cordoned bool) {
	t.Helper()
	n, err := client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Unschedulable = cordoned
	if _, err := client.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// nodesPlane is two fake API servers, a at 127.0.0.1 on node cp-a and b at
// 127.0.0.2 on node cp-b (cordoned when bCordoned), and the options of a
// controller that finds them and reads the nodes from client.
type nodesPlane struct {
	a, b   *fakeAPIServer
	client *fake.Clientset
	rec    *recorder
	opts   Options
}

func newNodesPlane(t *testing.T, bCordoned bool) *nodesPlane {
	pki := newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	p := &nodesPlane{
		a:      newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups),
		b:      newFakeAPIServer(t, pki, plane[1].Version, plane[1].Groups, onLoopback("127.0.0.2")),
		client: fake.NewClientset(controlPlaneNode("cp-a", "127.0.0.1", false), controlPlaneNode("cp-b", "127.0.0.2", bCordoned)),
		rec:    &recorder{},
	}
	p.opts = testOptions(pki, p.rec, p.a, p.b)
	p.opts.Cluster = fakeCluster(p.client)
	return p
}

// Probes and polls are an hour apart here, so only the cordon itself can
// publish the snapshots the test waits for: the kubelet's restart, which
// restarts the server, may follow the cordon within a second.
func TestTheServerOfACordonedNodeDrainsFromTheCordonOn(t *testing.T) {
	p := newNodesPlane(t, false)
	a, b, client, rec := p.a, p.b, p.client, p.rec
	p.opts.PollInterval, p.opts.ReadinessInterval = time.Hour, time.Hour
	c := startController(t, p.opts)
	waitUntil(t, "Ready", c.Ready)
	draining := func(snap *discovery.Snapshot, srv *fakeAPIServer) bool {
		s := serverByID(snap, ClusterName(srv.address))
		return s != nil && s.Draining
	}
	if _, snap := c.Current(); draining(snap, a) || draining(snap, b) {
		t.Fatalf("a server drains before any node is cordoned")
	}

	setCordon(t, client, "cp-b", true)
	cordoned := rec.waitOffer(t, "b draining", func(snap *discovery.Snapshot) bool { return draining(snap, b) })
	if draining(cordoned.snap, a) {
		t.Errorf("a drains with b's node cordoned")
	}
	setCordon(t, client, "cp-b", false)
	rec.waitOffer(t, "b back", func(snap *discovery.Snapshot) bool {
		return snap.Generation > cordoned.snap.Generation && !draining(snap, b)
	})
	if n := a.requestCount(pathReadyz); n != 1 {
		t.Errorf("a probed %d times; want the first round only", n)
	}
}

// A controller whose identity may not list nodes (the rbac.yaml of an older
// release) finds and routes to the servers as before, drains none and says
// why once.
func TestAControllerThatMayNotListNodesRunsWithoutDraining(t *testing.T) {
	pki := newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups)
	client := fake.NewClientset(controlPlaneNode("cp-a", "127.0.0.1", true))
	listed := make(chan struct{}, 100)
	client.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		listed <- struct{}{}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC: not allowed"))
	})
	logs := &logtest.Buffer{}
	rec := &recorder{}
	opts := testOptions(pki, rec, a)
	opts.Cluster = fakeCluster(client)
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	c := startController(t, opts)
	waitUntil(t, "Ready", c.Ready)
	for range 2 {
		select {
		case <-listed:
		case <-time.After(15 * time.Second):
			t.Fatal("the nodes were not listed twice")
		}
	}
	waitRounds(t, a, 2)
	if _, snap := c.Current(); len(snap.Servers) != 1 || snap.Servers[0].Draining {
		t.Errorf("servers %+v; want a, not draining", snap.Servers)
	}
	if n := strings.Count(logs.String(), "cannot watch the cordoned nodes"); n != 1 {
		t.Errorf("the refusal logged %d times; want once:\n%s", n, logs.String())
	}
}

// A controller given only a list of servers (the load balancer) reads the
// nodes through its healthy servers, as itself, taking turns, and through
// none while none is healthy.
func TestNodesAreReadThroughTheHealthyServersAsTheController(t *testing.T) {
	type seen struct{ host, path, user string }
	got := make(chan seen, 4)
	var servers []*httptest.Server
	for range 2 {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- seen{r.Host, r.URL.RequestURI(), r.Header.Get("X-Remote-User")}
		}))
		t.Cleanup(srv.Close)
		servers = append(servers, srv)
	}
	client := &backendClient{http: servers[0].Client(), identity: http.Header{"X-Remote-User": {RemoteUser}}}
	// Both test servers share httptest's certificate, so one client trusts both.
	var healthy atomic.Pointer[[]string]
	transport := &throughServers{client: func() *backendClient { return client }, healthy: &healthy}
	get := func() error {
		req, err := http.NewRequest("GET", "https://apiservers.invalid/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); !errors.Is(err, errNoHealthyServer) {
		t.Fatalf("with no healthy server: %v; want %v", err, errNoHealthyServer)
	}
	addresses := []string{servers[0].Listener.Addr().String(), servers[1].Listener.Addr().String()}
	healthy.Store(&addresses)
	hosts := map[string]bool{}
	for range 2 {
		if err := get(); err != nil {
			t.Fatal(err)
		}
		s := <-got
		if s.path != "/api/v1/nodes?fieldSelector=spec.unschedulable%3Dtrue" || s.user != RemoteUser {
			t.Errorf("request %+v; want the nodes' path and query as the controller", s)
		}
		hosts[s.host] = true
	}
	if len(hosts) != 2 {
		t.Errorf("requests went to %v; want both healthy servers in turn", hosts)
	}
}

// kubeadm's procedure uncordons a node as soon as its new kubelet runs,
// which may be before the API server that kubelet restarted is back. So a
// draining server's first failed probe, even one that only got no answer,
// marks it unhealthy, and it stays so, uncordoned or not, until a probe
// finds it ready again with fresh documents.
func TestADrainingServerIsUnhealthyAtItsFirstUnansweredProbe(t *testing.T) {
	p := newNodesPlane(t, true)
	b, client, rec := p.b, p.client, p.rec
	p.opts.RequestTimeout = 100 * time.Millisecond
	c := startController(t, p.opts)
	waitUntil(t, "Ready", c.Ready)
	idB := ClusterName(b.address)
	rec.waitOffer(t, "b draining", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, idB)
		return s != nil && s.Draining && s.Healthy
	})

	b.stall(1)
	down := rec.waitOffer(t, "b unhealthy", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, idB)
		return s != nil && !s.Healthy
	})
	if n := b.stalledCount(); n != 1 {
		t.Errorf("b marked unhealthy after %d unanswered probes; want the first", n)
	}
	setCordon(t, client, "cp-b", false)
	rec.waitOffer(t, "b back, ready and no longer draining", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, idB)
		return snap.Generation > down.snap.Generation && s != nil && s.Healthy && !s.Draining
	})
}
