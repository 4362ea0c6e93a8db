package wasmhost

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// TestSoakUnderEnvoy133WithGarbageCollection runs 100,000 streams through the guest under cpp-host #427 WASI
// semantics (poll_oneoff fails), alternating the simple path with a GC-stress path that reads a 64 KiB header and
// leaves 32 KiB of garbage. Any trap fails the test. The garbage (about 3 GiB in total) far exceeds the 1 GiB
// memory limit, so finishing proves the Go collector ran inside callbacks, including inside the allocator.
func TestSoakUnderEnvoy133WithGarbageCollection(t *testing.T) {
	const (
		total   = 100_000
		workers = 2
	)
	opts := guestOptions(t, nil)
	opts.Envoy = envoyabi.Envoy133
	opts.Instances = workers
	h := newHost(t, guestWasm(t), opts)
	big := strings.Repeat("g", 64<<10)
	gcRequest := opRequest("gc", [2]string{"x-big", big})
	simple := &Request{Headers: [][2]string{{":path", "/"}, {"x-tenant", "acme"}}, EndOfStream: true}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < total; i += workers {
				req := simple
				if i%2 == 0 {
					req = gcRequest
				}
				out := h.HandleRequestHeaders(context.Background(), req)
				if out.Failed != nil || out.Verdict != Forward {
					errs <- fmt.Errorf("request %d: %+v", i, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if traps := h.counters.traps.Load(); traps != 0 {
		t.Fatalf("%d traps", traps)
	}
	for i, s := range h.slots {
		if size := s.inst.mem.Size(); size > 64<<20 {
			t.Errorf("instance %d memory grew to %d bytes; garbage is not being collected", i, size)
		}
	}
	t.Logf("%d streams in %v", total, time.Since(start))
}
