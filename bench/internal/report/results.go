// Package report turns raw benchmark output into skewgate's results: medians
// of repeated runs, ratios taken within each run (the machine is shared and
// absolute times drift, so only side-by-side ratios are compared), the
// results file (JSON for tools, Markdown for people, an SVG chart), the table in
// bench/README.md, and the check of every figure against its budget.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/skewgate/skewgate/bench/internal/loadgen"
	"github.com/skewgate/skewgate/bench/internal/stats"
)

// Number is a float64 that encodes NaN (a figure that could not be computed)
// as JSON null and decodes null back to NaN.
type Number float64

func (n Number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return json.Marshal(f)
}

func (n *Number) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Number(math.NaN())
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Number(f)
	return nil
}

// Machine describes where the results were measured.
type Machine struct {
	CPU           string   `json:"cpu"`
	Cores         int      `json:"cores"`
	Go            string   `json:"go"`
	OS            string   `json:"os"`
	KubeAPIServer []string `json:"kubeAPIServer"`
	Etcd          string   `json:"etcd"`
}

// Settings are the knobs of one harness run.
type Settings struct {
	MicroRuns      int    `json:"microRuns"`
	MicroBenchtime string `json:"microBenchtime"`
	Rounds         int    `json:"rounds"`
	Protocol       string `json:"protocol"`
	Concurrency    int    `json:"concurrency"`
	Requests       int    `json:"requests"`
	Duration       string `json:"duration"`
}

// Results is one harness run.
type Results struct {
	Date     string   `json:"date"`
	Machine  Machine  `json:"machine"`
	Settings Settings `json:"settings"`
	// Benchmarks are the micro benchmarks, medians over their runs.
	Benchmarks []Benchmark `json:"benchmarks"`
	// Paths are the macro measurements, medians over the rounds.
	Paths []Path `json:"paths"`
	// Figures are the derived values the budgets and the summary use, each the
	// median of per-run (or per-round) values.
	Figures []Figure `json:"figures"`
	// Topology describes the macro set-up: servers, requests and why.
	Topology string `json:"topology,omitempty"`
	// WallSeconds is how long the whole harness run took.
	WallSeconds Number `json:"wallSeconds"`
	// Started is when the run began (RFC 3339).
	Started string `json:"started,omitempty"`
	// MicroFrom is when the run that measured the micro benchmarks and the
	// instruction counts began, when another run did.
	MicroFrom string `json:"microFrom,omitempty"`
	// Earlier holds the figures of an earlier run set beside these: how far
	// the two differ is the run-to-run spread of each figure.
	Earlier *EarlierRun `json:"earlier,omitempty"`
}

// EarlierRun is another run's figures, by key.
type EarlierRun struct {
	Started string            `json:"started"`
	Figures map[string]Number `json:"figures"`
}

// SetEarlier sets the figures of the earlier run e beside r's.
func (r *Results) SetEarlier(e *Results) {
	r.Earlier = &EarlierRun{Started: e.Started, Figures: map[string]Number{}}
	if r.Earlier.Started == "" {
		r.Earlier.Started = e.Date
	}
	for _, f := range e.Figures {
		r.Earlier.Figures[f.Key] = f.Value
	}
}

// TakeMicro copies the micro benchmarks, their figures and the instruction
// counts of from, measured by another run, with their settings.
func (r *Results) TakeMicro(from *Results) {
	r.Benchmarks = append(r.Benchmarks, from.Benchmarks...)
	for _, f := range from.Figures {
		if f.Group == GroupMicro || f.Group == GroupInstructions {
			r.Figures = append(r.Figures, f)
		}
	}
	r.Settings.MicroRuns, r.Settings.MicroBenchtime = from.Settings.MicroRuns, from.Settings.MicroBenchtime
	r.MicroFrom = from.Started
	if r.MicroFrom == "" {
		r.MicroFrom = from.Date
	}
}

// spreadWithin is how far apart the runs or rounds of f lie, relative to
// its median: (largest - smallest) / median; NaN for a single run.
func spreadWithin(f Figure) float64 {
	lo, hi, n := math.Inf(1), math.Inf(-1), 0
	for _, v := range f.Runs {
		if !math.IsNaN(float64(v)) {
			lo, hi, n = math.Min(lo, float64(v)), math.Max(hi, float64(v)), n+1
		}
	}
	if n < 2 {
		return math.NaN()
	}
	return stats.Ratio(hi-lo, math.Abs(float64(f.Value)))
}

