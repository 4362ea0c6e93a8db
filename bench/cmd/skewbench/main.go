// Command skewbench is skewgate's benchmark harness.
//
//	skewbench run     run the micro benchmarks and the real-cluster macro
//	                  benchmark, write bench/results/<date>.{md,svg,json} and
//	                  update the table in bench/README.md
//	skewbench check   compare the newest results with the budgets: one
//	                  PASS/FAIL line per budget, exit status 1 on any FAIL
//
// Run both from the repository root (make bench, make bench-check). Every
// speed claim is a ratio of measurements taken side by side in one run: micro
// benchmarks pair each skewgate function with its upstream equivalent run by
// run, and the macro rounds interleave every path.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/bench/internal/report"
)

const usage = `Usage:
  skewbench run [flags]     run the benchmarks and write the results
  skewbench check [flags]   check the newest results against the budgets

Run "skewbench COMMAND -h" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "run":
		err = runBench(args[1:], stdout, stderr)
	case "check":
		var failed bool
		failed, err = runCheck(args[1:], stdout, stderr)
		if err == nil && failed {
			return 1
		}
	case "plain-proxy":
		err = runPlainProxy(args[1:], stderr)
	case "tcp-proxy":
		err = runTCPProxy(args[1:], stderr)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "skewbench: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return 2
	}
	fmt.Fprintf(stderr, "skewbench: %v\n", err)
	return 1
}

// errUsage marks a command-line mistake the flag set already reported.
var errUsage = errors.New("usage")

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments %q\n", fs.Args())
		return errUsage
	}
	return nil
}

type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

// runCheck prints a verdict per budget; failed reports whether any failed.
func runCheck(args []string, stdout, stderr io.Writer) (failed bool, err error) {
	fs := flag.NewFlagSet("skewbench check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("results", filepath.Join("bench", "results"), "directory of results files")
	file := fs.String("file", "", "results file to check (default: the newest in -results)")
	if err := parseFlags(fs, args); err != nil {
		return false, err
	}
	path := *file
	if path == "" {
		if path, err = report.Latest(*dir); err != nil {
			return false, err
		}
	}
	results, err := report.Load(path)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "%s (%s, %s)\n", path, results.Machine.CPU, results.Machine.Go)
	for _, v := range report.Check(results, report.Budgets) {
		fmt.Fprintln(stdout, v)
		failed = failed || !v.Pass
	}
	return failed, nil
}

// runBench runs the whole harness and writes the results.
func runBench(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("skewbench run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		micro = microConfig{repo: "."}
		macro macroConfig
	)
	outDir := fs.String("out", filepath.Join("bench", "results"), "directory for the results files")
	readme := fs.String("readme", filepath.Join("bench", "README.md"), "README whose results table is updated")
	earlier := fs.String("earlier", "", "results file of an earlier run whose figures the results set beside this run's "+
		"(default: the results of the same date in -out, which this run replaces)")
	skipMicro := fs.Bool("skip-micro", false, "leave out the micro benchmarks")
	microFrom := fs.String("micro-from", "", "results file whose micro benchmarks and instruction counts these results take instead of running them "+
		"(with -skip-micro: the macro benchmark measured again, the micro figures kept)")
	skipMacro := fs.Bool("skip-macro", false, "leave out the real-cluster benchmark")
	fs.IntVar(&micro.count, "micro-count", 5, "runs of every micro benchmark")
	fs.StringVar(&micro.benchtime, "micro-benchtime", "500ms", "-benchtime of each micro benchmark run")
	instructionRuns := fs.Int("instruction-runs", 2, "counts of the instructions per request under callgrind (valgrind), part of the micro benchmarks; 0 for none")
	fs.StringVar(&macro.skewgate, "skewgate", filepath.Join("bin", "skewgate"), "skewgate binary (make build)")
	fs.StringVar(&macro.wasm, "wasm", filepath.Join("build", "skewgate.wasm"), "plugin module (make build)")
	fs.StringVar(&macro.loadgen, "loadgen", filepath.Join("bin", "loadgen"), "loadgen binary (go build ./bench/cmd/loadgen)")
	fs.IntVar(&macro.rounds, "rounds", 7, "interleaved rounds over every macro path")
	fs.StringVar(&macro.protocol, "protocol", "h2", "client protocol: h2 or http1")
	fs.IntVar(&macro.concurrency, "concurrency", 4, "requests in flight per macro measurement")
	// The time bound is the one that normally ends a measurement, so that every
	// path of a round is measured over the same window.
	fs.IntVar(&macro.requests, "requests", 20000, "upper bound on requests per macro measurement")
	fs.DurationVar(&macro.duration, "duration", 4*time.Second, "upper bound on the time of a macro measurement")
	fs.IntVar(&macro.warmup, "warmup", 200, "unrecorded requests before each macro measurement")
	fs.StringVar(&macro.profileDir, "profile-dir", "", "after the rounds, write CPU and allocation profiles of skewgate serve under the load of its paths to this directory")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *skipMicro && *skipMacro {
		return errors.New("-skip-micro and -skip-macro leave nothing to run")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()
	work, err := os.MkdirTemp("", "skewbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	micro.work, micro.progress = work, stderr
	macro.progress = stderr
	if macro.self, err = os.Executable(); err != nil {
		return err
	}

	results := &report.Results{Date: started.Format(time.DateOnly), Started: started.UTC().Format(time.RFC3339)}
	earlierPath := *earlier
	if earlierPath == "" {
		if sameDay := filepath.Join(*outDir, results.Date+".json"); fileExists(sameDay) {
			earlierPath = sameDay
		}
	}
	if earlierPath != "" {
		e, err := report.Load(earlierPath)
		if err != nil {
			return fmt.Errorf("-earlier: %w", err)
		}
		results.SetEarlier(e)
	}
	if results.Machine, err = describeMachine(ctx, macro.kubeVersions()); err != nil {
		return err
	}
	results.Settings = report.Settings{
		MicroRuns: micro.count, MicroBenchtime: micro.benchtime, Rounds: macro.rounds, Protocol: macro.protocol,
		Concurrency: macro.concurrency, Requests: macro.requests, Duration: macro.duration.String(),
	}
	if *microFrom != "" {
		if !*skipMicro {
			return errors.New("-micro-from takes the micro benchmarks from a file: use it with -skip-micro")
		}
		from, err := report.Load(*microFrom)
		if err != nil {
			return fmt.Errorf("-micro-from: %w", err)
		}
		results.TakeMicro(from)
	}
	// Micro first, while no cluster competes for the CPU.
	if !*skipMicro {
		lines, err := runMicro(ctx, micro)
		if err != nil {
			return err
		}
		results.AddMicro(lines)
		if *instructionRuns > 0 {
			perRequest, labels, err := runInstructions(ctx, micro, *instructionRuns)
			if err != nil {
				return err
			}
			results.AddInstructions(perRequest, labels)
		}
	}
	if !*skipMacro {
		rounds, costs, footprint, err := runMacro(ctx, macro)
		if err != nil {
			return err
		}
		if err := results.AddMacro(rounds); err != nil {
			return err
		}
		results.AddCosts(costs)
		results.AddNodeLocalFootprint(footprint)
		results.Topology = topology
	}
	results.WallSeconds = report.Number(time.Since(started).Seconds())
	return writeResults(results, *outDir, *readme, stdout)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func writeResults(r *report.Results, dir, readme string, stdout io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	jsonPath, err := r.Save(dir)
	if err != nil {
		return err
	}
	chart := r.Date + ".svg"
	if err := os.WriteFile(filepath.Join(dir, chart), r.SVG(), 0o644); err != nil {
		return err
	}
	mdPath := filepath.Join(dir, r.Date+".md")
	if err := os.WriteFile(mdPath, r.Markdown(chart), 0o644); err != nil {
		return err
	}
	rel, err := filepath.Rel(filepath.Dir(readme), mdPath)
	if err != nil {
		return err
	}
	if err := report.UpdateReadme(readme, r.ReadmeTable(filepath.ToSlash(rel))); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s, %s and %s; updated %s (%s)\n", mdPath, filepath.Join(dir, chart), jsonPath, readme,
		time.Duration(float64(r.WallSeconds)*float64(time.Second)).Round(time.Second))
	for _, v := range report.Check(r, report.Budgets) {
		fmt.Fprintln(stdout, v)
	}
	return nil
}
