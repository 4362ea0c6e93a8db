package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

// identityLease builds a Lease the way kube-apiserver writes its identity
// lease; an empty address leaves the annotation out.
func identityLease(namespace, name, address string, labels map[string]string) *coordinationv1.Lease {
	holder := name + "_5f0f3fb0-1c1e-4d0e-9c6c-2f5d6f1d9a11"
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &holder,
			RenewTime:      &metav1.MicroTime{Time: time.Now()},
		},
	}
	if address != "" {
		l.Annotations = map[string]string{corev1.AnnotationPeerAdvertiseAddress: address}
	}
	return l
}

var identityLabels = map[string]string{identityLabelKey: identityLabelValue, corev1.LabelHostname: "node"}

// kubernetesSlice builds an EndpointSlice of a Service with one https port.
func kubernetesSlice(namespace, name, service string, addressType discoveryv1.AddressType, port int, addresses ...string) *discoveryv1.EndpointSlice {
	portName, portNumber, protocol := "https", int32(port), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: addressType,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: addresses}},
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &portNumber, Protocol: &protocol}},
	}
}

func hostPort(t *testing.T, address string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, n
}

// clusterOptions discovers servers only through client.
func clusterOptions(pki *testPKI, rec *recorder, client *fake.Clientset) Options {
	o := testOptions(pki, rec)
	o.Cluster = fakeCluster(client)
	return o
}

// asWire decodes obj's JSON, as kube-apiserver serves it, into out: the tests
// build discoveryv1 objects, so a field the controller's endpointSlice reads
// under another name fails them.
func asWire[T runtime.Object](obj runtime.Object, out T) T {
	raw, err := json.Marshal(obj)
	if err == nil {
		err = json.Unmarshal(raw, out)
	}
	if err != nil {
		panic(fmt.Sprintf("%T as %T: %v", obj, out, err))
	}
	return out
}

// fakeCluster lists and watches client as clusterListersFor does a real
// cluster: identity leases in kube-system, EndpointSlices in default and
// nodes, decoded from their JSON. The fake client ignores field selectors:
// every node is listed, cordoned or not.
func fakeCluster(client *fake.Clientset) *ClusterListers {
	leases := client.CoordinationV1().Leases(identityLeaseNamespace)
	slices := client.DiscoveryV1().EndpointSlices(kubernetesServiceNamespace)
	nodes := client.CoreV1().Nodes()
	// The fake client cannot stream initial lists; the wrapper says so.
	return &ClusterListers{
		Leases: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return leases.List(ctx, o) },
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return leases.Watch(ctx, o)
			},
		}, client),
		EndpointSlices: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				l, err := slices.List(ctx, o)
				if err != nil {
					return nil, err
				}
				return asWire(l, &endpointSliceList{}), nil
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := slices.Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
					if s, ok := e.Object.(*discoveryv1.EndpointSlice); ok {
						e.Object = asWire(s, &endpointSlice{})
					}
					return e, true
				}), nil
			},
		}, client),
		Nodes: cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				l, err := nodes.List(ctx, o)
				if err != nil {
					return nil, err
				}
				return asWire(l, &nodeList{}), nil
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				w, err := nodes.Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
					if n, ok := e.Object.(*corev1.Node); ok {
						e.Object = asWire(n, &node{})
					}
					return e, true
				}), nil
			},
		}, client),
	}
}

// waitForListed waits until the informers hold n leases and m EndpointSlices,
// whatever their validity.
func waitForListed(t *testing.T, c *Controller, leases, endpointSlices int) {
	t.Helper()
	waitUntil(t, "informers to catch up", func() bool {
		l, s := c.cluster.list()
		return len(l) == leases && len(s) == endpointSlices
	})
}

// waitRounds waits until srv has seen n more polls, each of which has
// finished publishing.
func waitRounds(t *testing.T, srv *fakeAPIServer, n int) {
	t.Helper()
	start := srv.requestCount(pathReadyz)
	waitUntil(t, "more polls", func() bool { return srv.requestCount(pathReadyz) >= start+n+1 })
}

