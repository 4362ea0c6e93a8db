package rehearsal

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/skewgate/skewgate/host/testcluster/kubenode"
)

// kubeadmSteps times the steps of `kubeadm upgrade apply` and `kubeadm upgrade node` from the
// lines kubeadm prints as it starts each one. Most of an upgrade's time is kubeadm waiting for the
// kubelet to restart a static Pod; only the first steps and the last ones read and write through
// the endpoint. Timing each step is what tells a difference between two endpoints from a
// difference between two kubelets.
type kubeadmSteps struct {
	names  []string
	starts []time.Time
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
	return &kubeadmSteps{names: []string{"preflight"}, starts: []time.Time{start}}
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
		s.names = append(s.names, name)
		s.starts = append(s.starts, t)
		return
	}
}

// until lists each step with how long it took until the next one started, or until end.
func (s *kubeadmSteps) until(end time.Time) string {
	parts := make([]string, len(s.names))
	for i, name := range s.names {
		next := end
		if i+1 < len(s.starts) {
			next = s.starts[i+1]
		}
		parts[i] = name + " " + next.Sub(s.starts[i]).Round(time.Second).String()
	}
	return strings.Join(parts, ", ")
}

// runKubeadmUpgrade runs argv (a `kubeadm upgrade` command) on n, timing its steps as its output
// arrives. An error carries the end of kubeadm's output, the kubelet's log and the node's
// containers: kubeadm says only that a static Pod did not restart in time, the kubelet and the
// container's state say why.
func runKubeadmUpgrade(ctx context.Context, n *kubenode.Node, argv []string) (*kubeadmSteps, error) {
	cmd := n.Command(ctx, argv...)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Start()
	w.Close()
	if err != nil {
		return nil, err
	}
	steps := newKubeadmSteps(time.Now())
	var last []string
	lines := bufio.NewScanner(r)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		steps.line(time.Now(), lines.Text())
		last = append(last, lines.Text())
		if len(last) > 30 {
			last = last[1:]
		}
	}
	// A line past the scanner's limit ends the scan; the rest is read on, so that kubeadm never
	// blocks on a full pipe.
	io.Copy(io.Discard, r)
	if err := cmd.Wait(); err != nil {
		diag, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		containers, psErr := n.Run(diag, "crictl", "ps", "--all")
		if psErr != nil {
			containers = []byte(psErr.Error())
		}
		return nil, fmt.Errorf("%s: %w\n%s\nits kubelet:\n%s\nits containers:\n%s", strings.Join(argv[:3], " "), err,
			strings.Join(last, "\n"), n.LogTail("kubelet", 20), containers)
	}
	return steps, nil
}
