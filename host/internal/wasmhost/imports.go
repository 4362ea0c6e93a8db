package wasmhost

import (
	"context"
	"errors"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// hostFunc implements one import; stack holds the parameters and receives the results (wazero GoModuleFunction).
type hostFunc func(inst *instance, stack []uint64)

// moduleImports returns the Envoy imports the module uses, which CheckImports has matched with what the emulated
// release provides, and fails for one this host does not implement: it implements what skewgate's plugin
// imports, and a module importing more would otherwise meet a function Envoy has but this host lacks.
func (h *Host) moduleImports(compiled wazero.CompiledModule) ([]envoyabi.Import, error) {
	imported := make(map[string]bool)
	for _, def := range compiled.ImportedFunctions() {
		ns, name, _ := def.Import()
		imported[ns+"."+name] = true
	}
	impls := h.implementations()
	var out []envoyabi.Import
	var errs []error
	for _, imp := range envoyabi.ProvidedBy(h.opts.Envoy, h.abi) {
		if !imported[imp.QualifiedName()] {
			continue
		}
		if impls[imp.Name] == nil {
			errs = append(errs, fmt.Errorf("the module imports %s, which this host does not implement", imp.QualifiedName()))
			continue
		}
		out = append(out, imp)
	}
	return out, errors.Join(errs...)
}

// link instantiates the env and WASI host modules with exactly h.imports and builds the restricted-phase
// allow-lists for the emulated Envoy release.
func (h *Host) link(ctx context.Context) error {
	impls := h.implementations()
	h.startVMRestriction = &restriction{phase: "during VM start", allowed: make([]bool, len(h.imports))}
	h.mallocRestriction = &restriction{phase: "inside the guest allocator", allowed: make([]bool, len(h.imports))}
	builders := make(map[string]wazero.HostModuleBuilder)
	var order []string
	for idx, imp := range h.imports {
		h.startVMRestriction.allowed[idx] = imp.AllowedDuringStartVM(h.opts.Envoy)
		h.mallocRestriction.allowed[idx] = imp.AllowedDuringMalloc(h.opts.Envoy)
		b, ok := builders[imp.Namespace]
		if !ok {
			b = h.runtime.NewHostModuleBuilder(imp.Namespace)
			builders[imp.Namespace] = b
			order = append(order, imp.Namespace)
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(guard(idx, imp, impls[imp.Name]), imp.Params, imp.Results).
			WithName(imp.Name).
			Export(imp.Name)
	}
	for _, ns := range order {
		if _, err := builders[ns].Instantiate(ctx); err != nil {
			return fmt.Errorf("link host module %s: %w", ns, err)
		}
	}
	return nil
}

// guard finds the calling instance and enforces the restricted phases: a disallowed call traps, like cpp-host's
// restricted_callback.
func guard(idx int, imp envoyabi.Import, impl hostFunc) api.GoModuleFunc {
	name := imp.QualifiedName()
	return func(ctx context.Context, _ api.Module, stack []uint64) {
		inst, ok := ctx.Value(instanceKey{}).(*instance)
		if !ok {
			panic(guestTrap{fmt.Errorf("%s called outside a host-managed call", name)})
		}
		if r := inst.restriction; r != nil && !r.allowed[idx] {
			panic(guestTrap{fmt.Errorf("restricted_callback: %s may not be called %s", name, r.phase)})
		}
		impl(inst, stack)
	}
}

// implementations maps import names to their implementation: the proxy-wasm functions skewgate's plugin imports
// and the WASI functions a Go wasip1 module imports, which are the same under both WASI namespaces.
func (h *Host) implementations() map[string]hostFunc {
	m := map[string]hostFunc{
		"proxy_log":                      proxyLog,
		"proxy_get_buffer_bytes":         proxyGetBufferBytes,
		"proxy_get_header_map_pairs":     proxyGetHeaderMapPairs,
		"proxy_set_header_map_pairs":     proxySetHeaderMapPairs,
		"proxy_replace_header_map_value": proxyReplaceHeaderMapValue,
		"proxy_get_property":             proxyGetProperty,
		"proxy_send_local_response":      proxySendLocalResponse,
		"proxy_continue_stream":          proxyContinueStream,
		"proxy_define_metric":            proxyDefineMetric,
		"proxy_increment_metric":         proxyIncrementMetric,
		"proxy_get_metric":               proxyGetMetric,
		"proxy_call_foreign_function":    proxyCallForeignFunction,
		"proxy_set_effective_context":    proxySetEffectiveContext,
		"proxy_http_call":                proxyHTTPCall,
	}
	for name, fn := range wasiImplementations(h.opts.Envoy) {
		m[name] = fn
	}
	return m
}
