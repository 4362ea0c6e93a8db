package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// Where API servers announce themselves. Only these namespaces and labels are
// trusted: anyone able to write a Lease or EndpointSlice elsewhere could
// otherwise inject a backend.
const (
	identityLeaseNamespace = "kube-system"
	identityLabelKey       = "apiserver.kubernetes.io/identity"
	identityLabelValue     = "kube-apiserver"

	kubernetesServiceNamespace = "default"
	kubernetesServiceName      = "kubernetes"
)

// maxNameLength is the longest server ID or cluster name a snapshot accepts.
const maxNameLength = 253

// ClusterName is the deterministic upstream (Envoy cluster) name of the API
// server at address (host:port, as the controller canonicalises it):
// "apiserver-" + host + "-" + port, lower-cased, every character other than a
// letter or digit replaced by '-'. It is also the server's ID when no identity
// lease names it. Distinct IP addresses always get distinct names.
func ClusterName(address string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		host, port = address, ""
	}
	var b strings.Builder
	b.Grow(len("apiserver-") + len(host) + 1 + len(port))
	b.WriteString("apiserver-")
	for _, c := range strings.ToLower(host) {
		if ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	b.WriteByte('-')
	b.WriteString(port)
	return b.String()
}

// parseStaticServer turns an --apiserver URL into the canonical host:port.
func parseStaticServer(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("API server %q: %w", raw, err)
	}
	if u.Scheme != "https" {
		return "", fmt.Errorf("API server %q: must be an https:// URL", raw)
	}
	if u.Opaque != "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("API server %q: must be https://host:port with nothing after the port", raw)
	}
	host := u.Hostname()
	if host == "" {
		return "", fmt.Errorf("API server %q: no host", raw)
	}
	port := 443
	if p := u.Port(); p != "" {
		port, err = strconv.Atoi(p)
		if err != nil || port < 1 || port > 65535 {
			return "", fmt.Errorf("API server %q: port must be 1 to 65535", raw)
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		address, err := canonicalAddress(ip, uint16(port))
		if err != nil {
			return "", fmt.Errorf("API server %q: %w", raw, err)
		}
		return address, nil
	}
	address := net.JoinHostPort(strings.ToLower(host), strconv.Itoa(port))
	if len(ClusterName(address)) > maxNameLength {
		return "", fmt.Errorf("API server %q: host name too long", raw)
	}
	return address, nil
}

// parsePeerAddress validates an announced ip:port: an IP literal (never a
// host name, which would make the announcement a DNS lookup away from any
// target), a usable unicast address and a port from 1 to 65535.
func parsePeerAddress(s string) (string, error) {
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return "", fmt.Errorf("%q is not an ip:port address", s)
	}
	if ap.Port() == 0 {
		return "", fmt.Errorf("%q: port must be 1 to 65535", s)
	}
	address, err := canonicalAddress(ap.Addr(), ap.Port())
	if err != nil {
		return "", fmt.Errorf("%q: %w", s, err)
	}
	return address, nil
}

// canonicalAddress spells an IP address one way only, so that the same server
// found through different sources is recognised as one.
func canonicalAddress(ip netip.Addr, port uint16) (string, error) {
	if ip.Zone() != "" {
		return "", errors.New("IPv6 zones are not supported")
	}
	ip = ip.Unmap()
	if ip.IsUnspecified() || ip.IsMulticast() {
		return "", fmt.Errorf("%s is not a unicast address", ip)
	}
	return netip.AddrPortFrom(ip, port).String(), nil
}

// errNoPeerAddress marks a valid identity lease that announces no address: its
// server is found through the EndpointSlices instead.
var errNoPeerAddress = errors.New("no " + corev1.AnnotationPeerAdvertiseAddress + " annotation")

// leaseAddress returns the server address an identity lease announces; the
// lease name is the server ID.
func leaseAddress(l *coordinationv1.Lease) (string, error) {
	if l.Namespace != identityLeaseNamespace {
		return "", fmt.Errorf("lease is in namespace %q, not %s", l.Namespace, identityLeaseNamespace)
	}
	if l.Labels[identityLabelKey] != identityLabelValue {
		return "", fmt.Errorf("lease lacks label %s=%s", identityLabelKey, identityLabelValue)
	}
	if len(l.Name) > maxNameLength {
		return "", errors.New("lease name too long for a server ID")
	}
	raw, ok := l.Annotations[corev1.AnnotationPeerAdvertiseAddress]
	if !ok {
		return "", errNoPeerAddress
	}
	address, err := parsePeerAddress(raw)
	if err != nil {
		return "", fmt.Errorf("annotation %s: %w", corev1.AnnotationPeerAdvertiseAddress, err)
	}
	return address, nil
}

