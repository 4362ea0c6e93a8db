package plugin

// The module exports malloc and free so that no runtime places an allocator
// of its own inside the module's memory. WAMR (Envoy's
// envoy.wasm.runtime.wamr) otherwise inserts a 32 KiB app heap as an extra
// initial page, with its allocator's state in it, and Go's runtime, which
// takes every page past its data for fresh zeroed heap, builds its own heap
// on top of it. WAMR disables its heap only when both exports exist with the
// types its loader checks: malloc (i32) -> i32 and free (i32) -> ().
//
// Hosts that find malloc call it instead of proxy_on_memory_allocate
// (proxy-wasm-cpp-host tries malloc first), so it allocates as the SDK's
// proxy_on_memory_allocate does, from Go's heap: there is one allocator, and
// a buffer the host fills is owned by the collector like every other Go
// object once the SDK has turned the returned pointer into a slice.

// allocateForHost returns size bytes of Go heap for the host to fill. A zero
// size gets one byte rather than a pointer past an empty slice, which would
// trap.
//
//go:wasmexport malloc
func allocateForHost(size uint32) *byte {
	buf := make([]byte, max(size, 1))
	return &buf[0]
}

// releaseFromHost does nothing. Go's heap has no explicit free: a buffer
// from allocateForHost is reclaimed by the collector once nothing refers to
// it, and releasing it here would free memory the SDK may still hold. The
// pointer is taken as a number so that an address the host made up is never
// seen by the collector as a Go pointer.
//
//go:wasmexport free
func releaseFromHost(uint32) {}
