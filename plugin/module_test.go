package plugin

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/config"
	"github.com/skewgate/skewgate/plugin/plugintest"
)

// maxModuleSize is the budget for build/skewgate.wasm: every Envoy worker
// compiles and holds its own copy.
const maxModuleSize = 4 << 20

// The module announces the schema version it reads, as the hosts read it
// from the file: the export's name spells discovery's version.
func TestBuiltModuleAnnouncesTheSchemaItReads(t *testing.T) {
	v, err := config.ModuleSchemaVersion(readBuiltModule(t))
	if err != nil || v != discovery.CurrentSchema() {
		t.Fatalf("the module announces %v, %v; want %v (the //go:wasmexport name in schema.go)", v, err, discovery.CurrentSchema())
	}
}

func TestBuiltModuleFitsSizeBudget(t *testing.T) {
	if size := len(readBuiltModule(t)); size > maxModuleSize {
		t.Errorf("the module is %d bytes; budget %d", size, maxModuleSize)
	}
}

// forbiddenCalls block, sleep, arm a runtime timer or touch files: in Envoy's
// host the Go scheduler cannot wait (poll_oneoff fails before Envoy 1.39 and
// spins after), and a plugin has no file system.
var forbiddenCalls = map[string][]string{
	"time":    {"Sleep", "After", "AfterFunc", "NewTimer", "NewTicker", "Tick"},
	"context": {"WithTimeout", "WithDeadline", "WithTimeoutCause", "WithDeadlineCause"},
	"os":      {"Open", "OpenFile", "Create", "ReadFile", "WriteFile", "ReadDir", "Stat", "Lstat", "Getenv", "LookupEnv", "Exit"},
	"sync":    {"NewCond"},
}

// TestPluginCodeNeverWaitsSpawnsOrTouchesFiles reads the source compiled into
// the module (plugin/, its configuration, its command and discovery/, tests
// excluded): no go statements, no blocking or timer calls, no file access, no
// channel operations, and an init() that only registers the VM context.
func TestPluginCodeNeverWaitsSpawnsOrTouchesFiles(t *testing.T) {
	for _, dir := range []string{".", "config", "cmd/skewgate-plugin", "../discovery"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			checkPluginSource(t, file)
		}
	}
}

func checkPluginSource(t *testing.T, file string) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	imported := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		path := strings.Trim(imp.Path.Value, `"`)
		name := filepath.Base(path)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		imported[name] = path
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: go statement", fset.Position(n.Pos()))
		case *ast.SendStmt, *ast.SelectStmt:
			t.Errorf("%s: channel operation", fset.Position(n.Pos()))
		case *ast.UnaryExpr:
			if n.Op == token.ARROW {
				t.Errorf("%s: channel receive", fset.Position(n.Pos()))
			}
		case *ast.SelectorExpr:
			if pkg, ok := n.X.(*ast.Ident); ok {
				for _, name := range forbiddenCalls[imported[pkg.Name]] {
					if n.Sel.Name == name {
						t.Errorf("%s: %s.%s", fset.Position(n.Pos()), imported[pkg.Name], name)
					}
				}
			}
		case *ast.FuncDecl:
			if n.Name.Name == "init" && n.Recv == nil {
				checkInitOnlyRegisters(t, fset, n)
			}
		}
		return true
	})
}

func checkInitOnlyRegisters(t *testing.T, fset *token.FileSet, fn *ast.FuncDecl) {
	t.Helper()
	for _, stmt := range fn.Body.List {
		call, ok := stmt.(*ast.ExprStmt)
		if !ok {
			t.Errorf("%s: init() does more than register contexts", fset.Position(stmt.Pos()))
			continue
		}
		sel, ok := call.X.(*ast.CallExpr).Fun.(*ast.SelectorExpr)
		if !ok || !strings.HasPrefix(sel.Sel.Name, "Set") || !strings.HasSuffix(sel.Sel.Name, "Context") {
			t.Errorf("%s: init() calls something other than proxywasm.Set*Context", fset.Position(stmt.Pos()))
		}
	}
}

// The plugin's own work per request (reading the headers it was given and
// deciding) allocates nothing; what remains is the SDK's copy of the header
// map from the host.
func TestRequestDecisionDoesNotAllocate(t *testing.T) {
	cfg, err := parseConfig(plugintest.Config(t, 1, nil, discoverytest.WithFieldSkew(discoverytest.SkewedControlPlane())))
	if err != nil {
		t.Fatal(err)
	}
	h := &httpContext{plugin: &pluginContext{cfg: cfg}, cfg: cfg}
	for _, target := range []string{
		"/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies?limit=500",
		plugintest.KubeletPodList,
		"/api/v1/watch/pods?fieldSelector=metadata.namespace%3Dns%2Cspec.nodeName%21%3Dn%5C%2C1",
		"/apis/apps/v1/namespaces/ns/deployments/web?fieldManager=kubectl",
	} {
		headers := [][2]string{
			{":method", "GET"}, {":path", target},
			{":authority", "kube.example"}, {":scheme", "https"}, {"accept", "application/json"},
			{"user-agent", "kubectl/v1.36.3"}, {"authorization", "Bearer abc"},
		}
		var d discovery.Decision
		allocs := testing.AllocsPerRun(200, func() {
			in := h.scan(headers)
			req, ok := h.request(&in)
			if !ok {
				t.Fatal("request target rejected")
			}
			d = cfg.Index.Decide(&req, 1)
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per request; want 0", target, allocs)
		}
		if d.Action != discovery.Route {
			t.Errorf("%s: decision %+v; want a re-routed request", target, d)
		}
	}
}

// The module carries the decision core and the SDK, never a Kubernetes
// library: those are the differential tests' oracles only.
func TestPluginDependsOnNoKubernetesLibrary(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", plugintest.ModuleCommand)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") {
			t.Errorf("the plugin depends on %s", pkg)
		}
	}
}

// parseConfig is what OnPluginStart does with a configuration.
func parseConfig(raw []byte) (*Config, error) {
	parsed, err := config.Parse(raw)
	if err != nil {
		return nil, err
	}
	return configFrom(parsed)
}