// runToRun is how far f's median lies from the earlier run's, relative to
// the earlier one; NaN without an earlier run of the figure.
func (r *Results) runToRun(f Figure) (earlier, change float64) {
	if r.Earlier == nil {
		return math.NaN(), math.NaN()
	}
	e, ok := r.Earlier.Figures[f.Key]
	if !ok {
		return math.NaN(), math.NaN()
	}
	return float64(e), stats.Ratio(float64(f.Value)-float64(e), math.Abs(float64(e)))
}

// Benchmark is one micro benchmark's medians.
type Benchmark struct {
	Name        string            `json:"name"`
	Runs        int               `json:"runs"`
	NsPerOp     Number            `json:"nsPerOp"`
	BytesPerOp  Number            `json:"bytesPerOp"`
	AllocsPerOp Number            `json:"allocsPerOp"`
	Extra       map[string]Number `json:"extra,omitempty"`
}

// Path is one macro path's medians over the rounds; latencies in microseconds.
type Path struct {
	ID     string `json:"id"`
	Label  string `json:"label"`
	Rounds int    `json:"rounds"`
	P50    Number `json:"p50_us"`
	P90    Number `json:"p90_us"`
	P99    Number `json:"p99_us"`
	RPS    Number `json:"rps"`
	// AddedP50 is the median over rounds of this path's p50 minus its floor's
	// p50 in the same round; NaN for a floor.
	AddedP50 Number `json:"addedP50_us"`
	Floor    string `json:"floor,omitempty"`
	// OK and Errors total the measured requests over all rounds.
	OK     int `json:"ok"`
	Errors int `json:"errors"`
}

// Figure is a derived value: Value is the median of Runs.
type Figure struct {
	// Group is GroupMicro, GroupMacro, GroupCost or GroupInstructions.
	Group string   `json:"group"`
	Key   string   `json:"key"`
	Label string   `json:"label"`
	Unit  string   `json:"unit"`
	Value Number   `json:"value"`
	Runs  []Number `json:"runs"`
}

// Figure returns the figure with key.
func (r *Results) Figure(key string) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Key == key {
			return f, true
		}
	}
	return Figure{}, false
}

// Path returns the path with id.
func (r *Results) Path(id string) (Path, bool) {
	for _, p := range r.Paths {
		if p.ID == id {
			return p, true
		}
	}
	return Path{}, false
}

func (r *Results) addFigure(group, key, label, unit string, runs []float64) {
	f := Figure{Group: group, Key: key, Label: label, Unit: unit, Value: Number(stats.Median(runs))}
	for _, v := range runs {
		f.Runs = append(f.Runs, Number(v))
	}
	r.Figures = append(r.Figures, f)
}

// Figure groups: where a figure's runs come from.
const (
	GroupMicro = "micro"
	GroupMacro = "macro"
	// GroupCost figures are what each macro measurement cost the process
	// serving it, per request.
	GroupCost = "cost"
	// GroupInstructions figures are instructions counted by an instruction-
	// level simulator over a micro benchmark: the same from run to run.
	GroupInstructions = "instructions"
)

// Macro path identifiers. A path's floor is the direct request it adds a hop
// to.
const (
	PathDirect           = "direct"
	PathDirectCapable    = "direct-capable"
	PathPlainProxy       = "plain-proxy"
	PathSkewgate         = "skewgate"
	PathSkewgateRerouted = "skewgate-rerouted"
	PathMVPRerouted      = "mvp-rerouted"
	PathSkewgateAPIs     = "skewgate-apis"
	PathAPIServerAPIs    = "apiserver-apis"
	PathSkewgateAPIs304  = "skewgate-apis-304"
	PathAPIServerAPIs304 = "apiserver-apis-304"

	// The node-local paths: a control-plane node's own components reaching
	// their own API server.
	PathDirectLocal       = "direct-local"
	PathPlainProxyLocal   = "plain-proxy-local"
	PathTCPProxyLocal     = "tcp-proxy-local"
	PathSkewgateNodeLocal = "skewgate-node-local"
)

