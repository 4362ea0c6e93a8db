package wasmhost

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/skewgate/skewgate/host/envoyabi"
)

// hostFunc implements one import; stack holds the parameters and receives the results (wazero GoModuleFunction).
type hostFunc func(inst *instance, stack []uint64)

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
		impl, ok := impls[imp.Name]
		if !ok {
			if imp.IsWASI() {
				return fmt.Errorf("no implementation for %s", imp.QualifiedName())
			}
			impl = unimplemented
		}
		b, ok := builders[imp.Namespace]
		if !ok {
			b = h.runtime.NewHostModuleBuilder(imp.Namespace)
			builders[imp.Namespace] = b
			order = append(order, imp.Namespace)
		}
		b.NewFunctionBuilder().
			WithGoModuleFunction(guard(idx, imp, impl), imp.Params, imp.Results).
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

// unimplemented answers proxy_* functions this host does not support (gRPC callouts, gRPC status).
func unimplemented(_ *instance, stack []uint64) { stack[0] = uint64(statusUnimplemented) }

// implementations maps import names to their implementation. WASI functions are the same under both namespaces.
func (h *Host) implementations() map[string]hostFunc {
	m := map[string]hostFunc{
		"proxy_log":                          proxyLog,
		"proxy_get_log_level":                proxyGetLogLevel,
		"proxy_get_current_time_nanoseconds": proxyGetCurrentTimeNanoseconds,
		"proxy_set_tick_period_milliseconds": proxySetTickPeriodMilliseconds,
		"proxy_get_configuration":            proxyGetConfiguration,
		"proxy_get_buffer_bytes":             proxyGetBufferBytes,
		"proxy_get_buffer_status":            proxyGetBufferStatus,
		"proxy_set_buffer_bytes":             proxySetBufferBytes,
		"proxy_get_header_map_value":         proxyGetHeaderMapValue,
		"proxy_add_header_map_value":         proxyAddHeaderMapValue,
		"proxy_replace_header_map_value":     proxyReplaceHeaderMapValue,
		"proxy_remove_header_map_value":      proxyRemoveHeaderMapValue,
		"proxy_get_header_map_pairs":         proxyGetHeaderMapPairs,
		"proxy_set_header_map_pairs":         proxySetHeaderMapPairs,
		"proxy_get_header_map_size":          proxyGetHeaderMapSize,
		"proxy_get_property":                 proxyGetProperty,
		"proxy_set_property":                 proxySetProperty,
		"proxy_send_local_response":          proxySendLocalResponse,
		"proxy_continue_stream":              proxyContinueStream,
		"proxy_close_stream":                 proxyCloseStream,
		"proxy_continue_request":             proxyContinueRequest,
		"proxy_continue_response":            proxyContinueResponse,
		"proxy_clear_route_cache":            proxyClearRouteCache,
		"proxy_get_shared_data":              proxyGetSharedData,
		"proxy_set_shared_data":              proxySetSharedData,
		"proxy_register_shared_queue":        proxyRegisterSharedQueue,
		"proxy_resolve_shared_queue":         proxyResolveSharedQueue,
		"proxy_enqueue_shared_queue":         proxyEnqueueSharedQueue,
		"proxy_dequeue_shared_queue":         proxyDequeueSharedQueue,
		"proxy_define_metric":                proxyDefineMetric,
		"proxy_increment_metric":             proxyIncrementMetric,
		"proxy_record_metric":                proxyRecordMetric,
		"proxy_get_metric":                   proxyGetMetric,
		"proxy_call_foreign_function":        proxyCallForeignFunction,
		"proxy_set_effective_context":        proxySetEffectiveContext,
		"proxy_done":                         proxyDone,
		"proxy_http_call":                    proxyHTTPCall,
		"pthread_equal":                      pthreadEqual,
		"emscripten_notify_memory_growth":    func(*instance, []uint64) {},
	}
	for name, fn := range wasiImplementations(h.opts.Envoy) {
		m[name] = fn
	}
	return m
}
