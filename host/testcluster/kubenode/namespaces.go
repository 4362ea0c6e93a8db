package kubenode

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// Namespace kinds, as /proc/<pid>/ns names them.
const (
	mountNamespace   = "mnt"
	networkNamespace = "net"
	utsNamespace     = "uts"
)

// Namespace identifies one namespace by kind and inode number, as /proc/<pid>/ns/<kind> links
// show it ("net:[4026532305]").
type Namespace struct {
	Kind  string
	Inode uint64
}

func (n Namespace) String() string { return fmt.Sprintf("%s:[%d]", n.Kind, n.Inode) }

// unshareFlags are unshare's options for each namespace kind.
var unshareFlags = map[string]string{mountNamespace: "--mount", networkNamespace: "--net", utsNamespace: "--uts"}

// holder is the pause program started by unshare in new namespaces, which it keeps alive until it
// is stopped. Every other process of those namespaces enters them with nsenter, so that the holder
// alone decides when they end.
type holder struct {
	proc       *testcluster.Process
	namespaces []Namespace
}

// startHolder starts pause in new namespaces of the given kinds. A new mount namespace gets
// private propagation, so that nothing mounted in it reaches the machine's.
func startHolder(ctx context.Context, name, logPath, pause string, kinds ...string) (*holder, error) {
	argv := []string{"unshare"}
	for _, k := range kinds {
		argv = append(argv, unshareFlags[k])
		if k == mountNamespace {
			argv = append(argv, "--propagation", "private")
		}
	}
	argv = append(argv, "--", pause)
	proc, err := testcluster.StartProcess(name, logPath, argv)
	if err != nil {
		return nil, err
	}
	h := &holder{proc: proc}
	// unshare creates the namespaces and then execs pause in place; once the process runs pause,
	// they exist.
	if err := h.waitForPause(ctx, pause); err != nil {
		proc.Stop(time.Second)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for _, k := range kinds {
		ours, err := namespaceOf(os.Getpid(), k)
		if err != nil {
			proc.Stop(time.Second)
			return nil, err
		}
		theirs, err := namespaceOf(proc.PID(), k)
		if err == nil && theirs == ours {
			err = fmt.Errorf("%s is still in this process's %s namespace", name, k)
		}
		if err != nil {
			proc.Stop(time.Second)
			return nil, err
		}
		h.namespaces = append(h.namespaces, theirs)
	}
	return h, nil
}

func (h *holder) waitForPause(ctx context.Context, pause string) error {
	want, err := filepath.EvalSymlinks(pause)
	if err != nil {
		return err
	}
	exe := fmt.Sprintf("/proc/%d/exe", h.proc.PID())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if got, err := os.Readlink(exe); err == nil && got == want {
			return nil
		}
		if exited, err := h.proc.Exited(); exited {
			return fmt.Errorf("unshare ended: %v: %s", err, h.proc.LogTail(5))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("unshare did not start %s: %w", pause, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// enter returns argv run inside the holder's namespaces, with exactly the environment env: nsenter
// and env both exec in place, so the process started is argv's program itself.
func (h *holder) enter(env []string, argv ...string) []string {
	out := []string{"nsenter", "--target", strconv.Itoa(h.proc.PID())}
	for _, ns := range h.namespaces {
		out = append(out, unshareFlags[ns.Kind])
	}
	out = append(out, "--", "env", "-i")
	out = append(out, env...)
	return append(out, argv...)
}

// stop ends the holder. Its namespaces end with it once no other process is in them.
func (h *holder) stop() { h.proc.Stop(5 * time.Second) }

// namespaceOf reads the namespace of the given kind that process pid is in.
func namespaceOf(pid int, kind string) (Namespace, error) {
	info, err := os.Stat(fmt.Sprintf("/proc/%d/ns/%s", pid, kind))
	if err != nil {
		return Namespace{}, err
	}
	return Namespace{Kind: kind, Inode: info.Sys().(*syscall.Stat_t).Ino}, nil
}

// ProcessesIn lists the processes of the machine that are in any of the namespaces, by PID, with
// the name of their program. Processes that end while it looks are left out.
func ProcessesIn(namespaces []Namespace) (map[int]string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	wanted := map[Namespace]bool{}
	for _, ns := range namespaces {
		wanted[ns] = true
	}
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		for _, ns := range namespaces {
			got, err := namespaceOf(pid, ns.Kind)
			if err != nil || !wanted[got] {
				continue
			}
			comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if err != nil {
				break
			}
			out[pid] = strings.TrimSpace(string(comm))
			break
		}
	}
	return out, nil
}

// killAll sends SIGKILL to every process in the namespaces but spared until none is left, and names
// those it had to kill.
func killAll(ctx context.Context, namespaces []Namespace, spared int) ([]string, error) {
	var killed []string
	for {
		procs, err := ProcessesIn(namespaces)
		if err != nil {
			return killed, err
		}
		delete(procs, spared)
		if len(procs) == 0 {
			return killed, nil
		}
		for pid, comm := range procs {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
				killed = append(killed, fmt.Sprintf("%s (%d)", comm, pid))
			}
		}
		select {
		case <-ctx.Done():
			return killed, fmt.Errorf("processes still in the node's namespaces: %v", procs)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runCommand runs argv, returning its standard output; a failure carries the end of its output.
func runCommand(ctx context.Context, argv []string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		out := stderr.Bytes()
		if len(out) == 0 {
			out = stdout.Bytes()
		}
		return stdout.Bytes(), fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, testcluster.LastLines(out, 20))
	}
	return stdout.Bytes(), nil
}

// errNotYet marks a condition being waited for that does not hold yet.
var errNotYet = errors.New("not yet")

// poll calls check every interval until it returns nil or an error other than one wrapping
// errNotYet, or until ctx ends; then the last not-yet error explains the wait.
func poll(ctx context.Context, interval time.Duration, check func() error) error {
	for {
		err := check()
		if err == nil || !errors.Is(err, errNotYet) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}