// sliceAddresses returns the server addresses an EndpointSlice of the
// kubernetes Service lists, and a description of every entry it refused.
func sliceAddresses(s *discoveryv1.EndpointSlice) (addresses, refused []string) {
	if s.Namespace != kubernetesServiceNamespace {
		return nil, []string{fmt.Sprintf("EndpointSlice is in namespace %q, not %s", s.Namespace, kubernetesServiceNamespace)}
	}
	if s.Labels[discoveryv1.LabelServiceName] != kubernetesServiceName {
		return nil, []string{fmt.Sprintf("EndpointSlice lacks label %s=%s", discoveryv1.LabelServiceName, kubernetesServiceName)}
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return nil, []string{fmt.Sprintf("EndpointSlice address type %q is not IPv4 or IPv6", s.AddressType)}
	}
	port, err := slicePort(s.Ports)
	if err != nil {
		return nil, []string{err.Error()}
	}
	for _, ep := range s.Endpoints {
		for _, ip := range ep.Addresses {
			address, err := parsePeerAddress(net.JoinHostPort(ip, strconv.Itoa(int(port))))
			if err != nil {
				refused = append(refused, "endpoint "+err.Error())
				continue
			}
			addresses = append(addresses, address)
		}
	}
	return addresses, refused
}

// slicePort picks the API servers' port: the one named https, as kube-apiserver
// names it, or the only port there is.
func slicePort(ports []discoveryv1.EndpointPort) (int32, error) {
	var chosen *discoveryv1.EndpointPort
	for i := range ports {
		if ports[i].Name != nil && *ports[i].Name == "https" {
			chosen = &ports[i]
			break
		}
	}
	if chosen == nil && len(ports) == 1 {
		chosen = &ports[0]
	}
	if chosen == nil || chosen.Port == nil {
		return 0, errors.New("EndpointSlice has no port named https")
	}
	if chosen.Protocol != nil && *chosen.Protocol != corev1.ProtocolTCP {
		return 0, fmt.Errorf("EndpointSlice port protocol %s is not TCP", *chosen.Protocol)
	}
	if *chosen.Port < 1 || *chosen.Port > 65535 {
		return 0, fmt.Errorf("EndpointSlice port %d is not 1 to 65535", *chosen.Port)
	}
	return *chosen.Port, nil
}

// ClusterListers list and watch what API servers announce themselves in. The
// controller narrows both to the labels it trusts and re-checks namespace and
// labels of everything they return.
type ClusterListers struct {
	// Leases are the identity leases (kube-system).
	Leases cache.ListerWatcher
	// EndpointSlices are the kubernetes Service's EndpointSlices (default).
	EndpointSlices cache.ListerWatcher
}

// clusterListersFor lists and watches through cfg with clients of the two API
// groups only: the full clientset would link and register every Kubernetes API
// type, about 10 MiB of resident memory for two resources.
func clusterListersFor(cfg *rest.Config) (*ClusterListers, error) {
	leases, err := groupClient(cfg, coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	slices, err := groupClient(cfg, discoveryv1.SchemeGroupVersion, discoveryv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	return &ClusterListers{
		Leases:         cache.NewListWatchFromClient(leases, "leases", identityLeaseNamespace, fields.Everything()),
		EndpointSlices: cache.NewListWatchFromClient(slices, "endpointslices", kubernetesServiceNamespace, fields.Everything()),
	}, nil
}

func groupClient(cfg *rest.Config, gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	c.GroupVersion = &gv
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// labelled lists and watches only objects carrying selector.
type labelled struct {
	lw       cache.ListerWatcher
	selector string
}

func (l labelled) List(o metav1.ListOptions) (runtime.Object, error) {
	o.LabelSelector = l.selector
	return l.lw.List(o)
}

func (l labelled) Watch(o metav1.ListOptions) (watch.Interface, error) {
	o.LabelSelector = l.selector
	return l.lw.Watch(o)
}

// IsWatchListSemanticsUnSupported passes on whether the wrapped lister can
// stream its initial list as watch events; the reflector asks.
func (l labelled) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.lw)
}

// clusterSource watches the identity Leases and the kubernetes Service's
// EndpointSlices through informers restricted to their label.
type clusterSource struct {
	leases, slices cache.SharedIndexInformer
	running        sync.WaitGroup
}

func newClusterSource(l ClusterListers) *clusterSource {
	return &clusterSource{
		leases: cache.NewSharedIndexInformer(labelled{l.Leases, labels.Set{identityLabelKey: identityLabelValue}.String()},
			&coordinationv1.Lease{}, 0, cache.Indexers{}),
		slices: cache.NewSharedIndexInformer(labelled{l.EndpointSlices, labels.Set{discoveryv1.LabelServiceName: kubernetesServiceName}.String()},
			&discoveryv1.EndpointSlice{}, 0, cache.Indexers{}),
	}
}

// start runs the informers until ctx is done and waits for their first list.
func (s *clusterSource) start(ctx context.Context) error {
	for _, inf := range []cache.SharedIndexInformer{s.leases, s.slices} {
		s.running.Go(func() { inf.RunWithContext(ctx) })
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.leases.HasSynced, s.slices.HasSynced) {
		return fmt.Errorf("controller: waiting for the lease and EndpointSlice informers: %w", ctx.Err())
	}
	return nil
}

// stop waits for the informers to end; ctx passed to start must be done.
func (s *clusterSource) stop() { s.running.Wait() }

func (s *clusterSource) list() ([]*coordinationv1.Lease, []*discoveryv1.EndpointSlice) {
	var leases []*coordinationv1.Lease
	for _, obj := range s.leases.GetStore().List() {
		leases = append(leases, obj.(*coordinationv1.Lease))
	}
	var slices []*discoveryv1.EndpointSlice
	for _, obj := range s.slices.GetStore().List() {
		slices = append(slices, obj.(*discoveryv1.EndpointSlice))
	}
	return leases, slices
}
