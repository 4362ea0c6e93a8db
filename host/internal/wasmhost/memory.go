package wasmhost

import (
	"fmt"
)

// guestTrap aborts the current guest call from inside a host function. wazero recovers the panic and returns it
// from the outermost Call, which the host then treats like any other trap (the instance is failed and recreated).
type guestTrap struct{ err error }

func (t guestTrap) Error() string { return t.err.Error() }
func (t guestTrap) Unwrap() error { return t.err }

// read returns a view of guest memory, valid until the guest next runs (an allocation can grow and move memory).
func (inst *instance) read(ptr, size uint32) ([]byte, bool) {
	return inst.mem.Read(ptr, size)
}

func (inst *instance) writeU32(ptr, v uint32) bool { return inst.mem.WriteUint32Le(ptr, v) }

func (inst *instance) writeU64(ptr uint32, v uint64) bool { return inst.mem.WriteUint64Le(ptr, v) }

// writableSlots reports whether the two u32 out-parameters of a return-by-pointer call are inside memory, so that
// the host never allocates guest memory it cannot hand back.
func (inst *instance) writableSlots(ptrPtr, sizePtr uint32) bool {
	_, okPtr := inst.mem.Read(ptrPtr, 4)
	_, okSize := inst.mem.Read(sizePtr, 4)
	return okPtr && okSize
}

// allocate runs the guest's allocator under cpp-host's malloc allow-list and returns the guest pointer, 0 if the
// guest returned a null pointer. A trap inside the allocator is propagated to the enclosing guest call.
func (inst *instance) allocate(size uint32) uint32 {
	saved := inst.restriction
	inst.restriction = inst.host.mallocRestriction
	inst.allocStack[0] = uint64(size)
	err := inst.fns.malloc.CallWithStack(inst.callCtx, inst.allocStack[:])
	inst.restriction = saved
	if err != nil {
		panic(guestTrap{fmt.Errorf("guest allocator: %w", err)})
	}
	return uint32(inst.allocStack[0])
}

// returnBytes implements the return-by-pointer convention: allocate len(data) bytes in the guest, copy data and
// store the pointer and size at ptrPtr and sizePtr. Empty data is returned as (0, 0) without allocating.
func (inst *instance) returnBytes(data []byte, ptrPtr, sizePtr uint32) status {
	if !inst.writableSlots(ptrPtr, sizePtr) {
		return statusInvalidMemoryAccess
	}
	ptr := uint32(0)
	if len(data) > 0 {
		if ptr = inst.allocate(uint32(len(data))); ptr == 0 || !inst.mem.Write(ptr, data) {
			return statusInvalidMemoryAccess
		}
	}
	if !inst.writeU32(ptrPtr, ptr) || !inst.writeU32(sizePtr, uint32(len(data))) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// returnString is returnBytes for a string, avoiding a conversion copy.
func (inst *instance) returnString(data string, ptrPtr, sizePtr uint32) status {
	if !inst.writableSlots(ptrPtr, sizePtr) {
		return statusInvalidMemoryAccess
	}
	ptr := uint32(0)
	if len(data) > 0 {
		if ptr = inst.allocate(uint32(len(data))); ptr == 0 || !inst.mem.WriteString(ptr, data) {
			return statusInvalidMemoryAccess
		}
	}
	if !inst.writeU32(ptrPtr, ptr) || !inst.writeU32(sizePtr, uint32(len(data))) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}
