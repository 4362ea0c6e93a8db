package kubenode

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// machineState is what a cluster must leave as it found it: the mounts of this process's mount
// namespace (the machine's), the cgroups directly under each hierarchy's root, and the directories
// the nodes cover with their own.
type machineState struct {
	mounts  []string
	cgroups []string
	// coveredEntries are the entries of the machine's directories the nodes bind their own over.
	coveredEntries []string
	// absentPaths are machine paths containerd, CNI, CDI and NRI would create on their own.
	absentPaths []string
}

// pathsNodesMustNotCreate are where a containerd or kubelet left to its defaults writes.
var pathsNodesMustNotCreate = []string{
	"/var/lib/containerd", "/run/containerd", "/opt/containerd", "/etc/containerd",
	"/etc/cni", "/opt/cni", "/etc/cdi", "/var/run/cdi", "/etc/nri", "/opt/nri", "/run/netns",
}

func snapshotMachine(t *testing.T) machineState {
	t.Helper()
	var s machineState
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mountinfo)), "\n") {
		// Drop the mount ID and parent ID, which a remount changes without leaking anything.
		fields := strings.Fields(line)
		s.mounts = append(s.mounts, strings.Join(fields[2:], " "))
	}
	slices.Sort(s.mounts)
	hierarchies, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hierarchies {
		entries, err := os.ReadDir(h)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() {
				s.cgroups = append(s.cgroups, filepath.Join(h, e.Name()))
			}
		}
	}
	for _, m := range nodeMounts {
		if m.file {
			continue
		}
		entries, err := os.ReadDir(m.inside)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			s.coveredEntries = append(s.coveredEntries, filepath.Join(m.inside, e.Name()))
		}
	}
	for _, p := range pathsNodesMustNotCreate {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			s.absentPaths = append(s.absentPaths, p)
		}
	}
	return s
}

// checkNothingLeft fails t for every trace the cluster left: a process in one of its namespaces, a
// namespace of its still referenced by a process, an open file or a mount, a mount or cgroup that
// was not there before, an entry in a directory the nodes covered, a path a node's daemons would
// have created.
func checkNothingLeft(t *testing.T, before machineState, namespaces []Namespace, cgroupPrefix string) {
	t.Helper()
	procs, err := ProcessesIn(namespaces)
	if err != nil {
		t.Fatal(err)
	}
	if len(procs) > 0 {
		t.Errorf("processes left in the cluster's namespaces: %v", procs)
	}
	refs, err := namespaceReferences(namespaces)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) > 0 {
		t.Errorf("the cluster's namespaces are still referenced: %v", refs)
	}

	after := snapshotMachine(t)
	if added := missingFrom(before.mounts, after.mounts); len(added) > 0 {
		t.Errorf("mounts left on the machine: %q", added)
	}
	if added := missingFrom(before.cgroups, after.cgroups); len(added) > 0 {
		t.Errorf("cgroups left on the machine: %q", added)
	}
	hierarchies, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hierarchies {
		matches, err := filepath.Glob(filepath.Join(h, cgroupPrefix+"*"))
		if err != nil {
			t.Fatal(err)
		}
		if len(matches) > 0 {
			t.Errorf("node cgroups left: %q", matches)
		}
	}
	if added := missingFrom(before.coveredEntries, after.coveredEntries); len(added) > 0 {
		t.Errorf("written to the machine under a node's own directories: %q", added)
	}
	if created := missingFrom(after.absentPaths, before.absentPaths); len(created) > 0 {
		t.Errorf("created on the machine: %q", created)
	}
}

// missingFrom returns the elements of b that a lacks.
func missingFrom(a, b []string) []string {
	var out []string
	for _, x := range b {
		if !slices.Contains(a, x) {
			out = append(out, x)
		}
	}
	return out
}

// namespaceReferences finds what still holds any of the namespaces: a process in it, an open file
// descriptor of it, or an nsfs mount of it in the machine's mount namespace.
func namespaceReferences(namespaces []Namespace) ([]string, error) {
	wanted := map[string]bool{}
	for _, ns := range namespaces {
		wanted[ns.String()] = true
	}
	var refs []string
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		for _, dir := range []string{"ns", "fd"} {
			links, err := os.ReadDir(fmt.Sprintf("/proc/%d/%s", pid, dir))
			if err != nil {
				continue // ended, or a kernel thread
			}
			for _, l := range links {
				target, err := os.Readlink(fmt.Sprintf("/proc/%d/%s/%s", pid, dir, l.Name()))
				if err == nil && wanted[target] {
					refs = append(refs, fmt.Sprintf("process %d %s/%s -> %s", pid, dir, l.Name(), target))
				}
			}
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		// An nsfs mount's root (field 4) is the namespace, "net:[4026532305]".
		if len(fields) > 4 && wanted[fields[3]] {
			refs = append(refs, "mount "+s.Text())
		}
	}
	return refs, s.Err()
}
