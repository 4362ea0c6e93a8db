// Command pause is the sandbox process of the real test nodes' pods and the process that holds a
// test node's namespaces open: it does nothing until SIGINT or SIGTERM, and reaps every child it
// inherits, as the init process of a pod's PID namespace must. It is built static, so that it is
// the whole of the pause image.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		reapExited()
	}
}

// reapExited collects every child that has exited; one SIGCHLD may stand for several.
func reapExited() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
