package wasmhost

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/skewgate/skewgate/plugin/plugintest"
)

// wamrEnvironments are VM environments (vm_config.environment_variables) of different sizes. Go's runtime
// copies the environment into its heap during _initialize, so its size moves what Go places in the page WAMR
// inserts; GODEBUG=gctrace=1 is the setting WAMR's heap was first seen to corrupt Go's with.
var wamrEnvironments = []struct {
	name        string
	environment [][2]string
}{
	{"no environment", nil},
	{"GODEBUG=gctrace=1", [][2]string{{"GODEBUG", "gctrace=1"}}},
	{"GODEBUG=gctrace=1 and small variables", [][2]string{
		{"GODEBUG", "gctrace=1"}, {"POD_NAME", "envoy-7d9f6c5b8-x2x4q"}, {"POD_NAMESPACE", "kube-system"},
	}},
	{"GODEBUG=gctrace=1 and a 3 KiB variable", [][2]string{
		{"GODEBUG", "gctrace=1"}, {"ISTIO_META_CLUSTER_ID", strings.Repeat("c", 3<<10)},
	}},
	{"a 40 KiB variable", [][2]string{{"ENVOY_EXTRA", strings.Repeat("e", 40<<10)}}},
}

// The plugin's behaviour suite in the memory layout Envoy's WAMR runtime gives a module that lets WAMR insert
// its app heap, with environments of several sizes. The plugin exports its own malloc and free, so WAMR (and
// this mode) leaves its memory to Go's runtime alone.
func TestPluginSuiteHoldsInWAMRsMemoryLayoutWhateverTheEnvironment(t *testing.T) {
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range wamrEnvironments {
		t.Run(env.name, func(t *testing.T) {
			plugintest.Run(t, pluginHarness{wasm: wasm, environment: env.environment, wamrAppHeap: true})
		})
	}
}

// WAMR takes a module's exports as its allocator only with the exact types its loader checks: malloc
// (i32) -> i32 and free (i32) -> (). With both present it inserts no app heap into the module's memory.
func TestPluginExportsTheMallocAndFreeWAMRUsesInsteadOfItsAppHeap(t *testing.T) {
	wasm, err := builtPlugin()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	compiled, err := r.CompileModule(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	exports := compiled.ExportedFunctions()
	for _, want := range []struct {
		name            string
		params, results []api.ValueType
	}{
		{"malloc", []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}},
		{"free", []api.ValueType{api.ValueTypeI32}, nil},
	} {
		def, ok := exports[want.name]
		if !ok {
			t.Errorf("the module does not export %s", want.name)
			continue
		}
		if !slices.Equal(def.ParamTypes(), want.params) || !slices.Equal(def.ResultTypes(), want.results) {
			t.Errorf("%s is %s; WAMR takes only %s", want.name, signature(def.ParamTypes(), def.ResultTypes()),
				signature(want.params, want.results))
		}
	}
	if !wamrUsesModuleAllocator(exports) {
		t.Error("WAMR would insert its app heap into the module's memory")
	}
	h := newHost(t, wasm, Options{Instances: 1, WAMRAppHeap: true, Logger: slog.New(slog.DiscardHandler),
		PluginConfiguration: fixturePluginConfig(t, fixtureSnapshot(t, 3, ""), nil)})
	if h.insertsAppHeap || h.exports.allocator != "malloc" {
		t.Errorf("in WAMR's layout the host inserts an app heap: %v, and allocates with %s; want no heap and malloc",
			h.insertsAppHeap, h.exports.allocator)
	}
}

func signature(params, results []api.ValueType) string {
	names := func(types []api.ValueType) string {
		var s []string
		for _, t := range types {
			s = append(s, api.ValueTypeName(t))
		}
		return "(" + strings.Join(s, ", ") + ")"
	}
	return names(params) + " -> " + names(results)
}
