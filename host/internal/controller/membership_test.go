package controller

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/logtest"
)

// newTrio is a PKI and fake API servers for the three members of the skewed
// control plane.
func newTrio(t *testing.T) (pki *testPKI, a, b, c *fakeAPIServer) {
	t.Helper()
	pki, a, b = newSkewedPair(t)
	plane := discoverytest.SkewedControlPlane()
	return pki, a, b, newFakeAPIServer(t, pki, plane[2].Version, plane[2].Groups)
}

// via is how the cluster names a server: its identity lease, or an
// EndpointSlice of the kubernetes Service.
type via int

const (
	viaLease via = iota
	viaSlice
)

func (v via) String() string { return [...]string{"identity lease", "EndpointSlice"}[v] }

// announce makes the cluster name srv through v, as name.
func announce(t *testing.T, client *fake.Clientset, v via, name string, srv *fakeAPIServer) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch v {
	case viaLease:
		_, err = client.CoordinationV1().Leases("kube-system").Create(ctx, identityLease("kube-system", "apiserver-"+name, srv.address, identityLabels), metav1.CreateOptions{})
	case viaSlice:
		host, port := hostPort(t, srv.address)
		_, err = client.DiscoveryV1().EndpointSlices("default").Create(ctx,
			kubernetesSlice("default", "kubernetes-"+name, "kubernetes", discoveryv1.AddressTypeIPv4, port, host), metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// withdraw takes back what announce made.
func withdraw(t *testing.T, client *fake.Clientset, v via, name string) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch v {
	case viaLease:
		err = client.CoordinationV1().Leases("kube-system").Delete(ctx, "apiserver-"+name, metav1.DeleteOptions{})
	case viaSlice:
		err = client.DiscoveryV1().EndpointSlices("default").Delete(ctx, "kubernetes-"+name, metav1.DeleteOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// gate makes the lists and watches of the leases and EndpointSlices fail
// while it is shut, as an API server that is down or refuses them; shutting
// it ends the watches open through it.
type gate struct {
	mu      sync.Mutex
	err     error
	watches []watch.Interface
}

func (g *gate) shut(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = err
	for _, w := range g.watches {
		w.Stop()
	}
	g.watches = nil
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.err = nil
}

func (g *gate) failure() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

type gatedLister struct {
	lw   cache.ListerWatcher
	gate *gate
}

func (l gatedLister) List(o metav1.ListOptions) (runtime.Object, error) {
	if err := l.gate.failure(); err != nil {
		return nil, err
	}
	return l.lw.List(o)
}

func (l gatedLister) Watch(o metav1.ListOptions) (watch.Interface, error) {
	if err := l.gate.failure(); err != nil {
		return nil, err
	}
	w, err := l.lw.Watch(o)
	if err == nil {
		l.gate.mu.Lock()
		l.gate.watches = append(l.gate.watches, w)
		l.gate.mu.Unlock()
	}
	return w, err
}

func (l gatedLister) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.lw)
}

// gated is the cluster of client, its leases and EndpointSlices behind g.
func gated(client *fake.Clientset, g *gate) *ClusterListers {
	l := fakeCluster(client)
	l.Leases, l.EndpointSlices = gatedLister{l.Leases, g}, gatedLister{l.EndpointSlices, g}
	return l
}

var errAPIDown = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")

// routesExactly matches a snapshot whose healthy servers are servers.
func routesExactly(servers ...*fakeAPIServer) func(*discovery.Snapshot) bool {
	var want []string
	for _, s := range servers {
		want = append(want, ClusterName(s.address))
	}
	slices.Sort(want)
	return func(snap *discovery.Snapshot) bool {
		var healthy []string
		for _, s := range snap.Servers {
			if s.Healthy {
				healthy = append(healthy, s.Cluster)
			}
		}
		slices.Sort(healthy)
		return slices.Equal(healthy, want)
	}
}

func addresses(servers ...*fakeAPIServer) []string {
	var list []string
	for _, s := range servers {
		list = append(list, s.address)
	}
	slices.Sort(list)
	return list
}

func memberAddresses(m Members) []string {
	var list []string
	for _, s := range m.Servers {
		list = append(list, s.Address)
	}
	return list
}

func TestBootstrapListIsUsedOnlyUntilTheClusterAnswers(t *testing.T) {
	for _, v := range []via{viaLease, viaSlice} {
		t.Run(v.String(), func(t *testing.T) {
			pki, a, b, c3 := newTrio(t)
			client := fake.NewClientset()
			announce(t, client, v, "a", a)
			announce(t, client, v, "c", c3)
			g := &gate{}
			g.shut(errAPIDown)
			rec := &recorder{}
			opts := testOptions(pki, rec, a, b)
			opts.Cluster = gated(client, g)
			c := startController(t, opts)

			rec.waitOffer(t, "the bootstrap list routed to", routesExactly(a, b))
			waitRounds(t, a, 3)
			if n := c3.totalRequests(); n != 0 {
				t.Errorf("a server only the cluster announces got %d requests before the cluster answered", n)
			}
			if m := c.Members(); m.ClusterRead || !slices.Equal(memberAddresses(m), addresses(a, b)) {
				t.Errorf("before the cluster answered: %+v; want the bootstrap list, not read", m)
			}

			g.open()
			after := rec.waitOffer(t, "the cluster's servers routed to", routesExactly(a, c3))
			// The bootstrap server the cluster lacks is no longer routed to, but
			// discovery keeps its APIs for the grace period.
			if s := serverByID(after.snap, ClusterName(b.address)); s == nil || s.Healthy {
				t.Errorf("b = %+v; want it in the snapshot, unhealthy", s)
			}
			m := c.Members()
			if !m.ClusterRead || !slices.Equal(memberAddresses(m), addresses(a, c3)) ||
				!slices.Equal(m.ListedNotInCluster, addresses(b)) || !slices.Equal(m.InClusterNotListed, addresses(c3)) {
				t.Errorf("after the cluster answered: %+v; want a and c, b listed but not in the cluster, c not listed", m)
			}
		})
	}
}

func TestServerRemovedFromTheClusterLeavesTheSnapshotWithoutRestart(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		announced, withdrawn []via
		// stays: another announcement keeps the server a member.
		stays bool
	}{
		{"lease deleted", []via{viaLease}, []via{viaLease}, false},
		{"endpoint removed", []via{viaSlice}, []via{viaSlice}, false},
		{"lease deleted and endpoint removed", []via{viaLease, viaSlice}, []via{viaLease, viaSlice}, false},
		{"lease deleted, endpoint kept", []via{viaLease, viaSlice}, []via{viaLease}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki, a, b := newSkewedPair(t)
			client := fake.NewClientset()
			announce(t, client, viaLease, "a", a)
			for _, v := range tc.announced {
				announce(t, client, v, "b", b)
			}
			rec := &recorder{}
			opts := testOptions(pki, rec)
			opts.Cluster = fakeCluster(client)
			opts.GracePeriod = 2 * time.Second
			c := startController(t, opts)
			rec.waitOffer(t, "a and b routed to", routesExactly(a, b))

			withdrawn := time.Now()
			for _, v := range tc.withdrawn {
				withdraw(t, client, v, "b")
			}
			if tc.stays {
				waitRounds(t, a, 5)
				if _, snap := c.Current(); !routesExactly(a, b)(snap) || serverByID(snap, ClusterName(b.address)) == nil {
					t.Errorf("servers %+v; want b routed to under its cluster name", snap.Servers)
				}
				return
			}
			unrouted := rec.waitOffer(t, "b out of routing", func(snap *discovery.Snapshot) bool {
				return routesExactly(a)(snap) && len(snap.Servers) == 2
			})
			if d := unrouted.at.Sub(withdrawn); d >= opts.GracePeriod {
				t.Errorf("b routed to for %v after it left the cluster; want it taken out at once", d)
			}
			left := rec.waitOffer(t, "b leaves the snapshot", func(snap *discovery.Snapshot) bool { return len(snap.Servers) == 1 })
			if got := snapshotIDs(left.snap); !slices.Equal(got, []string{"apiserver-a"}) {
				t.Errorf("servers after b left = %v", got)
			}
			if left.at.Sub(withdrawn) < opts.GracePeriod-opts.PollInterval {
				t.Errorf("b left the snapshot %v after it left the cluster, within the %v grace period", left.at.Sub(withdrawn), opts.GracePeriod)
			}
		})
	}
}

