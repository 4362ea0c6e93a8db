package kubenode

import (
	"fmt"
	"strings"
)

// Inside a node, containerd keeps its state and socket in the node's own /run (a tmpfs of the
// node's mount namespace), where kubeadm and crictl look for them by default.
const (
	containerdSocket   = "/run/containerd/containerd.sock"
	containerdEndpoint = "unix://" + containerdSocket
	// containerdNamespace is the containerd namespace the CRI plugin keeps Kubernetes' images in.
	containerdNamespace = "k8s.io"
)

// containerdConfig renders a node's containerd configuration (format version 3, containerd 2.x):
// its own root under the node's directory; no CNI, NRI, CDI or opt directories of the machine;
// the node's sandbox image; and restrict_oom_score_adj, without which every sandbox fails here
// (root lacks CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj).
func containerdConfig(root, verifierDir, cniDir, sandboxImage string) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("version = 3")
	line("root = %q", root)
	line("state = %q", "/run/containerd")
	// Plugins that would create directories of the machine (/opt/containerd, /etc/nri) and that a
	// node does not use.
	line("disabled_plugins = [%q, %q]", "io.containerd.internal.v1.opt", "io.containerd.nri.v1.nri")
	line("")
	line("[grpc]")
	line("  address = %q", containerdSocket)
	line("")
	// Image verification (which the transfer and CRI plugins need) reads verifiers from here.
	line("[plugins.'io.containerd.image-verifier.v1.bindir']")
	line("  bin_dir = %q", verifierDir)
	line("")
	line("[plugins.'io.containerd.cri.v1.images'.pinned_images]")
	line("  sandbox = %q", sandboxImage)
	line("")
	line("[plugins.'io.containerd.cri.v1.runtime']")
	line("  restrict_oom_score_adj = true")
	line("  enable_cdi = false")
	line("")
	line("[plugins.'io.containerd.cri.v1.runtime'.cni]")
	line("  bin_dirs = [%q]", cniDir+"/bin")
	line("  conf_dir = %q", cniDir+"/net.d")
	return b.String()
}
