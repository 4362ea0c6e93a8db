package wasmhost

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// WASI as proxy-wasm-cpp-host implements it (src/exports.cc): no file system, stdout and stderr go to the log,
// and most other calls fail with fixed errno values. A Go plugin sees the same results here as in Envoy.

// maxRandomGetBytes is cpp-host's per-call limit for random_get.
const maxRandomGetBytes = 64 << 10

// WASI clock ids.
const (
	clockRealtime  = 0
	clockMonotonic = 1
)

// wasiRightFDWrite is __WASI_RIGHTS_FD_WRITE; cpp-host reports it for fds 1 and 2.
const wasiRightFDWrite = 1 << 6

// wasiFileTypeCharacterDevice is __WASI_FILETYPE_CHARACTER_DEVICE.
const wasiFileTypeCharacterDevice = 2

func errno(stack []uint64, e uint32) { stack[0] = uint64(e) }

func returnErrno(e uint32) hostFunc {
	return func(_ *instance, stack []uint64) { errno(stack, e) }
}

// wasiImplementations returns the WASI functions a Go wasip1 module imports, for the emulated Envoy release; the
// release decides poll_oneoff's behaviour (ENOSYS before cpp-host #533, zero events from it on).
func wasiImplementations(envoy envoyabi.Version) map[string]hostFunc {
	pollOneoff := returnErrno(errnoNosys)
	if envoy.AtLeast(envoyabi.Envoy139) {
		pollOneoff = wasiPollOneoffNoEvents
	}
	return map[string]hostFunc{
		"args_sizes_get":      wasiArgsSizesGet,
		"args_get":            returnErrno(errnoSuccess),
		"environ_sizes_get":   wasiEnvironSizesGet,
		"environ_get":         wasiEnvironGet,
		"clock_time_get":      wasiClockTimeGet,
		"random_get":          wasiRandomGet,
		"fd_write":            wasiFDWrite,
		"fd_close":            wasiUnsupportedButSucceeds("fd_close"),
		"fd_fdstat_get":       wasiFDStatGet,
		"fd_fdstat_set_flags": returnErrno(errnoNosys),
		"fd_prestat_get":      returnErrno(errnoBadf),
		"fd_prestat_dir_name": returnErrno(errnoNosys),
		"proc_exit":           wasiProcExit,
		"sched_yield":         returnErrno(errnoSuccess),
		"poll_oneoff":         pollOneoff,
	}
}

func faultUnless(ok bool) uint32 {
	if ok {
		return errnoSuccess
	}
	return errnoFault
}

// args_sizes_get(argc, argv_buf_size): no arguments.
func wasiArgsSizesGet(inst *instance, stack []uint64) {
	errno(stack, faultUnless(inst.writeU32(u32(stack[0]), 0) && inst.writeU32(u32(stack[1]), 0)))
}

// environ_sizes_get(count, buf_size): Options.Environment as "KEY=VALUE\0" strings.
func wasiEnvironSizesGet(inst *instance, stack []uint64) {
	env := inst.host.opts.Environment
	size := 0
	for _, kv := range env {
		size += len(kv[0]) + len(kv[1]) + 2
	}
	errno(stack, faultUnless(inst.writeU32(u32(stack[0]), uint32(len(env))) && inst.writeU32(u32(stack[1]), uint32(size))))
}

// environ_get(environ, environ_buf)
func wasiEnvironGet(inst *instance, stack []uint64) {
	ptrs, buf := u32(stack[0]), u32(stack[1])
	for i, kv := range inst.host.opts.Environment {
		entry := kv[0] + "=" + kv[1] + "\x00"
		if !inst.writeU32(ptrs+uint32(i)*4, buf) || !inst.mem.WriteString(buf, entry) {
			errno(stack, errnoFault)
			return
		}
		buf += uint32(len(entry))
	}
	errno(stack, errnoSuccess)
}

// clock_time_get(id, precision, time): realtime and monotonic only.
func wasiClockTimeGet(inst *instance, stack []uint64) {
	var now uint64
	switch u32(stack[0]) {
	case clockRealtime:
		now = uint64(time.Now().UnixNano())
	case clockMonotonic:
		now = uint64(inst.host.clock())
	default:
		errno(stack, errnoNotsup)
		return
	}
	errno(stack, faultUnless(inst.writeU64(u32(stack[2]), now)))
}

