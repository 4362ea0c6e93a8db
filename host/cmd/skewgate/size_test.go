package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// buildFlags and buildEnv are the Makefile's for bin/skewgate. -s -w drops
// the symbol table and DWARF only: panics, tracebacks and profiles read
// pclntab, which stays.
var (
	buildFlags = []string{"-trimpath", "-ldflags=-s -w"}
	buildEnv   = append(os.Environ(), "CGO_ENABLED=0")
)

// maxBinarySize is bin/skewgate's budget in bytes: it runs beside every API
// server in node-local mode. It was 39.4 MB unstripped while it linked
// go-control-plane's management server and gRPC, which moved into
// skewgate-xds; without them it measured 28.3 MB unstripped and 19.7 MB
// built with buildFlags.
const maxBinarySize = 25_000_000

// sizeAdvice names what has made the binary grow before.
const sizeAdvice = `see what links it: go list -deps ./host/cmd/skewgate, ` +
	`go tool nm -size -sort size bin/skewgate; above all a package calling reflect's Method or MethodByName ` +
	`with a computed name (text/template, html/template: the linker then keeps every exported method of every ` +
	`type), a Kubernetes API types package (k8s.io/api/core/v1's registration keeps all its types) or a test helper`

func TestBuiltBinaryFitsSizeBudget(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "skewgate")
	build := exec.Command("go", append(append([]string{"build"}, buildFlags...), "-o", bin, ".")...)
	build.Env = buildEnv
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxBinarySize {
		t.Errorf("bin/skewgate is %d bytes; budget %d: %s", fi.Size(), maxBinarySize, sizeAdvice)
	}
}

// TestBinaryLinksNoTemplatesAPITypesDemoOrXDSServer lists the packages bin/skewgate
// links: none of those that have made it large, nor the xDS management
// server and gRPC (skewgate-xds links them), nor the demo, its fakes or
// test helpers. The captured documents (package fixtures) are linked: they
// are what `skewgate check --to VERSION` compares against.
func TestBinaryLinksNoTemplatesAPITypesDemoOrXDSServer(t *testing.T) {
	args := append(append([]string{"list", "-deps"}, buildFlags...), "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".")
	list := exec.Command("go", args...)
	list.Env = buildEnv
	out, err := list.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{
		"text/template", "html/template",
		// skewgate-xds's, so that node-local instances do not carry them.
		"google.golang.org/grpc", "github.com/envoyproxy/go-control-plane/pkg/server/v3",
		"github.com/skewgate/skewgate/host/internal/xds",
		"k8s.io/api/core/v1", "k8s.io/client-go/kubernetes",
		"github.com/skewgate/skewgate/host/internal/demo", "github.com/skewgate/skewgate/host/internal/devpki",
		"github.com/skewgate/skewgate/discovery/discoverytest",
	}
	importers := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		pkg, imports, _ := strings.Cut(strings.TrimSpace(line), " ")
		for _, imp := range strings.Fields(imports) {
			importers[imp] = append(importers[imp], pkg)
		}
	}
	for _, f := range forbidden {
		if by, linked := importers[f]; linked {
			t.Errorf("bin/skewgate links %s, imported by %s", f, strings.Join(by, ", "))
		}
	}
}
