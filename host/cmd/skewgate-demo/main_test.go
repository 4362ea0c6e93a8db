package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/host/internal/cmdline"
)

func TestCommandLineMistakesFailBeforeAnythingStarts(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"unknown flag", []string{"--no-such-flag"}, cmdline.ExitUsage, "no-such-flag"},
		{"stray argument", []string{"serve"}, cmdline.ExitUsage, "unexpected arguments: serve"},
		{"bad log format", []string{"--log-format", "xml"}, 1, "--log-format"},
		{"bad log level", []string{"--log-level", "loud"}, 1, "--log-level"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(context.Background(), tc.args, &stdout, &stderr); code != tc.code {
				t.Errorf("exit %d, want %d; stderr: %s", code, tc.code, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.says) {
				t.Errorf("stderr does not name %q: %s", tc.says, stderr.String())
			}
			if stdout.Len() != 0 {
				t.Errorf("a report was printed: %s", stdout.String())
			}
		})
	}
}

func TestHelpExitsCleanly(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if !strings.Contains(stderr.String(), "-exit-after-report") {
		t.Errorf("help lacks the flags: %s", stderr.String())
	}
}

// make demo is the first thing a new user runs: it starts, reports and ends
// without a warning or an error in its log.
func TestDemoRunsWithoutAWarning(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"--exit-after-report", "--wasm", "../../../build/skewgate.wasm"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr.String())
	}
	for _, level := range []string{"level=WARN", "level=ERROR"} {
		if strings.Contains(stderr.String(), level) {
			t.Errorf("the demo logged %s:\n%s", level, stderr.String())
		}
	}
	if !strings.Contains(stdout.String(), "false 404s") {
		t.Errorf("the demo printed no comparison:\n%s", stdout.String())
	}
}
