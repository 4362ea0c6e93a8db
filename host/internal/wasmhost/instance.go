package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// instanceKey carries the calling *instance in the context of every guest call, so that host functions find their
// instance without any lookup by name.
type instanceKey struct{}

// restriction is a cpp-host restricted phase: only the imports marked in allowed may be called.
type restriction struct {
	phase   string
	allowed []bool // indexed like Host.imports
}

// guestExports are the module's callbacks, resolved once per instance. A nil function is not exported; the
// host then skips the call as cpp-host does.
type guestExports struct {
	initialize, mainWithArgs, mainVoid, start api.Function
	malloc                                    api.Function
	onContextCreate, onVMStart, onConfigure   api.Function
	onRequestHeaders, onRequestBody           api.Function
	onLog, onDone, onDelete                   api.Function
	onHTTPCallResponse                        api.Function
}

// rootContext is a plugin (root) context: one per configuration generation.
type rootContext struct {
	id            uint32
	configuration []byte
	// streams counts the root's live streams; a root replaced while some still wait for HTTP calls is retired
	// and shut down when the last one ends, as Envoy keeps a plugin alive while its filters run.
	streams int
	retired bool
}

// stream is an HTTP stream context. Several live in an instance at once while streams wait for HTTP calls;
// finished ones are kept for reuse.
type stream struct {
	id          uint32
	root        *rootContext
	ctx         context.Context // the request's; the stream's HTTP calls run under it
	headers     [][2]string
	endOfStream bool
	props       *Properties

	// requestOpen is true from proxy_on_request_headers until the request is forwarded or answered, also while
	// the stream waits for its body or for HTTP calls: the request headers may change and a local response may be
	// sent.
	requestOpen, inLog bool

	// awaitingBody: proxy_on_request_headers paused the request for its body, which comes next. body is the
	// body once read (bodyRead), readable as buffer type 0 while the request is open.
	awaitingBody, bodyRead bool
	body                   []byte

	routeCacheCleared bool
	response          *LocalResponse
	continueRequested bool

	calls streamCalls
}

// guestContext is the context host functions act on: the callback's context or the one chosen with
// proxy_set_effective_context.
type guestContext struct {
	id     uint32
	root   *rootContext // nil for the VM context (id 0) during startVm
	stream *stream      // nil for root contexts
}

// instance is one VM: a module instance with its contexts. It is used by one goroutine at a time, the holder of
// its slot's mutex.
type instance struct {
	host    *Host
	slot    *slot
	mod     api.Module
	mem     api.Memory
	callCtx context.Context
	fns     guestExports

	stack       [5]uint64 // callbacks take at most five parameters and return at most one result
	allocStack  [1]uint64
	restriction *restriction

	createdAt     time.Time
	failed        error
	nextContextID uint32
	root          *rootContext   // the committed configuration's root
	roots         []*rootContext // every live root: committed, staged by Configure, and kept by proxy_on_done
	configuring   *rootContext   // buffer type 7 is readable only while this root's proxy_on_configure runs
	effective     guestContext
	streams       map[uint32]*stream
	spareStreams  []*stream
	lastCallToken uint32
	callResponse  callResponse
	lastGuestErr  string
	scratch       []byte
	// lastLocalBody is the body of the last local reply, which the next one shares if it is the same.
	lastLocalBody []byte
	output        [2][]byte // stdout and stderr bytes not yet ended by a newline

	// callStart is the start of the running guest callback (host clock, 0 when idle), read by the watchdog.
	callStart atomic.Int64
	// callStack holds the guest functions running now, outermost first, when Options.CallDepth is set.
	callStack []api.FunctionDefinition
}

// ConfigError reports a configuration an instance did not accept.
type ConfigError struct {
	Instance int
	// Callback is proxy_on_vm_start or proxy_on_configure.
	Callback string
	// Trap is the guest's runtime error, nil when the callback returned false.
	Trap error
	// LastGuestError is the last error-level line the guest logged during the attempt.
	LastGuestError string
}