// PathSpec names a macro path and its floor.
type PathSpec struct {
	ID, Label, Floor string
}

// MacroPaths lists the macro paths in the order every round measures them.
var MacroPaths = []PathSpec{
	{PathDirect, "direct to the API servers (no re-route needed)", ""},
	{PathPlainProxy, "plain Go reverse proxy", PathDirect},
	{PathSkewgate, "skewgate serve, no re-route", PathDirect},
	{PathDirectLocal, "direct to the node's own server (v1.35.4)", ""},
	{PathPlainProxyLocal, "plain Go reverse proxy to the node's own server", PathDirectLocal},
	{PathTCPProxyLocal, "L4 TCP proxy to the node's own server (TLS end to end)", PathDirectLocal},
	{PathSkewgateNodeLocal, "skewgate serve, node-local mode", PathDirectLocal},
	{PathDirectCapable, "direct to the only capable server", ""},
	{PathSkewgateRerouted, "skewgate serve, re-routed", PathDirectCapable},
	{PathMVPRerouted, "upstream MVP, proxied by a peer", PathDirectCapable},
	{PathSkewgateAPIs, "skewgate merged /apis", ""},
	{PathAPIServerAPIs, "kube-apiserver peer-aggregated /apis", ""},
	{PathSkewgateAPIs304, "skewgate merged /apis, 304", ""},
	{PathAPIServerAPIs304, "kube-apiserver peer-aggregated /apis, 304", ""},
}

func pathSpec(id string) (PathSpec, bool) {
	i := slices.IndexFunc(MacroPaths, func(p PathSpec) bool { return p.ID == id })
	if i < 0 {
		return PathSpec{}, false
	}
	return MacroPaths[i], true
}

// Round is one round of macro measurements, by path ID.
type Round map[string]*loadgen.Result

// AddMacro summarises the rounds into Paths and the macro figures. Every
// figure is computed per round, from measurements taken minutes apart at
// most, and then reduced to its median.
func (r *Results) AddMacro(rounds []Round) error {
	for _, spec := range MacroPaths {
		p := Path{ID: spec.ID, Label: spec.Label, Floor: spec.Floor}
		var p50, p90, p99, rps, added []float64
		for _, round := range rounds {
			res := round[spec.ID]
			if res == nil {
				return fmt.Errorf("a round lacks path %s", spec.ID)
			}
			p.Rounds++
			p.OK += res.OK
			for _, n := range res.Errors {
				p.Errors += n
			}
			p50, p90, p99 = append(p50, okValue(res, res.P50)), append(p90, okValue(res, res.P90)), append(p99, okValue(res, res.P99))
			rps = append(rps, res.RPS)
			if spec.Floor != "" {
				added = append(added, addedP50(round, spec.ID))
			}
		}
		p.P50, p.P90, p.P99 = Number(stats.Median(p50)), Number(stats.Median(p90)), Number(stats.Median(p99))
		p.RPS, p.AddedP50 = Number(stats.Median(rps)), Number(stats.Median(added))
		r.Paths = append(r.Paths, p)
	}
	perRound := func(f func(Round) float64) []float64 {
		out := make([]float64, len(rounds))
		for i, round := range rounds {
			out[i] = f(round)
		}
		return out
	}
	addedRatio := func(a, b string) func(Round) float64 {
		return func(round Round) float64 { return positiveRatio(addedP50(round, a), addedP50(round, b)) }
	}
	rpsRatio := func(a, b string) func(Round) float64 {
		return func(round Round) float64 { return stats.Ratio(round[a].RPS, round[b].RPS) }
	}
	p50Ratio := func(a, b string) func(Round) float64 {
		return func(round Round) float64 {
			return stats.Ratio(okValue(round[a], round[a].P50), okValue(round[b], round[b].P50))
		}
	}
	r.addFigure(GroupMacro, FigureReroutedAddedP50, "re-routed: skewgate added p50 / in-server MVP added p50", "ratio", perRound(addedRatio(PathSkewgateRerouted, PathMVPRerouted)))
	r.addFigure(GroupMacro, FigureReroutedRPS, "re-routed: skewgate rps / in-server MVP rps", "ratio", perRound(rpsRatio(PathSkewgateRerouted, PathMVPRerouted)))
	r.addFigure(GroupMacro, FigureForwardAddedP50, "no re-route: skewgate added p50 / plain reverse proxy added p50", "ratio", perRound(addedRatio(PathSkewgate, PathPlainProxy)))
	r.addFigure(GroupMacro, FigureForwardRPS, "no re-route: skewgate rps / plain reverse proxy rps", "ratio", perRound(rpsRatio(PathSkewgate, PathPlainProxy)))
	r.addFigure(GroupMacro, FigureNodeLocalAddedP50, "node-local: skewgate added p50 / plain reverse proxy added p50", "ratio",
		perRound(addedRatio(PathSkewgateNodeLocal, PathPlainProxyLocal)))
	r.addFigure(GroupMacro, "nodelocal.added_p50.skewgate_over_tcp", "node-local: skewgate added p50 / L4 TCP proxy added p50", "ratio",
		perRound(addedRatio(PathSkewgateNodeLocal, PathTCPProxyLocal)))
	r.addFigure(GroupMacro, FigureAPIsRPS, "/apis: skewgate merged rps / kube-apiserver peer-aggregated rps", "ratio", perRound(rpsRatio(PathSkewgateAPIs, PathAPIServerAPIs)))
	r.addFigure(GroupMacro, "apis.p50.skewgate_over_apiserver", "/apis: skewgate p50 / kube-apiserver p50", "ratio", perRound(p50Ratio(PathSkewgateAPIs, PathAPIServerAPIs)))
	r.addFigure(GroupMacro, "apis304.rps.skewgate_over_apiserver", "/apis 304: skewgate rps / kube-apiserver rps", "ratio", perRound(rpsRatio(PathSkewgateAPIs304, PathAPIServerAPIs304)))
	r.addFigure(GroupMacro, "apis304.p50.skewgate_over_apiserver", "/apis 304: skewgate p50 / kube-apiserver p50", "ratio", perRound(p50Ratio(PathSkewgateAPIs304, PathAPIServerAPIs304)))
	return nil
}

