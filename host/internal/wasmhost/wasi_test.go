package wasmhost

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

func (p *probe) wasi(namespace, fn string, args ...uint64) uint32 {
	p.t.Helper()
	return uint32(p.call(namespace+"."+fn, args...))
}

func TestWASIReturnCodesMatchCppHost(t *testing.T) {
	for _, ns := range []string{envoyabi.NamespaceWASISnapshotPreview1, envoyabi.NamespaceWASIUnstable} {
		t.Run(ns, func(t *testing.T) {
			p := newProbe(t, envoyabi.Envoy133, nil)
			p.useRoot()
			tests := []struct {
				fn   string
				args []uint64
				want uint32
			}{
				{"fd_fdstat_set_flags", []uint64{1, 0}, errnoNosys},
				{"fd_prestat_get", []uint64{3, outValue}, errnoBadf},
				{"fd_prestat_dir_name", []uint64{3, inBase, 8}, errnoNosys},
				{"fd_fdstat_get", []uint64{0, outValue}, errnoBadf},
				{"fd_fdstat_get", []uint64{5, outValue}, errnoBadf},
				{"fd_write", []uint64{3, inBase, 0, outValue}, errnoBadf},
				{"clock_time_get", []uint64{2, 0, outValue}, errnoNotsup},
				{"random_get", []uint64{inBase, maxRandomGetBytes + 1}, errnoInval},
				{"random_get", []uint64{badPtr, 16}, errnoFault},
				{"args_sizes_get", []uint64{badPtr, outValue}, errnoFault},
				{"sched_yield", nil, errnoSuccess},
				{"poll_oneoff", []uint64{inBase, inBase + 64, 1, outValue}, errnoNosys},
				{"fd_close", []uint64{1}, errnoSuccess},
				{"args_get", []uint64{inBase, inBase}, errnoSuccess},
			}
			for _, tt := range tests {
				if got := p.wasi(ns, tt.fn, tt.args...); got != tt.want {
					t.Errorf("%s%v = %d, want %d", tt.fn, tt.args, got, tt.want)
				}
			}
		})
	}
}

func TestWASIStdoutAndStderrBecomeLogs(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	p.useRoot()
	// Two iovecs: "hello " and "world\n".
	p.put(0, "hello world\n")
	iovs := binary.LittleEndian.AppendUint32(nil, inBase)
	iovs = binary.LittleEndian.AppendUint32(iovs, 6)
	iovs = binary.LittleEndian.AppendUint32(iovs, inBase+6)
	iovs = binary.LittleEndian.AppendUint32(iovs, 6)
	iovPtr, _ := p.put(64, string(iovs))
	if got := p.wasi("wasi_snapshot_preview1", "fd_write", 2, iovPtr, 2, outValue); got != errnoSuccess {
		t.Fatalf("fd_write = %d", got)
	}
	if p.u32At(outValue) != 12 {
		t.Fatalf("nwritten = %d", p.u32At(outValue))
	}
	if p.inst.lastGuestErr != "hello world" || !p.logs.contains("hello world") {
		t.Fatalf("stderr line not logged without its newline: %q", p.inst.lastGuestErr)
	}
	if got := p.wasi("wasi_snapshot_preview1", "fd_write", 1, iovPtr, 1, outValue); got != errnoSuccess || p.u32At(outValue) != 6 {
		t.Fatalf("fd_write to stdout = %d", got)
	}
	if got := p.wasi("wasi_snapshot_preview1", "fd_write", 1, badPtr, 1, outValue); got != errnoFault {
		t.Fatalf("fd_write with a bad iovec = %d", got)
	}
	p.wasi("wasi_snapshot_preview1", "proc_exit", 3)
	if !p.logs.contains("proc_exit(3) called") {
		t.Fatal("proc_exit not logged")
	}
}

func TestWASIFDStatClockRandomAndEnvironment(t *testing.T) {
	p := newProbe(t, envoyabi.Envoy133, nil)
	p.useRoot()
	const ns = "wasi_snapshot_preview1"
	if got := p.wasi(ns, "fd_fdstat_get", 1, outValue); got != errnoSuccess {
		t.Fatalf("fd_fdstat_get(1) = %d", got)
	}
	stat, _ := p.inst.mem.Read(outValue, 24)
	if stat[0] != wasiFileTypeCharacterDevice || binary.LittleEndian.Uint64(stat[8:]) != wasiRightFDWrite {
		t.Fatalf("fdstat = %v", stat)
	}

	before := time.Now().UnixNano()
	if got := p.wasi(ns, "clock_time_get", clockRealtime, 0, outValue); got != errnoSuccess {
		t.Fatalf("realtime = %d", got)
	}
	if v := int64(p.u64At(outValue)); v < before || v > time.Now().UnixNano() {
		t.Fatalf("realtime %d out of range", v)
	}
	p.wasi(ns, "clock_time_get", clockMonotonic, 0, outValue)
	first := p.u64At(outValue)
	p.wasi(ns, "clock_time_get", clockMonotonic, 0, outValue)
	if p.u64At(outValue) < first {
		t.Fatal("monotonic clock went backwards")
	}

	if got := p.wasi(ns, "random_get", inBase, maxRandomGetBytes); got != errnoSuccess {
		t.Fatalf("random_get(64 KiB) = %d", got)
	}

	if got := p.wasi(ns, "environ_sizes_get", outPtr, outSize); got != errnoSuccess {
		t.Fatalf("environ_sizes_get = %d", got)
	}
	if p.u32At(outPtr) != 2 || p.u32At(outSize) != uint32(len("A=1\x00LONGER=value\x00")) {
		t.Fatalf("environ sizes = %d, %d", p.u32At(outPtr), p.u32At(outSize))
	}
	if got := p.wasi(ns, "environ_get", inBase, inBase+64); got != errnoSuccess {
		t.Fatalf("environ_get = %d", got)
	}
	second := p.u32At(inBase + 4)
	value, _ := p.inst.mem.Read(second, uint32(len("LONGER=value\x00")))
	if string(value) != "LONGER=value\x00" {
		t.Fatalf("second variable = %q", value)
	}
	if got := p.wasi(ns, "args_sizes_get", outPtr, outSize); got != errnoSuccess || p.u32At(outPtr) != 0 || p.u32At(outSize) != 0 {
		t.Fatal("args_sizes_get must report no arguments")
	}
}

func TestPollOneoffFollowsTheEnvoyProfile(t *testing.T) {
	tests := []struct {
		envoy envoyabi.Version
		want  uint32
	}{
		{envoyabi.Envoy133, errnoNosys},
		{envoyabi.Envoy139, errnoSuccess},
	}
	for _, tt := range tests {
		t.Run(tt.envoy.String(), func(t *testing.T) {
			p := newProbe(t, tt.envoy, nil)
			p.useRoot()
			p.inst.mem.WriteUint32Le(outValue, 7)
			if got := p.wasi("wasi_snapshot_preview1", "poll_oneoff", inBase, inBase+64, 1, outValue); got != tt.want {
				t.Fatalf("poll_oneoff = %d, want %d", got, tt.want)
			}
			if tt.want == errnoSuccess && p.u32At(outValue) != 0 {
				t.Fatal("poll_oneoff must report zero events")
			}
		})
	}
}
