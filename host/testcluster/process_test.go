package testcluster

import (
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProcessLogTailShowsTheLastLinesAndStopEndsTheProcess(t *testing.T) {
	p, err := StartProcess("printer", filepath.Join(t.TempDir(), "printer.log"),
		[]string{"sh", "-c", `for i in 1 2 3 4 5; do echo line$i; done; exec sleep 60`})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(p.LogTail(2), "line5") {
		if time.Now().After(deadline) {
			t.Fatalf("log never showed line5: %q", p.LogTail(10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := p.LogTail(2); got != "line4\nline5" {
		t.Errorf("LogTail(2) = %q, want the last two lines", got)
	}
	if !p.LogContains("line3") || p.LogContains("line6") {
		t.Error("logContains disagrees with the log")
	}
	if done, err := p.Exited(); done {
		t.Fatalf("the process ended early: %v", err)
	}
	p.Stop(5 * time.Second)
	if done, err := p.Exited(); !done || err == nil {
		t.Errorf("after Stop: exited %v, %v; want a process ended by SIGTERM", done, err)
	}
}

func TestProcessStopEndsAPausedProcess(t *testing.T) {
	// The trap would make the process exit 0 on SIGTERM; a stopped process runs it only once
	// continued, so a clean exit shows that Stop delivered SIGTERM rather than waiting for SIGKILL.
	p, err := StartProcess("paused", filepath.Join(t.TempDir(), "paused.log"),
		[]string{"sh", "-c", `trap 'echo terminated; exit 0' TERM; echo started; while :; do sleep 0.1; done`})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !p.LogContains("started") {
		if time.Now().After(deadline) {
			t.Fatalf("the process never started: %q", p.LogTail(10))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p.Stop(30 * time.Second)
	if done, err := p.Exited(); !done || !p.LogContains("terminated") {
		t.Errorf("after Stop of a paused process: exited %v (%v), log %q; want its SIGTERM handler run", done, err, p.LogTail(10))
	}
}

func TestProcessExitingCleanlyStillCountsAsExited(t *testing.T) {
	p, err := StartProcess("true", filepath.Join(t.TempDir(), "true.log"), []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		done, err := p.Exited()
		if done {
			// A server is never meant to exit, so even status 0 is reported as an error.
			if err == nil {
				t.Error("Exited reported no error for a process that ended")
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the process never ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Stop(time.Second)
}

func TestFreePortsAreDistinctLoopbackPorts(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ports)
	if len(slices.Compact(ports)) != 5 || ports[0] <= 0 {
		t.Errorf("ports %v, want five distinct ports", ports)
	}
}
