package envoyabi

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

func countBy(imports []Import, namespace string) int {
	n := 0
	for _, imp := range imports {
		if imp.Namespace == namespace {
			n++
		}
	}
	return n
}

func TestImportCountsMatchCppHostRegistration(t *testing.T) {
	tests := []struct {
		envoy     Version
		abi       string
		env, wasi int
	}{
		{Envoy132, ABI010, 42, 15},
		{Envoy132, ABI020, 40, 15},
		{Envoy133, ABI020, 40, 18},
		{Envoy133, ABI021, 41, 18},
		{Envoy139, ABI020, 40, 45},
		{Version{Major: 1, Minor: 40}, ABI021, 41, 45},
	}
	for _, tt := range tests {
		t.Run(tt.envoy.String()+"/"+tt.abi, func(t *testing.T) {
			set := ProvidedBy(tt.envoy, tt.abi)
			if got := countBy(set, NamespaceEnv); got != tt.env {
				t.Errorf("env functions = %d, want %d", got, tt.env)
			}
			for _, ns := range []string{NamespaceWASISnapshotPreview1, NamespaceWASIUnstable} {
				if got := countBy(set, ns); got != tt.wasi {
					t.Errorf("%s functions = %d, want %d", ns, got, tt.wasi)
				}
			}
		})
	}
}

func TestEmbeddedTableIsTheReferenceCopy(t *testing.T) {
	data, err := os.ReadFile("envoy-host-imports.tsv")
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != importsTSV {
		t.Fatal("embedded table differs from envoy-host-imports.tsv")
	}
	if len(table) != strings.Count(importsTSV, "\n")-1 {
		t.Fatalf("table has %d rows, file has %d", len(table), strings.Count(importsTSV, "\n")-1)
	}
}

func TestSignaturesParseIntoWazeroTypes(t *testing.T) {
	want := map[string]string{
		"env.proxy_increment_metric":            "(i32,i64)->(i32)",
		"env.proxy_record_metric":               "(i32,i64)->(i32)",
		"env.emscripten_notify_memory_growth":   "(i32)->()",
		"wasi_snapshot_preview1.clock_time_get": "(i32,i64,i32)->(i32)",
		"wasi_unstable.fd_seek":                 "(i32,i64,i32,i32)->(i32)",
		"wasi_snapshot_preview1.path_open":      "(i32,i32,i32,i32,i32,i64,i64,i32,i32)->(i32)",
		"wasi_snapshot_preview1.proc_exit":      "(i32)->()",
		"wasi_snapshot_preview1.sched_yield":    "()->(i32)",
	}
	for _, imp := range table {
		sig, ok := want[imp.QualifiedName()]
		if !ok {
			continue
		}
		delete(want, imp.QualifiedName())
		if imp.Signature() != sig {
			t.Errorf("%s signature = %s, want %s", imp.QualifiedName(), imp.Signature(), sig)
		}
	}
	for name := range want {
		t.Errorf("%s missing from table", name)
	}
	imp := table[0]
	for _, typ := range append(imp.Params, imp.Results...) {
		if typ != api.ValueTypeI32 && typ != api.ValueTypeI64 {
			t.Errorf("unexpected value type %v", typ)
		}
	}
}

func TestABIDependentFunctions(t *testing.T) {
	tests := []struct {
		name string
		abis map[string]bool
	}{
		{"proxy_get_configuration", map[string]bool{ABI010: true}},
		{"proxy_continue_request", map[string]bool{ABI010: true}},
		{"proxy_clear_route_cache", map[string]bool{ABI010: true}},
		{"proxy_continue_stream", map[string]bool{ABI020: true, ABI021: true}},
		{"proxy_close_stream", map[string]bool{ABI020: true, ABI021: true}},
		{"proxy_get_log_level", map[string]bool{ABI021: true}},
		{"proxy_log", map[string]bool{ABI010: true, ABI020: true, ABI021: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			imp := find(t, NamespaceEnv, tt.name)
			for _, abi := range []string{ABI010, ABI020, ABI021} {
				if got := imp.AvailableTo(abi); got != tt.abis[abi] {
					t.Errorf("AvailableTo(%s) = %v, want %v", abi, got, tt.abis[abi])
				}
			}
		})
	}
}

func find(t *testing.T, ns, name string) Import {
	t.Helper()
	for _, imp := range table {
		if imp.Namespace == ns && imp.Name == name {
			return imp
		}
	}
	t.Fatalf("%s.%s not in table", ns, name)
	return Import{}
}

