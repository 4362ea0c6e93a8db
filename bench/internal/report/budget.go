package report

import (
	"fmt"
	"math"
	"strconv"
)

// Budget is a limit one figure must respect.
type Budget struct {
	Text   string
	Figure string
	// AtLeast makes Limit a floor; otherwise it is a ceiling.
	AtLeast bool
	Limit   float64
}

// Budgets are skewgate's performance commitments. Every time budget is a
// ratio of two measurements taken side by side in one run: absolute times
// follow the machine more than the code.
var Budgets = []Budget{
	{Text: "re-routed through skewgate: added p50 <= 0.5 x the in-server MVP's added p50", Figure: FigureReroutedAddedP50, Limit: 0.5},
	{Text: "re-routed through skewgate: rps >= 1.25 x the in-server MVP's", Figure: FigureReroutedRPS, AtLeast: true, Limit: 1.25},
	{Text: "no re-route: skewgate's added p50 <= 1.1 x the plain reverse proxy's", Figure: FigureForwardAddedP50, Limit: 1.1},
	{Text: "no re-route: skewgate's rps >= 0.95 x the plain reverse proxy's", Figure: FigureForwardRPS, AtLeast: true, Limit: 0.95},
	{Text: "no re-route: skewgate's CPU per request <= 1.15 x the plain reverse proxy's", Figure: FigureForwardCPU, Limit: 1.15},
	{Text: "node-local: skewgate's added p50 <= 1.1 x the plain reverse proxy's (both in front of the node's own server)",
		Figure: FigureNodeLocalAddedP50, Limit: 1.1},
	{Text: "node-local skewgate: resident memory (VmRSS) after the rounds <= 64 MiB", Figure: FigureNodeLocalRSS, Limit: 64},
	{Text: "node-local skewgate: ready <= 3 s after start, warm compilation cache", Figure: FigureNodeLocalReadyWarm, Limit: 3},
	{Text: "node-local skewgate: ready <= 3 s after start, empty compilation cache", Figure: FigureNodeLocalReadyCold, Limit: 3},
	{Text: "merged /apis: rps >= 2 x kube-apiserver's peer-aggregated /apis", Figure: FigureAPIsRPS, AtLeast: true, Limit: 2},
	{Text: "merged /apis: CPU per request <= 0.5 x kube-apiserver's peer-aggregated /apis", Figure: FigureAPIsCPU, Limit: 0.5},
	{Text: "plugin request-headers call in wazero <= 15 x native Decide of the same request (slowest API request shape)",
		Figure: FigurePluginOverNative, Limit: 15},
	{Text: "ParseRequestInfo+Decide <= 0.25 x upstream's RequestInfo + lookup (all request kinds)", Figure: FigureRouting, Limit: 0.25},
	{Text: "Decide allocates nothing", Figure: FigureDecideAllocs, Limit: 0},
	{Text: "merge+ETag <= 1.0 x upstream", Figure: FigureMerge, Limit: 1.0},
}

// Verdict is a budget applied to one results file.
type Verdict struct {
	Budget Budget
	// Value is the figure's median; NaN when the figure is missing or could
	// not be computed, which fails the budget.
	Value float64
	Pass  bool
}

// Check applies every budget to r.
func Check(r *Results, budgets []Budget) []Verdict {
	verdicts := make([]Verdict, 0, len(budgets))
	for _, b := range budgets {
		v := Verdict{Budget: b, Value: math.NaN()}
		if f, ok := r.Figure(b.Figure); ok {
			v.Value = float64(f.Value)
		}
		switch {
		case math.IsNaN(v.Value):
		case b.AtLeast:
			v.Pass = v.Value >= b.Limit
		default:
			v.Pass = v.Value <= b.Limit
		}
		verdicts = append(verdicts, v)
	}
	return verdicts
}

// String is the verdict's report line.
func (v Verdict) String() string {
	status := "FAIL"
	if v.Pass {
		status = "PASS"
	}
	op := "<="
	if v.Budget.AtLeast {
		op = ">="
	}
	value := "missing"
	if !math.IsNaN(v.Value) {
		value = formatValue(v.Value)
	}
	return fmt.Sprintf("%s  %s: %s (budget %s %s)", status, v.Budget.Text, value, op, formatValue(v.Budget.Limit))
}

// formatValue prints three significant digits, without exponent for the
// magnitudes benchmarks produce.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case v == math.Trunc(v) && a < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}