// Cost is what one measurement cost the process serving the path: the
// stable figures, since CPU time and allocated bytes per request do not
// depend on how busy the other cores were, as latency and throughput do.
type Cost struct {
	// Requests is what the load sent the process in the window, its warm-up
	// included.
	Requests int `json:"requests"`
	// CPUSeconds is the process's user plus system time over the window.
	CPUSeconds Number `json:"cpuSeconds"`
	// AllocBytes is what the process allocated on its Go heap over the
	// window; NaN when it exports no count.
	AllocBytes Number `json:"allocBytes"`
}

func (c Cost) cpuPerRequest() float64 {
	return stats.Ratio(float64(c.CPUSeconds)*1e6, float64(c.Requests))
}

func (c Cost) allocPerRequest() float64 {
	return stats.Ratio(float64(c.AllocBytes), float64(c.Requests))
}

// RoundCosts are one round's costs, by path ID, for the paths whose serving
// process the harness measures.
type RoundCosts map[string]Cost

// CostPaths are the paths whose serving process is measured, in the order the
// figures list them: every hop the benchmark puts in front of the servers,
// and the API server answering /apis.
var CostPaths = []string{
	PathPlainProxy, PathSkewgate, PathSkewgateRerouted, PathPlainProxyLocal, PathTCPProxyLocal, PathSkewgateNodeLocal,
	PathSkewgateAPIs, PathAPIServerAPIs, PathSkewgateAPIs304, PathAPIServerAPIs304,
}

