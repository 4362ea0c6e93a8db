// Package envoyabi describes the host functions that Envoy's Wasm host (proxy-wasm-cpp-host) offers to a
// proxy-wasm module: namespace, name, signature, the ABI versions that see the function, the first Envoy release
// that registers it and whether it may be called while the VM starts (`_initialize`).
//
// The table is embedded from envoy-host-imports.tsv. It serves two purposes: a plugin test checks that a built
// module imports nothing Envoy would refuse to link, and skewgate's own Wasm host refuses what Envoy would and
// applies Envoy's restricted phases to what it links, so that a plugin behaves the same in both places.
package envoyabi

import (
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tetratelabs/wazero/api"
)

//go:embed envoy-host-imports.tsv
var importsTSV string

// Version is an Envoy release line (major.minor).
type Version struct {
	Major, Minor int
}

// Envoy releases whose Wasm host surfaces differ.
var (
	// Envoy132 is the last release before cpp-host #427; it cannot link Go (wasip1) modules.
	Envoy132 = Version{Major: 1, Minor: 32}
	// Envoy133 carries cpp-host #427: 18 WASI functions, poll_oneoff and fd_fdstat_set_flags return ENOSYS.
	Envoy133 = Version{Major: 1, Minor: 33}
	// Envoy139 carries cpp-host #533: 45 WASI functions, poll_oneoff succeeds with zero events.
	Envoy139 = Version{Major: 1, Minor: 39}
)

// ParseVersion parses "1.33" (a leading "v" and a patch component are accepted and the patch is ignored).
func ParseVersion(s string) (Version, error) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, fmt.Errorf("envoy version %q: want major.minor", s)
	}
	var v Version
	var err error
	if v.Major, err = strconv.Atoi(parts[0]); err != nil || v.Major < 0 {
		return Version{}, fmt.Errorf("envoy version %q: bad major", s)
	}
	if v.Minor, err = strconv.Atoi(parts[1]); err != nil || v.Minor < 0 {
		return Version{}, fmt.Errorf("envoy version %q: bad minor", s)
	}
	return v, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v is the release o or a later one.
func (v Version) AtLeast(o Version) bool {
	return v.Major > o.Major || (v.Major == o.Major && v.Minor >= o.Minor)
}

// Proxy-Wasm ABI versions known to cpp-host, as declared by the export proxy_abi_version_X_Y_Z.
const (
	ABI010 = "0.1.0"
	ABI020 = "0.2.0"
	ABI021 = "0.2.1"
)

const abiExportPrefix = "proxy_abi_version_"

// ErrUnknownABI is Envoy's load failure for a module without a known ABI marker export.
var ErrUnknownABI = errors.New("Missing or unknown Proxy-Wasm ABI version")

// DeclaredABI returns the ABI a module declares through its exports. A module exporting several markers gets the
// lowest, deterministically.
func DeclaredABI(exports map[string]api.FunctionDefinition) (string, bool) {
	for _, abi := range []string{ABI010, ABI020, ABI021} {
		if _, ok := exports[abiExportPrefix+strings.ReplaceAll(abi, ".", "_")]; ok {
			return abi, true
		}
	}
	return "", false
}

// ABIFromExport returns the ABI version an export name declares ("proxy_abi_version_0_2_0" → "0.2.0"), or false
// if the name is not an ABI marker known to Envoy.
func ABIFromExport(name string) (string, bool) {
	if !strings.HasPrefix(name, abiExportPrefix) {
		return "", false
	}
	abi := strings.ReplaceAll(strings.TrimPrefix(name, abiExportPrefix), "_", ".")
	switch abi {
	case ABI010, ABI020, ABI021:
		return abi, true
	}
	return "", false
}

// WASI namespaces; cpp-host registers the same functions under both.
const (
	NamespaceEnv                  = "env"
	NamespaceWASISnapshotPreview1 = "wasi_snapshot_preview1"
	NamespaceWASIUnstable         = "wasi_unstable"
)

// Import is one host function of Envoy's Wasm host.
type Import struct {
	Namespace string
	Name      string
	Params    []api.ValueType
	Results   []api.ValueType
	// ABIs lists the module ABI versions that get this function; nil means every ABI.
	ABIs []string
	// Since is the first Envoy release that registers the function. The zero Version means the function predates
	// the releases the table distinguishes (it is present in 1.32 and earlier).
	Since Version
	// AllowedDuringInitialize is cpp-host HEAD's startVm allow-list; see AllowedDuringStartVM for older releases.
	AllowedDuringInitialize bool
}

