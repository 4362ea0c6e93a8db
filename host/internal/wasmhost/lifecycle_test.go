package wasmhost

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

func findImport(t testing.TB, envoy envoyabi.Version, qualifiedName string) *envoyabi.Import {
	t.Helper()
	for _, imp := range implementedImports(envoy, envoyabi.ABI020) {
		if imp.QualifiedName() == qualifiedName {
			return &imp
		}
	}
	t.Fatalf("%s is not provided by Envoy %s or not implemented", qualifiedName, envoy)
	return nil
}

// callbackMarkers returns the lifecycle callbacks the probe logged, in order.
func callbackMarkers(logs *logRecorder) []string {
	var out []string
	for _, m := range logs.messages() {
		if name, ok := strings.CutPrefix(m, "proxy_on_"); ok {
			out = append(out, name)
		}
	}
	return out
}

func TestStreamCallbacksRunInEnvoyOrderLogBeforeDoneBeforeDelete(t *testing.T) {
	logs := &logRecorder{}
	wasm := probeSpec{imports: implementedImports(envoyabi.Envoy133, envoyabi.ABI020), markers: true}.build()
	h := newHost(t, wasm, Options{Envoy: envoyabi.Envoy133, Instances: 1, Logger: slog.New(logs)})
	if got, want := callbackMarkers(logs), []string{"context_create", "vm_start", "configure"}; !slices.Equal(got, want) {
		t.Fatalf("start-up callbacks = %v, want %v", got, want)
	}
	logs.records = nil

	out := h.HandleRequestHeaders(context.Background(), &Request{Headers: [][2]string{{":path", "/"}}})
	if out.Failed != nil || out.Verdict != Forward {
		t.Fatalf("outcome %+v", out)
	}
	want := []string{"context_create", "request_headers", "log", "done", "delete"}
	if got := callbackMarkers(logs); !slices.Equal(got, want) {
		t.Fatalf("stream callbacks = %v, want Envoy's order %v", got, want)
	}
	logs.records = nil

	if err := h.Configure(context.Background(), []byte("next")); err != nil {
		t.Fatal(err)
	}
	want = []string{"context_create", "vm_start", "configure", "done", "delete"}
	if got := callbackMarkers(logs); !slices.Equal(got, want) {
		t.Fatalf("configuration change callbacks = %v, want %v (new root first, then the old one shut down)", got, want)
	}
}

func TestStartVMAllowListTrapsForbiddenImports(t *testing.T) {
	tests := []struct {
		envoy   envoyabi.Version
		call    string
		allowed bool
	}{
		{envoyabi.Envoy133, "env.proxy_log", true},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.clock_time_get", true},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.fd_fdstat_set_flags", true},
		{envoyabi.Envoy133, "wasi_unstable.random_get", true},
		{envoyabi.Envoy133, "env.proxy_get_property", false},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.poll_oneoff", false},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.sched_yield", false},
		{envoyabi.Envoy139, "wasi_snapshot_preview1.poll_oneoff", true},
		{envoyabi.Envoy139, "env.proxy_http_call", false},
	}
	for _, tt := range tests {
		t.Run(tt.envoy.String()+"/"+tt.call, func(t *testing.T) {
			spec := probeSpec{imports: implementedImports(tt.envoy, envoyabi.ABI020), initializeCalls: findImport(t, tt.envoy, tt.call)}
			h, err := New(context.Background(), spec.build(), Options{Envoy: tt.envoy, Instances: 1, Logger: slog.New(slog.DiscardHandler)})
			if tt.allowed {
				if err != nil {
					t.Fatalf("allowed call failed the start: %v", err)
				}
				_ = h.Close(context.Background())
				return
			}
			if err == nil {
				_ = h.Close(context.Background())
				t.Fatal("forbidden call during _initialize did not trap")
			}
			if !strings.Contains(err.Error(), "restricted_callback: "+tt.call) || !strings.Contains(err.Error(), "_initialize") {
				t.Fatalf("error = %v", err)
			}
		})
	}
}