func TestStartVMAllowListFollowsCppHostHistory(t *testing.T) {
	tests := []struct {
		ns, name                     string
		envoy132, envoy133, envoy139 bool
	}{
		{NamespaceEnv, "proxy_log", true, true, true},
		{NamespaceEnv, "proxy_get_property", false, false, false},
		{NamespaceEnv, "emscripten_notify_memory_growth", false, false, true},
		{NamespaceEnv, "pthread_equal", false, false, false},
		{NamespaceWASISnapshotPreview1, "fd_write", true, true, true},
		{NamespaceWASISnapshotPreview1, "fd_fdstat_get", false, true, true},
		{NamespaceWASISnapshotPreview1, "fd_fdstat_set_flags", true, true, true},
		{NamespaceWASIUnstable, "poll_oneoff", false, false, true},
		{NamespaceWASIUnstable, "clock_res_get", true, true, true},
		{NamespaceWASISnapshotPreview1, "sched_yield", false, false, false},
		{NamespaceWASISnapshotPreview1, "proc_exit", false, false, false},
		{NamespaceWASISnapshotPreview1, "fd_read", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.ns+"."+tt.name, func(t *testing.T) {
			imp := find(t, tt.ns, tt.name)
			for v, want := range map[Version]bool{Envoy132: tt.envoy132, Envoy133: tt.envoy133, Envoy139: tt.envoy139} {
				if got := imp.AllowedDuringStartVM(v); got != want {
					t.Errorf("AllowedDuringStartVM(%s) = %v, want %v", v, got, want)
				}
			}
		})
	}
}

func TestMallocAllowList(t *testing.T) {
	allowed133 := map[string]bool{"env.proxy_log": true}
	for _, ns := range []string{NamespaceWASISnapshotPreview1, NamespaceWASIUnstable} {
		allowed133[ns+".fd_write"] = true
		allowed133[ns+".clock_time_get"] = true
	}
	for _, imp := range table {
		if got := imp.AllowedDuringMalloc(Envoy133); got != allowed133[imp.QualifiedName()] {
			t.Errorf("%s AllowedDuringMalloc(1.33) = %v", imp.QualifiedName(), got)
		}
		want139 := allowed133[imp.QualifiedName()] || (imp.IsWASI() && imp.Name == "poll_oneoff")
		if got := imp.AllowedDuringMalloc(Envoy139); got != want139 {
			t.Errorf("%s AllowedDuringMalloc(1.39) = %v", imp.QualifiedName(), got)
		}
	}
}

// fakeImport stands in for a wazero import definition; only the methods CheckImports uses are implemented.
type fakeImport struct {
	api.FunctionDefinition
	ns, name        string
	params, results []api.ValueType
}

func (f fakeImport) Import() (string, string, bool) { return f.ns, f.name, true }
func (f fakeImport) ParamTypes() []api.ValueType    { return f.params }
func (f fakeImport) ResultTypes() []api.ValueType   { return f.results }

func TestCheckImportsReportsMissingAndMismatchedImportsLikeEnvoy(t *testing.T) {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	tests := []struct {
		name    string
		envoy   Version
		imports []api.FunctionDefinition
		want    []string
	}{
		{
			name:  "go runtime imports link on 1.33",
			envoy: Envoy133,
			imports: []api.FunctionDefinition{
				fakeImport{ns: "wasi_snapshot_preview1", name: "poll_oneoff", params: []api.ValueType{i32, i32, i32, i32}, results: []api.ValueType{i32}},
				fakeImport{ns: "env", name: "proxy_increment_metric", params: []api.ValueType{i32, i64}, results: []api.ValueType{i32}},
			},
		},
		{
			name:    "poll_oneoff is missing on 1.32",
			envoy:   Envoy132,
			imports: []api.FunctionDefinition{fakeImport{ns: "wasi_snapshot_preview1", name: "poll_oneoff", params: []api.ValueType{i32, i32, i32, i32}, results: []api.ValueType{i32}}},
			want:    []string{"Failed to load Wasm module due to a missing import: wasi_snapshot_preview1.poll_oneoff"},
		},
		{
			name:    "fd_filestat_get is missing before 1.39",
			envoy:   Envoy133,
			imports: []api.FunctionDefinition{fakeImport{ns: "wasi_snapshot_preview1", name: "fd_filestat_get", params: []api.ValueType{i32, i32}, results: []api.ValueType{i32}}},
			want:    []string{"missing import: wasi_snapshot_preview1.fd_filestat_get"},
		},
		{
			name:    "signature mismatch",
			envoy:   Envoy139,
			imports: []api.FunctionDefinition{fakeImport{ns: "env", name: "proxy_increment_metric", params: []api.ValueType{i32, i32}, results: []api.ValueType{i32}}},
			want:    []string{"import type mismatch for env.proxy_increment_metric, want: (i32,i32)->(i32), but host exports: (i32,i64)->(i32)"},
		},
		{
			name:    "0.1.0-only function is missing for 0.2.0",
			envoy:   Envoy139,
			imports: []api.FunctionDefinition{fakeImport{ns: "env", name: "proxy_get_configuration", params: []api.ValueType{i32, i32}, results: []api.ValueType{i32}}},
			want:    []string{"missing import: env.proxy_get_configuration"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckImports(tt.envoy, ABI020, tt.imports)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("expected an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestABIFromExport(t *testing.T) {
	tests := map[string]string{
		"proxy_abi_version_0_1_0": ABI010,
		"proxy_abi_version_0_2_0": ABI020,
		"proxy_abi_version_0_2_1": ABI021,
		"proxy_abi_version_0_3_0": "",
		"proxy_on_tick":           "",
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := ABIFromExport(name)
			if got != want || ok != (want != "") {
				t.Errorf("ABIFromExport = %q, %v; want %q", got, ok, want)
			}
		})
	}
}

func TestParseVersion(t *testing.T) {
	tests := []struct {
		in      string
		want    Version
		wantErr bool
	}{
		{in: "1.33", want: Envoy133},
		{in: "v1.39.2", want: Envoy139},
		{in: "1", wantErr: true},
		{in: "1.x", wantErr: true},
		{in: "1.2.3.4", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseVersion(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseVersion = %v, %v", got, err)
			}
		})
	}
}

func TestParseTableRejectsMalformedRows(t *testing.T) {
	header := strings.Join(tableHeader, "\t") + "\n"
	tests := map[string]string{
		"bad header":      "namespace\tname\n",
		"field count":     header + "env\tproxy_log\t(i32)->(i32)\tall\tenvoy<=1.32\n",
		"namespace":       header + "envx\tproxy_log\t(i32)->(i32)\tall\tenvoy<=1.32\tno\n",
		"signature":       header + "env\tproxy_log\t(i32)(i32)\tall\tenvoy<=1.32\tno\n",
		"value type":      header + "env\tproxy_log\t(i128)->(i32)\tall\tenvoy<=1.32\tno\n",
		"abi":             header + "env\tproxy_log\t(i32)->(i32)\t0.3.0\tenvoy<=1.32\tno\n",
		"availability":    header + "env\tproxy_log\t(i32)->(i32)\tall\tenvoy~1.32\tno\n",
		"allowed column":  header + "env\tproxy_log\t(i32)->(i32)\tall\tenvoy<=1.32\tmaybe\n",
		"duplicate entry": header + "env\tproxy_log\t(i32)->(i32)\tall\tenvoy<=1.32\tno\nenv\tproxy_log\t(i32)->(i32)\tall\tenvoy<=1.32\tno\n",
	}
	for name, tsv := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := parseTable(tsv); err == nil {
				t.Fatal("expected an error")
			}
		})
	}
}