// QualifiedName is "namespace.name", the form Envoy uses in link errors.
func (i Import) QualifiedName() string { return i.Namespace + "." + i.Name }

// Signature renders the function type like the table: "(i32,i64)->(i32)".
func (i Import) Signature() string { return FormatSignature(i.Params, i.Results) }

// AvailableTo reports whether a module declaring abi gets this function.
func (i Import) AvailableTo(abi string) bool {
	return i.ABIs == nil || slices.Contains(i.ABIs, abi)
}

// ProvidedBy reports whether Envoy release envoy links this function for a module declaring abi.
func (i Import) ProvidedBy(envoy Version, abi string) bool {
	return i.AvailableTo(abi) && envoy.AtLeast(i.Since)
}

// IsWASI reports whether the function lives in one of the two WASI namespaces.
func (i Import) IsWASI() bool {
	return i.Namespace == NamespaceWASISnapshotPreview1 || i.Namespace == NamespaceWASIUnstable
}

// AllowedDuringStartVM reports whether a module may call the function from `_initialize` (or main/_start) on
// Envoy release envoy. cpp-host traps any other call. The HEAD list (the table's column) applies from 1.39; older
// releases lack poll_oneoff (#533) and emscripten_notify_memory_growth (#461, release not determined, treated as
// 1.39), and fd_fdstat_get was added to the list together with fd_fdstat_set_flags in 1.33 (#427).
func (i Import) AllowedDuringStartVM(envoy Version) bool {
	if !i.AllowedDuringInitialize {
		return false
	}
	if envoy.AtLeast(Envoy139) {
		return true
	}
	switch i.Name {
	case "poll_oneoff", "emscripten_notify_memory_growth":
		return false
	case "fd_fdstat_get":
		return envoy.AtLeast(Envoy133)
	}
	return true
}

// AllowedDuringMalloc reports whether a module may call the function while the host runs the module's allocator
// (cpp-host WasmBase::allocMemory): proxy_log, fd_write and clock_time_get, plus poll_oneoff from 1.39 (#533).
func (i Import) AllowedDuringMalloc(envoy Version) bool {
	switch {
	case i.Namespace == NamespaceEnv:
		return i.Name == "proxy_log"
	case i.Name == "fd_write", i.Name == "clock_time_get":
		return true
	case i.Name == "poll_oneoff":
		return envoy.AtLeast(Envoy139)
	}
	return false
}

// SameSignature reports whether a function type equals this import's type.
func (i Import) SameSignature(params, results []api.ValueType) bool {
	return slices.Equal(i.Params, params) && slices.Equal(i.Results, results)
}

var table = mustParseTable(importsTSV)

// ProvidedBy returns the functions Envoy release envoy links for a module declaring abi.
func ProvidedBy(envoy Version, abi string) []Import {
	var out []Import
	for _, imp := range table {
		if imp.ProvidedBy(envoy, abi) {
			out = append(out, imp)
		}
	}
	return out
}

// CheckImports compares a module's function imports with what Envoy release envoy links for abi and returns an
// error per unresolved import, worded like Envoy's load failure, or nil when the module links.
func CheckImports(envoy Version, abi string, imported []api.FunctionDefinition) error {
	provided := make(map[string]Import)
	for _, imp := range ProvidedBy(envoy, abi) {
		provided[imp.QualifiedName()] = imp
	}
	var errs []error
	for _, def := range imported {
		ns, name, _ := def.Import()
		imp, ok := provided[ns+"."+name]
		if !ok {
			errs = append(errs, fmt.Errorf("Failed to load Wasm module due to a missing import: %s.%s", ns, name))
			continue
		}
		if !imp.SameSignature(def.ParamTypes(), def.ResultTypes()) {
			errs = append(errs, fmt.Errorf(
				"Failed to load Wasm module due to an import type mismatch for %s.%s, want: %s, but host exports: %s",
				ns, name, FormatSignature(def.ParamTypes(), def.ResultTypes()), imp.Signature()))
		}
	}
	return errors.Join(errs...)
}

