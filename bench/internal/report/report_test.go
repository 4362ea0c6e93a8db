package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/skewgate/skewgate/bench/internal/loadgen"
)

func TestParseGoBenchReadsResultLinesAndSkipsTheRest(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/skewgate/skewgate/bench/micro
cpu: AMD EPYC
BenchmarkDecide/discovery-not-modified-2    	 1522022	       165.2 ns/op	       0 B/op	       0 allocs/op
BenchmarkMergeAndETag/skewgate-2         	     850	    253915 ns/op	 219.16 MB/s	   69510 B/op	     271 allocs/op
    bench_test.go:12: a log line from a benchmark
BenchmarkRequestRouting/get-object/skewgate
BenchmarkRequestRouting/get-object/skewgate-2         	 1000000	       302.8 ns/op
PASS
ok  	github.com/skewgate/skewgate/bench/micro	5.679s
pkg: github.com/skewgate/skewgate/host/internal/wasmhost
BenchmarkPluginGuestMemory-2      1	12385744356 ns/op	         9.000 MiB/vm	       144.0 pages/vm
BenchmarkPluginRequestHeaders/forward/wasm-stream 	   52093	      6638 ns/op
`
	got, err := ParseGoBench(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	const micro, wasmhost = "github.com/skewgate/skewgate/bench/micro", "github.com/skewgate/skewgate/host/internal/wasmhost"
	want := []BenchLine{
		{micro, "BenchmarkDecide/discovery-not-modified", 2, 1522022, map[string]float64{"ns/op": 165.2, "B/op": 0, "allocs/op": 0}},
		{micro, "BenchmarkMergeAndETag/skewgate", 2, 850, map[string]float64{"ns/op": 253915, "MB/s": 219.16, "B/op": 69510, "allocs/op": 271}},
		{micro, "BenchmarkRequestRouting/get-object/skewgate", 2, 1000000, map[string]float64{"ns/op": 302.8}},
		{wasmhost, "BenchmarkPluginGuestMemory", 2, 1, map[string]float64{"ns/op": 12385744356, "MiB/vm": 9, "pages/vm": 144}},
		// Without a -GOMAXPROCS suffix (GOMAXPROCS=1) a hyphenated name stays whole.
		{wasmhost, "BenchmarkPluginRequestHeaders/forward/wasm-stream", 1, 52093, map[string]float64{"ns/op": 6638}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParseGoBench:\n got %+v\nwant %+v", got, want)
	}
}

func TestParseGoBenchRejectsMalformedResultLines(t *testing.T) {
	for _, line := range []string{
		"BenchmarkX-2  10  abc ns/op",
		"BenchmarkX-2  10  5",
		"BenchmarkX-2  10  5 B/op",
		"BenchmarkX-2  10",
		"BenchmarkX-2  0  5 ns/op",
	} {
		t.Run(line, func(t *testing.T) {
			if _, err := ParseGoBench(strings.NewReader(line + "\n")); err == nil {
				t.Errorf("ParseGoBench(%q) succeeded; want an error", line)
			}
		})
	}
}

// benchLines renders runs of benchmarks as go test would, interleaved: run k
// of every name, then run k+1.
func benchLines(t *testing.T, runs map[string][]float64, order []string) []BenchLine {
	t.Helper()
	var b strings.Builder
	b.WriteString("pkg: example\n")
	for k := range runs[order[0]] {
		for _, name := range order {
			b.WriteString(name + "-2 100 " + formatFloat(runs[name][k]) + " ns/op 0 B/op 0 allocs/op\n")
		}
	}
	lines, err := ParseGoBench(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

func formatFloat(v float64) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

func figureRuns(t *testing.T, r *Results, key string) (float64, []float64) {
	t.Helper()
	f, ok := r.Figure(key)
	if !ok {
		t.Fatalf("figure %s missing; have %v", key, figureKeys(r))
	}
	runs := make([]float64, len(f.Runs))
	for i, v := range f.Runs {
		runs[i] = float64(v)
	}
	return float64(f.Value), runs
}

func figureKeys(r *Results) []string {
	var keys []string
	for _, f := range r.Figures {
		keys = append(keys, f.Key)
	}
	return keys
}

func TestAddMicroTakesRatiosWithinEachRunThenTheMedian(t *testing.T) {
	runs := map[string][]float64{
		"BenchmarkRequestRouting/get/skewgate":  {100, 200, 150},
		"BenchmarkRequestRouting/get/upstream":  {400, 400, 300},
		"BenchmarkRequestRouting/list/skewgate": {300, 300, 300},
		"BenchmarkRequestRouting/list/upstream": {600, 1200, 300},
		"BenchmarkMergeAndETag/skewgate":        {90, 100, 110},
		"BenchmarkMergeAndETag/upstream":        {100, 100, 100},
		"BenchmarkDecide/a":                     {120, 190, 130},
		"BenchmarkDecide/b":                     {150, 140, 210},
	}
	var order []string
	for name := range runs {
		order = append(order, name)
	}
	var r Results
	r.AddMicro(benchLines(t, runs, order))
	cases := []struct {
		key        string
		wantRuns   []float64
		wantMedian float64
	}{
		{"routing.get.skewgate_over_upstream", []float64{0.25, 0.5, 0.5}, 0.5},
		{"routing.list.skewgate_over_upstream", []float64{0.5, 0.25, 1}, 0.5},
		// The mix: (100+300)/(400+600), (200+300)/(400+1200), (150+300)/(300+300).
		{FigureRouting, []float64{0.4, 0.3125, 0.75}, 0.4},
		{FigureMerge, []float64{0.9, 1, 1.1}, 1},
		{FigureDecideNs, []float64{150, 190, 210}, 190},
		{FigureDecideAllocs, []float64{0, 0, 0}, 0},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			median, got := figureRuns(t, &r, c.key)
			if !reflect.DeepEqual(got, c.wantRuns) || median != c.wantMedian {
				t.Errorf("runs %v median %v; want %v median %v", got, median, c.wantRuns, c.wantMedian)
			}
		})
	}
	if len(r.Benchmarks) != len(runs) {
		t.Errorf("%d benchmark summaries; want %d", len(r.Benchmarks), len(runs))
	}
	for _, b := range r.Benchmarks {
		if b.Name == "BenchmarkDecide/a" && (b.NsPerOp != 130 || b.Runs != 3) {
			t.Errorf("BenchmarkDecide/a: %+v; want median 130 ns/op over 3 runs", b)
		}
	}
}

func TestAddMicroDerivesPluginFigures(t *testing.T) {
	runs := map[string][]float64{
		"BenchmarkPluginRequestHeaders/forward/native":                     {100, 100},
		"BenchmarkPluginRequestHeaders/forward/decide-wasm":                {1000, 1200},
		"BenchmarkPluginRequestHeaders/forward/wasm":                       {1500, 1700},
		"BenchmarkPluginRequestHeaders/forward/wasm-stream":                {3000, 3000},
		"BenchmarkPluginRequestHeaders/reroute/native":                     {100, 100},
		"BenchmarkPluginRequestHeaders/reroute/wasm":                       {1900, 1600},
		"BenchmarkPluginRequestHeaders/reroute/wasm-stream":                {3500, 3500},
		"BenchmarkPluginRequestHeaders/discovery-not-modified/native":      {100, 100},
		"BenchmarkPluginRequestHeaders/discovery-not-modified/wasm":        {9000, 9000},
		"BenchmarkPluginRequestHeaders/discovery-not-modified/wasm-stream": {9500, 9500},
		"BenchmarkPluginConfigure/native":                                  {1000, 2000},
		"BenchmarkPluginConfigure/instances=2":                             {30000, 40000},
	}
	var order []string
	for name := range runs {
		order = append(order, name)
	}
	var r Results
	r.AddMicro(benchLines(t, runs, order))
	cases := []struct {
		key        string
		wantRuns   []float64
		wantMedian float64
	}{
		{"plugin.forward.wasm_over_native", []float64{15, 17}, 16},
		{"plugin.forward.decide_wasm_over_native", []float64{10, 12}, 11},
		{"plugin.reroute.stream_over_native", []float64{35, 35}, 35},
		// The budget covers API requests: the plugin answering discovery is not one.
		{FigurePluginRequestNs, []float64{1900, 1700}, 1800},
		// Per run, the slower API request shape over its own native decision.
		{FigurePluginOverNative, []float64{19, 17}, 18},
		{"plugin.discovery-not-modified.wasm_over_native", []float64{90, 90}, 90},
		{"plugin.configure.vms=2.over_native", []float64{30, 20}, 25},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			median, got := figureRuns(t, &r, c.key)
			if !reflect.DeepEqual(got, c.wantRuns) || median != c.wantMedian {
				t.Errorf("runs %v median %v; want %v median %v", got, median, c.wantRuns, c.wantMedian)
			}
		})
	}
}

// macroRound builds a round from per-path p50 and rps.
func macroRound(p50, rps map[string]float64) Round {
	round := Round{}
	for _, spec := range MacroPaths {
		round[spec.ID] = &loadgen.Result{Count: 100, OK: 100, P50: p50[spec.ID], P90: p50[spec.ID] * 1.5, P99: p50[spec.ID] * 2,
			RPS: rps[spec.ID], Errors: map[string]int{}}
	}
	return round
}

func TestAddMacroComputesAddedLatencyAndRatiosPerRound(t *testing.T) {
	base := func(mvpAdded, sgAdded float64) Round {
		return macroRound(map[string]float64{
			PathDirect: 1000, PathPlainProxy: 1200, PathSkewgate: 1220,
			PathDirectLocal: 700, PathPlainProxyLocal: 900, PathTCPProxyLocal: 750, PathSkewgateNodeLocal: 900 + sgAdded/10,
			PathDirectCapable: 1100, PathSkewgateRerouted: 1100 + sgAdded, PathMVPRerouted: 1100 + mvpAdded,
			PathSkewgateAPIs: 300, PathAPIServerAPIs: 3000, PathSkewgateAPIs304: 200, PathAPIServerAPIs304: 800,
		}, map[string]float64{
			PathDirect: 4000, PathPlainProxy: 3000, PathSkewgate: 2900, PathDirectCapable: 3800,
			PathSkewgateRerouted: 3000, PathMVPRerouted: 1500, PathSkewgateAPIs: 9000, PathAPIServerAPIs: 1000,
			PathSkewgateAPIs304: 12000, PathAPIServerAPIs304: 6000,
		})
	}
	rounds := []Round{base(1000, 200), base(800, 400), base(-50, 100)}
	var r Results
	if err := r.AddMacro(rounds); err != nil {
		t.Fatal(err)
	}
	median, runs := figureRuns(t, &r, FigureReroutedAddedP50)
	if runs[0] != 0.2 || runs[1] != 0.5 || !math.IsNaN(runs[2]) || median != 0.35 {
		t.Errorf("re-routed added p50 ratios %v, median %v; want 0.2, 0.5, undefined (MVP no slower than its floor), median 0.35", runs, median)
	}
	for key, want := range map[string]float64{
		FigureReroutedRPS: 2, FigureForwardAddedP50: 1.1, FigureForwardRPS: 2900.0 / 3000, FigureAPIsRPS: 9,
		"apis304.rps.skewgate_over_apiserver": 2, "apis.p50.skewgate_over_apiserver": 0.1,
		// Node-local skewgate adds 220, 240 and 210 over direct-local: against
		// the plain proxy's 200 and the TCP proxy's 50 in the same rounds.
		FigureNodeLocalAddedP50: 1.1, "nodelocal.added_p50.skewgate_over_tcp": 4.4,
	} {
		if got, _ := figureRuns(t, &r, key); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v; want %v", key, got, want)
		}
	}
	p, ok := r.Path(PathSkewgateRerouted)
	if !ok || p.AddedP50 != 200 || p.Floor != PathDirectCapable || p.Rounds != 3 || p.OK != 300 {
		t.Errorf("path %+v; want median added p50 200 over %s in 3 rounds", p, PathDirectCapable)
	}
	if p, _ := r.Path(PathDirect); !math.IsNaN(float64(p.AddedP50)) || p.P50 != 1000 || p.RPS != 4000 {
		t.Errorf("floor path %+v; want p50 1000, rps 4000, no added latency", p)
	}
	for id, want := range map[string]float64{PathPlainProxyLocal: 200, PathTCPProxyLocal: 50, PathSkewgateNodeLocal: 220} {
		if p, _ := r.Path(id); p.Floor != PathDirectLocal || math.Abs(float64(p.AddedP50)-want) > 1e-9 {
			t.Errorf("path %+v; want median added p50 %v over %s", p, want, PathDirectLocal)
		}
	}
}

func TestAddNodeLocalFootprintRecordsMemoryInMiBAndReadinessInSeconds(t *testing.T) {
	var r Results
	r.AddNodeLocalFootprint(NodeLocalFootprint{VmRSS: 48 << 20, RssAnon: 30 << 20, RssFile: 18 << 20,
		ReadyCold: 2500 * time.Millisecond, ReadyWarm: 400 * time.Millisecond})
	cases := []struct {
		key, unit string
		want      float64
	}{
		{FigureNodeLocalRSS, "MiB", 48},
		{"nodelocal.memory.rssanon_mib", "MiB", 30},
		{"nodelocal.memory.rssfile_mib", "MiB", 18},
		{FigureNodeLocalReadyCold, "s", 2.5},
		{FigureNodeLocalReadyWarm, "s", 0.4},
	}
	for _, c := range cases {
		t.Run(c.key, func(t *testing.T) {
			f, ok := r.Figure(c.key)
			if !ok || f.Group != GroupMacro || f.Unit != c.unit || float64(f.Value) != c.want || len(f.Runs) != 1 {
				t.Errorf("figure %+v (found %v); want %v %s from one measurement", f, ok, c.want, c.unit)
			}
		})
	}
}

func TestAddMacroRejectsARoundMissingAPath(t *testing.T) {
	round := macroRound(map[string]float64{}, map[string]float64{})
	delete(round, PathMVPRerouted)
	var r Results
	if err := r.AddMacro([]Round{round}); err == nil || !strings.Contains(err.Error(), PathMVPRerouted) {
		t.Errorf("AddMacro = %v; want an error naming %s", err, PathMVPRerouted)
	}
}

func TestAddMacroIgnoresPercentilesOfRunsWithoutSuccess(t *testing.T) {
	round := macroRound(map[string]float64{PathDirect: 1000, PathPlainProxy: 1200}, map[string]float64{})
	round[PathDirect].OK = 0
	var r Results
	if err := r.AddMacro([]Round{round}); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.Path(PathPlainProxy); !math.IsNaN(float64(p.AddedP50)) {
		t.Errorf("added p50 %v over a floor without a successful response; want undefined", p.AddedP50)
	}
}

func resultsWith(figures map[string]float64) *Results {
	r := &Results{}
	for key, v := range figures {
		r.Figures = append(r.Figures, Figure{Key: key, Value: Number(v)})
	}
	return r
}

func TestAddCostsDividesByRequestsPerRoundThenTakesTheMedian(t *testing.T) {
	r := &Results{}
	round := func(plainCPU, gatewayCPU float64) RoundCosts {
		return RoundCosts{
			PathPlainProxy: {Requests: 1000, CPUSeconds: Number(plainCPU), AllocBytes: 4e6},
			PathSkewgate:   {Requests: 500, CPUSeconds: Number(gatewayCPU), AllocBytes: 3e6},
			// No metrics: no allocation figure.
			PathAPIServerAPIs: {Requests: 100, CPUSeconds: 0.1, AllocBytes: Number(math.NaN())},
		}
	}
	r.AddCosts([]RoundCosts{round(0.1, 0.06), round(0.2, 0.12), round(0.1, 0.1)})
	want := map[string]float64{
		"cpu.plain-proxy.us_per_request":         100, // 100, 200, 100 µs
		"cpu.skewgate.us_per_request":            200, // 120, 240, 200 µs
		"alloc.skewgate.bytes_per_request":       6000,
		"cpu.apiserver-apis.us_per_request":      1000,
		FigureForwardCPU:                         1.2, // 1.2, 1.2, 2
		"forward.alloc.skewgate_over_plain":      1.5,
		"cpu.skewgate-apis.us_per_request":       math.NaN(), // not measured in any round
		"alloc.apiserver-apis.bytes_per_request": math.NaN(),
	}
	for key, v := range want {
		f, ok := r.Figure(key)
		switch {
		case math.IsNaN(v) && key[:5] == "alloc":
			if ok {
				t.Errorf("%s recorded without any count of allocations", key)
			}
		case !ok:
			t.Errorf("no figure %s", key)
		case math.IsNaN(v) != math.IsNaN(float64(f.Value)) || !math.IsNaN(v) && math.Abs(float64(f.Value)-v) > 1e-9:
			t.Errorf("%s = %v (runs %v); want %v", key, f.Value, f.Runs, v)
		}
	}
}

func TestAddInstructionsRecordsEachBenchmarkAndWhatTheGatewayAdds(t *testing.T) {
	r := &Results{}
	r.AddInstructions(map[string][]float64{InstructionsGateway: {600e3, 602e3}, InstructionsPlainProxy: {400e3, 400e3}},
		map[string]string{InstructionsGateway: "gateway", InstructionsPlainProxy: "plain"})
	for key, want := range map[string]float64{
		"instructions.gateway.per_request":       601e3,
		"instructions.plain_proxy.per_request":   400e3,
		FigureInstructionsRatio:                  1.5025,
		"instructions.gateway_added.per_request": 201e3,
	} {
		if f, ok := r.Figure(key); !ok || math.Abs(float64(f.Value)-want) > 1e-6 || len(f.Runs) != 2 {
			t.Errorf("%s = %+v, %v; want %v over 2 runs", key, f, ok, want)
		}
	}
	none := &Results{}
	none.AddInstructions(nil, nil)
	if len(none.Figures) != 0 {
		t.Errorf("no counts gave figures %+v", none.Figures)
	}
}

func TestTakeMicroKeepsTheMicroAndInstructionFiguresOnly(t *testing.T) {
	from := &Results{Started: "2026-01-02T09:00:00Z", Settings: Settings{MicroRuns: 5, MicroBenchtime: "500ms"},
		Benchmarks: []Benchmark{{Name: "BenchmarkDecide/get", Runs: 5}},
		Figures: []Figure{{Group: GroupMicro, Key: FigureDecideAllocs}, {Group: GroupInstructions, Key: FigureInstructionsRatio},
			{Group: GroupMacro, Key: FigureForwardRPS}, {Group: GroupCost, Key: FigureForwardCPU}}}
	r := &Results{}
	r.TakeMicro(from)
	_, decide := r.Figure(FigureDecideAllocs)
	_, instructions := r.Figure(FigureInstructionsRatio)
	_, rps := r.Figure(FigureForwardRPS)
	_, cpu := r.Figure(FigureForwardCPU)
	if !decide || !instructions || rps || cpu || len(r.Benchmarks) != 1 || r.Settings.MicroRuns != 5 {
		t.Errorf("took %+v", r)
	}
	if md := string(r.Markdown("c.svg")); !strings.Contains(md, "measured by the run started 2026-01-02T09:00:00Z") {
		t.Errorf("Markdown does not say which run measured the micro benchmarks:\n%s", md)
	}
}

func TestRunToRunSpreadComparesWithTheEarlierRunsMedian(t *testing.T) {
	earlier := &Results{Date: "2026-01-02", Started: "2026-01-02T10:00:00Z",
		Figures: []Figure{{Key: "cpu.skewgate.us_per_request", Value: 100}}}
	r := &Results{Date: "2026-01-02", Figures: []Figure{
		{Key: "cpu.skewgate.us_per_request", Label: "CPU", Unit: "µs", Value: 104, Runs: []Number{100, 104, 110}},
		{Key: "new", Label: "new figure", Unit: "ratio", Value: 1, Runs: []Number{1}},
	}}
	r.SetEarlier(earlier)
	md := string(r.Markdown("c.svg"))
	for _, want := range []string{"the one started 2026-01-02T10:00:00Z",
		"| CPU (`cpu.skewgate.us_per_request`) | 104 | µs | 9.6% | 100 | +4.0% | 100, 104, 110 |",
		"| new figure (`new`) | 1 | ratio |  |  |  | 1 |"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestCheckAppliesCeilingsAndFloorsInclusively(t *testing.T) {
	ceiling := Budget{Text: "ceiling", Figure: "c", Limit: 0.5}
	floor := Budget{Text: "floor", Figure: "f", AtLeast: true, Limit: 1.25}
	zero := Budget{Text: "no allocations", Figure: "z", Limit: 0}
	cases := []struct {
		name   string
		budget Budget
		value  float64
		pass   bool
	}{
		{"under the ceiling", ceiling, 0.3, true},
		{"at the ceiling", ceiling, 0.5, true},
		{"over the ceiling", ceiling, 0.51, false},
		{"over the floor", floor, 2, true},
		{"at the floor", floor, 1.25, true},
		{"under the floor", floor, 1.2, false},
		{"zero allocations", zero, 0, true},
		{"one allocation", zero, 1, false},
		{"undefined value", ceiling, math.NaN(), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := Check(resultsWith(map[string]float64{c.budget.Figure: c.value}), []Budget{c.budget})
			if len(v) != 1 || v[0].Pass != c.pass {
				t.Errorf("verdict %+v; want pass=%v", v, c.pass)
			}
		})
	}
}

func TestCheckFailsAMissingFigure(t *testing.T) {
	v := Check(&Results{}, []Budget{{Text: "x", Figure: "absent", Limit: 1}})
	if v[0].Pass || !strings.HasPrefix(v[0].String(), "FAIL") || !strings.Contains(v[0].String(), "missing") {
		t.Errorf("verdict %q; want FAIL with the figure reported missing", v[0])
	}
}

func TestVerdictLines(t *testing.T) {
	cases := []struct {
		v    Verdict
		want string
	}{
		{Verdict{Budget{Text: "re-routed", Limit: 0.5}, 0.3125, true}, "PASS  re-routed: 0.312 (budget <= 0.5)"},
		{Verdict{Budget{Text: "rps", AtLeast: true, Limit: 1.25}, 1.1, false}, "FAIL  rps: 1.10 (budget >= 1.25)"},
		{Verdict{Budget{Text: "plugin", Limit: 2000}, 4663.4, false}, "FAIL  plugin: 4663 (budget <= 2000)"},
		{Verdict{Budget{Text: "allocs", Limit: 0}, 0, true}, "PASS  allocs: 0 (budget <= 0)"},
	}
	for _, c := range cases {
		if got := c.v.String(); got != c.want {
			t.Errorf("got %q; want %q", got, c.want)
		}
	}
}

func TestEveryBudgetNamesAFigureTheHarnessProduces(t *testing.T) {
	produced := map[string]bool{
		FigureReroutedAddedP50: true, FigureReroutedRPS: true, FigureForwardAddedP50: true, FigureForwardRPS: true,
		FigureAPIsRPS: true, FigurePluginOverNative: true, FigureRouting: true, FigureDecideAllocs: true, FigureMerge: true,
		FigureNodeLocalAddedP50: true, FigureNodeLocalRSS: true, FigureNodeLocalReadyWarm: true, FigureNodeLocalReadyCold: true,
		FigureForwardCPU: true, FigureAPIsCPU: true,
	}
	for _, b := range Budgets {
		if !produced[b.Figure] {
			t.Errorf("budget %q checks figure %q, which nothing produces", b.Text, b.Figure)
		}
	}
}

func TestResultsRoundTripThroughJSONKeepingUndefinedValues(t *testing.T) {
	dir := t.TempDir()
	r := &Results{Date: "2026-01-02", WallSeconds: 61,
		Figures: []Figure{{Key: "k", Value: Number(math.NaN()), Runs: []Number{1, Number(math.NaN())}}},
		Paths:   []Path{{ID: PathDirect, P50: 10, AddedP50: Number(math.NaN())}}}
	path, err := r.Save(dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "2026-01-02.json" {
		t.Errorf("saved as %s; want <date>.json", path)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := got.Figure("k")
	if !math.IsNaN(float64(f.Value)) || f.Runs[0] != 1 || !math.IsNaN(float64(f.Runs[1])) || got.Paths[0].P50 != 10 ||
		!math.IsNaN(float64(got.Paths[0].AddedP50)) || got.WallSeconds != 61 {
		t.Errorf("round trip gave %+v", got)
	}
}

func TestLatestPicksTheNewestDate(t *testing.T) {
	dir := t.TempDir()
	if _, err := Latest(dir); err == nil {
		t.Error("Latest of an empty directory succeeded; want an error")
	}
	for _, name := range []string{"2025-12-31.json", "2026-02-01.json", "2026-01-15.json", "2026-03-01.md", "2026-03-01.svg"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Latest(dir)
	if err != nil || filepath.Base(got) != "2026-02-01.json" {
		t.Errorf("Latest = %s, %v; want 2026-02-01.json", got, err)
	}
}

func TestReplaceBetweenMarkers(t *testing.T) {
	doc := "# Bench\n\nintro\n\n" + ReadmeBegin + "\nold table\n" + ReadmeEnd + "\n\nafter\n"
	cases := []struct {
		name, doc, content, want string
		err                      bool
	}{
		{"replaces the table", doc, "| new |\n", "# Bench\n\nintro\n\n" + ReadmeBegin + "\n| new |\n" + ReadmeEnd + "\n\nafter\n", false},
		{"empty section", ReadmeBegin + ReadmeEnd, "x", ReadmeBegin + "\nx\n" + ReadmeEnd, false},
		{"missing end", ReadmeBegin + "\n", "x", "", true},
		{"missing begin", ReadmeEnd + "\n", "x", "", true},
		{"reversed", ReadmeEnd + ReadmeBegin, "x", "", true},
		{"twice", doc + doc, "x", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ReplaceBetweenMarkers([]byte(c.doc), c.content)
			if (err != nil) != c.err {
				t.Fatalf("error %v; want error=%v", err, c.err)
			}
			if !c.err && string(got) != c.want {
				t.Errorf("got %q; want %q", got, c.want)
			}
		})
	}
	once, _ := ReplaceBetweenMarkers([]byte(doc), "| t |")
	twice, _ := ReplaceBetweenMarkers(once, "| t |")
	if !bytes.Equal(once, twice) {
		t.Errorf("replacing twice changed the document:\n%s\n%s", once, twice)
	}
}

func sampleResults(t *testing.T) *Results {
	t.Helper()
	r := &Results{Date: "2026-01-02", Machine: Machine{CPU: "Test <CPU> & co", Cores: 2, Go: "go1.26.8"},
		Settings: Settings{MicroRuns: 3, Rounds: 2, Protocol: "h2"}, Topology: "Three servers."}
	round := macroRound(map[string]float64{PathDirect: 1000, PathPlainProxy: 1300, PathSkewgate: 1250,
		PathDirectLocal: 600, PathPlainProxyLocal: 800, PathSkewgateNodeLocal: 850},
		map[string]float64{PathDirect: 10, PathPlainProxy: 8})
	if err := r.AddMacro([]Round{round, round}); err != nil {
		t.Fatal(err)
	}
	r.AddNodeLocalFootprint(NodeLocalFootprint{VmRSS: 70 << 20, ReadyCold: 2 * time.Second, ReadyWarm: time.Second})
	r.AddMicro(benchLines(t, map[string][]float64{"BenchmarkMergeAndETag/skewgate": {1, 2}, "BenchmarkMergeAndETag/upstream": {2, 2}},
		[]string{"BenchmarkMergeAndETag/skewgate", "BenchmarkMergeAndETag/upstream"}))
	return r
}

func TestSVGIsWellFormedAndDrawsEveryPath(t *testing.T) {
	r := sampleResults(t)
	svg := r.SVG()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	rects, texts := 0, []string{}
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "rect" {
				rects++
			}
		case xml.CharData:
			texts = append(texts, string(tok))
		}
	}
	joined := strings.Join(texts, "\n")
	// One background, a latency and a throughput bar per path, a bar per ratio figure (two are defined here).
	if want := 1 + 2*len(MacroPaths); rects < want {
		t.Errorf("%d rectangles; want at least %d", rects, want)
	}
	for _, spec := range MacroPaths {
		if !strings.Contains(joined, spec.ID) {
			t.Errorf("path %s not labelled", spec.ID)
		}
	}
	if !strings.Contains(joined, "Test <CPU> & co") {
		t.Errorf("the machine's name did not survive escaping:\n%s", joined)
	}
}

func TestMarkdownReportsBudgetsPathsFiguresAndBenchmarks(t *testing.T) {
	md := string(sampleResults(t).Markdown("2026-01-02.svg"))
	for _, want := range []string{
		"# Benchmark results, 2026-01-02", "![chart](2026-01-02.svg)", "Three servers.",
		"| Budget | Measured | Verdict |", "merge+ETag <= 1.0 x upstream | 0.75 | PASS",
		"| `plain-proxy`: plain Go reverse proxy | 1.30 ms |", "300 µs over `direct`",
		"`merge.skewgate_over_upstream`", "| `BenchmarkMergeAndETag/skewgate` | 2 |",
		"| `direct-local`: direct to the node's own server (v1.35.4) | 600 µs |", "250 µs over `direct-local`",
		"node-local: skewgate's added p50 <= 1.1 x the plain reverse proxy's (both in front of the node's own server) | 1.25 | FAIL",
		"resident memory (VmRSS) after the rounds <= 64 MiB | 70 | FAIL", "warm compilation cache | 1 | PASS",
		"(`nodelocal.memory.vmrss_mib`) | 70 | MiB |  |  |  | 70 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
