package rehearsal

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// kubeadmSteps times the steps of `kubeadm upgrade apply` and `kubeadm upgrade node` from the
// lines kubeadm prints as it starts each one; it is kubeadm's standard output and error, keeping
// what kubeadm wrote. Most of an upgrade's time is kubeadm waiting for the kubelet to restart a
// static Pod; only the first steps and the last ones read and write through the endpoint. Timing
// each step is what tells a difference between two endpoints from a difference between two
// kubelets.
type kubeadmSteps struct {
	steps []kubeadmStep
	out   bytes.Buffer
	// timed is how much of out has been read for step starts: up to its last full line.
	timed int
}

type kubeadmStep struct {
	name  string
	start time.Time
}

// kubeadmStepStarts maps what kubeadm prints as a step starts to the step's name; a static Pod's
// step is named after its component, which follows the text. The last text is the part releases
// share: 1.36 prints "[upgrade/control-plane] ... successfully upgraded!", earlier ones
// "[upgrade] ... successfully updated!".
var kubeadmStepStarts = []struct{ text, name string }{
	{"[upgrade] Running cluster health checks", "cluster health checks"},
	{`[upgrade/staticpods] Preparing for "`, ""},
	{"The control plane instance for this node was successfully", "configuration and addons"},
}

func newKubeadmSteps(start time.Time) *kubeadmSteps {
	return &kubeadmSteps{steps: []kubeadmStep{{"preflight", start}}}
}

// Write keeps p and times every line it completes.
func (s *kubeadmSteps) Write(p []byte) (int, error) {
	now := time.Now()
	s.out.Write(p)
	for {
		end := bytes.IndexByte(s.out.Bytes()[s.timed:], '\n')
		if end < 0 {
			return len(p), nil
		}
		s.line(now, string(s.out.Bytes()[s.timed:s.timed+end]))
		s.timed += end + 1
	}
}

// line notes a line of kubeadm's output written at t.
func (s *kubeadmSteps) line(t time.Time, line string) {
	for _, m := range kubeadmStepStarts {
		_, rest, ok := strings.Cut(line, m.text)
		if !ok {
			continue
		}
		name := m.name
		if name == "" {
			name, _, _ = strings.Cut(rest, `"`)
		}
		s.steps = append(s.steps, kubeadmStep{name, t})
		return
	}
}

// upgradeSteps lists each step as the nth node's, lasting until the next one started, or until
// end.
func (s *kubeadmSteps) upgradeSteps(nth int, end time.Time) []UpgradeStep {
	steps := make([]UpgradeStep, len(s.steps))
	for i, step := range s.steps {
		next := end
		if i+1 < len(s.steps) {
			next = s.steps[i+1].start
		}
		steps[i] = UpgradeStep{Node: nth, Name: step.name, Took: next.Sub(step.start)}
	}
	return steps
}

// runKubeadmUpgrade runs argv (a `kubeadm upgrade` command) on n, timing its steps from start as
// its output arrives. An error carries the end of kubeadm's output, the kubelet's log and the node's
// containers: kubeadm says only that a static Pod did not restart in time, the kubelet and the
// container's state say why.
func runKubeadmUpgrade(ctx context.Context, n *kubenode.Node, argv []string, start time.Time) (*kubeadmSteps, error) {
	cmd := n.Command(ctx, argv...)
	steps := newKubeadmSteps(start)
	cmd.Stdout, cmd.Stderr = steps, steps
	if err := cmd.Run(); err != nil {
		diag, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		containers, psErr := n.Run(diag, "crictl", "ps", "--all")
		if psErr != nil {
			containers = []byte(psErr.Error())
		}
		return nil, fmt.Errorf("%s: %w\n%s\nits kubelet:\n%s\nits containers:\n%s", strings.Join(argv[:3], " "), err,
			testcluster.LastLines(steps.out.Bytes(), 30), n.LogTail("kubelet", 20), containers)
	}
	return steps, nil
}
