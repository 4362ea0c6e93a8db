// Package wasmhost runs skewgate's proxy-wasm HTTP filter plugin the way Envoy's Wasm host (proxy-wasm-cpp-host)
// does, on wazero: it accepts a module only if the selected Envoy release would link it, implements the host
// functions the plugin imports with Envoy's semantics (ABI 0.2.x, request headers and request bodies: no ticks,
// shared data, queues or responses), emulates cpp-host's WASI return codes and restricted start-up phases, and
// follows Envoy's callback order, so that the plugin behaves in skewgate's gateway as it does in Envoy.
//
// A Host compiles the module once and keeps a pool of VM instances (Envoy: one per worker). A request takes an
// instance, runs a whole stream (create, request headers, log, done, delete) and returns it; a stream that pauses
// for proxy_http_call gives the instance back while the call runs and takes it again for the response, and one
// that pauses for its body gives it back while the body is read and takes it again for proxy_on_request_body. A
// trapped instance is replaced in the background with exponential backoff; configuration changes start a new root
// context on every instance and commit only if all accept.
package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// maxMemoryPages caps guest memory at 1 GiB, cpp-host's PROXY_WASM_HOST_MAX_WASM_MEMORY_SIZE_BYTES.
const (
	maxMemoryPages = 1 << 14
	wasmPageSize   = 1 << 16
)

// Errors reported in Outcome.Failed besides guest traps.
var (
	ErrClosed     = errors.New("wasm host is closed")
	ErrNoInstance = errors.New("no Wasm VM instance became available in time")
)

// Host runs one plugin module.
type Host struct {
	opts     Options
	logger   *slog.Logger
	abi      string
	epoch    time.Time
	runtime  wazero.Runtime
	cache    wazero.CompilationCache
	compiled wazero.CompiledModule

	moduleConfig       wazero.ModuleConfig
	exports            resolvedExports
	imports            []envoyabi.Import
	startVMRestriction *restriction
	mallocRestriction  *restriction

	// insertsAppHeap is Options.WAMRAppHeap for a module WAMR would give an app heap.
	insertsAppHeap bool

	metrics *metricRegistry

	counters           hostCounters
	lastConfiguredSlot atomic.Int32

	slots []*slot
	pool  chan *slot

	// mu serialises Configure and instance recreation and guards configuration.
	mu            sync.Mutex
	configuration []byte

	// background guards starting goroutines against Close.
	background sync.Mutex
	closed     atomic.Bool
	wg         sync.WaitGroup
	done       chan struct{}
	// ctx is cancelled by Close; HTTP calls no request waits for run under it.
	ctx    context.Context
	cancel context.CancelFunc
}

// slot is a position in the pool. Its mutex is held by whichever goroutine uses the slot's instance.
type slot struct {
	index int
	mu    sync.Mutex
	inst  *instance
	// inPool is true while the slot waits in Host.pool, so that it is never queued twice.
	inPool bool
	// current mirrors inst for the watchdog, which must not take mu.
	current atomic.Pointer[instance]
	// crashes counts consecutive crashes of short-lived instances (guarded by Host.mu).
	crashes int
	// The slot's worker goroutine runs guest callbacks: start hands it job,
	// finished says it is done. Only the goroutine holding mu uses them.
	job      workerJob
	start    chan struct{}
	finished chan struct{}
	// outcome is what the worker's start of a stream decided, kept here so
	// that a request hands the worker no memory of its own.
	outcome Outcome
}

// workerJob is one turn of a slot's worker: fn if set, else the start of a stream for req, whose outcome goes to
// the slot's outcome and whose stream is left in paused if it waits for HTTP calls.
type workerJob struct {
	fn     func()
	ctx    context.Context
	req    *Request
	paused *stream
}