func TestJoinedServerIsRoutedOnceReady(t *testing.T) {
	for _, v := range []via{viaLease, viaSlice} {
		t.Run(v.String(), func(t *testing.T) {
			pki, a, b := newSkewedPair(t)
			client := fake.NewClientset()
			announce(t, client, v, "a", a)
			rec := &recorder{}
			opts := testOptions(pki, rec)
			opts.Cluster = fakeCluster(client)
			c := startController(t, opts)
			rec.waitOffer(t, "a routed to", routesExactly(a))

			b.setReady(false)
			announce(t, client, v, "b", b)
			waitUntil(t, "b probed not ready", func() bool { return b.failedReadyzCount() >= 3 })
			if m := c.Members(); !slices.Equal(memberAddresses(m), addresses(a, b)) {
				t.Errorf("members %+v; want b a member once announced", m.Servers)
			}
			for _, o := range rec.all() {
				if s := serverByID(o.snap, ClusterName(b.address)); s != nil && s.Healthy {
					t.Fatalf("generation %d routes to b before its /readyz answered 200", o.snap.Generation)
				}
			}

			ready := time.Now()
			b.setReady(true)
			joined := rec.waitOffer(t, "b routed to", routesExactly(a, b))
			if joined.at.Before(ready) {
				t.Errorf("b routed to at %v, before it was ready at %v", joined.at, ready)
			}
		})
	}
}

