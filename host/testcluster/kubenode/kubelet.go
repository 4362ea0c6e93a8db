package kubenode

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/skewgate/skewgate/host/testcluster"
)

// The files kubeadm writes for the kubelet, at their paths inside a node, and the flags systemd's
// kubeadm drop-in passes with them.
const (
	kubeletConfigFile    = "/var/lib/kubelet/config.yaml"
	kubeletFlagsFile     = "/var/lib/kubelet/kubeadm-flags.env"
	kubeletKubeconfig    = "/etc/kubernetes/kubelet.conf"
	kubeletBootstrapConf = "/etc/kubernetes/bootstrap-kubelet.conf"
	// kubeletFlagsVariable is the variable of kubeletFlagsFile holding kubeadm's flags.
	kubeletFlagsVariable = "KUBELET_KUBEADM_ARGS"
)

const (
	// kubeletRestartDelay is how long the supervisor waits before starting a kubelet that
	// exited, as systemd's kubelet unit does (RestartSec=10); a crashing kubelet does not spin.
	kubeletRestartDelay = 2 * time.Second
	kubeletStopGrace    = 15 * time.Second
)

// kubeletSupervisor does for a node's kubelet what systemd does elsewhere: once kubeadm has written
// the kubelet's configuration and flags it starts the kubelet with them, and it starts the kubelet
// again whenever it exits, with the flags and binary current at that moment.
type kubeletSupervisor struct {
	node *Node
	log  testcluster.Logger

	mu     sync.Mutex
	proc   *testcluster.Process
	starts int
	// stopping is a kubelet being stopped on purpose; no other starts until it has ended.
	stopping *testcluster.Process
	stopped  bool

	wake chan struct{}
	done chan struct{}
}

func startKubeletSupervisor(n *Node, log testcluster.Logger) *kubeletSupervisor {
	s := &kubeletSupervisor{node: n, log: log, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return s
}

func (s *kubeletSupervisor) run() {
	defer close(s.done)
	for {
		argv, ready := s.kubeletCommand()
		if ready {
			if err := s.start(argv); err != nil {
				s.log.Logf("node %s: starting the kubelet: %v", s.node.Name, err)
			}
		}
		s.mu.Lock()
		proc, stopped := s.proc, s.stopped
		s.mu.Unlock()
		if stopped {
			return
		}
		var exited <-chan struct{}
		if proc != nil {
			exited = proc.Done()
		}
		select {
		case <-s.wake:
		case <-exited:
			s.mu.Lock()
			// restart and stop let go of the process before they stop it.
			unexpected := s.proc == proc
			if unexpected {
				s.proc = nil
			}
			s.mu.Unlock()
			if !unexpected {
				continue
			}
			_, err := proc.Exited()
			s.log.Logf("node %s: kubelet exited (%v); starting it again in %s; log:\n%s",
				s.node.Name, err, kubeletRestartDelay, proc.LogTail(15))
			select {
			case <-s.wake:
			case <-time.After(kubeletRestartDelay):
			}
		case <-time.After(200 * time.Millisecond):
			// Waiting for kubeadm's files.
		}
	}
}

// kubeletCommand returns the kubelet's command line once kubeadm has written its files. Only a
// supervisor without a running kubelet starts one.
func (s *kubeletSupervisor) kubeletCommand() ([]string, bool) {
	s.mu.Lock()
	running := s.proc != nil || s.stopping != nil || s.stopped
	s.mu.Unlock()
	if running {
		return nil, false
	}
	if _, err := os.Stat(s.node.HostPath(kubeletConfigFile)); err != nil {
		return nil, false
	}
	env, err := os.ReadFile(s.node.HostPath(kubeletFlagsFile))
	if err != nil {
		return nil, false
	}
	flags, err := parseKubeletFlags(env)
	if err != nil {
		s.log.Logf("node %s: %s: %v", s.node.Name, kubeletFlagsFile, err)
		return nil, false
	}
	argv := []string{"kubelet",
		"--bootstrap-kubeconfig=" + kubeletBootstrapConf,
		"--kubeconfig=" + kubeletKubeconfig,
		"--config=" + kubeletConfigFile,
	}
	return append(argv, flags...), true
}

func (s *kubeletSupervisor) start(argv []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.proc != nil || s.stopping != nil {
		return nil
	}
	proc, err := s.node.Start("kubelet", argv...)
	if err != nil {
		return err
	}
	s.proc = proc
	s.starts++
	s.log.Logf("node %s: kubelet started (start %d): %s", s.node.Name, s.starts, strings.Join(argv[1:], " "))
	return nil
}

// restart stops the running kubelet, if any; the supervisor starts it again at once.
func (s *kubeletSupervisor) restart() {
	s.mu.Lock()
	proc := s.proc
	s.proc, s.stopping = nil, proc
	s.mu.Unlock()
	if proc != nil {
		proc.Stop(kubeletStopGrace)
	}
	s.mu.Lock()
	s.stopping = nil
	s.mu.Unlock()
	s.poke()
}

func (s *kubeletSupervisor) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// stop stops the kubelet for good.
func (s *kubeletSupervisor) stop() {
	s.mu.Lock()
	s.stopped = true
	proc := s.proc
	s.proc = nil
	s.mu.Unlock()
	s.poke()
	<-s.done
	if proc != nil {
		proc.Stop(kubeletStopGrace)
	}
}

// current returns the running kubelet process, if any.
func (s *kubeletSupervisor) current() *testcluster.Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// parseKubeletFlags reads KUBELET_KUBEADM_ARGS from the text of kubeadm-flags.env, which kubeadm
// writes as one line KUBELET_KUBEADM_ARGS="--flag=value ..." for systemd to split at spaces.
func parseKubeletFlags(env []byte) ([]string, error) {
	s := bufio.NewScanner(bytes.NewReader(env))
	for s.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(s.Text()), "=")
		if !ok || name != kubeletFlagsVariable {
			continue
		}
		if unquoted, err := strconv.Unquote(value); err == nil {
			value = unquoted
		}
		flags := strings.Fields(value)
		for _, f := range flags {
			if !strings.HasPrefix(f, "--") {
				return nil, fmt.Errorf("%s holds %q, which is not a flag", kubeletFlagsVariable, f)
			}
		}
		return flags, nil
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("no %s", kubeletFlagsVariable)
}