// New compiles wasm, links the Envoy import set for its ABI, and starts opts.Instances VM instances configured with
// opts.PluginConfiguration.
func New(ctx context.Context, wasm []byte, opts Options) (*Host, error) {
	opts = opts.withDefaults()
	h := &Host{
		opts:          opts,
		logger:        opts.Logger,
		epoch:         time.Now(),
		metrics:       newMetricRegistry(opts.Instances),
		configuration: opts.PluginConfiguration,
		done:          make(chan struct{}),
		moduleConfig:  wazero.NewModuleConfig().WithName("").WithStartFunctions(),
	}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	rc := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(maxMemoryPages).
		WithCloseOnContextDone(opts.CallTimeout > 0)
	if opts.CompilationCacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(opts.CompilationCacheDir)
		if err != nil {
			return nil, fmt.Errorf("compilation cache: %w", err)
		}
		h.cache = cache
		rc = rc.WithCompilationCache(cache)
	}
	h.runtime = wazero.NewRuntimeWithConfig(ctx, rc)
	if err := h.load(ctx, wasm); err != nil {
		h.release(ctx)
		return nil, err
	}
	h.slots = make([]*slot, opts.Instances)
	h.pool = make(chan *slot, opts.Instances)
	for i := range h.slots {
		s := &slot{index: i, start: make(chan struct{}), finished: make(chan struct{}, 1)}
		// Held while the instance starts: a call its root dispatches delivers only to the slot's instance.
		s.mu.Lock()
		inst, err := h.newInstance(s, h.configuration)
		if err != nil {
			s.mu.Unlock()
			h.release(ctx)
			return nil, fmt.Errorf("start Wasm VM instance %d: %w", i, err)
		}
		s.inst, s.inPool = inst, true
		s.current.Store(inst)
		s.mu.Unlock()
		h.slots[i] = s
		h.pool <- s
	}
	h.counters.liveInstances.Store(int64(opts.Instances))
	for _, s := range h.slots {
		h.goBackground(func() { h.runWorker(s) })
	}
	if opts.CallTimeout > 0 {
		h.goBackground(h.runWatchdog)
	}
	return h, nil
}

// load compiles the module, checks its ABI, imports and exports as cpp-host does, and links the host functions.
func (h *Host) load(ctx context.Context, wasm []byte) error {
	compileCtx := ctx
	if h.opts.CallDepth != nil {
		// Listeners are compiled into the guest's code; host modules stay uncounted.
		compileCtx = experimental.WithFunctionListenerFactory(ctx, h.opts.CallDepth)
	}
	compiled, err := h.runtime.CompileModule(compileCtx, wasm)
	if err != nil {
		return fmt.Errorf("Failed to load Wasm code: %w", err)
	}
	h.compiled = compiled
	exported := compiled.ExportedFunctions()
	var ok bool
	if h.abi, ok = envoyabi.DeclaredABI(exported); !ok {
		return envoyabi.ErrUnknownABI
	}
	if h.abi == envoyabi.ABI010 {
		return errors.New("proxy-wasm ABI 0.1.0 modules are not supported: this host runs ABI 0.2.x modules")
	}
	if _, ok := compiled.ExportedMemories()[memoryExport]; !ok {
		return errors.New("Wasm module does not export its memory")
	}
	if len(compiled.ImportedMemories()) > 0 {
		return errors.New("Wasm modules importing memory are not supported")
	}
	if err := envoyabi.CheckImports(h.opts.Envoy, h.abi, compiled.ImportedFunctions()); err != nil {
		return err
	}
	if h.exports, err = resolveExports(exported); err != nil {
		return err
	}
	h.insertsAppHeap = h.opts.WAMRAppHeap && !wamrUsesModuleAllocator(exported)
	if h.imports, err = h.moduleImports(compiled); err != nil {
		return err
	}
	return h.link(ctx)
}

// release cancels detached HTTP calls and frees the runtime and the compilation cache.
func (h *Host) release(ctx context.Context) {
	h.cancel()
	_ = h.runtime.Close(ctx)
	if h.cache != nil {
		_ = h.cache.Close(ctx)
	}
}

// Close stops background work and frees every instance. Requests still running fail.
func (h *Host) Close(ctx context.Context) error {
	h.background.Lock()
	if h.closed.Swap(true) {
		h.background.Unlock()
		return nil
	}
	close(h.done)
	h.background.Unlock()
	h.cancel()
	h.wg.Wait()
	h.release(ctx)
	return nil
}

// goBackground starts fn unless the host is closing.
func (h *Host) goBackground(fn func()) {
	h.background.Lock()
	defer h.background.Unlock()
	if h.closed.Load() {
		return
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		fn()
	}()
}

