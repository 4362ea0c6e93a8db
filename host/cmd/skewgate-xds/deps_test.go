package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestBinaryLinksNoWebAssemblyRuntime lists the packages bin/skewgate-xds
// links, built as the Makefile builds it: no plugin runs here, so neither
// the WebAssembly runtime nor the gateway that hosts it may be linked,
// whatever the process shell it shares with skewgate serve comes to import.
func TestBinaryLinksNoWebAssemblyRuntime(t *testing.T) {
	list := exec.Command("go", "list", "-deps", "-trimpath", "-tags", "grpcnotrace", ".")
	list.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	linked := strings.Fields(string(out))
	for _, pkg := range []string{
		"github.com/tetratelabs/wazero",
		"github.com/skewgate/skewgate/host/internal/wasmhost",
		"github.com/skewgate/skewgate/host/internal/gateway",
	} {
		if slices.Contains(linked, pkg) {
			t.Errorf("bin/skewgate-xds links %s; go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./host/cmd/skewgate-xds shows what imports it", pkg)
		}
	}
}
