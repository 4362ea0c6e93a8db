package testcluster

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ResidentMemory is a process's resident set, in bytes, as /proc/<pid>/status gives it.
type ResidentMemory struct {
	// VmRSS is the whole resident set: RssAnon plus RssFile (plus shared memory).
	VmRSS int64
	// RssAnon is anonymous memory: heaps, stacks, code compiled at run time.
	RssAnon int64
	// RssFile is the mapped files' resident pages, the executable's among them.
	RssFile int64
}

// ResidentMemory reads the process's resident memory. It fails once the process has ended, whose
// PID may have gone to another.
func (p *Process) ResidentMemory() (ResidentMemory, error) {
	if exited, err := p.Exited(); exited {
		return ResidentMemory{}, fmt.Errorf("the process ended before its memory was read: %w", err)
	}
	return ResidentMemoryOf(p.PID())
}

// ResidentMemoryOf reads the resident memory of the process with ID pid, which need not be a child
// of this one (a container's process, say).
func ResidentMemoryOf(pid int) (ResidentMemory, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ResidentMemory{}, err
	}
	return parseResidentMemory(status)
}

// parseResidentMemory reads VmRSS, RssAnon and RssFile from the text of /proc/<pid>/status, which
// gives them in kB (KiB).
func parseResidentMemory(status []byte) (ResidentMemory, error) {
	var m ResidentMemory
	missing := map[string]*int64{"VmRSS": &m.VmRSS, "RssAnon": &m.RssAnon, "RssFile": &m.RssFile}
	for line := range strings.Lines(string(status)) {
		key, value, _ := strings.Cut(line, ":")
		dst, wanted := missing[key]
		if !wanted {
			continue
		}
		digits, ok := strings.CutSuffix(strings.TrimSpace(value), " kB")
		kib, err := strconv.ParseInt(digits, 10, 64)
		if !ok || err != nil || kib < 0 {
			return ResidentMemory{}, fmt.Errorf("%s %q: want a size in kB", key, strings.TrimSpace(value))
		}
		*dst = kib << 10
		delete(missing, key)
	}
	if len(missing) > 0 {
		return ResidentMemory{}, fmt.Errorf("no %s in the process status", strings.Join(slices.Sorted(maps.Keys(missing)), ", "))
	}
	return m, nil
}