// clock is a monotonic nanosecond clock, never 0.
func (h *Host) clock() int64 { return int64(time.Since(h.epoch)) + 1 }

// ABI is the Proxy-Wasm ABI version the module declares.
func (h *Host) ABI() string { return h.abi }

// HandleRequestHeaders runs one request through the plugin: it takes an instance from the pool, runs
// proxy_on_context_create, proxy_on_request_headers, proxy_on_log, proxy_on_done and proxy_on_delete, and returns
// what the gateway must do. It never panics on guest misbehaviour; see Outcome.Failed.
//
// A stream the plugin pauses with HTTP calls outstanding waits for them with its instance back in the pool; each
// response runs proxy_on_http_call_response on that instance, until the plugin answers (Respond), resumes
// (Forward with the headers as modified) or pauses with no call left (the failure policy). If the instance
// failed meanwhile, its contexts are gone and the failure policy answers with ErrStreamLost. If ctx ends first,
// the calls are cancelled, the stream's context is finished as Envoy finishes a reset stream, and the Outcome is
// Reset with Failed set to ctx.Err(); the same if ctx ends while the request waits for an instance. Neither counts
// as a failed request: the client left.
//
// A stream whose headers the plugin pauses for the body (see BodyReader) waits for req.Body.ReadBody with its
// instance back in the pool, then runs proxy_on_request_body once, with the whole body and end_of_stream set, on
// that instance, and is decided as after its headers (and may wait for HTTP calls in turn). A Forward outcome then
// carries the body in Outcome.Body. If the body cannot be read, the stream is finished as Envoy finishes a reset
// stream and the Outcome is Reset with BodyFailed set (and Failed set to ctx.Err() if ctx ended).
func (h *Host) HandleRequestHeaders(ctx context.Context, req *Request) Outcome {
	var out Outcome
	s, err := h.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return clientGone(err)
		}
		h.applyFailurePolicy(req, &out, err)
		return out
	}
	inst := s.inst
	s.job = workerJob{ctx: ctx, req: req}
	started := h.startOnWorker(s)
	out, s.outcome = s.outcome, Outcome{}
	if !started {
		h.applyFailurePolicy(req, &out, ErrClosed)
	}
	paused := s.job.paused
	var calls streamCalls
	wantsBody := false
	if paused != nil {
		// Read while the slot is held: other streams' callbacks may reach this one through
		// proxy_set_effective_context once it is given back.
		calls, wantsBody = paused.calls, paused.awaitingBody
	}
	s.job = workerJob{}
	h.putBack(s)
	if paused != nil {
		return h.awaitPaused(ctx, s, inst, paused, calls, wantsBody, req, out)
	}
	return out
}

// awaitPaused finishes a stream that waits for its body or for HTTP calls, with the slot given back meanwhile.
func (h *Host) awaitPaused(ctx context.Context, s *slot, inst *instance, st *stream, calls streamCalls, wantsBody bool, req *Request, out Outcome) Outcome {
	if wantsBody {
		h.awaitBody(ctx, s, inst, st, req, &out)
	} else {
		h.awaitCalls(ctx, s, inst, st, calls, req, &out)
	}
	return out
}

// awaitBody reads the body of a stream paused for it, without holding the stream's instance, runs
// proxy_on_request_body on that instance, and waits for the HTTP calls the callback leaves the stream waiting for.
func (h *Host) awaitBody(ctx context.Context, s *slot, inst *instance, st *stream, req *Request, out *Outcome) {
	body, err := req.Body.ReadBody()
	if err != nil {
		// Envoy resets a stream whose body does not arrive, which finishes its context. The reader's error says
		// why, also when the client is gone (for HTTP/1.x Go's server ends the context on any error reading
		// the connection, a read deadline included).
		_ = h.withInstance(s, inst, func() { inst.finishStream(st, &Outcome{}) })
		*out = Outcome{Verdict: Reset, BodyFailed: err, Failed: ctx.Err()}
		return
	}
	if body == nil {
		body = []byte{}
	}
	var pending *stream
	var calls streamCalls
	err = h.withInstance(s, inst, func() {
		if pending = inst.deliverBody(st, body, req, out); pending != nil {
			calls = pending.calls
		}
	})
	switch {
	case err != nil:
		h.applyFailurePolicy(req, out, err)
	case pending != nil:
		h.awaitCalls(ctx, s, inst, pending, calls, req, out)
	}
	if out.Verdict == Forward {
		// The client's body is consumed: whoever forwards the request, the plugin or the failure policy, sends
		// what was read.
		out.Body = body
	}
}

