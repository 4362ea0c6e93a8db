package controller

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

func TestClusterNameSpellsHostAndPort(t *testing.T) {
	for _, tc := range []struct{ address, want string }{
		{"127.0.0.1:6443", "apiserver-127-0-0-1-6443"},
		{"[2001:db8::1]:443", "apiserver-2001-db8--1-443"},
		{"[::1]:6443", "apiserver---1-6443"},
		{"kube-a.example.com:6443", "apiserver-kube-a-example-com-6443"},
	} {
		if got := ClusterName(tc.address); got != tc.want {
			t.Errorf("ClusterName(%q) = %q, want %q", tc.address, got, tc.want)
		}
	}
}

func TestDistinctIPAddressesGetDistinctClusterNames(t *testing.T) {
	rng := rand.New(rand.NewPCG(20260601, 7))
	// Small numbers and many zero groups make IPv4 and compressed IPv6 forms
	// as alike as they can get.
	group := func() uint16 {
		if rng.IntN(2) == 0 {
			return 0
		}
		return uint16(rng.IntN(0x20))
	}
	byName := map[string]string{}
	for range 20000 {
		var ip netip.Addr
		if rng.IntN(2) == 0 {
			ip = netip.AddrFrom4([4]byte{byte(rng.IntN(8)), byte(rng.IntN(8)), byte(rng.IntN(8)), byte(rng.IntN(8))})
		} else {
			var b [16]byte
			for i := 0; i < 16; i += 2 {
				g := group()
				b[i], b[i+1] = byte(g>>8), byte(g)
			}
			ip = netip.AddrFrom16(b)
		}
		address, err := parsePeerAddress(netip.AddrPortFrom(ip, uint16(1+rng.IntN(3))).String())
		if err != nil {
			continue // unspecified or multicast
		}
		name := ClusterName(address)
		if other, ok := byName[name]; ok && other != address {
			t.Fatalf("%s and %s both get the cluster name %s", other, address, name)
		}
		byName[name] = address
	}
	if len(byName) < 1000 {
		t.Fatalf("only %d distinct addresses generated", len(byName))
	}
}

