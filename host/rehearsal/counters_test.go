package rehearsal

import "testing"

// always is a judge that finds no capable server up.
func always() bool { return true }

func TestTallyCountsFailuresByTheUpgradeStepTheyCameIn(t *testing.T) {
	phase := "cp-1=v1.35.4 cp-2="
	tl := newTally(func() string { return phase })
	tl.request("GET /a", 200, false, nil, "")
	tl.request("GET /a", 404, false, nil, "not found")
	phase = "cp-1=v1.35.4 cp-2=v1.36.3"
	tl.request("GET /a", 404, false, nil, "not found")
	if tl.request("GET /a", 503, true, always, "no capable server") {
		t.Error("a 503 with Retry-After while no capable server was up counted as failed")
	}
	if !tl.request("GET /a", 503, false, always, "lost in flight") {
		t.Error("a 503 without Retry-After not counted as failed")
	}
	tl.watchEnded()
	tl.watchInterrupted("watch /a", "too old resource version")
	want := map[string]int{
		"404 while cp-1=v1.35.4 cp-2=":                      1,
		"404 while cp-1=v1.35.4 cp-2=v1.36.3":               1,
		"503 while cp-1=v1.35.4 cp-2=v1.36.3":               1,
		"watch interrupted while cp-1=v1.35.4 cp-2=v1.36.3": 1,
	}
	if len(tl.byPhase) != len(want) {
		t.Errorf("by phase %v, want %v", tl.byPhase, want)
	}
	for k, n := range want {
		if tl.byPhase[k] != n {
			t.Errorf("%q: %d, want %d (all: %v)", k, tl.byPhase[k], n, tl.byPhase)
		}
	}
	var c Counts
	tl.into(&c)
	if c.Requests != 5 || c.False404 != 2 || c.Allowed503 != 1 || c.WatchStreamsEnded != 1 || c.WatchInterruptions != 1 {
		t.Errorf("counts %+v", c)
	}
}