func TestClusterOutageKeepsTheLastMembership(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"API unreachable", errAPIDown},
		{"reads forbidden", apierrors.NewForbidden(schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, "", errors.New("RBAC: not allowed"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki, a, b, c3 := newTrio(t)
			client := fake.NewClientset()
			announce(t, client, viaLease, "a", a)
			announce(t, client, viaLease, "c", c3)
			g := &gate{}
			logs := &logtest.Buffer{}
			rec := &recorder{}
			opts := testOptions(pki, rec, a, b)
			opts.Cluster = gated(client, g)
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
			c := startController(t, opts)
			rec.waitOffer(t, "the cluster's servers routed to", routesExactly(a, c3))

			g.shut(tc.err)
			// What changes while the cluster cannot be read is not seen.
			withdraw(t, client, viaLease, "c")
			announce(t, client, viaLease, "b", b)
			waitUntil(t, "the failed reads logged", func() bool { return strings.Contains(logs.String(), "cannot list or watch") })
			waitRounds(t, a, 5)
			if _, snap := c.Current(); !routesExactly(a, c3)(snap) {
				t.Errorf("servers %+v during the outage; want a and c, as last read, and not the bootstrap list", snap.Servers)
			}
			if m := c.Members(); !m.ClusterRead || !slices.Equal(memberAddresses(m), addresses(a, c3)) {
				t.Errorf("members during the outage: %+v", m)
			}
			if n := strings.Count(logs.String(), "cannot list or watch"); n > 4 {
				t.Errorf("the failed reads logged %d times; want each distinct error once:\n%s", n, logs)
			}

			g.open()
			rec.waitOffer(t, "the cluster followed again", routesExactly(a, b))
		})
	}
}

