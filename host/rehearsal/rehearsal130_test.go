package rehearsal

import (
	"testing"

	"github.com/skewgate/skewgate/host/testcluster"
)

// TestUpgrade130To131HarmsBehindTheBaselineNoneThroughSkewgate upgrades 1.30 to 1.31. Behind
// the round-robin proxy, besides the namespace deletion's leftovers and false 404s, the field
// selector the 1.31 kubelets list Services with is refused by the 1.30 servers; through skewgate
// no list is refused and no Pod fails for want of Services read. How often an upgraded kubelet's
// restarted Pod fails behind the baseline is logged, not asserted: the kubelet retries its list,
// and a retry that lands on an upgraded server succeeds.
func TestUpgrade130To131HarmsBehindTheBaselineNoneThroughSkewgate(t *testing.T) {
	rehearseSideBySide(t, Scenario{From: testcluster.KubeVersion130, To: testcluster.KubeVersion131, Kinds: Kinds131},
		func(t *testing.T, counts Counts) {
			baselineLeavesObjectsAndAnswersFalse404s(t, counts)
			if counts.False400 == 0 {
				t.Error("no list with the 1.31 field selector got a false 400 through the round-robin proxy")
			}
		})
}

// TestBaselineTCPBalancerUpgrade130To131ShowsTheHarms upgrades 1.30 to 1.31 behind the TCP load
// balancer of kubeadm's high-availability guide, the endpoint of kubernetes/kubernetes#127316:
// a 1.31 client whose connection the balancer gave to a 1.30 server keeps it and has its Service
// list with the new field selector refused on every retry. A 1.31 kubelet so placed does not
// start its node's workload Pod while it is; whether one is depends on the turn its connection
// comes in (a 1.30 server for two in three connections at the first node's kubelet restart, one
// in three at the second's), so the Pods that fail are logged, not asserted.
func TestBaselineTCPBalancerUpgrade130To131ShowsTheHarms(t *testing.T) {
	ctx := rehearsalContext(t)
	s := Scenario{From: testcluster.KubeVersion130, To: testcluster.KubeVersion131, Kinds: Kinds131, Endpoint: TCPBaseline}
	counts, err := Run(ctx, t, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("baseline (TCP balancer) %s -> %s: %s", testcluster.KubeVersion130, testcluster.KubeVersion131, counts)
	if counts.False400 == 0 {
		t.Error("no list with the 1.31 field selector got a false 400 through the TCP balancer")
	}
	if counts.False404 == 0 {
		t.Error("no client got a false 404 through the TCP balancer")
	}
}