// runOnWorker runs fn on the slot's worker; the caller holds the slot.
func (h *Host) runOnWorker(s *slot, fn func()) bool {
	s.job.fn = fn
	defer func() { s.job.fn = nil }()
	return h.startOnWorker(s)
}

// startOnWorker runs s.job on the slot's own goroutine, whose stack has long
// grown to what calls into the guest need. Run on the caller's goroutine
// instead, every request (a fresh goroutine in net/http) would grow and copy
// its stack on the way into the guest, which costs more than the hand-over.
func (h *Host) startOnWorker(s *slot) bool {
	select {
	case s.start <- struct{}{}:
	case <-h.done:
		return false
	}
	<-s.finished
	return true
}

// runWorker runs the slot's jobs until the host closes.
func (h *Host) runWorker(s *slot) {
	for {
		select {
		case <-s.start:
			if j := &s.job; j.fn != nil {
				j.fn()
			} else {
				j.paused = s.inst.startStream(j.ctx, j.req, &s.outcome)
			}
			s.finished <- struct{}{}
		case <-h.done:
			return
		}
	}
}

// clientGone is the outcome of a request whose context ended before the plugin decided it.
func clientGone(err error) Outcome { return Outcome{Verdict: Reset, Failed: err} }

// applyFailurePolicy answers a request the plugin could not process.
func (h *Host) applyFailurePolicy(req *Request, out *Outcome, err error) {
	h.counters.failedRequests.Add(1)
	*out = Outcome{Failed: err}
	if h.opts.FailurePolicy == FailOpen {
		out.Verdict = Forward
		out.Headers = req.Headers
		return
	}
	out.Verdict = Respond
	out.Response = failStreamResponse()
}

// acquire takes an idle slot with a healthy instance and locks it.
func (h *Host) acquire(ctx context.Context) (*slot, error) {
	for {
		if h.closed.Load() {
			return nil, ErrClosed
		}
		var s *slot
		select {
		case s = <-h.pool:
		default:
			var err error
			if s, err = h.waitForSlot(ctx); err != nil {
				return nil, err
			}
		}
		s.mu.Lock()
		s.inPool = false
		if s.inst.failed == nil {
			return s, nil
		}
		// The instance failed in a background callback while idle; its recreation queues the slot again.
		s.mu.Unlock()
	}
}

func (h *Host) waitForSlot(ctx context.Context) (*slot, error) {
	start := time.Now()
	timer := time.NewTimer(h.opts.PoolTimeout)
	defer func() {
		timer.Stop()
		h.counters.poolWaits.Add(1)
		h.counters.poolWaitNanos.Add(uint64(time.Since(start)))
	}()
	select {
	case s := <-h.pool:
		return s, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-timer.C:
		h.counters.poolTimeouts.Add(1)
		return nil, ErrNoInstance
	case <-h.done:
		return nil, ErrClosed
	}
}

// putBack unlocks a slot taken with acquire and returns it to the pool unless its instance failed.
func (h *Host) putBack(s *slot) {
	healthy := s.inst.failed == nil
	if healthy {
		s.inPool = true
	}
	s.mu.Unlock()
	if healthy {
		h.pool <- s
	}
}

