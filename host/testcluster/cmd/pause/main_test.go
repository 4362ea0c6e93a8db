package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func buildPause(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pause")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, out)
	}
	return bin
}

func TestPauseRunsUntilSIGTERMOrSIGINTAndThenExitsCleanly(t *testing.T) {
	bin := buildPause(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				t.Fatalf("pause ended by itself: %v", err)
			case <-time.After(300 * time.Millisecond):
			}
			// SIGCHLD alone must not end it.
			if err := cmd.Process.Signal(syscall.SIGCHLD); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				t.Fatalf("pause ended at SIGCHLD: %v", err)
			case <-time.After(200 * time.Millisecond):
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("pause exited with %v at %s, want status 0", err, sig)
				}
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("pause still running 10s after %s", sig)
			}
		})
	}
}

// children lists the child processes of pid's main thread.
func children(pid int) ([]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	return strings.Fields(string(data)), err
}

func TestPauseReapsTheOrphansOfItsPIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("a PID namespace of its own needs root, as every test of the real nodes does")
	}
	bin := buildPause(t)
	// unshare forks pause as PID 1 of a new PID namespace and waits for it.
	unshare := exec.Command("unshare", "--pid", "--fork", "--kill-child", "--", bin)
	if err := unshare.Start(); err != nil {
		t.Fatal(err)
	}
	var pausePID int
	// unshare ignores SIGTERM while it waits for its child; pause must end at it.
	defer func() {
		if pausePID != 0 {
			syscall.Kill(pausePID, syscall.SIGTERM)
		}
		timer := time.AfterFunc(10*time.Second, func() { unshare.Process.Kill() })
		defer timer.Stop()
		if err := unshare.Wait(); err != nil {
			t.Errorf("pause, PID 1 of its namespace, did not exit cleanly at SIGTERM: %v", err)
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for pausePID == 0 {
		kids, _ := children(unshare.Process.Pid)
		if len(kids) == 1 {
			exe, _ := os.Readlink("/proc/" + kids[0] + "/exe")
			if exe == bin {
				pausePID, _ = strconv.Atoi(kids[0])
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("pause did not start in its PID namespace")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The shell exits at once; its sleep is orphaned and becomes a child of the namespace's init.
	// The sleep outlives any scheduling delay; the test ends it once pause has adopted it.
	orphan := exec.Command("nsenter", "--target", strconv.Itoa(pausePID), "--pid", "--", "sh", "-c", "sleep 300 >/dev/null 2>&1 & exit 0")
	if out, err := orphan.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	kids, err := children(pausePID)
	if err != nil || len(kids) != 1 {
		t.Fatalf("pause's children after the orphaning: %v (%v), want the orphaned sleep", kids, err)
	}
	orphanPID, err := strconv.Atoi(kids[0])
	if err != nil {
		t.Fatal(err)
	}
	// Killed, the orphan stays a zombie child of pause until pause reaps it.
	if err := syscall.Kill(orphanPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = waitFor(10*time.Second, func() error {
		kids, err := children(pausePID)
		if err != nil {
			return err
		}
		if len(kids) > 0 {
			return fmt.Errorf("pause still has children %v, reaped or not", kids)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

func waitFor(timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
