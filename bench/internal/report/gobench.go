package report

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// BenchLine is one result line of `go test -bench` output.
type BenchLine struct {
	// Package is the import path from the preceding "pkg:" line.
	Package string
	// Name is the benchmark's full name without the -GOMAXPROCS suffix.
	Name       string
	Procs      int
	Iterations int
	// Metrics maps each unit (ns/op, B/op, allocs/op, MB/s, custom units) to
	// its value.
	Metrics map[string]float64
}

// ParseGoBench reads the standard output of `go test -bench` (the benchmark
// format of golang.org/x/perf): "pkg:" lines set the package of the results
// that follow; a result line is a name starting with "Benchmark", an iteration
// count and value-unit pairs. Other lines (goos, PASS, ok, logs) are skipped.
// A line that starts like a result but does not parse is an error.
func ParseGoBench(r io.Reader) ([]BenchLine, error) {
	var lines []BenchLine
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		if rest, ok := strings.CutPrefix(text, "pkg: "); ok {
			pkg = strings.TrimSpace(rest)
			continue
		}
		fields := strings.Fields(text)
		if len(fields) < 2 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			// A benchmark's own log line or a failure message, not a result.
			continue
		}
		line, err := parseBenchLine(fields)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", n, text, err)
		}
		line.Package = pkg
		lines = append(lines, line)
	}
	return lines, sc.Err()
}

func parseBenchLine(fields []string) (BenchLine, error) {
	line := BenchLine{Name: fields[0], Procs: 1, Metrics: map[string]float64{}}
	if i := strings.LastIndexByte(line.Name, '-'); i > 0 {
		if procs, err := strconv.Atoi(line.Name[i+1:]); err == nil && procs > 0 {
			line.Name, line.Procs = line.Name[:i], procs
		}
	}
	iterations, err := strconv.Atoi(fields[1])
	if err != nil || iterations <= 0 {
		return line, fmt.Errorf("iteration count %q", fields[1])
	}
	line.Iterations = iterations
	pairs := fields[2:]
	if len(pairs) == 0 || len(pairs)%2 != 0 {
		return line, fmt.Errorf("want value-unit pairs after the iteration count, got %q", pairs)
	}
	for i := 0; i < len(pairs); i += 2 {
		v, err := strconv.ParseFloat(pairs[i], 64)
		if err != nil {
			return line, fmt.Errorf("value %q of %s", pairs[i], pairs[i+1])
		}
		line.Metrics[pairs[i+1]] = v
	}
	if _, ok := line.Metrics["ns/op"]; !ok {
		return line, fmt.Errorf("no ns/op")
	}
	return line, nil
}

// Runs groups the lines by benchmark name, keeping their order: with -count N
// the k-th line of a name is its k-th run, and runs of sub-benchmarks of one
// parent alternate, so the k-th runs of two siblings were measured side by
// side.
func Runs(lines []BenchLine) map[string][]BenchLine {
	runs := map[string][]BenchLine{}
	for _, l := range lines {
		runs[l.Name] = append(runs[l.Name], l)
	}
	return runs
}
