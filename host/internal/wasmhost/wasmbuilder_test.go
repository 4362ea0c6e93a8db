package wasmhost

import (
	"slices"
	"strings"

	"github.com/tetratelabs/wazero/api"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// wasmModule assembles small WebAssembly binaries for tests that need exact control over imports, exports and
// guest behaviour (hostile pointers, forbidden calls during start-up, callback order).
type wasmModule struct {
	types   [][2][]api.ValueType
	imports []wasmImport
	funcs   []wasmFunc
	pages   uint32
	heap    int32 // initial value of global 0, the bump allocator's next free byte
	data    []wasmData
}

type wasmImport struct {
	module, name string
	typeIdx      uint32
}

type wasmFunc struct {
	export  string
	typeIdx uint32
	body    []byte
}

type wasmData struct {
	offset uint32
	bytes  []byte
}

func (m *wasmModule) typeIndex(params, results []api.ValueType) uint32 {
	for i, t := range m.types {
		if slices.Equal(t[0], params) && slices.Equal(t[1], results) {
			return uint32(i)
		}
	}
	m.types = append(m.types, [2][]api.ValueType{params, results})
	return uint32(len(m.types) - 1)
}

// importFunc adds a function import and returns its function index. Imports must precede defined functions.
func (m *wasmModule) importFunc(module, name string, params, results []api.ValueType) uint32 {
	if len(m.funcs) > 0 {
		panic("imports must be added before functions")
	}
	m.imports = append(m.imports, wasmImport{module, name, m.typeIndex(params, results)})
	return uint32(len(m.imports) - 1)
}

// addFunc adds an exported function whose body is instructions without the final end.
func (m *wasmModule) addFunc(export string, params, results []api.ValueType, body ...[]byte) {
	m.funcs = append(m.funcs, wasmFunc{export, m.typeIndex(params, results), slices.Concat(body...)})
}

func (m *wasmModule) funcIndex(module, name string) uint32 {
	for i, imp := range m.imports {
		if imp.module == module && imp.name == name {
			return uint32(i)
		}
	}
	panic("no import " + module + "." + name)
}

func uleb(v uint64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			out = append(out, b|0x80)
			continue
		}
		return append(out, b)
	}
}

