package report

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// Markdown renders the results file: machine, settings, budgets, macro paths,
// ratios and micro benchmarks, with the chart (chartFile, next to it).
func (r *Results) Markdown(chartFile string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Benchmark results, %s\n\n", r.Date)
	fmt.Fprintf(&b, "Written by `make bench`; `make bench-check` compares the newest results with the budgets.\n\n")
	b.WriteString("## Machine\n\n")
	fmt.Fprintf(&b, "- CPU: %s, %d cores (shared with other work; only ratios measured side by side are compared)\n", r.Machine.CPU, r.Machine.Cores)
	fmt.Fprintf(&b, "- Go: %s, %s\n", r.Machine.Go, r.Machine.OS)
	fmt.Fprintf(&b, "- kube-apiserver: %s; etcd %s\n", strings.Join(r.Machine.KubeAPIServer, ", "), r.Machine.Etcd)
	s := r.Settings
	if len(r.Benchmarks) > 0 {
		fmt.Fprintf(&b, "- Micro: every benchmark %d times (-benchtime %s), medians; ratios per run, then the median", s.MicroRuns, s.MicroBenchtime)
		if r.MicroFrom != "" {
			fmt.Fprintf(&b, "; measured by the run started %s", r.MicroFrom)
		}
		b.WriteString("\n")
	}
	if len(r.Paths) > 0 {
		fmt.Fprintf(&b, "- Macro: %d interleaved rounds over every path; per path %s, concurrency %d, at most %d requests and %s; ratios per round, then the median\n",
			s.Rounds, protocolName(s.Protocol), s.Concurrency, s.Requests, s.Duration)
	}
	fmt.Fprintf(&b, "- Wall time of the run: %s\n\n", formatDuration(float64(r.WallSeconds)))

	b.WriteString("![chart](" + chartFile + ")\n\n")
	b.WriteString("## Budgets\n\n")
	b.WriteString(r.BudgetTable())
	if r.Topology != "" {
		b.WriteString("\n## Macro: real kube-apiservers on loopback\n\n")
		b.WriteString(r.Topology + "\n\n")
	}
	if len(r.Paths) > 0 {
		if r.Topology == "" {
			b.WriteString("\n## Macro\n\n")
		}
		b.WriteString("Latencies are medians over the rounds; the added p50 is a path's p50 minus its floor's p50 in the same round.\n\n")
		b.WriteString("| Path | p50 | p90 | p99 | added p50 | rps | requests | errors |\n|---|---:|---:|---:|---:|---:|---:|---:|\n")
		floors := map[string]bool{}
		for _, p := range r.Paths {
			floors[p.Floor] = true
		}
		for _, p := range r.Paths {
			added := ""
			switch {
			case p.Floor != "":
				added = formatMicros(float64(p.AddedP50)) + " over `" + p.Floor + "`"
			case floors[p.ID]:
				added = "(floor)"
			}
			fmt.Fprintf(&b, "| `%s`: %s | %s | %s | %s | %s | %s | %d | %d |\n", p.ID, p.Label,
				formatMicros(float64(p.P50)), formatMicros(float64(p.P90)), formatMicros(float64(p.P99)), added,
				formatNumber(float64(p.RPS)), p.OK, p.Errors)
		}
	}
	if len(r.Figures) > 0 {
		b.WriteString("\n## Figures\n\n")
		b.WriteString("The spread within the run is (largest - smallest) / median of its runs or rounds. ")
		if r.Earlier != nil {
			fmt.Fprintf(&b, "The earlier run is the one started %s; run to run is this median's difference from its median. ", r.Earlier.Started)
		}
		b.WriteString("CPU and allocations per request (`cpu.*`, `alloc.*`, group cost) are the serving process's own, over each " +
			"measurement's window; instruction counts (`instructions.*`) come from an instruction-level simulator.\n\n")
		b.WriteString("| Figure | Median | Unit | Spread within the run | Earlier run | Run to run | Per run or round |\n|---|---:|---|---:|---:|---:|---|\n")
		for _, f := range r.Figures {
			runs := make([]string, len(f.Runs))
			for i, v := range f.Runs {
				runs[i] = formatNumber(float64(v))
			}
			earlier, change := r.runToRun(f)
			fmt.Fprintf(&b, "| %s (`%s`) | %s | %s | %s | %s | %s | %s |\n", f.Label, f.Key, formatNumber(float64(f.Value)), f.Unit,
				formatPercent(spreadWithin(f), false), blankIfNaN(earlier), formatPercent(change, true), strings.Join(runs, ", "))
		}
	}
	if len(r.Benchmarks) > 0 {
		b.WriteString("\n## Micro benchmarks\n\n| Benchmark | runs | ns/op | B/op | allocs/op | other |\n|---|---:|---:|---:|---:|---|\n")
		for _, m := range r.Benchmarks {
			var extra []string
			for _, unit := range sortedKeys(m.Extra) {
				extra = append(extra, formatNumber(float64(m.Extra[unit]))+" "+unit)
			}
			fmt.Fprintf(&b, "| `%s` | %d | %s | %s | %s | %s |\n", m.Name, m.Runs, formatNumber(float64(m.NsPerOp)),
				formatNumber(float64(m.BytesPerOp)), formatNumber(float64(m.AllocsPerOp)), strings.Join(extra, ", "))
		}
	}
	return b.Bytes()
}

