package testcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// ControllerManagerUser is the identity kube-controller-manager authenticates as with its client
// certificate, as kubeadm's controller-manager.conf has it.
const ControllerManagerUser = "system:kube-controller-manager"

// The controllers that delete things on behalf of others: the garbage collector and the namespace
// controller.
var DeletingControllers = []string{"garbage-collector-controller", "namespace-controller"}

// ControllerManagerSpec says which kube-controller-manager to run and where it talks.
type ControllerManagerSpec struct {
	// Name names its log file; unique within a cluster.
	Name string
	// Version is a pinned kube-controller-manager version.
	Version string
	// Kubeconfig says where it talks and as whom: a file from WriteComponentKubeconfig for
	// ControllerManagerUser, possibly edited since.
	Kubeconfig string
	// Controllers default to DeletingControllers.
	Controllers []string
}

// ControllerManager is a running kube-controller-manager.
type ControllerManager struct {
	proc *Process
}

// StartControllerManager runs kube-controller-manager as kubeadm configures it where it matters
// here: a kubeconfig with its own client certificate, one service-account credential per
// controller, and the cluster's service CIDR; without leader election or a serving port, since
// tests run one at a time. It returns once the process is running; callers wait for what they
// need from it.
func (c *Cluster) StartControllerManager(ctx context.Context, spec ControllerManagerSpec) (*ControllerManager, error) {
	if !hostnamePattern.MatchString(spec.Name) {
		return nil, fmt.Errorf("controller manager name %q is not a DNS label", spec.Name)
	}
	binary, err := EnsureBinary(ctx, c.log, KubeControllerManager, spec.Version)
	if err != nil {
		return nil, err
	}
	controllers := spec.Controllers
	if len(controllers) == 0 {
		controllers = DeletingControllers
	}
	argv := []string{binary,
		"--kubeconfig=" + spec.Kubeconfig,
		"--controllers=" + strings.Join(controllers, ","),
		"--use-service-account-credentials=true",
		"--service-cluster-ip-range=" + ServiceClusterIPRange,
		"--leader-elect=false",
		"--secure-port=0",
		"--v=2",
	}
	m := &ControllerManager{}
	if m.proc, err = StartProcess(spec.Name, filepath.Join(c.dir, spec.Name+".log"), argv); err != nil {
		return nil, err
	}
	c.log.Logf("kube-controller-manager %s %s started with %s", spec.Name, spec.Version, spec.Kubeconfig)
	return m, nil
}

// Stop ends the controller manager (SIGTERM, then SIGKILL after a grace period).
func (m *ControllerManager) Stop() { m.proc.Stop(10 * time.Second) }

// Exited reports whether the process has ended, and how.
func (m *ControllerManager) Exited() (bool, error) { return m.proc.Exited() }

// LogContains reports whether the controller manager's log contains s.
func (m *ControllerManager) LogContains(s string) bool { return m.proc.LogContains(s) }

// LogTail returns the last n lines of its log.
func (m *ControllerManager) LogTail(n int) string { return m.proc.LogTail(n) }
