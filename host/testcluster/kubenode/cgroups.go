package kubenode

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// cgroupMounts returns the mount points of the machine's cgroup hierarchies (v1 controllers, the
// named systemd hierarchy, the unified v2 one), from /proc/self/mountinfo.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// Fields: ID parent major:minor root mountpoint options [optional...] - fstype source super.
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep < 0 || sep+1 >= len(fields) || len(fields) < 5 {
			continue
		}
		if fstype := fields[sep+1]; fstype == "cgroup" || fstype == "cgroup2" {
			mounts = append(mounts, fields[4])
		}
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	if len(mounts) == 0 {
		return nil, errors.New("no cgroup hierarchy is mounted")
	}
	return mounts, nil
}

// cgroupV1 reports whether the machine runs the legacy hierarchy: /sys/fs/cgroup is then not a
// cgroup2 mount.
func cgroupV1() (bool, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/sys/fs/cgroup", &st); err != nil {
		return false, err
	}
	const cgroup2Magic = 0x63677270
	return st.Type != cgroup2Magic, nil
}

// createCgroup creates cgroup path (absolute within each hierarchy, "/skewgate-…") in every
// hierarchy, since the kubelet checks that its cgroupRoot exists in each. A new cpuset cgroup is
// empty and admits no process until it has CPUs and memory nodes; it gets its parent's.
func createCgroup(path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	for _, m := range mounts {
		dir := filepath.Join(m, path)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			value, err := os.ReadFile(filepath.Join(filepath.Dir(dir), file))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, file), value, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
			}
		}
	}
	return nil
}

// removeCgroup removes cgroup path and every cgroup below it from every hierarchy, deepest first.
// A cgroup whose last process has just exited may refuse removal for a moment, so it retries
// until ctx ends.
func removeCgroup(ctx context.Context, path string) error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		root := filepath.Join(m, path)
		err := poll(ctx, 100*time.Millisecond, func() error {
			dirs, err := cgroupTree(root)
			if err != nil {
				return err
			}
			for _, d := range slices.Backward(dirs) {
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("removing cgroup %s: %w: %w", d, err, errNotYet)
				}
			}
			return nil
		})
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// cgroupTree lists root and every cgroup below it, parents before children; none if root does not
// exist.
func cgroupTree(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs, err
}
