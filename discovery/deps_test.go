package discovery

import (
	"os/exec"
	"strings"
	"testing"
)

// The package is compiled into the Wasm plugin: outside tests it depends on the
// standard library only (gjson, which it used to read JSON with, links
// encoding/json and 790 KB of module with it).
func TestDiscoveryDependsOnStandardLibraryOnly(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg != "github.com/skewgate/skewgate/discovery" {
			t.Errorf("discovery depends on %s", pkg)
		}
	}
}

// net/url's package initialisation alone (net/netip, unique) costs the plugin
// 100 KB of its 4 MiB budget, so discovery decodes queries and prints URLs
// itself; encoding/json would bring most of reflect.
func TestDiscoveryImportsNeitherNetURLNorEncodingJSON(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "net/url" || pkg == "net/netip" || pkg == "encoding/json" {
			t.Errorf("discovery depends on %s", pkg)
		}
	}
}
