package wasmhost

import (
	"fmt"
	"runtime"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// guestMemory is a guest's linear memory in an anonymous mapping of its own
// rather than in the Go heap. In the Go heap the collector lets the heap
// grow to twice what is live before it collects, so the guest's memory cost
// its size twice over in resident memory, and every memory.grow copied the
// whole memory into a larger buffer and left the old one to the collector.
// Here the whole maximum is reserved once without access (no memory is
// committed or resident for it) and pages are made accessible as the guest
// grows: the memory never moves and costs the pages the guest touched.
type guestMemory struct {
	reserved []byte
	// accessible is how many leading bytes of reserved the guest may use.
	accessible int
}

// newGuestMemory reserves max bytes of address space for one instance's
// memory. It is released once inst is unreachable, not when wazero frees
// the memory: a module closed by the call timeout's watchdog may still be
// running on its worker goroutine, which holds inst until the call returns.
func newGuestMemory(inst *instance, max int) (*guestMemory, error) {
	reserved, err := syscall.Mmap(-1, 0, max, syscall.PROT_NONE, syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("reserve %d bytes for the guest's memory: %w", max, err)
	}
	m := &guestMemory{reserved: reserved}
	runtime.AddCleanup(inst, func(reserved []byte) { _ = syscall.Munmap(reserved) }, reserved)
	return m, nil
}

// allocator hands m to wazero as the memory of the instance it instantiates.
func (m *guestMemory) allocator() experimental.MemoryAllocator {
	return experimental.MemoryAllocatorFunc(func(uint64, uint64) experimental.LinearMemory { return m })
}

// Reallocate makes the first size bytes accessible and returns them; nil
// (the guest's memory.grow fails) beyond the reservation or when the system
// refuses to commit the pages. New pages read as zero, as the Wasm
// specification requires of grown memory.
func (m *guestMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.reserved)) {
		return nil
	}
	if n := int(size); n > m.accessible {
		if err := syscall.Mprotect(m.reserved[m.accessible:n], syscall.PROT_READ|syscall.PROT_WRITE); err != nil {
			return nil
		}
		m.accessible = n
	}
	return m.reserved[:size:size]
}

// Free leaves the mapping to the cleanup newGuestMemory registered.
func (*guestMemory) Free() {}
