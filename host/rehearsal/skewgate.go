package rehearsal

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

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
	l := &loggedLoadBalancer{LoadBalancer: lb, log: log}
	watchCtx, stop := context.WithCancel(context.Background())
	l.stopWatching = stop
	l.watching.Go(func() { l.logSnapshots(watchCtx) })
	return l, nil
}

// maxLoggedWarnings bounds the load balancer's lines a run logs.
const maxLoggedWarnings = 150

type loggedLoadBalancer struct {
	*kubeadmskewgate.LoadBalancer
	log          testcluster.Logger
	stopWatching context.CancelFunc
	watching     sync.WaitGroup
}

// logSnapshots logs, with the time, every change of what the load balancer's snapshot says of each
// server: its version, its health and the Service field-selector labels it accepts (those that
// decide where the 1.31 kubelet's Service list goes), read as often as the servers are sampled so
// that a failed request can be set beside the view it was routed by.
func (l *loggedLoadBalancer) logSnapshots(ctx context.Context) {
	last := ""
	for ctx.Err() == nil {
		if raw, err := l.Snapshot(ctx); err == nil {
			if view := snapshotView(raw); view != last {
				l.log.Logf("load balancer's snapshot at %s: %s", time.Now().Format(logTime), view)
				last = view
			}
		}
		sleep(ctx, sampleInterval)
	}
}

// snapshotView is one line of what a snapshot says of each server, without its generation.
func snapshotView(raw []byte) string {
	var snap struct {
		Servers []struct {
			Cluster        string              `json:"cluster"`
			Version        string              `json:"version"`
			Healthy        bool                `json:"healthy"`
			Draining       bool                `json:"draining"`
			FieldSelectors map[string][]string `json:"fieldSelectors"`
		} `json:"servers"`
	}
	if err := json.Unmarshal(raw, &snap); err != nil {
		return "unreadable: " + err.Error()
	}
	var parts []string
	for _, s := range snap.Servers {
		health := "unhealthy"
		if s.Healthy {
			health = "healthy"
		}
		part := s.Cluster + " " + s.Version + " " + health
		if s.Draining {
			part += " draining"
		}
		if labels, ok := s.FieldSelectors["v1/services"]; ok {
			part += " services[" + strings.Join(labels, ",") + "]"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}

func (l *loggedLoadBalancer) Close() error {
	l.stopWatching()
	l.watching.Wait()
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