// AddCosts records, per path, the CPU time and the bytes allocated per
// request, and their ratios between paths that the budgets compare, each
// per round and then the median.
func (r *Results) AddCosts(rounds []RoundCosts) {
	series := func(id string, f func(Cost) float64) []float64 {
		out := make([]float64, len(rounds))
		for i, round := range rounds {
			c, ok := round[id]
			out[i] = math.NaN()
			if ok {
				out[i] = f(c)
			}
		}
		return out
	}
	for _, id := range CostPaths {
		spec, _ := pathSpec(id)
		r.addFigure(GroupCost, "cpu."+id+".us_per_request", "CPU per request of the serving process: "+spec.Label, "µs",
			series(id, Cost.cpuPerRequest))
		if allocs := series(id, Cost.allocPerRequest); !allNaN(allocs) {
			r.addFigure(GroupCost, "alloc."+id+".bytes_per_request", "bytes allocated per request by the serving process: "+spec.Label, "B",
				allocs)
		}
	}
	ratio := func(a, b string, f func(Cost) float64) []float64 {
		as, bs := series(a, f), series(b, f)
		out := make([]float64, len(rounds))
		for i := range out {
			out[i] = stats.Ratio(as[i], bs[i])
		}
		return out
	}
	r.addFigure(GroupCost, FigureForwardCPU, "no re-route: skewgate CPU per request / plain reverse proxy's", "ratio",
		ratio(PathSkewgate, PathPlainProxy, Cost.cpuPerRequest))
	r.addFigure(GroupCost, "forward.alloc.skewgate_over_plain", "no re-route: skewgate bytes allocated per request / plain reverse proxy's", "ratio",
		ratio(PathSkewgate, PathPlainProxy, Cost.allocPerRequest))
	r.addFigure(GroupCost, "nodelocal.cpu.skewgate_over_plain", "node-local: skewgate CPU per request / plain reverse proxy's", "ratio",
		ratio(PathSkewgateNodeLocal, PathPlainProxyLocal, Cost.cpuPerRequest))
	r.addFigure(GroupCost, FigureAPIsCPU, "/apis: skewgate merged CPU per request / kube-apiserver peer-aggregated's", "ratio",
		ratio(PathSkewgateAPIs, PathAPIServerAPIs, Cost.cpuPerRequest))
	r.addFigure(GroupCost, "apis304.cpu.skewgate_over_apiserver", "/apis 304: skewgate CPU per request / kube-apiserver's", "ratio",
		ratio(PathSkewgateAPIs304, PathAPIServerAPIs304, Cost.cpuPerRequest))
}

func allNaN(values []float64) bool {
	for _, v := range values {
		if !math.IsNaN(v) {
			return false
		}
	}
	return true
}

// Instruction benchmarks: the same request in one process through the
// gateway and through a bare reverse proxy (client, hop and backend alike).
const (
	InstructionsGateway    = "gateway"
	InstructionsPlainProxy = "plain_proxy"
)

// AddInstructions records the instructions per request counted for each
// instruction benchmark, one value per repetition, and what the gateway
// executes per request over the bare reverse proxy.
func (r *Results) AddInstructions(perRequest map[string][]float64, labels map[string]string) {
	for _, key := range sortedKeys(perRequest) {
		r.addFigure(GroupInstructions, "instructions."+key+".per_request", "instructions per request: "+labels[key], "instructions",
			perRequest[key])
	}
	gateway, plain := perRequest[InstructionsGateway], perRequest[InstructionsPlainProxy]
	if len(gateway) == 0 || len(plain) == 0 {
		return
	}
	n := min(len(gateway), len(plain))
	ratio, added := make([]float64, n), make([]float64, n)
	for i := range n {
		ratio[i], added[i] = stats.Ratio(gateway[i], plain[i]), gateway[i]-plain[i]
	}
	r.addFigure(GroupInstructions, FigureInstructionsRatio, "instructions per request: gateway / bare reverse proxy (both with client and backend)", "ratio", ratio)
	r.addFigure(GroupInstructions, "instructions.gateway_added.per_request", "instructions per request the gateway adds to a bare reverse proxy", "instructions", added)
}

// NodeLocalFootprint is what node-local skewgate costs its node besides
// latency, measured once per harness run.
type NodeLocalFootprint struct {
	// VmRSS, RssAnon and RssFile are the process's resident memory after the
	// rounds, from /proc/<pid>/status, in bytes.
	VmRSS, RssAnon, RssFile int64
	// ReadyCold and ReadyWarm are the times from starting the process to its
	// first ready answer: with an empty compilation cache (the plugin is
	// compiled) and with the cache that start filled.
	ReadyCold, ReadyWarm time.Duration
}