// FormatSignature renders a function type as "(i32,i64)->(i32)".
func FormatSignature(params, results []api.ValueType) string {
	var b strings.Builder
	writeTypes := func(types []api.ValueType) {
		b.WriteByte('(')
		for n, t := range types {
			if n > 0 {
				b.WriteByte(',')
			}
			b.WriteString(api.ValueTypeName(t))
		}
		b.WriteByte(')')
	}
	writeTypes(params)
	b.WriteString("->")
	writeTypes(results)
	return b.String()
}

func mustParseTable(tsv string) []Import {
	imports, err := parseTable(tsv)
	if err != nil {
		panic("envoyabi: embedded table: " + err.Error())
	}
	return imports
}

var tableHeader = []string{
	"namespace", "name", "wasm_signature", "abi_condition", "available_since", "allowed_during_initialize",
}

func parseTable(tsv string) ([]Import, error) {
	lines := strings.Split(strings.TrimRight(tsv, "\n"), "\n")
	if len(lines) == 0 || !slices.Equal(strings.Split(lines[0], "\t"), tableHeader) {
		return nil, errors.New("unexpected header")
	}
	seen := make(map[string]bool)
	imports := make([]Import, 0, len(lines)-1)
	for n, line := range lines[1:] {
		imp, err := parseRow(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+2, err)
		}
		if seen[imp.QualifiedName()] {
			return nil, fmt.Errorf("line %d: duplicate %s", n+2, imp.QualifiedName())
		}
		seen[imp.QualifiedName()] = true
		imports = append(imports, imp)
	}
	return imports, nil
}

func parseRow(line string) (Import, error) {
	f := strings.Split(line, "\t")
	if len(f) != len(tableHeader) {
		return Import{}, fmt.Errorf("want %d fields, got %d", len(tableHeader), len(f))
	}
	imp := Import{Namespace: f[0], Name: f[1]}
	switch imp.Namespace {
	case NamespaceEnv, NamespaceWASISnapshotPreview1, NamespaceWASIUnstable:
	default:
		return Import{}, fmt.Errorf("unknown namespace %q", imp.Namespace)
	}
	var err error
	if imp.Params, imp.Results, err = ParseSignature(f[2]); err != nil {
		return Import{}, err
	}
	if f[3] != "all" {
		for _, abi := range strings.Split(f[3], ",") {
			if _, ok := ABIFromExport(abiExportPrefix + strings.ReplaceAll(abi, ".", "_")); !ok {
				return Import{}, fmt.Errorf("unknown ABI %q", abi)
			}
			imp.ABIs = append(imp.ABIs, abi)
		}
	}
	switch {
	case f[4] == "envoy<=1.32":
	case strings.HasPrefix(f[4], "envoy>="):
		if imp.Since, err = ParseVersion(strings.TrimPrefix(f[4], "envoy>=")); err != nil {
			return Import{}, err
		}
	default:
		return Import{}, fmt.Errorf("unknown availability %q", f[4])
	}
	switch f[5] {
	case "yes":
		imp.AllowedDuringInitialize = true
	case "no":
	default:
		return Import{}, fmt.Errorf("allowed_during_initialize %q: want yes or no", f[5])
	}
	return imp, nil
}

// ParseSignature parses "(i32,i64)->(i32)" into wazero value types.
func ParseSignature(sig string) (params, results []api.ValueType, err error) {
	in, out, ok := strings.Cut(sig, "->")
	if !ok {
		return nil, nil, fmt.Errorf("signature %q: missing ->", sig)
	}
	if params, err = parseTypeList(in); err != nil {
		return nil, nil, fmt.Errorf("signature %q: %w", sig, err)
	}
	if results, err = parseTypeList(out); err != nil {
		return nil, nil, fmt.Errorf("signature %q: %w", sig, err)
	}
	return params, results, nil
}

func parseTypeList(s string) ([]api.ValueType, error) {
	if len(s) < 2 || s[0] != '(' || s[len(s)-1] != ')' {
		return nil, fmt.Errorf("type list %q not parenthesised", s)
	}
	inner := s[1 : len(s)-1]
	if inner == "" {
		return nil, nil
	}
	var types []api.ValueType
	for _, name := range strings.Split(inner, ",") {
		switch name {
		case "i32":
			types = append(types, api.ValueTypeI32)
		case "i64":
			types = append(types, api.ValueTypeI64)
		case "f32":
			types = append(types, api.ValueTypeF32)
		case "f64":
			types = append(types, api.ValueTypeF64)
		default:
			return nil, fmt.Errorf("unknown value type %q", name)
		}
	}
	return types, nil
}