// checkModule compiles a proxy-wasm module and reports whether Envoy release envoy would link it, as a host
// loading it does: the module must declare an ABI known to Envoy and import nothing (by name and signature) that
// Envoy does not provide for it.
func checkModule(ctx context.Context, wasm []byte, envoy Version) error {
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	defer r.Close(ctx)
	compiled, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return fmt.Errorf("Failed to load Wasm code: %w", err)
	}
	abi, ok := DeclaredABI(compiled.ExportedFunctions())
	if !ok {
		return ErrUnknownABI
	}
	return CheckImports(envoy, abi, compiled.ImportedFunctions())
}

func TestCheckModule(t *testing.T) {
	// A minimal module: (import "wasi_snapshot_preview1" "sched_yield" (func (result i32)))
	// plus an exported ABI marker function.
	module := func(abiExport string) []byte {
		out := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
		out = append(out, 0x01, 0x08, 0x02, 0x60, 0x00, 0x01, 0x7f, 0x60, 0x00, 0x00) // types: ()->i32, ()->()
		imp := append([]byte{0x01, 22}, "wasi_snapshot_preview1"...)
		imp = append(imp, 11)
		imp = append(imp, "sched_yield"...)
		imp = append(imp, 0x00, 0x00)
		out = append(out, 0x02, byte(len(imp)))
		out = append(out, imp...)
		out = append(out, 0x03, 0x02, 0x01, 0x01) // one function of type 1
		exp := append([]byte{0x01, byte(len(abiExport))}, abiExport...)
		exp = append(exp, 0x00, 0x01)
		out = append(out, 0x07, byte(len(exp)))
		out = append(out, exp...)
		return append(out, 0x0a, 0x04, 0x01, 0x02, 0x00, 0x0b) // empty body
	}
	tests := []struct {
		name    string
		wasm    []byte
		envoy   Version
		wantErr string
	}{
		{"links on 1.33", module("proxy_abi_version_0_2_0"), Envoy133, ""},
		{"sched_yield is missing on 1.32", module("proxy_abi_version_0_2_0"), Envoy132, "missing import: wasi_snapshot_preview1.sched_yield"},
		{"unknown ABI", module("proxy_abi_version_9_9_9"), Envoy139, "Missing or unknown Proxy-Wasm ABI version"},
		{"not Wasm", []byte("nope"), Envoy139, "Failed to load Wasm code"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkModule(context.Background(), tt.wasm, tt.envoy)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestDeclaredABIPicksTheLowestMarker(t *testing.T) {
	tests := []struct {
		exports []string
		want    string
	}{
		{[]string{"proxy_abi_version_0_2_1", "proxy_abi_version_0_2_0", "proxy_on_tick"}, ABI020},
		{[]string{"proxy_abi_version_0_1_0"}, ABI010},
		{[]string{"proxy_abi_version_0_3_0", "_initialize"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.exports, ","), func(t *testing.T) {
			exports := make(map[string]api.FunctionDefinition)
			for _, name := range tt.exports {
				exports[name] = nil
			}
			got, ok := DeclaredABI(exports)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("DeclaredABI = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}