// ErrConfigurationRejected matches every ConfigError with errors.Is.
var ErrConfigurationRejected = errors.New("plugin configuration rejected")

func (e *ConfigError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "instance %d: ", e.Instance)
	if e.Trap != nil {
		fmt.Fprintf(&b, "%s trapped: %v", e.Callback, e.Trap)
	} else {
		fmt.Fprintf(&b, "%s returned false", e.Callback)
	}
	if e.LastGuestError != "" {
		fmt.Fprintf(&b, " (last guest error: %q)", e.LastGuestError)
	}
	return b.String()
}

func (e *ConfigError) Is(target error) bool { return target == ErrConfigurationRejected }

func (e *ConfigError) Unwrap() error { return e.Trap }

// newInstance instantiates the module, runs startVm and starts a root context with configuration.
func (h *Host) newInstance(s *slot, configuration []byte) (*instance, error) {
	inst := &instance{host: h, slot: s, createdAt: time.Now(), nextContextID: 1, streams: make(map[uint32]*stream)}
	inst.callCtx = context.WithValue(context.Background(), instanceKey{}, inst)
	mem, err := newGuestMemory(inst, maxMemoryPages*wasmPageSize)
	if err != nil {
		return nil, err
	}
	mod, err := h.runtime.InstantiateModule(experimental.WithMemoryAllocator(inst.callCtx, mem.allocator()), h.compiled, h.moduleConfig)
	if err != nil {
		return nil, fmt.Errorf("instantiate Wasm module: %w", err)
	}
	inst.mod = mod
	inst.mem = mod.ExportedMemory(memoryExport)
	inst.fns = h.exports.bind(mod)
	if h.insertsAppHeap {
		if err := insertWAMRAppHeap(inst.mem); err != nil {
			_ = mod.Close(context.Background())
			return nil, err
		}
	}
	if err := inst.startVM(); err != nil {
		_ = mod.Close(context.Background())
		return nil, err
	}
	root, err := inst.startRoot(configuration)
	if err != nil {
		_ = mod.Close(context.Background())
		return nil, err
	}
	inst.commit(root)
	return inst, nil
}

// startVM runs the module's entry points under cpp-host's startVm allow-list: _initialize, then main(0, 0) or
// __main_void if exported; _start when there is no _initialize.
func (inst *instance) startVM() error {
	inst.restriction = inst.host.startVMRestriction
	defer func() { inst.restriction = nil }()
	f := &inst.fns
	type entryPoint struct {
		name string
		fn   api.Function
	}
	var steps []entryPoint
	if f.initialize != nil {
		steps = append(steps, entryPoint{"_initialize", f.initialize})
		switch {
		case f.mainWithArgs != nil:
			steps = append(steps, entryPoint{"main", f.mainWithArgs})
		case f.mainVoid != nil:
			steps = append(steps, entryPoint{"__main_void", f.mainVoid})
		}
	} else if f.start != nil {
		steps = append(steps, entryPoint{"_start", f.start})
	}
	for _, step := range steps {
		inst.stack = [5]uint64{}
		if _, err := inst.invoke(step.fn, guestContext{}); err != nil {
			return fmt.Errorf("Wasm VM start failed in %s: %w", step.name, err)
		}
	}
	return nil
}

// newContextID returns the next context id, skipping 0 (the VM) and ids still held by live contexts.
func (inst *instance) newContextID() uint32 {
	for {
		id := inst.nextContextID
		inst.nextContextID++
		if _, live := inst.streams[id]; id != 0 && !live &&
			!slices.ContainsFunc(inst.roots, func(r *rootContext) bool { return r.id == id }) {
			return id
		}
	}
}

