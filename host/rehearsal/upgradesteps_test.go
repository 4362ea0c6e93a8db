package rehearsal

import (
	"strings"
	"testing"
	"time"
)

func TestStepsSideBySidePairTheSameStepOfTheSameNodeAndTotalTheirDifference(t *testing.T) {
	baseline := []UpgradeStep{
		{1, "etcd", 14 * time.Second}, {1, "drain", 2 * time.Second},
		{2, "etcd", 17 * time.Second}, {2, "drain", 3 * time.Second},
	}
	skewgate := []UpgradeStep{
		{1, "etcd", 18 * time.Second}, {1, "drain", 2 * time.Second},
		{2, "etcd", 15 * time.Second}, {2, "configuration and addons", time.Second}, {2, "drain", 3 * time.Second},
	}
	want := strings.Join([]string{
		"node  step                      baseline  skewgate  difference",
		"1     etcd                      14s       18s       +4s",
		"1     drain                     2s        2s        0s",
		"2     etcd                      17s       15s       -2s",
		"2     drain                     3s        3s        0s",
		"2     configuration and addons  0s        1s        +1s",
		"      all steps                 36s       39s       +3s",
		"",
	}, "\n")
	if got := stepsSideBySide("baseline", baseline, "skewgate", skewgate); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestStepClockStepsFollowOneAnother(t *testing.T) {
	start := time.Now().Add(-time.Minute)
	clock := &stepClock{node: 3, last: start}
	clock.done("drain")
	clock.done("uncordon")
	if len(clock.steps) != 2 || clock.steps[0].Node != 3 || clock.steps[0].Name != "drain" || clock.steps[1].Name != "uncordon" {
		t.Fatalf("steps %+v", clock.steps)
	}
	if sum := clock.steps[0].Took + clock.steps[1].Took; sum != clock.last.Sub(start) {
		t.Errorf("the steps last %s together, the clock ran %s", sum, clock.last.Sub(start))
	}
}
