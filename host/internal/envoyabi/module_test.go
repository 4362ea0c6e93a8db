package envoyabi

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/skewgate/skewgate/plugin/plugintest"
)

// compiledModule is the plugin module built from the tree, decoded once; the
// interpreter compiles fastest and only its imports and exports matter here.
var compiledModule = sync.OnceValues(func() (wazero.CompiledModule, error) {
	wasm, err := plugintest.BuildModule(false)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	return wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter()).CompileModule(ctx, wasm)
})

func compileBuiltModule(t *testing.T) wazero.CompiledModule {
	t.Helper()
	compiled, err := compiledModule()
	if err != nil {
		t.Fatal(err)
	}
	return compiled
}

func TestBuiltModuleLinksInEnvoy133(t *testing.T) {
	compiled := compileBuiltModule(t)
	abi, ok := DeclaredABI(compiled.ExportedFunctions())
	if !ok {
		t.Fatal(ErrUnknownABI)
	}
	if err := CheckImports(Envoy133, abi, compiled.ImportedFunctions()); err != nil {
		t.Fatalf("Envoy 1.33 would refuse the module:\n%v", err)
	}
}

func TestBuiltModuleExportsWhatEnvoyCalls(t *testing.T) {
	exports := compileBuiltModule(t).ExportedFunctions()
	if abi, ok := DeclaredABI(exports); !ok || !strings.HasPrefix(abi, "0.2.") {
		t.Errorf("declared ABI %q (%v); want 0.2.x", abi, ok)
	}
	if exports["malloc"] == nil && exports["proxy_on_memory_allocate"] == nil {
		t.Error("no allocator export (malloc or proxy_on_memory_allocate)")
	}
	for _, name := range []string{"_initialize", "proxy_on_context_create", "proxy_on_configure", "proxy_on_request_headers", "proxy_on_log", "proxy_on_done", "proxy_on_delete"} {
		if exports[name] == nil {
			t.Errorf("missing export %s", name)
		}
	}
	for _, name := range []string{"_start", "main"} {
		if exports[name] != nil {
			t.Errorf("exports %s: a reactor must not", name)
		}
	}
}