// invoke calls a guest function with inst.stack as parameters, with gctx as the effective context. A failed call
// fails the instance.
func (inst *instance) invoke(fn api.Function, gctx guestContext) (uint64, error) {
	saved := inst.effective
	inst.effective = gctx
	timed := inst.host.opts.CallTimeout > 0
	if timed {
		inst.callStart.Store(inst.host.clock())
	}
	err := fn.CallWithStack(inst.callCtx, inst.stack[:])
	if timed {
		inst.callStart.Store(0)
	}
	if len(inst.output[0])+len(inst.output[1]) > 0 {
		inst.flushOutput()
	}
	inst.effective = saved
	if err != nil {
		inst.fail(err)
		return 0, err
	}
	return inst.stack[0], nil
}

func (inst *instance) call1(fn api.Function, gctx guestContext, a uint32) (uint64, error) {
	inst.stack[0] = uint64(a)
	return inst.invoke(fn, gctx)
}

func (inst *instance) call2(fn api.Function, gctx guestContext, a, b uint32) (uint64, error) {
	inst.stack[0], inst.stack[1] = uint64(a), uint64(b)
	return inst.invoke(fn, gctx)
}

// fail marks the instance failed and, if it serves a slot, schedules its replacement; later calls see the first
// error. An instance failing while it is being created is discarded by its creator instead.
func (inst *instance) fail(err error) {
	if inst.failed != nil {
		return
	}
	inst.failed = err
	h := inst.host
	h.counters.traps.Add(1)
	h.logger.Error("Wasm VM failed", "plugin", h.opts.PluginName, "instance", inst.slot.index, "error", err)
	if inst.slot.inst == inst {
		h.counters.liveInstances.Add(-1)
		h.scheduleRecreate(inst)
	}
}

// startRoot creates a root context for configuration: proxy_on_context_create(root, 0), proxy_on_vm_start and
// proxy_on_configure with the configuration readable as buffer type 7. New streams use it only once committed.
func (inst *instance) startRoot(configuration []byte) (*rootContext, error) {
	root := &rootContext{id: inst.newContextID(), configuration: configuration}
	inst.roots = append(inst.roots, root)
	inst.lastGuestErr = ""
	rctx := guestContext{id: root.id, root: root}
	reject := func(callback string, trap error) error {
		err := &ConfigError{Instance: inst.slot.index, Callback: callback, Trap: trap, LastGuestError: inst.lastGuestErr}
		if trap == nil {
			inst.shutdownRoot(root)
		}
		return err
	}
	if fn := inst.fns.onContextCreate; fn != nil {
		if _, err := inst.call2(fn, rctx, root.id, 0); err != nil {
			return nil, reject("proxy_on_context_create", err)
		}
	}
	if fn := inst.fns.onVMStart; fn != nil {
		ok, err := inst.call2(fn, rctx, root.id, uint32(len(inst.host.opts.VMConfiguration)))
		if err != nil || uint32(ok) == 0 {
			return nil, reject("proxy_on_vm_start", err)
		}
	}
	if fn := inst.fns.onConfigure; fn != nil {
		inst.configuring = root
		ok, err := inst.call2(fn, rctx, root.id, uint32(len(configuration)))
		inst.configuring = nil
		if err != nil || uint32(ok) == 0 {
			return nil, reject("proxy_on_configure", err)
		}
	}
	return root, nil
}

// commit makes root the configuration new streams use and shuts down the previous root.
func (inst *instance) commit(root *rootContext) {
	old := inst.root
	inst.root = root
	inst.host.lastConfiguredSlot.Store(int32(inst.slot.index))
	if old != nil {
		inst.shutdownRoot(old)
	}
}

// shutdownRoot runs proxy_on_done(root) and, if the guest is done, proxy_on_delete(root). A root whose
// proxy_on_done returns false stays, as in Envoy, until the guest calls proxy_done, which the plugin does not
// import: it lives as long as the instance. A root with live streams is retired instead and shut down after its
// last stream.
func (inst *instance) shutdownRoot(root *rootContext) {
	if inst.failed != nil {
		return
	}
	if root.streams > 0 {
		root.retired = true
		return
	}
	rctx := guestContext{id: root.id, root: root}
	if fn := inst.fns.onDone; fn != nil {
		done, err := inst.call1(fn, rctx, root.id)
		if err != nil {
			return
		}
		if uint32(done) == 0 {
			return
		}
	}
	inst.deleteRoot(root)
}