func TestMembershipDifferencesAreLoggedAndCounted(t *testing.T) {
	const (
		a = iota
		b
		c
	)
	type logged struct{ level, msg, attr string }
	notInCluster := logged{"WARN", "listed API server is not in the cluster: not routed to", "address"}
	notInClusterRouted := logged{"WARN", "listed API server is not in the cluster; routed to as listed", "address"}
	notListed := logged{"INFO", "API server in the cluster but not listed: routed to", "address"}
	notListedUnrouted := logged{"INFO", "API server in the cluster but not listed: not routed to, as the membership is the listed servers", "address"}
	localNotInCluster := logged{"WARN", "the local API server is announced by no identity lease or EndpointSlice", "local"}
	for _, tc := range []struct {
		name       string
		membership Membership
		listed     []int
		local      int // -1: none
		announced  []int
		members    []int
		// The servers listed but not in the cluster, and those in it but
		// not listed, each logged as logs says.
		notInCluster, notListed []int
		logs                    map[int]logged
		bySource                map[Source]int
	}{
		{name: "a listed server the cluster lacks", listed: []int{a, b}, local: -1, announced: []int{a}, members: []int{a},
			notInCluster: []int{b}, logs: map[int]logged{b: notInCluster}, bySource: map[Source]int{SourceListed: 1, SourceLease: 1}},
		{name: "a cluster member not listed", listed: []int{a}, local: -1, announced: []int{a, c}, members: []int{a, c},
			notListed: []int{c}, logs: map[int]logged{c: notListed}, bySource: map[Source]int{SourceListed: 1, SourceLease: 2}},
		{name: "both", listed: []int{a, b}, local: -1, announced: []int{a, c}, members: []int{a, c},
			notInCluster: []int{b}, notListed: []int{c}, logs: map[int]logged{b: notInCluster, c: notListed}, bySource: map[Source]int{SourceListed: 1, SourceLease: 2}},
		{name: "both, membership listed", membership: MembershipListed, listed: []int{a, b}, local: -1, announced: []int{a, c}, members: []int{a, b},
			notInCluster: []int{b}, notListed: []int{c}, logs: map[int]logged{b: notInClusterRouted, c: notListedUnrouted}, bySource: map[Source]int{SourceListed: 2, SourceLease: 1}},
		{name: "nothing listed", local: -1, announced: []int{a, c}, members: []int{a, c}, bySource: map[Source]int{SourceLease: 2}},
		{name: "the local server not announced", local: a, announced: []int{c}, members: []int{a, c},
			notInCluster: []int{a}, logs: map[int]logged{a: localNotInCluster}, bySource: map[Source]int{SourceLocal: 1, SourceLease: 1}},
		{name: "agreement", listed: []int{a, c}, local: -1, announced: []int{a, c}, members: []int{a, c}, bySource: map[Source]int{SourceListed: 2, SourceLease: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki, sa, sb, sc := newTrio(t)
			servers := []*fakeAPIServer{sa, sb, sc}
			pick := func(indexes []int) []*fakeAPIServer {
				var list []*fakeAPIServer
				for _, i := range indexes {
					list = append(list, servers[i])
				}
				return list
			}
			client := fake.NewClientset()
			for _, i := range tc.announced {
				announce(t, client, viaLease, strconv.Itoa(i), servers[i])
			}
			logs := &logtest.Buffer{}
			rec := &recorder{}
			opts := testOptions(pki, rec, pick(tc.listed)...)
			if tc.local >= 0 {
				opts.LocalServer = servers[tc.local].url()
			}
			opts.Cluster = fakeCluster(client)
			opts.Membership = tc.membership
			opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
			c := startController(t, opts)

			rec.waitOffer(t, "the members routed to", routesExactly(pick(tc.members)...))
			waitRounds(t, servers[tc.members[0]], 5)
			m := c.Members()
			if !m.ClusterRead || !slices.Equal(memberAddresses(m), addresses(pick(tc.members)...)) {
				t.Errorf("members %+v; want %v", m, addresses(pick(tc.members)...))
			}
			if !slices.Equal(m.ListedNotInCluster, addresses(pick(tc.notInCluster)...)) || !slices.Equal(m.InClusterNotListed, addresses(pick(tc.notListed)...)) {
				t.Errorf("differences %v and %v; want %v listed but not in the cluster and %v in it but not listed",
					m.ListedNotInCluster, m.InClusterNotListed, addresses(pick(tc.notInCluster)...), addresses(pick(tc.notListed)...))
			}
			if got, want := metricValue(t, c, "skewgate_controller_membership_differences"), float64(len(tc.notInCluster)+len(tc.notListed)); got != want {
				t.Errorf("skewgate_controller_membership_differences = %v, want %v", got, want)
			}
			for _, b := range sourceBits {
				if got := metricValue(t, c, `skewgate_controller_members{source="`+string(b.source)+`"}`); got != float64(tc.bySource[b.source]) {
					t.Errorf("members from %s = %v, want %d", b.source, got, tc.bySource[b.source])
				}
			}
			out := logs.String()
			for i, want := range tc.logs {
				line := "level=" + want.level + ` msg="` + want.msg
				if n := strings.Count(out, line); n != 1 {
					t.Errorf("%q logged %d times; want once:\n%s", line, n, out)
				}
				if !strings.Contains(out, want.attr+"="+servers[i].address) {
					t.Errorf("the log does not name %s:\n%s", servers[i].address, out)
				}
			}
			for _, msg := range []string{"not in the cluster", "in the cluster but not listed", "announced by no identity lease"} {
				if len(tc.logs) == 0 && strings.Contains(out, msg) {
					t.Errorf("%q logged where the listed servers and the cluster agree:\n%s", msg, out)
				}
			}
		})
	}
}