// AddNodeLocalFootprint records the footprint as figures, each a single run.
func (r *Results) AddNodeLocalFootprint(f NodeLocalFootprint) {
	mib := func(bytes int64) []float64 { return []float64{float64(bytes) / (1 << 20)} }
	r.addFigure(GroupMacro, FigureNodeLocalRSS, "node-local skewgate: resident memory (VmRSS) after the rounds", "MiB", mib(f.VmRSS))
	r.addFigure(GroupMacro, "nodelocal.memory.rssanon_mib", "node-local skewgate: anonymous resident memory (RssAnon)", "MiB", mib(f.RssAnon))
	r.addFigure(GroupMacro, "nodelocal.memory.rssfile_mib", "node-local skewgate: file-backed resident memory (RssFile)", "MiB", mib(f.RssFile))
	r.addFigure(GroupMacro, FigureNodeLocalReadyCold, "node-local skewgate: start to ready, empty compilation cache", "s",
		[]float64{f.ReadyCold.Seconds()})
	r.addFigure(GroupMacro, FigureNodeLocalReadyWarm, "node-local skewgate: start to ready, warm compilation cache", "s",
		[]float64{f.ReadyWarm.Seconds()})
}

// okValue is a latency figure of a run, NaN when the run had no successful
// response (its percentiles then mean nothing).
func okValue(res *loadgen.Result, v float64) float64 {
	if res == nil || res.OK == 0 {
		return math.NaN()
	}
	return v
}

// addedP50 is what path id adds to its floor's p50 in one round.
func addedP50(round Round, id string) float64 {
	spec, ok := pathSpec(id)
	if !ok || spec.Floor == "" || round[id] == nil || round[spec.Floor] == nil {
		return math.NaN()
	}
	return okValue(round[id], round[id].P50) - okValue(round[spec.Floor], round[spec.Floor].P50)
}

// positiveRatio is a / b for an added latency b that is positive; a hop that
// measured as no slower than its floor leaves the round's ratio undefined.
func positiveRatio(a, b float64) float64 {
	if !(b > 0) {
		return math.NaN()
	}
	return stats.Ratio(a, b)
}

// Figure keys the budgets refer to.
const (
	FigureReroutedAddedP50 = "rerouted.added_p50.skewgate_over_mvp"
	FigureReroutedRPS      = "rerouted.rps.skewgate_over_mvp"
	FigureForwardAddedP50  = "forward.added_p50.skewgate_over_plain"
	FigureForwardRPS       = "forward.rps.skewgate_over_plain"
	FigureAPIsRPS          = "apis.rps.skewgate_over_apiserver"
	FigureForwardCPU       = "forward.cpu.skewgate_over_plain"
	FigureAPIsCPU          = "apis.cpu.skewgate_over_apiserver"
	// FigureInstructionsRatio is reported, not budgeted: both sides include
	// the client's and the backend's instructions.
	FigureInstructionsRatio = "instructions.gateway_over_plain"
	FigurePluginRequestNs   = "plugin.request.max_ns"
	FigurePluginOverNative  = "plugin.request.max_wasm_over_native"
	FigureRouting           = "routing.all.skewgate_over_upstream"
	FigureDecideNs          = "decide.max_ns"
	FigureDecideAllocs      = "decide.max_allocs"
	FigureMerge             = "merge.skewgate_over_upstream"

	FigureNodeLocalAddedP50  = "nodelocal.added_p50.skewgate_over_plain"
	FigureNodeLocalRSS       = "nodelocal.memory.vmrss_mib"
	FigureNodeLocalReadyWarm = "nodelocal.ready.warm_s"
	FigureNodeLocalReadyCold = "nodelocal.ready.cold_s"
)

// Micro benchmark names the figures are derived from.
const (
	benchRouting       = "BenchmarkRequestRouting/"
	benchDecide        = "BenchmarkDecide/"
	benchMerge         = "BenchmarkMergeAndETag/"
	benchPluginRequest = "BenchmarkPluginRequestHeaders/"
	benchConfigure     = "BenchmarkPluginConfigure/"
	benchGuestMemory   = "BenchmarkPluginGuestMemory"
)

