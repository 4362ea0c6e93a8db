package controller

import (
	"errors"
	"math/rand/v2"
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
			got, refused := sliceAddresses(tc.slice)
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
