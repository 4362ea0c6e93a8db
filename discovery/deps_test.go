package discovery

import (
	"os/exec"
	"strings"
	"testing"
)

// The package is compiled into the Wasm plugin: outside tests it may depend on
// the standard library and gjson (with its two helper modules) only.
func TestDiscoveryDependsOnStandardLibraryAndGJSONOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/skewgate/skewgate/discovery": true,
		"github.com/tidwall/gjson":               true,
		"github.com/tidwall/match":               true,
		"github.com/tidwall/pretty":              true,
	}
	for _, pkg := range strings.Fields(string(out)) {
		if !allowed[pkg] {
			t.Errorf("discovery depends on %s", pkg)
		}
	}
}

// net/url's package initialisation alone (net/netip, unique) costs the plugin
// 100 KB of its 4 MiB budget, so discovery decodes queries and prints URLs
// itself.
func TestDiscoveryDoesNotImportNetURL(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "net/url" || pkg == "net/netip" {
			t.Errorf("discovery depends on %s", pkg)
		}
	}
}
