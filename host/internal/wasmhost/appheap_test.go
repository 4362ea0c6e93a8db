package wasmhost

import (
	"context"
	"log/slog"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

// The mode reproduces what WAMR does before a module without an allocator of its own runs: the initial memory
// is one page larger and that page holds non-zero bytes. A module exporting malloc and free keeps the memory it
// declared, zeroed. The probe's _initialize traps unless memory.size and the memory's last byte are as WAMR
// leaves them.
func TestWAMRAppHeapModeInsertsANonZeroPageOnlyWithoutTheModulesAllocator(t *testing.T) {
	const declaredPages = 2
	tests := []struct {
		name          string
		mallocAndFree bool
		freeType      []api.ValueType // free's results, to check that a wrongly typed free does not count
		wantPages     int32
		wantLastByte  int32
		wantInserted  bool
	}{
		{name: "no malloc or free", wantPages: declaredPages + 1, wantLastByte: wamrAppHeapFill, wantInserted: true},
		{name: "malloc and free", mallocAndFree: true, wantPages: declaredPages, wantLastByte: 0},
		{name: "malloc and a free returning a value", mallocAndFree: true, freeType: i32s(1),
			wantPages: declaredPages + 1, wantLastByte: wamrAppHeapFill, wantInserted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &wasmModule{pages: declaredPages}
			m.addFunc("proxy_abi_version_0_2_0", none, none)
			m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
			if tt.mallocAndFree {
				m.addFunc("malloc", i32s(1), i32s(1), i32Const(0))
				var freeBody []byte
				if len(tt.freeType) > 0 {
					freeBody = i32Const(0)
				}
				m.addFunc("free", i32s(1), tt.freeType, freeBody)
			}
			m.addFunc("_initialize", none, none,
				trapUnlessEqual(opMemorySize, i32Const(tt.wantPages)),
				trapUnlessEqual(slices.Concat(opMemorySize, i32Const(16), opI32Shl, i32Const(1), opI32Sub, opI32Load8U),
					i32Const(tt.wantLastByte)))
			h, err := New(context.Background(), m.encode(), Options{Instances: 1, WAMRAppHeap: true, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("_initialize saw another layout than WAMR's (%d pages, last byte %#x): %v",
					tt.wantPages, tt.wantLastByte, err)
			}
			defer h.Close(context.Background())
			if h.insertsAppHeap != tt.wantInserted {
				t.Errorf("app heap inserted: %v; want %v", h.insertsAppHeap, tt.wantInserted)
			}
		})
	}
}

var (
	opMemorySize = []byte{0x3f, 0x00}
	opI32Shl     = []byte{0x74}
	opI32Sub     = []byte{0x6b}
	opI32Load8U  = []byte{0x2d, 0x00, 0x00}
)

// trapUnlessEqual evaluates got and want (each pushing one i32) and traps when they differ.
func trapUnlessEqual(got, want []byte) []byte {
	const (
		i32Ne       = 0x47
		ifEmpty     = 0x04
		blockEmpty  = 0x40
		unreachable = 0x00
		end         = 0x0b
	)
	return slices.Concat(got, want, []byte{i32Ne, ifEmpty, blockEmpty, unreachable, end})
}
