package testcluster

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Process is one child process whose output goes to a log file: a server of the cluster, or a
// process a caller runs next to it (a proxy in front of the servers) under the same lifecycle.
type Process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error // valid once done is closed
}

// StartProcess starts argv with its output appended to logPath. The child gets its own process
// group, so terminal signals aimed at the test do not reach it directly, and SIGKILL when the
// parent dies, so a crashed or killed test never leaves servers behind. Every binary started here
// execs in place (unshare and sh included), so the process is the whole tree; argv must keep
// that true for Stop to reach everything it started.
func StartProcess(name, logPath string, argv []string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Done is closed once the process has ended.
func (p *Process) Done() <-chan struct{} { return p.done }

// PID is the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, errors.New("exited with status 0")
		}
		return true, p.waitErr
	default:
		return false, nil
	}
}

// Signal sends sig to the process. Signals go through os.Process, which targets exactly this
// child even if its PID were reused.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends SIGTERM, waits up to grace for a clean exit (kube-apiserver removes its peer endpoint
// lease on the way out), then sends SIGKILL. SIGCONT follows SIGTERM, because a process stopped
// with SIGSTOP would hold SIGTERM until continued.
func (p *Process) Stop(grace time.Duration) {
	if done, _ := p.Exited(); done {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	_ = p.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// LogTail returns the last n lines of the process log.
func (p *Process) LogTail(n int) string {
	return tailOfFile(p.logPath, n)
}

// tailOfFile returns the last n lines of the file at path.
func tailOfFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return LastLines(data, n)
}

// LogContains reports whether the process log contains s.
func (p *Process) LogContains(s string) bool {
	data, err := os.ReadFile(p.logPath)
	return err == nil && bytes.Contains(data, []byte(s))
}

// FreePorts returns n distinct loopback ports that were free a moment ago. Holding all listeners
// until every port is chosen keeps them distinct; a later bind race is handled by the callers
// retrying with fresh ports.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// addressInUse is the bind failure both etcd and kube-apiserver log when a port was taken.
const addressInUse = "address already in use"