func sleb(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

// Instructions.
func i32Const(v int32) []byte  { return append([]byte{0x41}, sleb(int64(v))...) }
func i64Const(v int64) []byte  { return append([]byte{0x42}, sleb(v)...) }
func localGet(i uint32) []byte { return append([]byte{0x20}, uleb(uint64(i))...) }
func call(idx uint32) []byte   { return append([]byte{0x10}, uleb(uint64(idx))...) }

var (
	opDrop       = []byte{0x1a}
	opI32Add     = []byte{0x6a}
	opGlobalGet0 = []byte{0x23, 0x00}
	opGlobalSet0 = []byte{0x24, 0x00}
)

func wasmName(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func vec(items [][]byte) []byte {
	return slices.Concat(append([][]byte{uleb(uint64(len(items)))}, items...)...)
}

func section(id byte, content []byte) []byte {
	return slices.Concat([]byte{id}, uleb(uint64(len(content))), content)
}

func valueTypes(types []api.ValueType) []byte {
	out := uleb(uint64(len(types)))
	return append(out, types...)
}

func (m *wasmModule) encode() []byte {
	out := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	var types [][]byte
	for _, t := range m.types {
		types = append(types, slices.Concat([]byte{0x60}, valueTypes(t[0]), valueTypes(t[1])))
	}
	out = append(out, section(1, vec(types))...)
	var imports [][]byte
	for _, imp := range m.imports {
		imports = append(imports, slices.Concat(wasmName(imp.module), wasmName(imp.name), []byte{0x00}, uleb(uint64(imp.typeIdx))))
	}
	out = append(out, section(2, vec(imports))...)
	var funcs [][]byte
	for _, f := range m.funcs {
		funcs = append(funcs, uleb(uint64(f.typeIdx)))
	}
	out = append(out, section(3, vec(funcs))...)
	out = append(out, section(5, vec([][]byte{append([]byte{0x00}, uleb(uint64(m.pages))...)}))...)
	out = append(out, section(6, vec([][]byte{slices.Concat([]byte{api.ValueTypeI32, 0x01}, i32Const(m.heap), []byte{0x0b})}))...)
	exports := [][]byte{slices.Concat(wasmName(memoryExport), []byte{0x02, 0x00})}
	for i, f := range m.funcs {
		exports = append(exports, slices.Concat(wasmName(f.export), []byte{0x00}, uleb(uint64(len(m.imports)+i))))
	}
	out = append(out, section(7, vec(exports))...)
	var code [][]byte
	for _, f := range m.funcs {
		body := slices.Concat([]byte{0x00}, f.body, []byte{0x0b})
		code = append(code, append(uleb(uint64(len(body))), body...))
	}
	out = append(out, section(10, vec(code))...)
	var data [][]byte
	for _, d := range m.data {
		data = append(data, slices.Concat([]byte{0x00}, i32Const(int32(d.offset)), []byte{0x0b}, wasmName(string(d.bytes))))
	}
	return append(out, section(11, vec(data))...)
}

var (
	i32  = api.ValueTypeI32
	none []api.ValueType
)

func i32s(n int) []api.ValueType { return slices.Repeat([]api.ValueType{i32}, n) }

// probe layout: test inputs live below probeHeapStart, the bump allocator hands out memory above it.
const (
	probePages     = 16
	probeHeapStart = 64 << 10
	markerBase     = 60 << 10
)

// probeSpec describes a probe module.
type probeSpec struct {
	abi string
	// imports are linked; every import gets an exported trampoline "call:ns.name" forwarding its parameters.
	imports []envoyabi.Import
	// initializeCalls makes the module export _initialize, calling this import with zero arguments.
	initializeCalls *envoyabi.Import
	// allocatorCalls makes the allocator call this import with zero arguments before allocating.
	allocatorCalls *envoyabi.Import
	// markers make every lifecycle callback log its own name with proxy_log (needs env.proxy_log in imports).
	markers bool
	// requestHeadersAction is returned by proxy_on_request_headers.
	requestHeadersAction int32
	// requestBody makes the module export proxy_on_request_body, returning Continue.
	requestBody bool
}

// callbackSpec is a callback a probe exports, with its parameter count and the i32 it returns.
type callbackSpec struct {
	name    string
	params  int
	returns int32 // -1: no result
}

// lifecycleCallbacks are the callbacks every probe exports.
var lifecycleCallbacks = []callbackSpec{
	{"proxy_on_context_create", 2, -1},
	{"proxy_on_vm_start", 2, 1},
	{"proxy_on_configure", 2, 1},
	{"proxy_on_request_headers", 3, 0},
	{"proxy_on_log", 1, -1},
	{"proxy_on_done", 1, 1},
	{"proxy_on_delete", 1, -1},
}

// callWithZeros calls imp with zero arguments and drops its result; nil gives no instructions.
func (m *wasmModule) callWithZeros(imp *envoyabi.Import) []byte {
	if imp == nil {
		return nil
	}
	var body []byte
	for _, typ := range imp.Params {
		if typ == api.ValueTypeI64 {
			body = append(body, i64Const(0)...)
		} else {
			body = append(body, i32Const(0)...)
		}
	}
	body = append(body, call(m.funcIndex(imp.Namespace, imp.Name))...)
	if len(imp.Results) > 0 {
		body = append(body, opDrop...)
	}
	return body
}

func (spec probeSpec) build() []byte {
	m := &wasmModule{pages: probePages, heap: probeHeapStart}
	for _, imp := range spec.imports {
		m.importFunc(imp.Namespace, imp.Name, imp.Params, imp.Results)
	}
	for i, imp := range spec.imports {
		var body []byte
		for p := range imp.Params {
			body = append(body, localGet(uint32(p))...)
		}
		body = append(body, call(uint32(i))...)
		m.addFunc("call:"+imp.QualifiedName(), imp.Params, imp.Results, body)
	}
	abi := spec.abi
	if abi == "" {
		abi = envoyabi.ABI020
	}
	m.addFunc("proxy_abi_version_"+strings.ReplaceAll(abi, ".", "_"), none, none)
	// proxy_on_memory_allocate(size): return heap; heap += size
	m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), m.callWithZeros(spec.allocatorCalls),
		opGlobalGet0, opGlobalGet0, localGet(0), opI32Add, opGlobalSet0)
	if spec.initializeCalls != nil {
		m.addFunc("_initialize", none, none, m.callWithZeros(spec.initializeCalls))
	}
	offset := uint32(markerBase)
	callbacks := lifecycleCallbacks
	if spec.requestBody {
		callbacks = append(slices.Clone(callbacks), callbackSpec{"proxy_on_request_body", 3, 0})
	}
	for _, cb := range callbacks {
		var body []byte
		if spec.markers {
			m.data = append(m.data, wasmData{offset, []byte(cb.name)})
			body = slices.Concat(i32Const(2), i32Const(int32(offset)), i32Const(int32(len(cb.name))),
				call(m.funcIndex(envoyabi.NamespaceEnv, "proxy_log")), opDrop)
			offset += uint32(len(cb.name))
		}
		var results []api.ValueType
		if cb.returns >= 0 {
			ret := cb.returns
			if cb.name == "proxy_on_request_headers" {
				ret = spec.requestHeadersAction
			}
			body = append(body, i32Const(ret)...)
			results = i32s(1)
		}
		m.addFunc(cb.name, i32s(cb.params), results, body)
	}
	return m.encode()
}
