package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/skewgate/skewgate/bench/internal/report"
)

// describeMachine records what the figures were measured on. The Go version is
// the toolchain's that builds the benchmarks (go env GOVERSION), not
// necessarily this binary's.
func describeMachine(ctx context.Context, kubeVersions []string) (report.Machine, error) {
	m := report.Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, KubeAPIServer: kubeVersions, Etcd: etcdVersion}
	if release, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.OS += ", Linux " + strings.TrimSpace(string(release))
	}
	m.CPU = "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if model := cpuModel(info); model != "" {
			m.CPU = model
		}
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOVERSION").Output()
	if err != nil {
		return m, fmt.Errorf("go env GOVERSION: %w", err)
	}
	m.Go = strings.TrimSpace(string(out))
	return m, nil
}

// cpuModel is the first "model name" of /proc/cpuinfo.
func cpuModel(cpuinfo []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	for sc.Scan() {
		key, value, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}
