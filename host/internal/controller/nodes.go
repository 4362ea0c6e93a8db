package controller

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Draining follows the nodes' cordons. kubeadm's upgrade procedure drains a
// control-plane node (kubectl drain cordons it first) before it upgrades and
// restarts the node's kubelet, and the new kubelet restarts the node's
// static kube-apiserver at once, cutting every request in flight on it; a
// write cut there cannot be retried safely. The API server of a cordoned node
// is therefore marked draining in the snapshot, and the routing decision
// sends it only what no other server can serve, from the cordon on: by the
// time the kubelet restarts, nothing is in flight on it. Only cordoned nodes
// are listed (field selector spec.unschedulable=true), so the controller
// holds a handful of small objects however large the cluster.
const cordonedNodesSelector = "spec.unschedulable=true"

// node is the part of a core/v1 Node the controller reads, decoded from the
// same JSON (see endpointSlice for why not k8s.io/api/core/v1's type).
type node struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              nodeSpec   `json:"spec"`
	Status            nodeStatus `json:"status"`
}

type nodeSpec struct {
	Unschedulable bool `json:"unschedulable,omitempty"`
}

type nodeStatus struct {
	Addresses []nodeAddress `json:"addresses,omitempty"`
}

type nodeAddress struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

func (n *node) DeepCopyObject() runtime.Object {
	c := &node{TypeMeta: n.TypeMeta, Spec: n.Spec, Status: nodeStatus{Addresses: slices.Clone(n.Status.Addresses)}}
	n.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

type nodeList = objectList[node, *node]

var coreGroupVersion = schema.GroupVersion{Version: "v1"}

func addNodes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypeWithName(coreGroupVersion.WithKind("Node"), &node{})
	scheme.AddKnownTypeWithName(coreGroupVersion.WithKind("NodeList"), &nodeList{})
	metav1.AddToGroupVersion(scheme, coreGroupVersion)
	return nil
}

// drainingAddresses maps every IP address of a cordoned node to the node's
// name. The controller checks the cordon itself too: a lister that
// ignored the field selector must not drain every node's server.
func drainingAddresses(nodes []*node) map[netip.Addr]string {
	addrs := map[netip.Addr]string{}
	for _, n := range nodes {
		if !n.Spec.Unschedulable {
			continue
		}
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				addrs[ip.Unmap()] = n.Name
			}
		}
	}
	return addrs
}

// distinctErrors tells whether an error differs from the one before: a
// controller without the RBAC to list nodes (rbac.yaml of an older release)
// would otherwise log the same refusal on every retry of the watch.
type distinctErrors struct {
	mu   sync.Mutex
	last string
}

func (d *distinctErrors) isNew(err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err.Error() == d.last {
		return false
	}
	d.last = err.Error()
	return true
}

// nodeLister lists and watches the nodes through cfg. Not with
// NewListWatchFromClient, which would replace selected's field selector
// with its own.
func nodeLister(cfg *rest.Config) (cache.ListerWatcher, error) {
	client, err := groupClient(cfg, coreGroupVersion, addNodes)
	if err != nil {
		return nil, err
	}
	return cache.NewFilteredListWatchFromClient(client, "nodes", metav1.NamespaceAll, func(*metav1.ListOptions) {}), nil
}

// cordonSource watches the cordoned nodes. Its first list is not waited
// for: a controller that may not list nodes still finds and routes to the
// servers, draining none.
type cordonSource struct {
	informer cache.SharedIndexInformer
	running  sync.WaitGroup
}

// newCordonSource prepares the informer; changed is called, from its
// goroutine, whenever the cordoned nodes change, and failed with every
// error of its list and watch.
func newCordonSource(nodes cache.ListerWatcher, changed func(), failed func(error)) *cordonSource {
	s := &cordonSource{informer: cache.NewSharedIndexInformer(selected{lw: nodes, field: cordonedNodesSelector}, &node{}, 0, cache.Indexers{})}
	// Neither fails before the informer runs.
	_, _ = s.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		UpdateFunc: func(any, any) { changed() },
		DeleteFunc: func(any) { changed() },
	})
	_ = s.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) { failed(err) })
	return s
}

func (s *cordonSource) start(ctx context.Context) {
	s.running.Go(func() { s.informer.RunWithContext(ctx) })
}

// stop waits for the informer to end; ctx passed to start must be done.
func (s *cordonSource) stop() { s.running.Wait() }

func (s *cordonSource) cordoned() []*node {
	var nodes []*node
	for _, obj := range s.informer.GetStore().List() {
		nodes = append(nodes, obj.(*node))
	}
	return nodes
}

// throughServers is the transport of the node client of a controller given
// no cluster client (a load balancer started with a list of servers): each
// request goes to one of the controller's healthy servers, as the
// controller itself (its backend client's certificate and identity), so
// that the nodes are read while any server is up. A watch cut by its
// server's restart is taken up by the next healthy one.
type throughServers struct {
	client  func() *backendClient
	healthy *atomic.Pointer[[]string]
	next    atomic.Uint64
}

var errNoHealthyServer = errors.New("no healthy API server to read the nodes from")

func (t *throughServers) RoundTrip(req *http.Request) (*http.Response, error) {
	var addresses []string
	if p := t.healthy.Load(); p != nil {
		addresses = *p
	}
	if len(addresses) == 0 {
		return nil, errNoHealthyServer
	}
	r := req.Clone(req.Context())
	r.URL.Scheme, r.URL.Host, r.Host = "https", addresses[t.next.Add(1)%uint64(len(addresses))], ""
	client := t.client()
	for name, values := range client.identity {
		r.Header[name] = values
	}
	return client.http.Transport.RoundTrip(r)
}
