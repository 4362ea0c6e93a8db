package kubenode

import (
	"slices"
	"strings"
	"testing"
)

func TestParseKubeletFlagsReadsKubeadmsFlagsFile(t *testing.T) {
	env := `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///run/containerd/containerd.sock --node-ip=10.240.0.2 --cgroup-root=/skewgate-abc-cp-1"` + "\n"
	got, err := parseKubeletFlags([]byte(env))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--container-runtime-endpoint=unix:///run/containerd/containerd.sock", "--node-ip=10.240.0.2", "--cgroup-root=/skewgate-abc-cp-1"}
	if !slices.Equal(got, want) {
		t.Errorf("flags = %q, want %q", got, want)
	}
	for _, bad := range []string{"", "OTHER=\"--x=1\"\n", `KUBELET_KUBEADM_ARGS="--x=1 stray"`} {
		if flags, err := parseKubeletFlags([]byte(bad)); err == nil {
			t.Errorf("parseKubeletFlags(%q) = %q, want an error", bad, flags)
		}
	}
}

func TestContainerdConfigKeepsTheNodeOffTheMachinesDirectories(t *testing.T) {
	got := containerdConfig("/nodes/cp-1/containerd", "/nodes/cp-1/image-verifiers", "/nodes/cp-1/cni", ImageRepository+"/pause:3.10.1")
	for _, want := range []string{
		"version = 3\n",
		`root = "/nodes/cp-1/containerd"`,
		`address = "/run/containerd/containerd.sock"`,
		`sandbox = "images.skewgate.invalid/pause:3.10.1"`,
		"restrict_oom_score_adj = true",
		"enable_cdi = false",
		`bin_dirs = ["/nodes/cp-1/cni/bin"]`,
		`conf_dir = "/nodes/cp-1/cni/net.d"`,
		`"io.containerd.internal.v1.opt"`,
		`"io.containerd.nri.v1.nri"`,
		`bin_dir = "/nodes/cp-1/image-verifiers"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("config lacks %s:\n%s", want, got)
		}
	}
}
