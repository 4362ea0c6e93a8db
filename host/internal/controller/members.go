package controller

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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

	// The names k8s.io/api/core/v1 and k8s.io/api/discovery/v1 give these.
	peerAdvertiseAddressAnnotation = "kubernetes.io/peer-advertise-address"
	serviceNameLabel               = "kubernetes.io/service-name"
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
var errNoPeerAddress = errors.New("no " + peerAdvertiseAddressAnnotation + " annotation")

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
	raw, ok := l.Annotations[peerAdvertiseAddressAnnotation]
	if !ok {
		return "", errNoPeerAddress
	}
	address, err := parsePeerAddress(raw)
	if err != nil {
		return "", fmt.Errorf("annotation %s: %w", peerAdvertiseAddressAnnotation, err)
	}
	return address, nil
}

// sliceAddresses returns the server addresses an EndpointSlice of the
// kubernetes Service lists, and a description of every entry it refused.
func sliceAddresses(s *endpointSlice) (addresses, refused []string) {
	if s.Namespace != kubernetesServiceNamespace {
		return nil, []string{fmt.Sprintf("EndpointSlice is in namespace %q, not %s", s.Namespace, kubernetesServiceNamespace)}
	}
	if s.Labels[serviceNameLabel] != kubernetesServiceName {
		return nil, []string{fmt.Sprintf("EndpointSlice lacks label %s=%s", serviceNameLabel, kubernetesServiceName)}
	}
	if s.AddressType != "IPv4" && s.AddressType != "IPv6" {
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
func slicePort(ports []endpointPort) (int32, error) {
	var chosen *endpointPort
	for i := range ports {
		if ports[i].Name == "https" {
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
	// No protocol means TCP.
	if chosen.Protocol != "" && chosen.Protocol != "TCP" {
		return 0, fmt.Errorf("EndpointSlice port protocol %s is not TCP", chosen.Protocol)
	}
	if *chosen.Port < 1 || *chosen.Port > 65535 {
		return 0, fmt.Errorf("EndpointSlice port %d is not 1 to 65535", *chosen.Port)
	}
	return *chosen.Port, nil
}

// endpointSlice is the part of a discovery.k8s.io/v1 EndpointSlice the
// controller reads, decoded from the same JSON. k8s.io/api/discovery/v1's own
// type would link k8s.io/api/core/v1, whose registration keeps every core type
// and its methods in the binary: about 4 MB, for four fields.
type endpointSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	AddressType       string         `json:"addressType"`
	Endpoints         []endpoint     `json:"endpoints"`
	Ports             []endpointPort `json:"ports"`
}

type endpoint struct {
	Addresses []string `json:"addresses"`
}

type endpointPort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	// Port is nil when the slice's Service port has none.
	Port *int32 `json:"port,omitempty"`
}

func (s *endpointSlice) DeepCopyObject() runtime.Object {
	c := &endpointSlice{TypeMeta: s.TypeMeta, AddressType: s.AddressType}
	s.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	for _, e := range s.Endpoints {
		c.Endpoints = append(c.Endpoints, endpoint{Addresses: slices.Clone(e.Addresses)})
	}
	for _, p := range s.Ports {
		if p.Port != nil {
			port := *p.Port
			p.Port = &port
		}
		c.Ports = append(c.Ports, p)
	}
	return c
}

type endpointSliceList = objectList[endpointSlice, *endpointSlice]

// objectList is the list of the controller's own decoded types.
type objectList[T any, P interface {
	*T
	runtime.Object
}] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

func (l *objectList[T, P]) DeepCopyObject() runtime.Object {
	c := &objectList[T, P]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	for i := range l.Items {
		c.Items = append(c.Items, *P(&l.Items[i]).DeepCopyObject().(P))
	}
	return c
}

var endpointSliceGroupVersion = schema.GroupVersion{Group: "discovery.k8s.io", Version: "v1"}

func addEndpointSlices(scheme *runtime.Scheme) error {
	scheme.AddKnownTypeWithName(endpointSliceGroupVersion.WithKind("EndpointSlice"), &endpointSlice{})
	scheme.AddKnownTypeWithName(endpointSliceGroupVersion.WithKind("EndpointSliceList"), &endpointSliceList{})
	metav1.AddToGroupVersion(scheme, endpointSliceGroupVersion)
	return nil
}

// ClusterListers list and watch what API servers announce themselves in, as
// clusterListersFor's do, and the nodes: Leases yields *coordinationv1.Lease
// objects, EndpointSlices *endpointSlice ones, Nodes *node ones. The
// controller narrows them to the labels and fields it trusts and re-checks
// namespace, labels and fields of everything they return.
type ClusterListers struct {
	// Leases are the identity leases (kube-system).
	Leases cache.ListerWatcher
	// EndpointSlices are the kubernetes Service's EndpointSlices (default).
	EndpointSlices cache.ListerWatcher
	// Nodes are the nodes, whose cordons mark their API servers draining
	// (see cordonedNodesSelector); without them, no server drains.
	Nodes cache.ListerWatcher
}

// clusterListersFor lists and watches through cfg with clients of the API
// groups needed only: the full clientset would link and register every
// Kubernetes API type, about 10 MiB of resident memory for three resources.
func clusterListersFor(cfg *rest.Config) (*ClusterListers, error) {
	leases, err := groupClient(cfg, coordinationv1.SchemeGroupVersion, coordinationv1.AddToScheme)
	if err != nil {
		return nil, err
	}
	endpointSlices, err := groupClient(cfg, endpointSliceGroupVersion, addEndpointSlices)
	if err != nil {
		return nil, err
	}
	nodes, err := nodeLister(cfg)
	if err != nil {
		return nil, err
	}
	return &ClusterListers{
		Leases:         cache.NewListWatchFromClient(leases, "leases", identityLeaseNamespace, fields.Everything()),
		EndpointSlices: cache.NewListWatchFromClient(endpointSlices, "endpointslices", kubernetesServiceNamespace, fields.Everything()),
		Nodes:          nodes,
	}, nil
}

func groupClient(cfg *rest.Config, gv schema.GroupVersion, addToScheme func(*runtime.Scheme) error) (*rest.RESTClient, error) {
	scheme := runtime.NewScheme()
	if err := addToScheme(scheme); err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.GroupVersion = &gv
	c.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// selected lists and watches only objects matching its label and field
// selectors.
type selected struct {
	lw            cache.ListerWatcher
	labels, field string
}

func (s selected) List(o metav1.ListOptions) (runtime.Object, error) {
	o.LabelSelector, o.FieldSelector = s.labels, s.field
	return s.lw.List(o)
}

func (s selected) Watch(o metav1.ListOptions) (watch.Interface, error) {
	o.LabelSelector, o.FieldSelector = s.labels, s.field
	return s.lw.Watch(o)
}

// IsWatchListSemanticsUnSupported passes on whether the wrapped lister can
// stream its initial list as watch events; the reflector asks.
func (s selected) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(s.lw)
}

// clusterSource watches the identity Leases and the kubernetes Service's
// EndpointSlices through informers restricted to their label. Its first list
// is not waited for: until both informers have listed, the members are the
// listed servers (see desiredMembers), and a load balancer whose kubeconfig
// names itself could not answer that list otherwise.
type clusterSource struct {
	leases, slices cache.SharedIndexInformer
	// changed is called when what the servers announce may have changed,
	// and once both informers have listed.
	changed func()
	running sync.WaitGroup
	// leaseErrors and sliceErrors keep a refusal that persists from being
	// reported on every retry.
	leaseErrors, sliceErrors distinctErrors
}

// newClusterSource prepares the informers; changed is called from their
// goroutines, and failed with every new error of their lists and watches.
func newClusterSource(l ClusterListers, changed func(), failed func(error)) *clusterSource {
	s := &clusterSource{
		leases: cache.NewSharedIndexInformer(selected{lw: l.Leases, labels: labels.Set{identityLabelKey: identityLabelValue}.String()},
			&coordinationv1.Lease{}, 0, cache.Indexers{}),
		slices: cache.NewSharedIndexInformer(selected{lw: l.EndpointSlices, labels: labels.Set{serviceNameLabel: kubernetesServiceName}.String()},
			&endpointSlice{}, 0, cache.Indexers{}),
		changed: changed,
	}
	// None of these fails before the informers run.
	_, _ = s.leases.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() },
		// Every kube-apiserver renews its lease every 10 seconds; only a
		// changed announcement matters.
		UpdateFunc: func(old, updated any) {
			if leaseAnnouncement(old) != leaseAnnouncement(updated) {
				changed()
			}
		},
		DeleteFunc: func(any) { changed() },
	})
	_, _ = s.slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	for _, inf := range []struct {
		informer cache.SharedIndexInformer
		errs     *distinctErrors
	}{{s.leases, &s.leaseErrors}, {s.slices, &s.sliceErrors}} {
		_ = inf.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
			// A watch that ends or expires is resumed, and a list that
			// fails is retried: only what the cluster answers is news.
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return
			}
			if inf.errs.isNew(err) {
				failed(err)
			}
		})
	}
	return s
}

