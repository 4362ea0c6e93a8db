package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// CallDepth makes a host count how deeply the guest's own functions nest and trap a call nested deeper than Limit.
// Envoy's runtimes give a VM a fixed stack (WAMR: 32 KiB) and kill it when a callback overflows it; wazero grows
// its stack instead, so without a limit a plugin that would crash Envoy passes every test here.
//
// Counting uses wazero's function listeners: every guest call leaves compiled code twice, which slows the guest
// several times over, so production hosts leave Options.CallDepth nil.
type CallDepth struct {
	// Limit is the deepest nesting of guest function calls a callback may reach, the callback itself counted as
	// one. A call beyond it traps the way a stack overflow does: the callback fails and the instance is
	// replaced. Zero or less only measures.
	Limit int

	// peak is read on every call; mu guards raising it, peakStack and functions.
	peak      atomic.Int64
	mu        sync.Mutex
	peakStack []string
	functions []*functionDepth
}

// ErrCallStackExhausted is the trap of a guest call nested deeper than CallDepth.Limit.
var ErrCallStackExhausted = errors.New("wasm call stack exhausted")

// CallDepthPeak is what a CallDepth measured. Functions are named as the module's name section names them, by
// index when it has none.
type CallDepthPeak struct {
	// Depth is the deepest nesting any instance of the host reached.
	Depth int
	// Stack names the functions on the stack when Depth was reached, outermost first.
	Stack []string
	// Functions is, for every function that ran, the deepest nesting it ran at.
	Functions map[string]int
}

// TakePeak returns what was measured since the host started or since the last TakePeak and starts anew, so that
// each phase of a workload can be measured apart.
func (d *CallDepth) TakePeak() CallDepthPeak {
	d.mu.Lock()
	defer d.mu.Unlock()
	peak := CallDepthPeak{Depth: int(d.peak.Swap(0)), Stack: d.peakStack, Functions: make(map[string]int)}
	d.peakStack = nil
	for _, f := range d.functions {
		if deepest := int(f.deepest.Swap(0)); deepest > 0 {
			name := functionName(f.def)
			peak.Functions[name] = max(peak.Functions[name], deepest)
		}
	}
	return peak
}

func functionName(def api.FunctionDefinition) string {
	if name := def.Name(); name != "" {
		return name
	}
	return def.DebugName()
}

// observe records stack if it is deeper than the peak; naming its functions is left to the rare new peak.
func (d *CallDepth) observe(stack []api.FunctionDefinition) {
	if int64(len(stack)) <= d.peak.Load() {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if int64(len(stack)) <= d.peak.Load() {
		return
	}
	names := make([]string, len(stack))
	for i, def := range stack {
		names[i] = functionName(def)
	}
	d.peak.Store(int64(len(stack)))
	d.peakStack = names
}

// NewFunctionListener gives every guest function a listener of its own, which remembers how deep it ran.
func (d *CallDepth) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	f := &functionDepth{limits: d, def: def}
	d.mu.Lock()
	d.functions = append(d.functions, f)
	d.mu.Unlock()
	return f
}

// functionDepth is one guest function's listener. The stack it pushes to belongs to the calling instance, found
// through the call's context like every host function finds it; a call the host makes from inside a host
// function (the guest allocator) nests on the same stack, as it does in cpp-host.
type functionDepth struct {
	limits  *CallDepth
	def     api.FunctionDefinition
	deepest atomic.Int32
}

func (f *functionDepth) Before(ctx context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64, _ experimental.StackIterator) {
	inst, ok := ctx.Value(instanceKey{}).(*instance)
	if !ok {
		return
	}
	inst.callStack = append(inst.callStack, f.def)
	depth := len(inst.callStack)
	for {
		deepest := f.deepest.Load()
		if int32(depth) <= deepest || f.deepest.CompareAndSwap(deepest, int32(depth)) {
			break
		}
	}
	f.limits.observe(inst.callStack)
	if limit := f.limits.Limit; limit > 0 && depth > limit {
		panic(guestTrap{fmt.Errorf("%w: %d nested calls exceed the limit of %d", ErrCallStackExhausted, depth, limit)})
	}
}

func (f *functionDepth) After(ctx context.Context, _ api.Module, _ api.FunctionDefinition, _ []uint64) {
	leave(ctx)
}

func (f *functionDepth) Abort(ctx context.Context, _ api.Module, _ api.FunctionDefinition, _ error) {
	leave(ctx)
}

func leave(ctx context.Context) {
	if inst, ok := ctx.Value(instanceKey{}).(*instance); ok && len(inst.callStack) > 0 {
		inst.callStack = inst.callStack[:len(inst.callStack)-1]
	}
}
