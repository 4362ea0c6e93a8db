package rehearsal

import (
	"strings"
	"testing"
	"time"
)

// Lines of a real `kubeadm upgrade apply v1.36.3 --v=1`, each with the second it was written at.
var kubeadmApplyLines = []struct {
	at   int
	line string
}{
	{0, `I1204 03:50:30.095911   28880 apply.go:240] [upgrade] retrieving configuration from cluster`},
	{0, `[upgrade] Reading configuration from the "kubeadm-config" ConfigMap in namespace "kube-system"...`},
	{1, `[upgrade] Running cluster health checks`},
	{61, `	[WARNING CreateJob]: Job "upgrade-health-check-1796356231132" in the namespace "kube-system" did not complete in 1m0s: no condition of type Complete`},
	{63, `[upgrade/staticpods] Preparing for "etcd" upgrade`},
	{64, `[upgrade/staticpods] Waiting for the kubelet to restart the component`},
	{140, `[upgrade/staticpods] Component "etcd" upgraded successfully!`},
	{141, `[upgrade/staticpods] Preparing for "kube-apiserver" upgrade`},
	{210, `[upgrade/staticpods] Component "kube-apiserver" upgraded successfully!`},
	{210, `[upgrade/staticpods] Preparing for "kube-controller-manager" upgrade`},
	{226, `[upgrade/staticpods] Preparing for "kube-scheduler" upgrade`},
	{240, `[upgrade/control-plane] The control plane instance for this node was successfully upgraded!`},
	{243, `[upgrade/addon] Skipping the addon/coredns phase. The addon is disabled.`},
}

func TestKubeadmStepsLastUntilTheNextStepStarts(t *testing.T) {
	const want = "preflight 1s, cluster health checks 1m2s, etcd 1m18s, kube-apiserver 1m9s, kube-controller-manager 16s, " +
		"kube-scheduler 14s, configuration and addons 4s"
	for _, tc := range []struct{ release, controlPlaneDone string }{
		{"1.36", "[upgrade/control-plane] The control plane instance for this node was successfully upgraded!"},
		{"1.31", "[upgrade] The control plane instance for this node was successfully updated!"},
	} {
		t.Run(tc.release, func(t *testing.T) {
			start := time.Date(2026, 12, 4, 3, 50, 30, 0, time.UTC)
			steps := newKubeadmSteps(start)
			for _, l := range kubeadmApplyLines {
				if strings.Contains(l.line, "The control plane instance") {
					l.line = tc.controlPlaneDone
				}
				steps.line(start.Add(time.Duration(l.at)*time.Second), l.line)
			}
			if got := joinSteps(steps.upgradeSteps(1, start.Add(244*time.Second))); got != want {
				t.Errorf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestKubeadmStepsTimeOnlyCompleteLinesAndKeepEveryByte(t *testing.T) {
	steps := newKubeadmSteps(time.Now())
	for _, chunk := range []string{`[upgrade/staticpods] Preparing for `, "\"etcd\" upgrade\n[upgrade/staticpods] Preparing for \"kube-", `apiserver" upgrade`} {
		steps.Write([]byte(chunk))
	}
	var names []string
	for _, s := range steps.steps {
		names = append(names, s.name)
	}
	if got := strings.Join(names, ","); got != "preflight,etcd" {
		t.Errorf("steps %s, want preflight,etcd: a line is timed once complete", got)
	}
	if want := "[upgrade/staticpods] Preparing for \"etcd\" upgrade\n[upgrade/staticpods] Preparing for \"kube-apiserver\" upgrade"; steps.out.String() != want {
		t.Errorf("kept %q", steps.out.String())
	}
}
