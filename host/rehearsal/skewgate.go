package rehearsal

import (
	"context"
	"fmt"
	"io"
	"strings"

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

// Endpoint starts the load balancer; a Scenario's Endpoint. When it stops, its warnings and
// errors go to the test log: they say which server it could not reach or counted unhealthy when a
// request failed.
func (s Skewgate) Endpoint(ctx context.Context, c *kubenode.Cluster, nodes []*kubenode.Node, log testcluster.Logger) (io.Closer, error) {
	lb, err := kubeadmskewgate.StartLoadBalancer(ctx, s.Dir, s.Binary, s.Wasm, c, nodes, log)
	if err != nil {
		return nil, err
	}
	return loggedLoadBalancer{lb, log}, nil
}

// maxLoggedWarnings bounds the load balancer's lines a run logs.
const maxLoggedWarnings = 150

type loggedLoadBalancer struct {
	*kubeadmskewgate.LoadBalancer
	log testcluster.Logger
}

func (l loggedLoadBalancer) Close() error {
	var warnings []string
	for line := range strings.Lines(l.Process.LogTail(1 << 20)) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			warnings = append(warnings, strings.TrimRight(line, "\n"))
		}
	}
	shown := warnings[:min(len(warnings), maxLoggedWarnings)]
	more := ""
	if len(warnings) > len(shown) {
		more = fmt.Sprintf("\n(%d more)", len(warnings)-len(shown))
	}
	l.log.Logf("load balancer: %d warnings and errors:\n%s%s", len(warnings), strings.Join(shown, "\n"), more)
	return l.LoadBalancer.Close()
}

// NodeLocal installs the node-local static Pod on n and points n's kube-controller-manager and
// kube-scheduler at it; a Scenario's NodeLocal.
func (s Skewgate) NodeLocal(ctx context.Context, n *kubenode.Node, log testcluster.Logger) error {
	return kubeadmskewgate.InstallNodeLocal(ctx, s.Dir, n, log)
}