// Configure applies a new plugin configuration as Envoy does on a configuration change: every instance creates a
// new root context (proxy_on_context_create, proxy_on_vm_start, proxy_on_configure). Only if every instance accepts
// are the new roots committed and the previous ones shut down (proxy_on_done, proxy_on_delete); otherwise the new
// roots are discarded, all instances keep the previous configuration and a *ConfigError says which instance
// refused and why. Streams already running finish with the root they started with.
func (h *Host) Configure(ctx context.Context, configuration []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed.Load() {
		return ErrClosed
	}
	configuration = append([]byte(nil), configuration...)
	var staged []stagedRoot
	for _, s := range h.slots {
		if err := ctx.Err(); err != nil {
			h.discard(staged)
			return err
		}
		s.mu.Lock()
		inst := s.inst
		if inst.failed != nil {
			// Being recreated: the new instance starts with h.configuration once this call returns.
			s.mu.Unlock()
			continue
		}
		root, err := inst.startRoot(configuration)
		s.mu.Unlock()
		if err != nil {
			h.discard(staged)
			h.logger.Warn("plugin configuration rejected", "plugin", h.opts.PluginName, "error", err)
			return err
		}
		staged = append(staged, stagedRoot{s, inst, root})
	}
	for _, st := range staged {
		st.slot.mu.Lock()
		if st.slot.inst == st.inst && st.inst.failed == nil {
			st.inst.commit(st.root)
		}
		st.slot.mu.Unlock()
	}
	h.configuration = configuration
	h.counters.configurationApplied.Add(1)
	return nil
}

// stagedRoot is a root context started by Configure and not yet committed.
type stagedRoot struct {
	slot *slot
	inst *instance
	root *rootContext
}

// discard shuts down roots staged by a Configure call that did not commit.
func (h *Host) discard(staged []stagedRoot) {
	for _, st := range staged {
		st.slot.mu.Lock()
		if st.slot.inst == st.inst {
			st.inst.shutdownRoot(st.root)
		}
		st.slot.mu.Unlock()
	}
}

// scheduleRecreate replaces a failed instance in the background: Envoy's FAIL_RELOAD, with exponential backoff
// for instances that crash again soon after creation.
func (h *Host) scheduleRecreate(failed *instance) {
	h.goBackground(func() { h.recreate(failed) })
}

func (h *Host) recreate(failed *instance) {
	s := failed.slot
	s.mu.Lock()
	_ = failed.mod.Close(context.Background())
	s.mu.Unlock()

	backoff := h.opts.RestartBackoff
	h.mu.Lock()
	if time.Since(failed.createdAt) < backoff.StableAfter {
		s.crashes++
	} else {
		s.crashes = 1
	}
	delay := backoff.Initial
	for i := 1; i < s.crashes && delay < backoff.Max; i++ {
		delay *= 2
	}
	delay = min(delay, backoff.Max)
	if s.crashes > 1 {
		h.counters.crashLoopBackoffs.Add(1)
	}
	h.mu.Unlock()

	timer := time.NewTimer(delay)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
		case <-h.done:
			return
		}
		h.mu.Lock()
		if h.closed.Load() {
			h.mu.Unlock()
			return
		}
		// Held while the instance starts: a call its root dispatches delivers only to the slot's instance.
		s.mu.Lock()
		inst, err := h.newInstance(s, h.configuration)
		if err != nil {
			s.mu.Unlock()
			h.mu.Unlock()
			h.counters.recreationFailures.Add(1)
			h.logger.Error("Wasm VM recreation failed", "plugin", h.opts.PluginName, "instance", s.index,
				"retry_in", min(delay*2, backoff.Max), "error", err)
			delay = min(delay*2, backoff.Max)
			timer.Reset(delay)
			continue
		}
		s.inst = inst
		s.current.Store(inst)
		queue := !s.inPool
		s.inPool = true
		s.mu.Unlock()
		h.mu.Unlock()
		h.counters.recreations.Add(1)
		h.counters.liveInstances.Add(1)
		h.logger.Info("Wasm VM recreated", "plugin", h.opts.PluginName, "instance", s.index)
		if queue {
			h.pool <- s
		}
		return
	}
}

// runWatchdog closes instances whose current callback exceeds Options.CallTimeout; the interrupted call then
// fails like a trap and the instance is recreated.
func (h *Host) runWatchdog() {
	period := max(h.opts.CallTimeout/4, time.Millisecond)
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-ticker.C:
		}
		now := h.clock()
		for _, s := range h.slots {
			inst := s.current.Load()
			if start := inst.callStart.Load(); start != 0 && time.Duration(now-start) > h.opts.CallTimeout {
				h.logger.Error("Wasm VM callback exceeded the call timeout", "plugin", h.opts.PluginName,
					"instance", s.index, "timeout", h.opts.CallTimeout)
				_ = inst.mod.CloseWithExitCode(context.Background(), 1)
			}
		}
	}
}