func TestLeaseDiscoveryTrustsOnlyLabelledKubeSystemLeasesWithAnIPAddress(t *testing.T) {
	pki, a, decoy := newSkewedPair(t)
	_, decoyPort := hostPort(t, decoy.address)
	client := fake.NewClientset(
		identityLease("kube-system", "apiserver-aaaa", a.address, identityLabels),
		identityLease("default", "apiserver-elsewhere", decoy.address, identityLabels),
		identityLease("kube-system", "apiserver-unlabelled", decoy.address, nil),
	)
	rec := &recorder{}
	c := startController(t, clusterOptions(pki, rec, client))
	waitUntil(t, "Ready", c.Ready)

	// Created after the informers started, these arrive through the watch,
	// which the fake clientset does not filter by label.
	for _, l := range []*coordinationv1.Lease{
		identityLease("kube-system", "apiserver-wrong-label", decoy.address,
			map[string]string{identityLabelKey: "kube-controller-manager"}),
		identityLease("kube-system", "apiserver-hostname", "localhost:"+strconv.Itoa(decoyPort), identityLabels),
		identityLease("kube-system", "apiserver-no-port", "127.0.0.1", identityLabels),
		identityLease("kube-system", "apiserver-port-zero", "127.0.0.1:0", identityLabels),
		identityLease("kube-system", "apiserver-unspecified", "0.0.0.0:"+strconv.Itoa(decoyPort), identityLabels),
		identityLease("kube-system", "apiserver-no-annotation", "", identityLabels),
	} {
		if _, err := client.CoordinationV1().Leases(l.Namespace).Create(context.Background(), l, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitForListed(t, c, 7, 0)
	waitRounds(t, a, 3)

	_, snap := c.Current()
	if got := snapshotIDs(snap); !slices.Equal(got, []string{"apiserver-aaaa"}) {
		t.Errorf("servers = %v, want only the lease-named apiserver-aaaa", got)
	}
	if s := serverByID(snap, "apiserver-aaaa"); s == nil || s.Cluster != ClusterName(a.address) {
		t.Errorf("apiserver-aaaa = %+v, want cluster %s", s, ClusterName(a.address))
	}
	if n := decoy.totalRequests(); n != 0 {
		t.Errorf("a server named only by untrusted leases received %d requests", n)
	}
	if n := rec.count(); n != 1 {
		t.Errorf("%d snapshots offered, want 1", n)
	}
}

func TestEndpointSlicesSupplyServersWithoutAnAddressAnnotation(t *testing.T) {
	pki, a, b := newSkewedPair(t)
	plane := discoverytest.SkewedControlPlane()
	decoy := newFakeAPIServer(t, pki, plane[2].Version, plane[2].Groups)
	hostA, portA := hostPort(t, a.address)
	hostB, portB := hostPort(t, b.address)
	hostDecoy, portDecoy := hostPort(t, decoy.address)
	client := fake.NewClientset(
		identityLease("kube-system", "apiserver-aaaa", a.address, identityLabels),
		identityLease("kube-system", "apiserver-bbbb", "", identityLabels),
		// a is listed here too and must stay one server, under its lease name.
		kubernetesSlice("default", "kubernetes-a", "kubernetes", discoveryv1.AddressTypeIPv4, portA, hostA),
		kubernetesSlice("default", "kubernetes-b", "kubernetes", discoveryv1.AddressTypeIPv4, portB, hostB),
		kubernetesSlice("kube-system", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, portDecoy, hostDecoy),
		kubernetesSlice("default", "other-service", "other", discoveryv1.AddressTypeIPv4, portDecoy, hostDecoy),
		kubernetesSlice("default", "kubernetes-fqdn", "kubernetes", discoveryv1.AddressTypeFQDN, portDecoy, "localhost"),
	)
	rec := &recorder{}
	c := startController(t, clusterOptions(pki, rec, client))
	waitUntil(t, "Ready", c.Ready)
	waitRounds(t, a, 3)

	_, snap := c.Current()
	want := []string{"apiserver-aaaa", ClusterName(b.address)}
	slices.Sort(want)
	if got := snapshotIDs(snap); !slices.Equal(got, want) {
		t.Errorf("servers = %v, want %v", got, want)
	}
	if n := decoy.totalRequests(); n != 0 {
		t.Errorf("a server listed only by untrusted EndpointSlices received %d requests", n)
	}
}

func TestLeaseMovingToAnotherAddressMovesItsServer(t *testing.T) {
	pki := newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	before := newFakeAPIServer(t, pki, plane[1].Version, plane[1].Groups)
	after := newFakeAPIServer(t, pki, plane[2].Version, plane[2].Groups)
	client := fake.NewClientset(identityLease("kube-system", "apiserver-bbbb", before.address, identityLabels))
	rec := &recorder{}
	c := startController(t, clusterOptions(pki, rec, client))
	waitUntil(t, "Ready", c.Ready)

	moved := identityLease("kube-system", "apiserver-bbbb", after.address, identityLabels)
	if _, err := client.CoordinationV1().Leases("kube-system").Update(context.Background(), moved, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := rec.waitOffer(t, "the server at its new address", func(snap *discovery.Snapshot) bool {
		s := serverByID(snap, "apiserver-bbbb")
		return s != nil && s.Cluster == ClusterName(after.address)
	})
	if got := snapshotIDs(o.snap); !slices.Equal(got, []string{"apiserver-bbbb"}) {
		t.Errorf("servers = %v, want the one server under its lease name", got)
	}
}

func TestRESTConfigCredentialsAreUsedAndCannotTurnOffVerification(t *testing.T) {
	pki := newTestPKI(t)
	plane := discoverytest.SkewedControlPlane()
	const token = "controller-token"
	a := newFakeAPIServer(t, pki, plane[0].Version, plane[0].Groups, withBearerToken(token))
	rogueCert := servingCert(t, newTestCA(t, "rogue-ca"), DefaultServerName)
	rogue := newFakeAPIServer(t, pki, plane[1].Version, plane[1].Groups, withBearerToken(token), withServingCert(rogueCert))
	rec := &recorder{}
	opts := testOptions(pki, rec, a, rogue)
	opts.FrontProxyCertificate = nil
	opts.RESTConfig = &rest.Config{
		Host:            "https://cluster.invalid",
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true, ServerName: "wrong.example"},
	}
	opts.Cluster = fakeCluster(fake.NewClientset())
	c := startController(t, opts)

	waitUntil(t, "Ready", c.Ready)
	series := fetchErrorSeries(rogue.address, pathReadyz, reasonTLS)
	waitUntil(t, series+" >= 2", func() bool { return metricValue(t, c, series) >= 2 })
	if _, snap := c.Current(); !slices.Equal(snapshotIDs(snap), []string{ClusterName(a.address)}) {
		t.Errorf("servers = %v, want only the verified one", snapshotIDs(snap))
	}
	if n := a.authFailureCount(); n != 0 {
		t.Errorf("%d requests failed authentication", n)
	}
	if got := a.header(pathAPIs).Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization = %q", got)
	}
	if n := rogue.totalRequests(); n != 0 {
		t.Errorf("the unverified server received %d requests", n)
	}
}