// random_get(buf, len): at most 64 KiB per call.
func wasiRandomGet(inst *instance, stack []uint64) {
	size := u32(stack[1])
	if size > maxRandomGetBytes {
		errno(stack, errnoInval)
		return
	}
	buf, ok := inst.read(u32(stack[0]), size)
	if !ok {
		errno(stack, errnoFault)
		return
	}
	_, _ = rand.Read(buf)
	errno(stack, errnoSuccess)
}

// fd_write(fd, iovs, iovs_len, nwritten): fd 1 logs at info, fd 2 at error. Output is logged per line (cpp-host
// logs every write; the Go runtime writes a panic report in many small pieces), see instance.writeOutput.
func wasiFDWrite(inst *instance, stack []uint64) {
	fd, iovs, iovsLen, nwritten := u32(stack[0]), u32(stack[1]), u32(stack[2]), u32(stack[3])
	if fd != 1 && fd != 2 {
		errno(stack, errnoBadf)
		return
	}
	total := uint32(0)
	for i := range iovsLen {
		iov, ok := inst.read(iovs+i*8, 8)
		if !ok {
			errno(stack, errnoFault)
			return
		}
		data, ok := inst.read(binary.LittleEndian.Uint32(iov), binary.LittleEndian.Uint32(iov[4:]))
		if !ok {
			errno(stack, errnoFault)
			return
		}
		inst.writeOutput(fd, data)
		total += uint32(len(data))
	}
	errno(stack, faultUnless(inst.writeU32(nwritten, total)))
}

// writeOutput appends guest stdout (fd 1) or stderr (fd 2) output and logs every completed line.
func (inst *instance) writeOutput(fd uint32, data []byte) {
	buf := &inst.output[fd-1]
	*buf = append(*buf, data...)
	for {
		line, rest, ok := bytes.Cut(*buf, []byte{'\n'})
		if !ok {
			break
		}
		inst.logOutput(fd, line)
		*buf = append((*buf)[:0], rest...)
	}
	if len(*buf) > maxOutputLine {
		inst.flushOutput()
	}
}

// maxOutputLine bounds buffered output without a newline.
const maxOutputLine = 16 << 10

// flushOutput logs output still waiting for a newline; called when a callback ends.
func (inst *instance) flushOutput() {
	for i := range inst.output {
		if len(inst.output[i]) > 0 {
			inst.logOutput(uint32(i+1), inst.output[i])
			inst.output[i] = inst.output[i][:0]
		}
	}
}

func (inst *instance) logOutput(fd uint32, line []byte) {
	if fd == 1 {
		inst.guestLog(slog.LevelInfo, line, "stdout")
	} else {
		inst.guestLog(slog.LevelError, line, "stderr")
	}
}

// fd_fdstat_get(fd, stat): a write-only character device for fds 1 and 2.
func wasiFDStatGet(inst *instance, stack []uint64) {
	fd, ptr := u32(stack[0]), u32(stack[1])
	if fd != 1 && fd != 2 {
		errno(stack, errnoBadf)
		return
	}
	var stat [24]byte // filetype u8, flags u16 at 2, rights_base u64 at 8, rights_inheriting u64 at 16
	stat[0] = wasiFileTypeCharacterDevice
	stat[8] = wasiRightFDWrite
	errno(stack, faultUnless(inst.mem.Write(ptr, stat[:])))
}

// wasiUnsupportedButSucceeds logs an error and reports success, as cpp-host does for fd_seek and fd_close.
func wasiUnsupportedButSucceeds(name string) hostFunc {
	msg := []byte(name + " is not supported")
	return func(inst *instance, stack []uint64) {
		inst.guestLog(slog.LevelError, msg, "wasi")
		errno(stack, errnoSuccess)
	}
}

// proc_exit(code): logged; the guest continues (and a Go guest then traps itself).
func wasiProcExit(inst *instance, stack []uint64) {
	inst.guestLog(slog.LevelError, fmt.Appendf(nil, "proc_exit(%d) called", int32(u32(stack[0]))), "wasi")
}

// poll_oneoff(in, out, nsubscriptions, nevents) from cpp-host #533: no event, no sleep.
func wasiPollOneoffNoEvents(inst *instance, stack []uint64) {
	errno(stack, faultUnless(inst.writeU32(u32(stack[3]), 0)))
}
