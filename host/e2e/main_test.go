package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The gateway under test, built once per run by TestMain. A failed build is not fatal for the
// whole package (the baseline needs no gateway); every scenario that needs it fails with the
// reason instead.
var skewgateBuild struct {
	binary, wasm string
	// compileCache is shared by every gateway of the run, so only the first one compiles the
	// plugin.
	compileCache string
	err          error
}

// repoRoot is the module root, two levels above this package's directory (the working
// directory of its tests).
const repoRoot = "../.."

const skewgateBuildTimeout = 10 * time.Minute

func TestMain(m *testing.M) {
	code := runTests(m)
	os.Exit(code)
}

func runTests(m *testing.M) int {
	work, err := os.MkdirTemp("", "skewgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(work)
	buildSkewgate(work)
	defer closeSharedClusters()
	return m.Run()
}

// buildSkewgate builds ./host/cmd/skewgate from the module root as the Makefile builds
// bin/skewgate (static, so that it also goes into skewgate's image), and checks that the plugin
// module `make build` produces is there.
func buildSkewgate(work string) {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		skewgateBuild.err = err
		return
	}
	skewgateBuild.compileCache = filepath.Join(work, "wasm-compilation-cache")
	skewgateBuild.wasm = filepath.Join(root, "build", "skewgate.wasm")
	if _, err := os.Stat(skewgateBuild.wasm); err != nil {
		skewgateBuild.err = fmt.Errorf("the plugin module is missing (%v): run `make build` first", err)
		return
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		skewgateBuild.err = fmt.Errorf("the go command is needed to build skewgate: %w", err)
		return
	}
	binary := filepath.Join(work, "skewgate")
	ctx, cancel := context.WithTimeout(context.Background(), skewgateBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-tags", "grpcnotrace", "-o", binary, "./host/cmd/skewgate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		skewgateBuild.err = fmt.Errorf("go build ./host/cmd/skewgate: %w\n%s", err, out.Bytes())
		return
	}
	skewgateBuild.binary = binary
}

// requireSkewgate fails the test when TestMain could not build the gateway.
func requireSkewgate(t *testing.T) {
	t.Helper()
	if skewgateBuild.err != nil {
		t.Fatalf("skewgate is not available: %v", skewgateBuild.err)
	}
	if skewgateBuild.binary == "" {
		t.Fatal("skewgate was not built: TestMain did not run")
	}
}
