package wasmhost

import (
	"log/slog"
	"runtime"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// FailurePolicy says how a request is answered when the plugin cannot process it (a trap, no instance available,
// or a stream the plugin paused without resuming). It mirrors Envoy's PluginConfig.failure_policy.
type FailurePolicy int

const (
	// FailClosed answers 503 with response-code details "wasm_fail_stream", as Envoy's FAIL_CLOSED does.
	FailClosed FailurePolicy = iota
	// FailOpen forwards the request with its original headers, as Envoy's FAIL_OPEN does.
	FailOpen
)

// Backoff bounds how fast a crashed instance is recreated (Envoy FAIL_RELOAD with reload_config backoff).
type Backoff struct {
	// Initial is the delay before recreating an instance that crashed after running stably. Default 100ms.
	Initial time.Duration
	// Max caps the doubling delay of a crash loop. Default 30s.
	Max time.Duration
	// StableAfter is how long an instance must live for its crash not to count as part of a crash loop.
	// Default 30s.
	StableAfter time.Duration
}

// Options configure a Host.
type Options struct {
	// Envoy selects the Envoy release whose Wasm host is emulated: the linked imports, the WASI semantics and the
	// restricted-phase allow-lists. Default envoyabi.Envoy133 (cpp-host #427: poll_oneoff returns ENOSYS);
	// envoyabi.Envoy139 gives cpp-host #533 semantics.
	Envoy envoyabi.Version
	// Instances is the number of VM instances (Envoy: one per worker). Default runtime.GOMAXPROCS(0).
	Instances int
	// CompilationCacheDir persists wazero's compiled code across processes when non-empty.
	CompilationCacheDir string

	// PluginName, RootID and VMID are Envoy's PluginConfig.name, root_id and vm_config.vm_id. They are readable
	// as the plugin_name, plugin_root_id and plugin_vm_id properties.
	PluginName, RootID, VMID string
	// VMConfiguration is vm_config.configuration, buffer type 6.
	VMConfiguration []byte
	// PluginConfiguration is the initial PluginConfig.configuration, buffer type 7 during proxy_on_configure.
	PluginConfiguration []byte
	// Environment is vm_config.environment_variables.key_values, visible through environ_get.
	Environment [][2]string

	// FailurePolicy answers requests the plugin cannot process. Default FailClosed.
	FailurePolicy FailurePolicy
	// RestartBackoff rate-limits the recreation of crashed instances.
	RestartBackoff Backoff
	// CallTimeout bounds one guest callback; an overrunning instance is closed and recreated. Zero disables the
	// bound (Envoy has none), which also avoids the per-call cost of interruptible compiled code.
	CallTimeout time.Duration
	// PoolTimeout bounds how long a request waits for a free instance before the failure policy answers it.
	// Default 5s.
	PoolTimeout time.Duration
	// CallDepth, when set, counts the nesting of guest calls and traps one nested deeper than its Limit, as a
	// runtime with a fixed-size stack would. Nil (the default) runs the guest at full speed without counting.
	CallDepth *CallDepth
	// WAMRAppHeap lays out each instance's memory as Envoy's WAMR runtime does for a module that exports no
	// malloc and free of its own: one page more than the module asks for, holding WAMR's allocator state (non-zero
	// bytes), before _initialize runs. A module exporting both is left alone, as WAMR leaves it. A test mode.
	WAMRAppHeap bool

	// HTTPCalls carries out proxy_http_call. Nil refuses every call with BadArgument, as Envoy refuses a call to
	// an unknown cluster.
	HTTPCalls HTTPCaller

	// Logger receives guest logs (proxy_log, fd_write) and host events. Default slog.Default().
	Logger *slog.Logger
}

const (
	defaultPoolTimeout       = 5 * time.Second
	defaultBackoffInitial    = 100 * time.Millisecond
	defaultBackoffMax        = 30 * time.Second
	defaultBackoffStableTime = 30 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Envoy == (envoyabi.Version{}) {
		o.Envoy = envoyabi.Envoy133
	}
	if o.Instances <= 0 {
		o.Instances = runtime.GOMAXPROCS(0)
	}
	if o.PoolTimeout <= 0 {
		o.PoolTimeout = defaultPoolTimeout
	}
	if o.RestartBackoff.Initial <= 0 {
		o.RestartBackoff.Initial = defaultBackoffInitial
	}
	if o.RestartBackoff.Max < o.RestartBackoff.Initial {
		o.RestartBackoff.Max = max(defaultBackoffMax, o.RestartBackoff.Initial)
	}
	if o.RestartBackoff.StableAfter <= 0 {
		o.RestartBackoff.StableAfter = defaultBackoffStableTime
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}