// AddMicro summarises `go test -bench` results into Benchmarks and the micro
// figures.
func (r *Results) AddMicro(lines []BenchLine) {
	runs := Runs(lines)
	names := make([]string, 0, len(runs))
	for name := range runs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		r.Benchmarks = append(r.Benchmarks, summarizeBenchmark(name, runs[name]))
	}
	// Per-kind pairs: the k-th run of each side was measured side by side.
	for _, kind := range kinds(names, benchRouting, "/skewgate") {
		base := benchRouting + kind + "/"
		r.addFigure(GroupMicro, "routing."+kind+".skewgate_over_upstream", "ParseRequestInfo+Decide / upstream NewRequestInfo+lookup: "+kind, "ratio",
			pairRatios(runs[base+"skewgate"], runs[base+"upstream"], "ns/op"))
	}
	if ks := kinds(names, benchRouting, "/skewgate"); len(ks) > 0 {
		r.addFigure(GroupMicro, FigureRouting, "ParseRequestInfo+Decide / upstream, all request kinds", "ratio",
			sumRatios(runs, ks, benchRouting, "/skewgate", "/upstream"))
	}
	if decide := withPrefix(names, benchDecide); len(decide) > 0 {
		r.addFigure(GroupMicro, FigureDecideNs, "Decide, slowest request kind", "ns/op", perRunMax(runs, decide, "ns/op"))
		r.addFigure(GroupMicro, FigureDecideAllocs, "Decide, most allocations of any request kind", "allocs/op", perRunMax(runs, decide, "allocs/op"))
	}
	if _, ok := runs[benchMerge+"skewgate"]; ok {
		r.addFigure(GroupMicro, FigureMerge, "merge+ETag of three real /apis: skewgate / upstream", "ratio",
			pairRatios(runs[benchMerge+"skewgate"], runs[benchMerge+"upstream"], "ns/op"))
	}
	pluginKinds := kinds(names, benchPluginRequest, "/wasm")
	for _, kind := range pluginKinds {
		base := benchPluginRequest + kind + "/"
		r.addFigure(GroupMicro, "plugin."+kind+".wasm_over_native", "plugin request headers in wazero / native Decide: "+kind, "ratio",
			pairRatios(runs[base+"wasm"], runs[base+"native"], "ns/op"))
		r.addFigure(GroupMicro, "plugin."+kind+".stream_over_native", "whole plugin stream in wazero / native Decide: "+kind, "ratio",
			pairRatios(runs[base+"wasm-stream"], runs[base+"native"], "ns/op"))
		if decideWasm, ok := runs[base+"decide-wasm"]; ok {
			r.addFigure(GroupMicro, "plugin."+kind+".decide_wasm_over_native", "Decide compiled to Wasm, in wazero / native Decide: "+kind, "ratio",
				pairRatios(decideWasm, runs[base+"native"], "ns/op"))
		}
	}
	// The request budget covers API requests, forwarded or re-routed; the
	// plugin answering discovery itself is reported by its ratios above.
	var resourceCalls []string
	var resourceRatios [][]float64
	for _, kind := range pluginKinds {
		if !strings.HasPrefix(kind, "discovery") {
			base := benchPluginRequest + kind + "/"
			resourceCalls = append(resourceCalls, base+"wasm")
			resourceRatios = append(resourceRatios, pairRatios(runs[base+"wasm"], runs[base+"native"], "ns/op"))
		}
	}
	if len(resourceCalls) > 0 {
		r.addFigure(GroupMicro, FigurePluginRequestNs, "plugin request-headers call in wazero, slowest API request shape", "ns/op",
			perRunMax(runs, resourceCalls, "ns/op"))
		r.addFigure(GroupMicro, FigurePluginOverNative, "plugin request-headers call in wazero / native Decide, slowest API request shape", "ratio",
			elementwiseMax(resourceRatios))
	}
	for _, name := range withPrefix(names, benchConfigure+"instances=") {
		vms := strings.TrimPrefix(name, benchConfigure+"instances=")
		r.addFigure(GroupMicro, "plugin.configure.vms="+vms+".over_native", "snapshot push to "+vms+" VM(s) / native parse+index", "ratio",
			pairRatios(runs[name], runs[benchConfigure+"native"], "ns/op"))
	}
	if mem, ok := runs[benchGuestMemory]; ok {
		r.addFigure(GroupMicro, "plugin.memory.mib_per_vm", "guest memory per VM after 1M requests", "MiB", metricRuns(mem, "MiB/vm"))
	}
}