func TestMallocAllowListTrapsForbiddenImportsInsideTheAllocator(t *testing.T) {
	tests := []struct {
		envoy   envoyabi.Version
		call    string
		allowed bool
	}{
		{envoyabi.Envoy133, "env.proxy_log", true},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.clock_time_get", true},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.fd_write", true},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.poll_oneoff", false},
		{envoyabi.Envoy139, "wasi_snapshot_preview1.poll_oneoff", true},
		{envoyabi.Envoy133, "env.proxy_get_header_map_pairs", false},
		{envoyabi.Envoy133, "wasi_snapshot_preview1.random_get", false},
	}
	for _, tt := range tests {
		t.Run(tt.envoy.String()+"/"+tt.call, func(t *testing.T) {
			spec := probeSpec{imports: implementedImports(tt.envoy, envoyabi.ABI020), allocatorCalls: findImport(t, tt.envoy, tt.call)}
			h := newHost(t, spec.build(), Options{Envoy: tt.envoy, Instances: 1, Logger: slog.New(slog.DiscardHandler)})
			s := h.slots[0]
			s.mu.Lock()
			defer s.mu.Unlock()
			p := &probe{t: t, host: h, inst: s.inst}
			p.beginStream([][2]string{{"k", "value"}}, Properties{})
			_, err := p.callErr("env.proxy_get_header_map_pairs", 0, outPtr, outSize)
			if tt.allowed != (err == nil) {
				t.Fatalf("allowed=%v but call error = %v", tt.allowed, err)
			}
			if err != nil && !strings.Contains(err.Error(), "inside the guest allocator") {
				t.Fatalf("error = %v", err)
			}
		})
	}
}

