package wasmhost

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/tetratelabs/wazero/api"
)

// WAMR (Envoy's envoy.wasm.runtime.wamr, 2.4 in proxy-wasm-cpp-host) instantiates every module through the
// wasm-c-api with a 32 KiB app heap: an allocator of WAMR's own that it places inside the module's default
// memory unless the module exports an allocator of its own. For a module without __heap_base, such as an
// upstream Go one, the heap becomes one extra page after the initial memory ("Insert app heap before new page"
// in core/iwasm/interpreter/wasm_runtime.c), and WAMR writes its allocator's header and free list there before
// the module runs. Go's runtime reads the memory's size at start-up and takes everything past its data as fresh
// heap, which it assumes is zeroed.

// wamrAppHeapPages is how many pages WAMR inserts for its 32 KiB app heap: the heap rounded up to whole pages.
const wamrAppHeapPages = 1

// wamrAppHeapFill is the byte the emulated app heap page is filled with. WAMR's metadata is not zero and its
// blocks hold whatever the host stored in them; filling the whole page makes any read of it as fresh,
// zeroed memory wrong, wherever in the page the guest first reads.
const wamrAppHeapFill = 0xa5

// wamrFunctionType is an export WAMR's loader accepts as the module's allocator: a name and its exact type.
type wamrFunctionType struct {
	name            string
	params, results []api.ValueType
}

// wamrMallocs and wamrFrees are the exports WAMR's loader (wasm_loader.c, load_from_sections) takes as the
// module's own malloc and free. It disables its app heap only when it finds both. __new counts as malloc only
// with __retain or __pin beside it (AssemblyScript's runtime).
var (
	wamrMallocs = []wamrFunctionType{{"malloc", i32Types(1), i32Types(1)}}
	wamrNew     = wamrFunctionType{"__new", i32Types(2), i32Types(1)}
	wamrRetains = []wamrFunctionType{{"__retain", i32Types(1), i32Types(1)}, {"__pin", i32Types(1), i32Types(1)}}
	wamrFrees   = []wamrFunctionType{
		{"free", i32Types(1), nil}, {"__release", i32Types(1), nil}, {"__unpin", i32Types(1), nil},
	}
)

func i32Types(n int) []api.ValueType { return slices.Repeat([]api.ValueType{api.ValueTypeI32}, n) }

func (f wamrFunctionType) exportedBy(exports map[string]api.FunctionDefinition) bool {
	def, ok := exports[f.name]
	return ok && slices.Equal(def.ParamTypes(), f.params) && slices.Equal(def.ResultTypes(), f.results)
}

func anyExportedBy(fns []wamrFunctionType, exports map[string]api.FunctionDefinition) bool {
	for _, f := range fns {
		if f.exportedBy(exports) {
			return true
		}
	}
	return false
}

// wamrUsesModuleAllocator reports whether WAMR would leave the module's memory alone: it exports a malloc and
// a free of the types WAMR checks, so WAMR uses those instead of inserting its app heap.
func wamrUsesModuleAllocator(exports map[string]api.FunctionDefinition) bool {
	malloc := anyExportedBy(wamrMallocs, exports) || (wamrNew.exportedBy(exports) && anyExportedBy(wamrRetains, exports))
	return malloc && anyExportedBy(wamrFrees, exports)
}

// insertWAMRAppHeap lays out a freshly instantiated memory as WAMR does for a module without its own allocator:
// one more initial page, holding non-zero allocator state, before any of the module's code runs.
func insertWAMRAppHeap(mem api.Memory) error {
	initial := mem.Size()
	if _, ok := mem.Grow(wamrAppHeapPages); !ok {
		return fmt.Errorf("insert WAMR's app heap: the memory of %d bytes cannot grow", initial)
	}
	heap := bytes.Repeat([]byte{wamrAppHeapFill}, wamrAppHeapPages*wasmPageSize)
	if !mem.Write(initial, heap) {
		return fmt.Errorf("insert WAMR's app heap at %d: out of range", initial)
	}
	return nil
}