// leaseAnnouncement is what a lease says of its server.
func leaseAnnouncement(obj any) string {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return ""
	}
	return l.Labels[identityLabelKey] + " " + l.Annotations[peerAdvertiseAddressAnnotation]
}

// start runs the informers until ctx is done; once both have listed, it
// calls changed.
func (s *clusterSource) start(ctx context.Context) {
	for _, inf := range []cache.SharedIndexInformer{s.leases, s.slices} {
		s.running.Go(func() { inf.RunWithContext(ctx) })
	}
	s.running.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), s.read) {
			s.changed()
		}
	})
}

// read reports whether both informers have listed: from then on their
// stores hold the last lists and watched changes, through any later outage.
func (s *clusterSource) read() bool { return s.leases.HasSynced() && s.slices.HasSynced() }

// stop waits for the informers to end; ctx passed to start must be done.
func (s *clusterSource) stop() { s.running.Wait() }

func (s *clusterSource) list() ([]*coordinationv1.Lease, []*endpointSlice) {
	var leases []*coordinationv1.Lease
	for _, obj := range s.leases.GetStore().List() {
		leases = append(leases, obj.(*coordinationv1.Lease))
	}
	var endpointSlices []*endpointSlice
	for _, obj := range s.slices.GetStore().List() {
		endpointSlices = append(endpointSlices, obj.(*endpointSlice))
	}
	return leases, endpointSlices
}
