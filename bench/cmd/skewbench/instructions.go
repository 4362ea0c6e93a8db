package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/skewgate/skewgate/bench/internal/report"
)

// instructionBenchmark is a Go benchmark whose instructions per operation
// are counted under callgrind.
type instructionBenchmark struct {
	key, label string
	pkg, bench string
}

// instructionBenchmarks send the same GET through the gateway and through a
// bare reverse proxy, each in one process with its client and backend, so
// that the difference is what the gateway executes per request.
var instructionBenchmarks = []instructionBenchmark{
	{report.InstructionsGateway, "GET through the gateway, with the plugin (client, gateway and backend in one process)",
		"host/internal/gateway", "BenchmarkGatewayRequest"},
	{report.InstructionsPlainProxy, "the same GET through a bare httputil.ReverseProxy",
		"host/internal/gateway", "BenchmarkPlainReverseProxy"},
}

// The two iteration counts whose totals are subtracted: what differs is
// only the requests between them, not the start, the set-up or the exit.
const (
	instructionsFewer = 100
	instructionsMore  = 400
)

// keptCompilationCache is the gateway tests' variable naming a compilation
// cache that outlives a run: filled natively first, it spares the simulator
// compiling the plugin.
const keptCompilationCache = "SKEWGATE_TEST_COMPILATION_CACHE"

// runInstructions counts, runs times over, the instructions per request of
// each instruction benchmark: valgrind's callgrind executes the test binary
// on a simulated CPU and counts every instruction of every thread, which
// repeats from run to run where times do not, given three settings.
// Asynchronous preemption is off, since callgrind does not survive Go's
// preemption signal; it changes where goroutines yield, not what they
// execute. The collector is off (GOGC=off): whether a cycle, which marks the
// whole heap of the decoded module, falls between the two iteration counts
// or not moved the count per request by 10 %; what a request allocates is
// reported as bytes per request instead. One P (GOMAXPROCS=1) leaves no
// thread spinning for work, which executes instructions for as long as it
// waits.
func runInstructions(ctx context.Context, cfg microConfig, runs int) (map[string][]float64, map[string]string, error) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		fmt.Fprintln(cfg.progress, "skewbench: valgrind not found: no instruction counts")
		return nil, nil, nil
	}
	cache := filepath.Join(cfg.work, "compilation-cache")
	perRequest, labels := map[string][]float64{}, map[string]string{}
	binaries := map[string]string{}
	for _, b := range instructionBenchmarks {
		labels[b.key] = b.label
		if _, ok := binaries[b.pkg]; ok {
			continue
		}
		bin := filepath.Join(cfg.work, filepath.Base(b.pkg)+".instructions.test")
		build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+b.pkg)
		build.Dir, build.Stdout, build.Stderr = cfg.repo, cfg.progress, cfg.progress
		if err := build.Run(); err != nil {
			return nil, nil, fmt.Errorf("go test -c ./%s: %w", b.pkg, err)
		}
		binaries[b.pkg] = bin
		// One native run fills the compilation cache.
		fill := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", "^"+b.bench+"$", "-test.benchtime", "1x")
		fill.Dir, fill.Env = filepath.Join(cfg.repo, b.pkg), append(os.Environ(), keptCompilationCache+"="+cache)
		if out, err := fill.CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w\n%s", b.bench, err, out)
		}
	}
	for run := 1; run <= runs; run++ {
		for _, b := range instructionBenchmarks {
			var totals [2]float64
			for i, n := range []int{instructionsFewer, instructionsMore} {
				total, err := countInstructions(ctx, binaries[b.pkg], filepath.Join(cfg.repo, b.pkg), cache, b.bench, n)
				if err != nil {
					return nil, nil, fmt.Errorf("%s under callgrind: %w", b.bench, err)
				}
				totals[i] = total
			}
			v := (totals[1] - totals[0]) / (instructionsMore - instructionsFewer)
			fmt.Fprintf(cfg.progress, "skewbench: instructions %d/%d %s: %.0f per request\n", run, runs, b.bench, v)
			perRequest[b.key] = append(perRequest[b.key], v)
		}
	}
	return perRequest, labels, nil
}

// collected is callgrind's closing count of every instruction executed.
var collected = regexp.MustCompile(`(?m)^==\d+== Collected : (\d+)$`)

func countInstructions(ctx context.Context, bin, dir, cache, bench string, iterations int) (float64, error) {
	cmd := exec.CommandContext(ctx, "valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
		bin, "-test.run", "^$", "-test.bench", "^"+bench+"$", "-test.benchtime", strconv.Itoa(iterations)+"x")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), keptCompilationCache+"="+cache, "GODEBUG=asyncpreemptoff=1", "GOGC=off", "GOMAXPROCS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w\n%s", err, tail(stderr.String(), 2000))
	}
	m := collected.FindStringSubmatch(stderr.String())
	if m == nil {
		return 0, errors.New("no instruction count in callgrind's output:\n" + tail(stderr.String(), 2000))
	}
	return strconv.ParseFloat(m[1], 64)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