// BudgetTable is the Markdown table of every budget's verdict.
func (r *Results) BudgetTable() string {
	var b strings.Builder
	b.WriteString("| Budget | Measured | Verdict |\n|---|---:|---|\n")
	for _, v := range Check(r, Budgets) {
		value := "missing"
		if !math.IsNaN(v.Value) {
			value = formatValue(v.Value)
		}
		verdict := "FAIL"
		if v.Pass {
			verdict = "PASS"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", v.Budget.Text, value, verdict)
	}
	return b.String()
}

// Markers delimit the generated results table in bench/README.md.
const (
	ReadmeBegin = "<!-- bench-results:begin -->"
	ReadmeEnd   = "<!-- bench-results:end -->"
)

// ReadmeTable is what goes between the README markers.
func (r *Results) ReadmeTable(resultsFile string) string {
	return fmt.Sprintf("Latest: [%s](%s) (%s, %d cores, %s).\n\n%s", r.Date, resultsFile, r.Machine.CPU, r.Machine.Cores, r.Machine.Go, r.BudgetTable())
}

// ReplaceBetweenMarkers replaces what lies between the begin and end markers
// of doc with content, keeping the markers.
func ReplaceBetweenMarkers(doc []byte, content string) ([]byte, error) {
	begin := bytes.Index(doc, []byte(ReadmeBegin))
	end := bytes.Index(doc, []byte(ReadmeEnd))
	if begin < 0 || end < 0 || end < begin {
		return nil, errors.New("the results markers " + ReadmeBegin + " and " + ReadmeEnd + " are missing or out of order")
	}
	if bytes.Count(doc, []byte(ReadmeBegin)) != 1 || bytes.Count(doc, []byte(ReadmeEnd)) != 1 {
		return nil, errors.New("the results markers must appear exactly once")
	}
	var out bytes.Buffer
	out.Write(doc[:begin+len(ReadmeBegin)])
	out.WriteString("\n" + strings.TrimRight(content, "\n") + "\n")
	out.Write(doc[end:])
	return out.Bytes(), nil
}

// UpdateReadme rewrites the table in the README at path.
func UpdateReadme(path, content string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := ReplaceBetweenMarkers(doc, content)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

func protocolName(p string) string {
	if p == "h2" {
		return "HTTP/2"
	}
	if p == "http1" {
		return "HTTP/1.1 keep-alive"
	}
	return p
}

// formatMicros prints a latency given in microseconds.
func formatMicros(us float64) string {
	switch {
	case math.IsNaN(us):
		return "n/a"
	case math.Abs(us) >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	default:
		return fmt.Sprintf("%.0f µs", us)
	}
}

func formatNumber(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return formatValue(v)
}

func blankIfNaN(v float64) string {
	if math.IsNaN(v) {
		return ""
	}
	return formatValue(v)
}

// formatPercent prints a fraction as a percentage, with its sign when signed;
// empty when undefined.
func formatPercent(fraction float64, signed bool) string {
	switch {
	case math.IsNaN(fraction) || math.IsInf(fraction, 0):
		return ""
	case signed:
		return fmt.Sprintf("%+.1f%%", fraction*100)
	default:
		return fmt.Sprintf("%.1f%%", fraction*100)
	}
}

func formatDuration(seconds float64) string {
	if math.IsNaN(seconds) || seconds <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%dm%02ds", int(seconds)/60, int(seconds)%60)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
