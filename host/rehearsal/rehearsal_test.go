package rehearsal

import (
	"context"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// These rehearsals run three real control-plane nodes each (host/testcluster/kubenode) and
// upgrade them; binaries missing from the cache are built first (`make test-binaries`).

const (
	rehearsalTimeout = 50 * time.Minute
	// teardownMargin is left of the test binary's -timeout for tearing the nodes down, so that a
	// rehearsal that runs out of time still leaves nothing behind.
	teardownMargin = 6 * time.Minute
)

// rehearsalContext ends after rehearsalTimeout, or teardownMargin before the test binary's
// deadline if that is sooner.
func rehearsalContext(t *testing.T) context.Context {
	deadline := time.Now().Add(rehearsalTimeout)
	if d, ok := t.Deadline(); ok && d.Add(-teardownMargin).Before(deadline) {
		deadline = d.Add(-teardownMargin)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

// rehearseSideBySide runs s twice at once, on clusters of their own: behind the per-request
// round-robin proxy users have today, where baselineShowsTheHarms checks its counts, and through
// skewgate, which must show no harm. Both runs share the machine from start to end, so the
// ratio of their upgrades' wall times compares the endpoints rather than the moments each ran in.
func rehearseSideBySide(t *testing.T, s Scenario, baselineShowsTheHarms func(*testing.T, Counts)) {
	var baseline, throughSkewgate Counts
	t.Cleanup(func() {
		if baseline.UpgradeWallTime > 0 && throughSkewgate.UpgradeWallTime > 0 {
			t.Logf("upgrade wall time skewgate/baseline %s: %s / %s = %.2f; step by step:\n%s", upgradeKey(s),
				throughSkewgate.UpgradeWallTime.Round(time.Second), baseline.UpgradeWallTime.Round(time.Second),
				throughSkewgate.UpgradeWallTime.Seconds()/baseline.UpgradeWallTime.Seconds(),
				stepsSideBySide("baseline", baseline.UpgradeSteps, "skewgate", throughSkewgate.UpgradeSteps))
		}
	})
	t.Run("baseline", func(t *testing.T) {
		t.Parallel()
		b := s
		b.Endpoint = Baseline
		counts, err := Run(rehearsalContext(t), t, b)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("baseline %s: %s", upgradeKey(s), counts)
		baseline = counts
		baselineShowsTheHarms(t, counts)
	})
	t.Run("skewgate", func(t *testing.T) {
		t.Parallel()
		throughSkewgate = rehearseThroughSkewgate(t, s)
	})
}

// TestUpgrade135To136HarmsBehindTheBaselineNoneThroughSkewgate upgrades 1.35 to 1.36. Behind the
// round-robin proxy, the old kube-controller-manager that leads while the new servers serve a
// kind it does not know finishes a namespace deletion that leaves that kind's objects in
// storage, and clients get 404s for what exists; through skewgate nothing of the kind happens.
func TestUpgrade135To136HarmsBehindTheBaselineNoneThroughSkewgate(t *testing.T) {
	rehearseSideBySide(t, Scenario{From: testcluster.KubeVersion135, To: testcluster.KubeVersion136, Kinds: Kinds136},
		baselineLeavesObjectsAndAnswersFalse404s)
}

// baselineLeavesObjectsAndAnswersFalse404s checks the harms every upgrade shows behind the
// round-robin proxy: objects of the new kind left in storage by the namespace deletion, and 404s
// for what exists.
func baselineLeavesObjectsAndAnswersFalse404s(t *testing.T, counts Counts) {
	if counts.ObjectsLeftByNamespaceDeletion == 0 {
		t.Errorf("the namespace deletion left none of its %d objects of the new kind behind", counts.ObjectsInDeletedNamespace)
	}
	if counts.False404 == 0 {
		t.Error("no client got a false 404 through the round-robin proxy")
	}
}

// TestBaselineControllersThroughEndpointUpgrade135To136DeletesDependents upgrades 1.35 to 1.36
// with every kube-controller-manager pointed at the round-robin endpoint, as kubeadm made them
// before 1.19.1: the garbage collector learns the new kind from a new server and looks its owners
// up on old ones, and deletes dependents whose owners exist.
func TestBaselineControllersThroughEndpointUpgrade135To136DeletesDependents(t *testing.T) {
	ctx := rehearsalContext(t)
	counts, err := Run(ctx, t, Scenario{From: testcluster.KubeVersion135, To: testcluster.KubeVersion136, Kinds: Kinds136, Endpoint: Baseline, ControllersThroughEndpoint: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline, controllers through the endpoint, %s -> %s: %s", testcluster.KubeVersion135, testcluster.KubeVersion136, counts)
	if counts.DependentsWronglyDeleted == 0 {
		t.Errorf("the garbage collector deleted none of the %d dependents", counts.DependentsCreated)
	}
}
