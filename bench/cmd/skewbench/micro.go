package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/skewgate/skewgate/bench/internal/report"
)

type microConfig struct {
	repo, work string
	count      int
	benchtime  string
	progress   io.Writer
}

// microSuite is one benchmark selection of one package's test binary.
type microSuite struct {
	pkg       string // directory relative to the repository root
	bench     string // -test.bench
	count     int
	benchtime string
}

// runMicro compiles each package's test binary once and runs the benchmark
// suites, printing their output as it comes and returning the parsed results.
// The plugin benchmarks need build/skewgate.wasm (make build).
func runMicro(ctx context.Context, cfg microConfig) ([]report.BenchLine, error) {
	suites := []microSuite{
		{"bench/micro", "^Benchmark(RequestRouting|Decide|MergeAndETag)$", cfg.count, cfg.benchtime},
		{"host/internal/wasmhost", "^BenchmarkPlugin(RequestHeaders|Configure)$", cfg.count, cfg.benchtime},
		// One operation is a million requests: run once.
		{"host/internal/wasmhost", "^BenchmarkPluginGuestMemory$", 1, "1x"},
	}
	binaries := map[string]string{}
	var lines []report.BenchLine
	for _, s := range suites {
		bin, ok := binaries[s.pkg]
		if !ok {
			bin = filepath.Join(cfg.work, filepath.Base(s.pkg)+".test")
			fmt.Fprintf(cfg.progress, "skewbench: compiling the benchmarks of ./%s\n", s.pkg)
			build := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, "./"+s.pkg)
			build.Dir, build.Stdout, build.Stderr = cfg.repo, cfg.progress, cfg.progress
			if err := build.Run(); err != nil {
				return nil, fmt.Errorf("go test -c ./%s: %w", s.pkg, err)
			}
			binaries[s.pkg] = bin
		}
		fmt.Fprintf(cfg.progress, "skewbench: ./%s -bench %s (count %d, benchtime %s)\n", s.pkg, s.bench, s.count, s.benchtime)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", s.bench, "-test.benchmem",
			"-test.count", strconv.Itoa(s.count), "-test.benchtime", s.benchtime)
		// A test binary runs in its package directory, as go test runs it.
		cmd.Dir = filepath.Join(cfg.repo, s.pkg)
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, cfg.progress), cfg.progress
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("benchmarks of ./%s: %w", s.pkg, err)
		}
		parsed, err := report.ParseGoBench(&out)
		if err != nil {
			return nil, fmt.Errorf("benchmarks of ./%s: %w", s.pkg, err)
		}
		if len(parsed) == 0 {
			return nil, fmt.Errorf("benchmarks of ./%s: no result matched %s", s.pkg, s.bench)
		}
		lines = append(lines, parsed...)
	}
	return lines, nil
}
