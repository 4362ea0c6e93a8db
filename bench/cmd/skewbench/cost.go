package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"time"

	"github.com/skewgate/skewgate/bench/internal/report"
)

// clockTicksPerSecond is the unit of utime and stime in /proc/<pid>/stat:
// USER_HZ, which Linux fixes at 100 for every user-space ABI.
const clockTicksPerSecond = 100

// processCPU is the CPU time, user plus system, that process pid and all its
// threads have used so far, from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcessCPU(string(raw))
}

// parseProcessCPU reads utime and stime (fields 14 and 15) from the text of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may hold
// spaces and parentheses itself, so the fields are counted from the last ')'.
func parseProcessCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("/proc/<pid>/stat: no command name")
	}
	fields := strings.Fields(stat[i+1:])
	// fields[0] is field 3 (state): field n is fields[n-3].
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/<pid>/stat: %d fields after the command name, want at least 13", len(fields))
	}
	var ticks int64
	for _, f := range fields[14-3 : 15-3+1] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("/proc/<pid>/stat: CPU time %q", f)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, nil
}

// allocMetric is the Prometheus counter of the bytes a Go process has
// allocated on its heap, which client_golang's Go collector exports (skewgate
// serve, kube-apiserver) and the benchmark's own hops serve too.
const allocMetric = "go_memstats_alloc_bytes_total"

// parseAllocBytes finds allocMetric in a Prometheus text exposition.
func parseAllocBytes(exposition string) (float64, error) {
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		if value, ok := strings.CutPrefix(sc.Text(), allocMetric+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(value), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no " + allocMetric + " in the metrics")
}

// serveAllocMetric serves allocMetric of this process at /metrics on the
// loopback address listen, for the harness to read what a benchmark hop
// allocates per request; it returns at once.
func serveAllocMetric(listen string) error {
	if ap, err := net.ResolveTCPAddr("tcp", listen); err != nil || !ap.IP.IsLoopback() {
		return fmt.Errorf("-metrics-listen %s: must be a loopback address", listen)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		sample := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(sample)
		fmt.Fprintf(w, "%s %d\n", allocMetric, sample[0].Value.Uint64())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return nil
}

// meter says where the harness reads what a path costs the process that
// serves it: its CPU time from /proc and its allocated bytes from its metrics.
type meter struct {
	pid int
	// metricsURL serves allocMetric; empty when the process exports none.
	metricsURL string
}

// measureCost runs load, the measured window, between two readings of what
// the process of m has spent: its CPU time just before and just after, and
// its allocated bytes outside that window, each time read twice in a row. The
// second of two reads minus the first is what one read of the metrics
// allocates; the allocations between the readings contain that once (the end
// of the last read before, the start of the first read after), so it is
// taken off. served is the number of requests load sent the process.
func (e *macroEnv) measureCost(ctx context.Context, m meter, load func() (served int, err error)) (report.Cost, error) {
	c := report.Cost{AllocBytes: report.Number(math.NaN())}
	var before [2]float64
	if err := e.readAllocTwice(ctx, m, &before); err != nil {
		return c, err
	}
	cpuBefore, err := processCPU(m.pid)
	if err != nil {
		return c, err
	}
	if c.Requests, err = load(); err != nil {
		return c, err
	}
	cpuAfter, err := processCPU(m.pid)
	if err != nil {
		return c, err
	}
	c.CPUSeconds = report.Number((cpuAfter - cpuBefore).Seconds())
	var after [2]float64
	if err := e.readAllocTwice(ctx, m, &after); err != nil {
		return c, err
	}
	if m.metricsURL != "" {
		c.AllocBytes = report.Number(after[0] - before[1] - (before[1] - before[0]))
	}
	return c, nil
}

func (e *macroEnv) readAllocTwice(ctx context.Context, m meter, into *[2]float64) error {
	if m.metricsURL == "" {
		return nil
	}
	for i := range into {
		status, _, body, err := e.get(ctx, m.metricsURL, nil)
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("GET %s: %d", m.metricsURL, status)
		}
		if into[i], err = parseAllocBytes(string(body)); err != nil {
			return fmt.Errorf("GET %s: %w", m.metricsURL, err)
		}
	}
	return nil
}