// In node-local mode the local server is a member whatever the cluster
// says; alone it is no bootstrap list: its clients never see its APIs alone
// while its peers are unknown. Under the listed membership it is all there
// is, and routed to at once.
func TestLocalServerIsAlwaysAMemberButAloneNoBootstrapList(t *testing.T) {
	for _, tc := range []struct {
		name string
		// withPeerListed lists the peer too; localAnnounced has the cluster
		// announce the local server.
		withPeerListed, localAnnounced bool
		membership                     Membership
	}{
		{"alone, announced", false, true, MembershipCluster},
		{"alone, not announced", false, false, MembershipCluster},
		{"beside a bootstrap list", true, true, MembershipCluster},
		{"alone, membership listed", false, true, MembershipListed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pki, local, peer := newSkewedPair(t)
			client := fake.NewClientset()
			announce(t, client, viaLease, "peer", peer)
			if tc.localAnnounced {
				announce(t, client, viaLease, "local", local)
			}
			g := &gate{}
			g.shut(errAPIDown)
			rec := &recorder{}
			opts := testOptions(pki, rec)
			if tc.withPeerListed {
				opts.StaticServers = []string{peer.url()}
			}
			opts.LocalServer = local.url()
			opts.Cluster = gated(client, g)
			opts.Membership = tc.membership
			c := startController(t, opts)

			if tc.membership == MembershipListed {
				rec.waitOffer(t, "the local server routed to", routesExactly(local))
				g.open()
				waitUntil(t, "the cluster read", func() bool { return c.Members().ClusterRead })
				waitRounds(t, local, 3)
				if _, snap := c.Current(); !routesExactly(local)(snap) || peer.totalRequests() != 0 {
					t.Errorf("servers %+v, %d requests to the peer; want the local server alone", snap.Servers, peer.totalRequests())
				}
				return
			}
			if tc.withPeerListed {
				o := rec.waitOffer(t, "the bootstrap list routed to", routesExactly(local, peer))
				if o.snap.Preferred != ClusterName(local.address) {
					t.Errorf("preferred %q before the cluster answered; want the local server", o.snap.Preferred)
				}
			} else {
				time.Sleep(10 * opts.PollInterval)
				if c.Ready() || local.totalRequests() != 0 {
					t.Fatalf("the local server alone was used before the cluster answered: ready %v, %d requests", c.Ready(), local.totalRequests())
				}
			}
			g.open()
			o := rec.waitOffer(t, "the local server and its peer routed to", func(snap *discovery.Snapshot) bool {
				return routesExactly(local, peer)(snap) && slices.Contains(snapshotIDs(snap), "apiserver-peer")
			})
			want := ClusterName(local.address)
			if tc.localAnnounced {
				want = "apiserver-local"
			}
			if o.snap.Preferred != want {
				t.Errorf("preferred %q; want the local server, %s", o.snap.Preferred, want)
			}
			if got := c.Members().ListedNotInCluster; tc.localAnnounced != (len(got) == 0) {
				t.Errorf("listed but not in the cluster: %v", got)
			}
		})
	}
}
