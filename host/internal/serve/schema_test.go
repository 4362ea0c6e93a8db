package serve

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/logtest"
)

// moduleExporting is a WebAssembly module exporting one empty function under
// each name: enough to announce a schema version.
func moduleExporting(names ...string) []byte {
	section := func(id byte, body []byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, section(1, []byte{1, 0x60, 0, 0})...)
	m = append(m, section(3, []byte{1, 0})...)
	exports := []byte{byte(len(names))}
	for _, name := range names {
		exports = append(append(append(exports, byte(len(name))), name...), 0, 0)
	}
	m = append(m, section(7, exports)...)
	return append(m, section(10, []byte{1, 2, 0, 0x0b})...)
}

// The controller never feeds a module a configuration it would refuse: a
// module of another major version, or one that announces none, stops the
// start, naming the flag.
func TestAModuleThatWouldRefuseTheConfigurationStopsTheStart(t *testing.T) {
	for _, c := range []struct {
		name   string
		module []byte
		want   string
	}{
		{"another major", moduleExporting("_initialize", "skewgate_schema_version_2_0"), ": the module implements schema 2.0, and refuses the configurations of schema " + discovery.CurrentSchema().String()},
		{"no announcement", moduleExporting("_initialize", "proxy_abi_version_0_2_0"), ": the module announces no schema version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.WasmPath = filepath.Join(f.dir, "old.wasm")
			if err := os.WriteFile(f.cfg.WasmPath, c.module, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := New(f.cfg); err == nil || !strings.Contains(err.Error(), "--wasm "+f.cfg.WasmPath+c.want) {
				t.Errorf("New = %v; want an error naming --wasm and containing %q", err, c.want)
			}
		})
	}
}

func TestEnvoyModuleSchemaVersionFlag(t *testing.T) {
	for _, c := range []struct {
		name, version string
		noEnvoy       bool
		want          string
	}{
		{"another major", "2.0", false, `--envoy-wasm-schema-version "2.0": the module implements schema 2.0`},
		{"not a version", "v1", false, `--envoy-wasm-schema-version "v1": must be "MAJOR.MINOR"`},
		{"without Envoys", "1.0", true, "--envoy-wasm-schema-version needs --envoy-ecds-file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			f.cfg.EnvoyWasmSchemaVersion = c.version
			if c.noEnvoy {
				f.cfg.EnvoyECDSFile = ""
			}
			if _, err := New(f.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New = %v; want an error containing %q", err, c.want)
			}
		})
	}
	// Envoys a minor version behind are fed, and told so once.
	f := newFixture(t)
	older := discovery.SchemaVersion{Major: discovery.SchemaMajor, Minor: discovery.SchemaMinor - 1}
	f.cfg.EnvoyWasmSchemaVersion = older.String()
	logs := &logtest.Buffer{}
	f.cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	if _, err := New(f.cfg); err != nil {
		t.Fatalf("New with Envoys of schema %v: %v", older, err)
	}
	if want := `msg="the Envoys' plugin module implements an older schema version than the configurations this controller writes`; !strings.Contains(logs.String(), want) ||
		!strings.Contains(logs.String(), "module_schema_version="+older.String()) {
		t.Errorf("log:\n%s\nwant a warning %s naming %v", logs, want, older)
	}
	if strings.Contains(logs.String(), "the plugin module (--wasm)") {
		t.Errorf("log:\n%s\nwarns about the module of this build", logs)
	}
}
