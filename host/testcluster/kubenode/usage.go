package kubenode

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/skewgate/skewgate/host/testcluster"
)

// ProcessUsage is one process of a node and what it uses.
type ProcessUsage struct {
	PID  int
	Name string
	// RSS is its resident set in bytes.
	RSS int64
	// CPUSeconds is the processor time it has used, user and system.
	CPUSeconds float64
}

// clockTicks is the unit of /proc/<pid>/stat's times on Linux (USER_HZ).
const clockTicks = 100

// Usage lists the processes in the node's namespaces (its containerd and kubelet, the shims, and
// the containers, which share its network namespace) with their memory and processor time, by
// name, then PID.
func (n *Node) Usage() ([]ProcessUsage, error) {
	procs, err := ProcessesIn(n.holder.namespaces)
	if err != nil {
		return nil, err
	}
	var out []ProcessUsage
	for pid, name := range procs {
		mem, err := testcluster.ResidentMemoryOf(pid)
		if err != nil {
			continue // ended meanwhile
		}
		cpu, err := cpuSeconds(pid)
		if err != nil {
			continue
		}
		out = append(out, ProcessUsage{PID: pid, Name: name, RSS: mem.VmRSS, CPUSeconds: cpu})
	}
	slices.SortFunc(out, func(a, b ProcessUsage) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return a.PID - b.PID
	})
	return out, nil
}

// cpuSeconds reads utime and stime from /proc/<pid>/stat: fields 14 and 15, counted after the
// parenthesised command name, which may itself hold spaces.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	end := strings.LastIndexByte(string(data), ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(string(data[end+1:]))
	// fields[0] is field 3 (state); utime is field 14, stime field 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, err
		}
		ticks += v
	}
	return float64(ticks) / clockTicks, nil
}