func (inst *instance) deleteRoot(root *rootContext) {
	if fn := inst.fns.onDelete; fn != nil {
		if _, err := inst.call1(fn, guestContext{id: root.id, root: root}, root.id); err != nil {
			return
		}
	}
	inst.roots = slices.DeleteFunc(inst.roots, func(r *rootContext) bool { return r == root })
}

// findContext resolves a context id for proxy_set_effective_context.
func (inst *instance) findContext(id uint32) (guestContext, bool) {
	if s, ok := inst.streams[id]; ok {
		return s.guestContext(), true
	}
	for _, r := range inst.roots {
		if r.id == id {
			return guestContext{id: id, root: r}, true
		}
	}
	return guestContext{}, false
}

// startStream runs the start of an HTTP stream in Envoy's order, proxy_on_context_create(id, root) and
// proxy_on_request_headers, and settles it. It returns the stream if it waits for HTTP calls, nil once out holds
// the outcome.
func (inst *instance) startStream(ctx context.Context, req *Request, out *Outcome) *stream {
	s := inst.newStream(ctx, inst.root, req)
	sctx := s.guestContext()
	f := &inst.fns
	if f.onContextCreate != nil {
		if _, err := inst.call2(f.onContextCreate, sctx, s.id, s.root.id); err != nil {
			inst.host.applyFailurePolicy(req, out, err)
			inst.releaseStream(s)
			return nil
		}
	}
	action := uint64(actionContinue)
	s.requestOpen = true
	if f.onRequestHeaders != nil {
		inst.stack[0], inst.stack[1], inst.stack[2] = uint64(s.id), uint64(len(s.headers)), 0
		if s.endOfStream {
			inst.stack[2] = 1
		}
		var err error
		action, err = inst.invoke(f.onRequestHeaders, sctx)
		if err != nil {
			inst.host.applyFailurePolicy(req, out, err)
			inst.releaseStream(s)
			return nil
		}
	}
	// A pause with nothing outstanding waits for the body: Envoy, with allow_on_headers_stop_iteration, takes
	// it for StopIteration and hands the filter the body next. Without a body, or a callback for it, nothing can
	// resume the stream.
	s.awaitingBody = action != actionContinue && len(s.calls.tokens) == 0 && !s.endOfStream &&
		req.Body != nil && f.onRequestBody != nil
	return inst.settle(s, req, out, uint32(action))
}

// deliverBody runs proxy_on_request_body(id, body size, end_of_stream 1) with the whole body, readable as buffer
// type 0, and settles the stream as after its headers: the callback's header changes, route-cache clears, local
// response and HTTP calls count alike. It returns the stream if it waits for HTTP calls, nil once out holds the
// outcome.
func (inst *instance) deliverBody(s *stream, body []byte, req *Request, out *Outcome) *stream {
	s.awaitingBody = false
	s.body, s.bodyRead = body, true
	inst.stack[0], inst.stack[1], inst.stack[2] = uint64(s.id), uint64(len(body)), 1
	action, err := inst.invoke(inst.fns.onRequestBody, s.guestContext())
	if err != nil {
		inst.host.applyFailurePolicy(req, out, err)
		inst.releaseStream(s)
		return nil
	}
	return inst.settle(s, req, out, uint32(action))
}

// settle decides the stream after a callback. A decided stream is finished; a paused one waiting for HTTP calls
// or for its body is returned to wait.
func (inst *instance) settle(s *stream, req *Request, out *Outcome, action uint32) *stream {
	if !inst.decide(s, req, out, action) {
		return s
	}
	inst.finishStream(s, out)
	return nil
}

