package rehearsal

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"
)

// UpgradeStep is how long one step of one node's upgrade took: kubeadm's own steps, then the
// procedure's (drain, the kubelet's swap, uncordon). Node is the node's place in the upgrade
// order, from 1: two clusters upgrade their nodes in the same places, not under the same names.
type UpgradeStep struct {
	Node int
	Name string
	Took time.Duration
}

// stepClock times a node's steps one after the other: each lasts from the end of the one before.
type stepClock struct {
	node  int
	last  time.Time
	steps []UpgradeStep
}

// done ends the step name now.
func (c *stepClock) done(name string) {
	now := time.Now()
	c.steps = append(c.steps, UpgradeStep{Node: c.node, Name: name, Took: now.Sub(c.last)})
	c.last = now
}

// joinSteps is steps as one line, "etcd 14s, kube-apiserver 38s, …".
func joinSteps(steps []UpgradeStep) string {
	parts := make([]string, len(steps))
	for i, s := range steps {
		parts[i] = s.Name + " " + s.Took.Round(time.Second).String()
	}
	return strings.Join(parts, ", ")
}

// stepsSideBySide is a table of two upgrades' steps, the same step of the same node on one row
// with how much longer the second took: where two endpoints' upgrades differ. A step only the
// second has comes after the first's.
func stepsSideBySide(firstName string, first []UpgradeStep, secondName string, second []UpgradeStep) string {
	type key struct {
		node int
		name string
	}
	took := map[key][2]time.Duration{}
	var order []key
	for i, steps := range [][]UpgradeStep{first, second} {
		for _, s := range steps {
			k := key{s.Node, s.Name}
			both, seen := took[k]
			if !seen {
				order = append(order, k)
			}
			both[i] += s.Took
			took[k] = both
		}
	}
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(w, "node\tstep\t%s\t%s\tdifference\n", firstName, secondName)
	var total [2]time.Duration
	for _, k := range order {
		both := took[k]
		total[0] += both[0]
		total[1] += both[1]
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\n", k.node, k.name, seconds(both[0]), seconds(both[1]), difference(both[1]-both[0]))
	}
	fmt.Fprintf(w, "\tall steps\t%s\t%s\t%s\n", seconds(total[0]), seconds(total[1]), difference(total[1]-total[0]))
	w.Flush()
	return b.String()
}

func seconds(d time.Duration) string { return d.Round(time.Second).String() }

// difference is d with its sign, "+4s" or "-3s".
func difference(d time.Duration) string {
	if d = d.Round(time.Second); d > 0 {
		return "+" + d.String()
	}
	return d.String()
}