func TestModuleImportingOutsideTheEnvoySetOrTheHostsFailsToLoad(t *testing.T) {
	i32x2 := []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}
	tests := []struct {
		name    string
		envoy   envoyabi.Version
		extra   envoyabi.Import
		wantErr string
	}{
		{
			name:    "unknown env function",
			envoy:   envoyabi.Envoy139,
			extra:   envoyabi.Import{Namespace: "env", Name: "proxy_does_not_exist", Params: i32x2, Results: i32s(1)},
			wantErr: "Failed to load Wasm module due to a missing import: env.proxy_does_not_exist",
		},
		{
			name:    "ABI 0.1.0 function in a 0.2.0 module",
			envoy:   envoyabi.Envoy139,
			extra:   envoyabi.Import{Namespace: "env", Name: "proxy_get_configuration", Params: i32x2, Results: i32s(1)},
			wantErr: "Failed to load Wasm module due to a missing import: env.proxy_get_configuration",
		},
		{
			name:    "WASI function added in 1.39 on 1.33",
			envoy:   envoyabi.Envoy133,
			extra:   envoyabi.Import{Namespace: "wasi_snapshot_preview1", Name: "fd_filestat_get", Params: i32x2, Results: i32s(1)},
			wantErr: "Failed to load Wasm module due to a missing import: wasi_snapshot_preview1.fd_filestat_get",
		},
		{
			name:    "WASI function added in 1.39 on 1.39, which no Go plugin imports",
			envoy:   envoyabi.Envoy139,
			extra:   envoyabi.Import{Namespace: "wasi_snapshot_preview1", Name: "fd_filestat_get", Params: i32x2, Results: i32s(1)},
			wantErr: "the module imports wasi_snapshot_preview1.fd_filestat_get, which this host does not implement",
		},
		{
			name:    "Envoy function the plugin does not import",
			envoy:   envoyabi.Envoy133,
			extra:   envoyabi.Import{Namespace: "env", Name: "proxy_set_tick_period_milliseconds", Params: i32s(1), Results: i32s(1)},
			wantErr: "the module imports env.proxy_set_tick_period_milliseconds, which this host does not implement",
		},
		{
			name:  "a function the host implements",
			envoy: envoyabi.Envoy133,
			extra: envoyabi.Import{Namespace: "env", Name: "proxy_log", Params: i32s(3), Results: i32s(1)},
		},
		{
			name:    "signature mismatch",
			envoy:   envoyabi.Envoy133,
			extra:   envoyabi.Import{Namespace: "env", Name: "proxy_increment_metric", Params: i32x2, Results: i32s(1)},
			wantErr: "Failed to load Wasm module due to an import type mismatch for env.proxy_increment_metric",
		},
		{
			name:    "wasi module that does not exist",
			envoy:   envoyabi.Envoy139,
			extra:   envoyabi.Import{Namespace: "wasi_snapshot_preview2", Name: "fd_write", Params: i32s(4), Results: i32s(1)},
			wantErr: "missing import: wasi_snapshot_preview2.fd_write",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wasm := probeSpec{imports: []envoyabi.Import{tt.extra}}.build()
			h, err := New(context.Background(), wasm, Options{Envoy: tt.envoy, Instances: 1, Logger: slog.New(slog.DiscardHandler)})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				_ = h.Close(context.Background())
				return
			}
			if err == nil {
				_ = h.Close(context.Background())
				t.Fatal("module loaded")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestModuleExportsAreValidatedLikeCppHost(t *testing.T) {
	base := func() *wasmModule { return &wasmModule{pages: 1} }
	tests := []struct {
		name    string
		build   func(m *wasmModule)
		wantErr string
	}{
		{
			name: "no ABI marker",
			build: func(m *wasmModule) {
				m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
			},
			wantErr: "Missing or unknown Proxy-Wasm ABI version",
		},
		{
			name: "unknown ABI marker",
			build: func(m *wasmModule) {
				m.addFunc("proxy_abi_version_0_3_0", none, none)
				m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
			},
			wantErr: "Missing or unknown Proxy-Wasm ABI version",
		},
		{
			name: "ABI 0.1.0 module",
			build: func(m *wasmModule) {
				m.addFunc("proxy_abi_version_0_1_0", none, none)
				m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
			},
			wantErr: "proxy-wasm ABI 0.1.0 modules are not supported",
		},
		{
			name: "no allocator",
			build: func(m *wasmModule) {
				m.addFunc("proxy_abi_version_0_2_0", none, none)
			},
			wantErr: "Wasm module is missing malloc function.",
		},
		{
			name: "request headers callback with the 0.1.0 signature in a 0.2.0 module",
			build: func(m *wasmModule) {
				m.addFunc("proxy_abi_version_0_2_0", none, none)
				m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
				m.addFunc("proxy_on_request_headers", i32s(2), i32s(1), i32Const(0))
			},
			wantErr: "Bad function signature for: proxy_on_request_headers",
		},
		{
			name: "malloc preferred over proxy_on_memory_allocate",
			build: func(m *wasmModule) {
				m.addFunc("proxy_abi_version_0_2_0", none, none)
				m.addFunc("malloc", i32s(1), i32s(1), i32Const(0))
				m.addFunc("proxy_on_memory_allocate", i32s(2), none)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := base()
			tt.build(m)
			h, err := New(context.Background(), m.encode(), Options{Instances: 1, Logger: slog.New(slog.DiscardHandler)})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if h.exports.allocator != "malloc" {
					t.Fatalf("allocator = %s", h.exports.allocator)
				}
				_ = h.Close(context.Background())
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestRootContextRejectionIsReportedWithTheCallback(t *testing.T) {
	m := &wasmModule{pages: 1}
	m.addFunc("proxy_abi_version_0_2_0", none, none)
	m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
	m.addFunc("proxy_on_vm_start", i32s(2), i32s(1), i32Const(0))
	_, err := New(context.Background(), m.encode(), Options{Instances: 1, Logger: slog.New(slog.DiscardHandler)})
	var cfgErr *ConfigError
	if !errors.As(err, &cfgErr) || cfgErr.Callback != "proxy_on_vm_start" || !errors.Is(err, ErrConfigurationRejected) {
		t.Fatalf("error = %v", err)
	}
}

func TestEntryPointsRunLikeCppHostStartVM(t *testing.T) {
	logLine := func(m *wasmModule, offset int32, text string) []byte {
		m.data = append(m.data, wasmData{uint32(offset), []byte(text)})
		return slices.Concat(i32Const(2), i32Const(offset), i32Const(int32(len(text))), call(0), opDrop)
	}
	tests := []struct {
		name    string
		exports func(m *wasmModule)
		want    []string
	}{
		{
			name: "_initialize then main(0, 0)",
			exports: func(m *wasmModule) {
				m.addFunc("_initialize", none, none, logLine(m, 100, "entry:_initialize"))
				m.addFunc("main", i32s(2), i32s(1), logLine(m, 200, "entry:main"), i32Const(0))
				m.addFunc("__main_void", none, i32s(1), logLine(m, 300, "entry:__main_void"), i32Const(0))
				m.addFunc("_start", none, none, logLine(m, 400, "entry:_start"))
			},
			want: []string{"entry:_initialize", "entry:main"},
		},
		{
			name: "_initialize then __main_void",
			exports: func(m *wasmModule) {
				m.addFunc("_initialize", none, none, logLine(m, 100, "entry:_initialize"))
				m.addFunc("__main_void", none, i32s(1), logLine(m, 300, "entry:__main_void"), i32Const(0))
			},
			want: []string{"entry:_initialize", "entry:__main_void"},
		},
		{
			name: "_start without _initialize",
			exports: func(m *wasmModule) {
				m.addFunc("_start", none, none, logLine(m, 400, "entry:_start"))
			},
			want: []string{"entry:_start"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &wasmModule{pages: 1}
			m.importFunc("env", "proxy_log", i32s(3), i32s(1))
			m.addFunc("proxy_abi_version_0_2_0", none, none)
			m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
			tt.exports(m)
			logs := &logRecorder{}
			newHost(t, m.encode(), Options{Instances: 1, Logger: slog.New(logs)})
			var got []string
			for _, msg := range logs.messages() {
				if strings.HasPrefix(msg, "entry:") {
					got = append(got, msg)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("entry points = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRootNotDoneStaysAlive: a root whose proxy_on_done returns false is not deleted when a new configuration
// replaces it; in Envoy it waits for proxy_done, which a module importing no proxy_done never calls.
func TestRootNotDoneStaysAlive(t *testing.T) {
	m := &wasmModule{pages: 1}
	m.addFunc("proxy_abi_version_0_2_0", none, none)
	m.addFunc("proxy_on_memory_allocate", i32s(1), i32s(1), i32Const(0))
	m.addFunc("proxy_on_done", i32s(1), i32s(1), i32Const(0))
	m.addFunc("proxy_on_delete", i32s(1), none)
	h := newHost(t, m.encode(), Options{Instances: 1, Logger: slog.New(slog.DiscardHandler)})
	s := h.slots[0]
	s.mu.Lock()
	first := s.inst.root
	s.mu.Unlock()
	if err := h.Configure(context.Background(), []byte("next")); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if second := s.inst.root; second == first || !slices.Equal(s.inst.roots, []*rootContext{first, second}) {
		t.Fatalf("roots %v after the configuration change; want the first, not done, and the new one", s.inst.roots)
	}
}

func TestClosedHostAnswersPerFailurePolicy(t *testing.T) {
	wasm := probeSpec{imports: implementedImports(envoyabi.Envoy133, envoyabi.ABI020)}.build()
	h, err := New(context.Background(), wasm, Options{Instances: 1, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := h.HandleRequestHeaders(context.Background(), &Request{})
	if !errors.Is(out.Failed, ErrClosed) || out.Verdict != Respond || out.Response.Status != 503 {
		t.Fatalf("outcome %+v", out)
	}
	if err := h.Configure(context.Background(), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("Configure after Close = %v", err)
	}
	if err := h.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}
