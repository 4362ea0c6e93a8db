package kubecluster

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a child process whose output goes to a log file.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
}

// StartProcess starts argv with its output appended to logPath. The child
// gets its own process group, so a terminal's Ctrl-C reaches only the harness,
// which then stops it in order, and SIGKILL if the harness dies, so no server
// outlives a crashed run. Everything started here execs in place (unshare and
// sh included), so the process is the whole tree.
func StartProcess(name, logPath string, argv []string, env []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, fmt.Errorf("%s exited with status 0", p.Name)
		}
		return true, fmt.Errorf("%s: %w", p.Name, p.waitErr)
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to grace, then SIGKILL. The signals go to this
// child only, through its os.Process.
func (p *Process) Stop(grace time.Duration) {
	if done, _ := p.Exited(); done {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last n lines of the process log, for error reports.
func (p *Process) Tail(n int) string {
	raw, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// FreePorts reserves n distinct loopback ports and releases them for the
// caller to bind. Another process may take one in between; callers retry.
func FreePorts(n int) ([]int, error) {
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// LoopbackAddress is 127.0.0.1:port.
func LoopbackAddress(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
