package plugintest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ModuleCommand is the package `make build` compiles into build/skewgate.wasm.
const ModuleCommand = "github.com/skewgate/skewgate/plugin/cmd/skewgate-plugin"

// BuildModule compiles the plugin module from the source in the tree, as
// `make build` does (a wasip1 reactor, -trimpath, the name section stripped),
// and returns its bytes, so that a test never runs a module older than the
// code. keepNames keeps the name section, which a test needs to tell the
// plugin's own frames from the Go runtime's; the code is the same.
func BuildModule(keepNames bool) ([]byte, error) {
	dir, err := os.MkdirTemp("", "skewgate-module-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "skewgate.wasm")
	args := []string{"build", "-buildmode=c-shared", "-trimpath"}
	if !keepNames {
		args = append(args, "-ldflags=-s -w")
	}
	cmd := exec.Command("go", append(args, "-o", out, ModuleCommand)...)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the plugin module: %v\n%s", err, msg)
	}
	return os.ReadFile(out)
}
