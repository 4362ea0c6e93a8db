package wasmhost

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"
)

// recursingGuest's proxy_on_configure(root, size) calls recurse(size), which calls itself until its argument is
// 0: a configuration of n bytes nests n+2 guest calls.
func recursingGuest() []byte {
	m := &wasmModule{pages: 1, heap: 1024}
	m.addFunc("proxy_abi_version_0_2_0", none, none)
	m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), opGlobalGet0, opGlobalGet0, localGet(0), opI32Add, opGlobalSet0)
	m.addFunc("proxy_on_context_create", i32s(2), none)
	m.addFunc("proxy_on_vm_start", i32s(2), i32s(1), i32Const(1))
	recurse := uint32(len(m.imports) + len(m.funcs))
	// if (n) recurse(n - 1)
	m.addFunc("recurse", i32s(1), none, localGet(0), []byte{0x04, 0x40}, localGet(0), i32Const(1), []byte{0x6b},
		call(recurse), []byte{0x0b})
	m.addFunc("proxy_on_configure", i32s(2), i32s(1), localGet(1), call(recurse), i32Const(1))
	return m.encode()
}

func TestCallDepthLimitTrapsACallbackNestedDeeperThanItAllows(t *testing.T) {
	const limit = 40
	tests := []struct {
		name      string
		limit     *CallDepth
		nesting   int // guest calls proxy_on_configure nests, itself included
		wantTrap  bool
		wantDepth int
	}{
		{"nesting up to the limit runs", &CallDepth{Limit: limit}, limit, false, limit},
		{"one call more traps", &CallDepth{Limit: limit}, limit + 1, true, limit + 1},
		{"without a limit it only measures", &CallDepth{}, 5000, false, 5000},
		{"without CallDepth nothing is counted", nil, 5000, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHost(t, recursingGuest(), Options{Instances: 1, CallDepth: tt.limit, Logger: slog.New(slog.DiscardHandler)})
			if tt.limit != nil {
				tt.limit.TakePeak()
			}
			err := h.Configure(context.Background(), bytes.Repeat([]byte("x"), tt.nesting-2))
			if tt.wantTrap {
				var cfgErr *ConfigError
				if !errors.As(err, &cfgErr) || cfgErr.Callback != "proxy_on_configure" || !errors.Is(err, ErrCallStackExhausted) {
					t.Fatalf("Configure: %v; want proxy_on_configure trapped with the stack exhausted", err)
				}
				if traps := h.counters.traps.Load(); traps != 1 {
					t.Errorf("%d traps; want the instance failed like on a stack overflow", traps)
				}
			} else if err != nil {
				t.Fatalf("Configure: %v", err)
			}
			if tt.limit == nil {
				return
			}
			peak := tt.limit.TakePeak()
			if peak.Depth != tt.wantDepth || len(peak.Stack) != tt.wantDepth {
				t.Errorf("peak depth %d with %d frames named; want %d", peak.Depth, len(peak.Stack), tt.wantDepth)
			}
			exports := h.compiled.ExportedFunctions()
			configure, recurse := functionName(exports["proxy_on_configure"]), functionName(exports["recurse"])
			if peak.Stack[0] != configure || peak.Stack[len(peak.Stack)-1] != recurse {
				t.Errorf("stack from %s to %s; want from %s to %s", peak.Stack[0], peak.Stack[len(peak.Stack)-1], configure, recurse)
			}
			if got := peak.Functions[recurse]; got != tt.wantDepth {
				t.Errorf("recurse ran %d deep; want %d", got, tt.wantDepth)
			}
		})
	}
}
