package rehearsal

import (
	"context"
	"io"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubeadmskewgate"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// Skewgate is skewgate deployed as host/deploy/kubeadm's README tells its users: the load balancer
// at the control-plane endpoint and the node-local static Pod on every control-plane node, from
// the deployment directory Dir (kubeadmskewgate.PrepareDeployment) with skewgate's Binary and the
// plugin module Wasm.
type Skewgate struct {
	Dir, Binary, Wasm string
}

// Endpoint starts the load balancer; a Scenario's Endpoint.
func (s Skewgate) Endpoint(ctx context.Context, c *kubenode.Cluster, nodes []*kubenode.Node, log testcluster.Logger) (io.Closer, error) {
	return kubeadmskewgate.StartLoadBalancer(ctx, s.Dir, s.Binary, s.Wasm, c, nodes, log)
}

// NodeLocal installs the node-local static Pod on n and points n's kube-controller-manager and
// kube-scheduler at it; a Scenario's NodeLocal.
func (s Skewgate) NodeLocal(ctx context.Context, n *kubenode.Node, log testcluster.Logger) error {
	return kubeadmskewgate.InstallNodeLocal(ctx, s.Dir, n, log)
}
