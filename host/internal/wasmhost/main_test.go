package wasmhost

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/skewgate/skewgate/host/internal/envoyabi"
)

// guestWasmPath is the test guest (testdata/guest) built once for the whole package by TestMain.
var guestWasmPath string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "wasmhost-guest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	guestWasmPath = filepath.Join(dir, "guest.wasm")
	if err := buildReactor("./testdata/guest", guestWasmPath); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// buildReactor builds the Go package pkg as a wasip1 reactor module at out, as
// the plugin is built.
func buildReactor(pkg, out string) error {
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, msg)
	}
	return nil
}

var (
	guestWasmOnce  sync.Once
	guestWasmBytes []byte
	guestWasmErr   error
)

func guestWasm(t testing.TB) []byte {
	t.Helper()
	guestWasmOnce.Do(func() { guestWasmBytes, guestWasmErr = os.ReadFile(guestWasmPath) })
	if guestWasmErr != nil {
		t.Fatal(guestWasmErr)
	}
	return guestWasmBytes
}

// compilationCacheDir keeps wazero's compiled code of the guest across the tests of one run; TestMain removes it.
func compilationCacheDir() string {
	return filepath.Join(filepath.Dir(guestWasmPath), "compilation-cache")
}

// logRecorder is a slog handler that keeps every record for assertions.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}

func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		out = append(out, rec.Message)
	}
	return out
}

func (r *logRecorder) contains(substr string) bool {
	return slices.ContainsFunc(r.messages(), func(m string) bool { return strings.Contains(m, substr) })
}

// guestOptions are the options most guest tests use.
func guestOptions(t testing.TB, logs *logRecorder) Options {
	if logs == nil {
		logs = &logRecorder{}
	}
	return Options{
		Envoy:               envoyabi.Envoy133,
		Instances:           2,
		CompilationCacheDir: compilationCacheDir(),
		PluginName:          "test-plugin",
		RootID:              "test-root",
		VMID:                "test-vm",
		PluginConfiguration: []byte("cluster=blue;generation=1"),
		Logger:              slog.New(logs),
		RestartBackoff:      Backoff{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond},
	}
}

func newHost(t testing.TB, wasm []byte, opts Options) *Host {
	t.Helper()
	h, err := New(context.Background(), wasm, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	return h
}

func header(headers [][2]string, key string) (string, bool) {
	for _, h := range headers {
		if h[0] == key {
			return h[1], true
		}
	}
	return "", false
}

func headerValues(headers [][2]string, key string) []string {
	var out []string
	for _, h := range headers {
		if h[0] == key {
			out = append(out, h[1])
		}
	}
	return out
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