// finishStream ends the stream in Envoy's order, proxy_on_log, proxy_on_done and proxy_on_delete, then delivers
// its cancelled calls.
func (inst *instance) finishStream(s *stream, out *Outcome) {
	s.requestOpen = false
	if s.calls.cancel != nil {
		// The upstream need not wait for the guest's remaining callbacks.
		s.calls.cancel()
	}
	s.inLog = true
	f := &inst.fns
	for _, fn := range [...]api.Function{f.onLog, f.onDone, f.onDelete} {
		if fn == nil {
			continue
		}
		if _, err := inst.call1(fn, s.guestContext(), s.id); err != nil {
			out.Failed = err
			inst.releaseStream(s)
			return
		}
	}
	inst.cancelCalls(s)
	inst.releaseStream(s)
}

// decide turns the stream's state after a callback into the outcome and reports whether it has one. A local
// response forces a pause whatever the callback returned (cpp-host stopNextIteration); a paused stream waits
// while HTTP calls are outstanding, or for the body it paused its headers for.
func (inst *instance) decide(s *stream, req *Request, out *Outcome, action uint32) bool {
	out.RouteCacheCleared = s.routeCacheCleared
	switch {
	case s.response != nil:
		out.Verdict = Respond
		out.Response = s.response
	case action == actionContinue || s.continueRequested:
		out.Verdict = Forward
		out.Headers = slices.Clone(s.headers)
	case len(s.calls.tokens) > 0, s.awaitingBody:
		return false
	default:
		inst.host.applyFailurePolicy(req, out, ErrStreamPaused)
		out.RouteCacheCleared = s.routeCacheCleared
	}
	return true
}

// ErrStreamPaused reports a stream the plugin paused without a local response, a proxy_continue_stream call or
// an HTTP call outstanding, and not for a body it can be given: nothing can resume it, so the failure policy
// answers it.
var ErrStreamPaused = errors.New("plugin paused the request without sending a response or resuming it")

// newStream registers a stream context for req, reusing a finished one.
func (inst *instance) newStream(ctx context.Context, root *rootContext, req *Request) *stream {
	var s *stream
	if n := len(inst.spareStreams); n > 0 {
		s = inst.spareStreams[n-1]
		inst.spareStreams = inst.spareStreams[:n-1]
	} else {
		s = new(stream)
	}
	*s = stream{id: inst.newContextID(), root: root, ctx: ctx, headers: s.headers[:0], endOfStream: req.EndOfStream,
		props: &req.Properties, calls: streamCalls{tokens: s.calls.tokens[:0]}}
	for _, h := range req.Headers {
		s.headers = append(s.headers, [2]string{strings.ToLower(h[0]), h[1]})
	}
	inst.streams[s.id] = s
	root.streams++
	return s
}

// releaseStream unregisters a stream, cancels its calls, shuts down its root if that was retired meanwhile, and
// drops the stream's references to the request so that the instance does not keep it alive.
func (inst *instance) releaseStream(s *stream) {
	if s.calls.cancel != nil {
		s.calls.cancel()
	}
	delete(inst.streams, s.id)
	root := s.root
	if root.streams--; root.streams == 0 && root.retired {
		root.retired = false
		inst.shutdownRoot(root)
	}
	clear(s.headers)
	s.root, s.ctx, s.props, s.response, s.body = nil, nil, nil, nil, nil
	s.calls = streamCalls{tokens: s.calls.tokens[:0]}
	inst.spareStreams = append(inst.spareStreams, s)
}

func (s *stream) guestContext() guestContext {
	return guestContext{id: s.id, root: s.root, stream: s}
}

// guestLog emits a guest log line and remembers error-level lines for configuration errors.
func (inst *instance) guestLog(level slog.Level, msg []byte, source string) {
	if level >= slog.LevelError {
		inst.lastGuestErr = string(msg)
	}
	logger := inst.host.logger
	if !logger.Enabled(inst.callCtx, level) {
		return
	}
	logger.LogAttrs(inst.callCtx, level, string(msg),
		slog.String("plugin", inst.host.opts.PluginName),
		slog.Int("instance", inst.slot.index),
		slog.Uint64("context", uint64(inst.effective.id)),
		slog.String("source", source))
}