func summarizeBenchmark(name string, runs []BenchLine) Benchmark {
	b := Benchmark{Name: name, Runs: len(runs), NsPerOp: Number(stats.Median(metricRuns(runs, "ns/op"))),
		BytesPerOp: Number(stats.Median(metricRuns(runs, "B/op"))), AllocsPerOp: Number(stats.Median(metricRuns(runs, "allocs/op")))}
	for unit := range runs[0].Metrics {
		switch unit {
		case "ns/op", "B/op", "allocs/op":
			continue
		}
		if b.Extra == nil {
			b.Extra = map[string]Number{}
		}
		b.Extra[unit] = Number(stats.Median(metricRuns(runs, unit)))
	}
	return b
}

// metricRuns is one metric of every run, NaN where a run lacks it.
func metricRuns(runs []BenchLine, unit string) []float64 {
	out := make([]float64, len(runs))
	for i, l := range runs {
		v, ok := l.Metrics[unit]
		if !ok {
			v = math.NaN()
		}
		out[i] = v
	}
	return out
}

// pairRatios divides the k-th run of a by the k-th run of b.
func pairRatios(a, b []BenchLine, unit string) []float64 {
	av, bv := metricRuns(a, unit), metricRuns(b, unit)
	out := make([]float64, min(len(av), len(bv)))
	for k := range out {
		out[k] = stats.Ratio(av[k], bv[k])
	}
	return out
}

// sumRatios divides, per run, the total of every kind's a-side by the total of
// its b-side: the cost of the whole request mix.
func sumRatios(runs map[string][]BenchLine, kinds []string, prefix, a, b string) []float64 {
	n := math.MaxInt
	for _, k := range kinds {
		n = min(n, len(runs[prefix+k+a]), len(runs[prefix+k+b]))
	}
	out := make([]float64, n)
	for run := range out {
		var sa, sb float64
		for _, k := range kinds {
			sa += runs[prefix+k+a][run].Metrics["ns/op"]
			sb += runs[prefix+k+b][run].Metrics["ns/op"]
		}
		out[run] = stats.Ratio(sa, sb)
	}
	return out
}

// perRunMax is, per run, the largest value of unit among the benchmarks.
// elementwiseMax is, per run, the largest of the series' values.
func elementwiseMax(series [][]float64) []float64 {
	n := math.MaxInt
	for _, s := range series {
		n = min(n, len(s))
	}
	out := make([]float64, n)
	for run := range out {
		out[run] = math.Inf(-1)
		for _, s := range series {
			out[run] = math.Max(out[run], s[run])
		}
	}
	return out
}

func perRunMax(runs map[string][]BenchLine, names []string, unit string) []float64 {
	series := make([][]float64, len(names))
	for i, name := range names {
		series[i] = metricRuns(runs[name], unit)
	}
	return elementwiseMax(series)
}

// kinds lists X for every name prefix+X+suffix, X without a slash.
func kinds(names []string, prefix, suffix string) []string {
	var out []string
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		if kind, ok := strings.CutSuffix(rest, suffix); ok && kind != "" && !strings.Contains(kind, "/") {
			out = append(out, kind)
		}
	}
	return out
}

func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, name := range names {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out
}

// Save writes the results as <dir>/<date>.json.
func (r *Results) Save(dir string) (string, error) {
	raw, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, r.Date+".json")
	return path, os.WriteFile(path, append(raw, '\n'), 0o644)
}

// Load reads a results file.
func Load(path string) (*Results, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

// Latest returns the newest results file in dir: names are ISO dates, so the
// lexically greatest <date>.json is the latest.
func Latest(dir string) (string, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return "", err
	}
	if len(matches) == 0 {
		return "", errors.New("no results in " + dir + ": run `make bench` first")
	}
	slices.Sort(matches)
	return matches[len(matches)-1], nil
}
