package testcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
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

// StartControllerManager runs kube-controller-manager as kubeadm configures it where it matters
// here: a kubeconfig with its own client certificate, one service-account credential per
// controller, and the cluster's service CIDR; without leader election or a serving port, since
// tests run one at a time. It returns once the process is running; callers wait for what they
// need from it.
func (c *Cluster) StartControllerManager(ctx context.Context, spec ControllerManagerSpec) (*Process, error) {
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
	proc, err := StartProcess(spec.Name, filepath.Join(c.dir, spec.Name+".log"), argv)
	if err != nil {
		return nil, err
	}
	c.log.Logf("kube-controller-manager %s %s started with %s", spec.Name, spec.Version, spec.Kubeconfig)
	return proc, nil
}