const memoryExport = "memory"

// exportSpec is a callback the host may call and its required signature (cpp-host WasmBase::getFunctions).
type exportSpec struct {
	name    string
	params  int
	results int
	field   func(*guestExports) *api.Function
}

var exportSpecs = []exportSpec{
	{"_initialize", 0, 0, func(g *guestExports) *api.Function { return &g.initialize }},
	{"main", 2, 1, func(g *guestExports) *api.Function { return &g.mainWithArgs }},
	{"__main_void", 0, 1, func(g *guestExports) *api.Function { return &g.mainVoid }},
	{"_start", 0, 0, func(g *guestExports) *api.Function { return &g.start }},
	{"proxy_on_context_create", 2, 0, func(g *guestExports) *api.Function { return &g.onContextCreate }},
	{"proxy_on_vm_start", 2, 1, func(g *guestExports) *api.Function { return &g.onVMStart }},
	{"proxy_on_configure", 2, 1, func(g *guestExports) *api.Function { return &g.onConfigure }},
	{"proxy_on_request_headers", 3, 1, func(g *guestExports) *api.Function { return &g.onRequestHeaders }},
	{"proxy_on_request_body", 3, 1, func(g *guestExports) *api.Function { return &g.onRequestBody }},
	{"proxy_on_log", 1, 0, func(g *guestExports) *api.Function { return &g.onLog }},
	{"proxy_on_done", 1, 1, func(g *guestExports) *api.Function { return &g.onDone }},
	{"proxy_on_delete", 1, 0, func(g *guestExports) *api.Function { return &g.onDelete }},
	{"proxy_on_http_call_response", 5, 0, func(g *guestExports) *api.Function { return &g.onHTTPCallResponse }},
}

// allocatorNames are tried in cpp-host's order.
var allocatorNames = []string{"malloc", "proxy_on_memory_allocate"}

// resolvedExports lists the exports present in the module with validated signatures.
type resolvedExports struct {
	present   []exportSpec
	allocator string
}

// resolveExports validates the module's callbacks like cpp-host: a callback with the wrong signature fails the
// load ("Bad function signature for: name"), a module without an allocator cannot receive host data.
func resolveExports(defs map[string]api.FunctionDefinition) (resolvedExports, error) {
	var r resolvedExports
	allI32 := func(types []api.ValueType) bool {
		return !slices.ContainsFunc(types, func(t api.ValueType) bool { return t != api.ValueTypeI32 })
	}
	for _, spec := range exportSpecs {
		def, ok := defs[spec.name]
		if !ok {
			continue
		}
		if len(def.ParamTypes()) != spec.params || len(def.ResultTypes()) != spec.results ||
			!allI32(def.ParamTypes()) || !allI32(def.ResultTypes()) {
			return r, fmt.Errorf("Bad function signature for: %s", spec.name)
		}
		r.present = append(r.present, spec)
	}
	for _, name := range allocatorNames {
		def, ok := defs[name]
		if !ok {
			continue
		}
		if len(def.ParamTypes()) != 1 || len(def.ResultTypes()) != 1 || !allI32(def.ParamTypes()) || !allI32(def.ResultTypes()) {
			return r, fmt.Errorf("Bad function signature for: %s", name)
		}
		r.allocator = name
		break
	}
	if r.allocator == "" {
		return r, errors.New("Wasm module is missing malloc function.")
	}
	return r, nil
}

func (r resolvedExports) bind(mod api.Module) guestExports {
	var g guestExports
	for _, spec := range r.present {
		*spec.field(&g) = mod.ExportedFunction(spec.name)
	}
	g.malloc = mod.ExportedFunction(r.allocator)
	return g
}