func TestPeerAddressMustBeAUsableIPLiteralWithPort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.1:6443", "10.0.0.1:6443"},
		{"127.0.0.1:1", "127.0.0.1:1"},
		{"10.0.0.1:65535", "10.0.0.1:65535"},
		{"[2001:DB8:0::1]:6443", "[2001:db8::1]:6443"},
		{"[::ffff:10.0.0.1]:6443", "10.0.0.1:6443"},
		{"localhost:6443", ""},
		{"kube-a.example.com:6443", ""},
		{"10.0.0.1", ""},
		{"10.0.0.1:", ""},
		{"10.0.0.1:0", ""},
		{"10.0.0.1:65536", ""},
		{"2001:db8::1:6443", ""},
		{"[fe80::1%eth0]:6443", ""},
		{"0.0.0.0:6443", ""},
		{"[::]:6443", ""},
		{"224.0.0.1:6443", ""},
		{"010.0.0.1:6443", ""},
		{" 10.0.0.1:6443", ""},
		{"10.0.0.1:6443\n", ""},
		{"", ""},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := parsePeerAddress(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Errorf("accepted as %q", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestStaticServerMustBeAnHTTPSHostAndPort(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://10.0.0.1:6443", "10.0.0.1:6443"},
		{"https://10.0.0.1:6443/", "10.0.0.1:6443"},
		{"https://10.0.0.1", "10.0.0.1:443"},
		{"https://[2001:DB8::1]:6443", "[2001:db8::1]:6443"},
		{"https://[::ffff:10.0.0.1]:6443", "10.0.0.1:6443"},
		{"https://Kube-A.Example.com:6443", "kube-a.example.com:6443"},
		{"http://10.0.0.1:6443", ""},
		{"10.0.0.1:6443", ""},
		{"https://10.0.0.1:6443/api", ""},
		{"https://user@10.0.0.1:6443", ""},
		{"https://10.0.0.1:6443?insecure=true", ""},
		{"https://10.0.0.1:6443#x", ""},
		{"https://10.0.0.1:0", ""},
		{"https://10.0.0.1:99999", ""},
		{"https://:6443", ""},
		{"https://0.0.0.0:6443", ""},
		{"https://[fe80::1%25eth0]:6443", ""},
		{"https://" + strings.Repeat("a.", 125) + "example:6443", ""},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseStaticServer(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Errorf("accepted as %q", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("= %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestLeaseIsTrustedOnlyInKubeSystemWithTheIdentityLabel(t *testing.T) {
	long := "apiserver-" + strings.Repeat("x", maxNameLength)
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
		want  string
		err   error
	}{
		{"valid", identityLease("kube-system", "apiserver-a", "10.0.0.1:6443", identityLabels), "10.0.0.1:6443", nil},
		{"other namespace", identityLease("default", "apiserver-a", "10.0.0.1:6443", identityLabels), "", nil},
		{"no label", identityLease("kube-system", "apiserver-a", "10.0.0.1:6443", nil), "", nil},
		{"other identity", identityLease("kube-system", "apiserver-a", "10.0.0.1:6443",
			map[string]string{identityLabelKey: "kube-scheduler"}), "", nil},
		{"no annotation", identityLease("kube-system", "apiserver-a", "", identityLabels), "", errNoPeerAddress},
		{"host name", identityLease("kube-system", "apiserver-a", "kube-a:6443", identityLabels), "", nil},
		{"name too long", identityLease("kube-system", long, "10.0.0.1:6443", identityLabels), "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaseAddress(tc.lease)
			switch {
			case tc.want != "":
				if err != nil || got != tc.want {
					t.Errorf("= %q, %v; want %q", got, err, tc.want)
				}
			case tc.err != nil:
				if !errors.Is(err, tc.err) {
					t.Errorf("error = %v, want %v", err, tc.err)
				}
			case err == nil || errors.Is(err, errNoPeerAddress):
				t.Errorf("= %q, %v; want the lease refused", got, err)
			}
		})
	}
}

func TestEndpointSliceAddressesComeOnlyFromTheKubernetesService(t *testing.T) {
	twoPorts := kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.1")
	metricsName, metricsPort := "metrics", int32(9090)
	twoPorts.Ports[0].Name = &metricsName
	twoPorts.Ports = append(twoPorts.Ports, discoveryv1.EndpointPort{Name: &metricsName, Port: &metricsPort})
	unnamed := kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.1")
	unnamed.Ports[0].Name = nil
	udp := kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.1")
	protocol := corev1.ProtocolUDP
	udp.Ports[0].Protocol = &protocol
	for _, tc := range []struct {
		name    string
		slice   *discoveryv1.EndpointSlice
		want    []string
		refused int
	}{
		{"IPv4", kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.1", "10.0.0.2"),
			[]string{"10.0.0.1:6443", "10.0.0.2:6443"}, 0},
		{"IPv6", kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv6, 6443, "2001:DB8::1"),
			[]string{"[2001:db8::1]:6443"}, 0},
		{"one unnamed port", unnamed, []string{"10.0.0.1:6443"}, 0},
		{"bad address among good", kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "999.0.0.1", "10.0.0.1", "0.0.0.0"),
			[]string{"10.0.0.1:6443"}, 2},
		{"other namespace", kubernetesSlice("kube-system", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.1"), nil, 1},
		{"other service", kubernetesSlice("default", "web", "web", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.1"), nil, 1},
		{"FQDN", kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeFQDN, 6443, "kube-a.example.com"), nil, 1},
		{"no https port among several", twoPorts, nil, 1},
		{"UDP", udp, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, refused := sliceAddresses(asWire(tc.slice, &endpointSlice{}))
			if !slices.Equal(got, tc.want) || len(refused) != tc.refused {
				t.Errorf("= %v, refused %q; want %v and %d refused", got, refused, tc.want, tc.refused)
			}
		})
	}
}

func TestMostRecentlyRenewedLeaseNamesASharedAddress(t *testing.T) {
	renewedAt := func(l *coordinationv1.Lease, at time.Time) *coordinationv1.Lease {
		l.Spec.RenewTime = &metav1.MicroTime{Time: at}
		return l
	}
	now := time.Now()
	for _, tc := range []struct {
		name   string
		leases []*coordinationv1.Lease
		want   string
	}{
		{"replacement renewed later", []*coordinationv1.Lease{
			renewedAt(identityLease("kube-system", "apiserver-new", "10.0.0.1:6443", identityLabels), now),
			renewedAt(identityLease("kube-system", "apiserver-old", "10.0.0.1:6443", identityLabels), now.Add(-time.Hour)),
		}, "apiserver-new"},
		{"listed in the other order", []*coordinationv1.Lease{
			renewedAt(identityLease("kube-system", "apiserver-old", "10.0.0.1:6443", identityLabels), now.Add(-time.Hour)),
			renewedAt(identityLease("kube-system", "apiserver-new", "10.0.0.1:6443", identityLabels), now),
		}, "apiserver-new"},
		{"same renewal, name decides", []*coordinationv1.Lease{
			renewedAt(identityLease("kube-system", "apiserver-b", "10.0.0.1:6443", identityLabels), now),
			renewedAt(identityLease("kube-system", "apiserver-a", "10.0.0.1:6443", identityLabels), now),
		}, "apiserver-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Controller{notices: newNotices(discardLogger())}
			got := c.leaseIDsByAddress(tc.leases)
			if len(got) != 1 || got["10.0.0.1:6443"] != tc.want {
				t.Errorf("= %v, want 10.0.0.1:6443 named %s", got, tc.want)
			}
		})
	}
}

// TestClusterClientsDecodeWhatKubeAPIServerSends lists and watches through
// the clients clusterListersFor builds, against a server answering as
// kube-apiserver does (a JSON list, or initial events ended by a bookmark when
// the client asks for them, then a change through the watch), so that the
// kinds, paths and label selectors the controller uses are those of the real
// API.
func TestClusterClientsDecodeWhatKubeAPIServerSends(t *testing.T) {
	lease := identityLease("kube-system", "apiserver-aaaa", "10.0.0.1:6443", identityLabels)
	lease.TypeMeta = metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"}
	lease.ResourceVersion = "10"
	movedLease := lease.DeepCopy()
	movedLease.ResourceVersion, movedLease.Annotations[corev1.AnnotationPeerAdvertiseAddress] = "11", "10.0.0.3:6443"
	slice := kubernetesSlice("default", "kubernetes", "kubernetes", discoveryv1.AddressTypeIPv4, 6443, "10.0.0.2")
	slice.TypeMeta = metav1.TypeMeta{Kind: "EndpointSlice", APIVersion: "discovery.k8s.io/v1"}
	slice.ResourceVersion = "10"
	grownSlice := slice.DeepCopy()
	grownSlice.ResourceVersion = "11"
	grownSlice.Endpoints = append(grownSlice.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.0.0.4"}})
	cordoned := &corev1.Node{TypeMeta: metav1.TypeMeta{Kind: "Node", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "cp-1", ResourceVersion: "10"},
		Spec:       corev1.NodeSpec{Unschedulable: true},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "cp-1"}}}}
	readdressed := cordoned.DeepCopy()
	readdressed.ResourceVersion = "11"
	readdressed.Status.Addresses = append(readdressed.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "192.0.2.1"})
	type resource struct {
		list             runtime.Object
		initial, changed metav1.Object
		selector, fields string
	}
	resources := map[string]resource{
		"/apis/coordination.k8s.io/v1/namespaces/kube-system/leases": {
			&coordinationv1.LeaseList{TypeMeta: metav1.TypeMeta{Kind: "LeaseList", APIVersion: "coordination.k8s.io/v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []coordinationv1.Lease{*lease}},
			lease, movedLease, "apiserver.kubernetes.io/identity=kube-apiserver", ""},
		"/apis/discovery.k8s.io/v1/namespaces/default/endpointslices": {
			&discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{Kind: "EndpointSliceList", APIVersion: "discovery.k8s.io/v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []discoveryv1.EndpointSlice{*slice}},
			slice, grownSlice, "kubernetes.io/service-name=kubernetes", ""},
		"/api/v1/nodes": {
			&corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"},
				ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.Node{*cordoned}},
			cordoned, readdressed, "", "spec.unschedulable=true"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, ok := resources[r.URL.Path]
		if !ok {
			t.Errorf("request for %s", r.URL.Path)
			http.NotFound(w, r)
			return
		}
		q := r.URL.Query()
		if got := q.Get("labelSelector"); got != res.selector {
			t.Errorf("%s: label selector %q, want %q", r.URL.Path, got, res.selector)
		}
		if got := q.Get("fieldSelector"); got != res.fields {
			t.Errorf("%s: field selector %q, want %q", r.URL.Path, got, res.fields)
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		if q.Get("watch") != "true" {
			if err := enc.Encode(res.list); err != nil {
				t.Error(err)
			}
			return
		}
		var events []map[string]any
		if q.Get("sendInitialEvents") == "true" {
			kind := res.initial.(runtime.Object).GetObjectKind().GroupVersionKind()
			bookmark := map[string]any{"kind": kind.Kind, "apiVersion": kind.GroupVersion().String(),
				"metadata": map[string]any{"resourceVersion": "10", "annotations": map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
			events = append(events, map[string]any{"type": "ADDED", "object": res.initial}, map[string]any{"type": "BOOKMARK", "object": bookmark})
		}
		for _, e := range append(events, map[string]any{"type": "MODIFIED", "object": res.changed}) {
			if err := enc.Encode(e); err != nil {
				t.Error(err)
			}
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)

	listers, err := clusterListersFor(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	src := newClusterSource(*listers, func() {}, func(err error) { t.Errorf("cluster watch: %v", err) })
	cordons := newCordonSource(listers.Nodes, func() {}, func(err error) { t.Errorf("node watch: %v", err) })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() {
		cancel()
		src.stop()
		cordons.stop()
	})
	cordons.start(ctx)
	src.start(ctx)
	waitUntil(t, "the watched changes", func() bool {
		leases, endpointSlices := src.list()
		nodes := cordons.cordoned()
		return len(leases) == 1 && leases[0].ResourceVersion == "11" && len(endpointSlices) == 1 && endpointSlices[0].ResourceVersion == "11" &&
			len(nodes) == 1 && nodes[0].ResourceVersion == "11"
	})
	draining := drainingAddresses(cordons.cordoned())
	want := map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "cp-1", netip.MustParseAddr("192.0.2.1"): "cp-1"}
	if !maps.Equal(draining, want) {
		t.Errorf("draining addresses %v; want %v", draining, want)
	}
	leases, endpointSlices := src.list()
	if got, err := leaseAddress(leases[0]); err != nil || got != "10.0.0.3:6443" || leases[0].Name != "apiserver-aaaa" {
		t.Errorf("lease %s announces %q, %v; want apiserver-aaaa at 10.0.0.3:6443", leases[0].Name, got, err)
	}
	if got, refused := sliceAddresses(endpointSlices[0]); !slices.Equal(got, []string{"10.0.0.2:6443", "10.0.0.4:6443"}) || len(refused) != 0 {
		t.Errorf("EndpointSlice addresses %v, refused %q; want 10.0.0.2:6443 and 10.0.0.4:6443", got, refused)
	}
}
