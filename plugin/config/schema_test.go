package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
)

func nextMinor() discovery.SchemaVersion {
	return discovery.SchemaVersion{Major: discovery.SchemaMajor, Minor: discovery.SchemaMinor + 1}
}

// The configuration follows the snapshot's rules (discovery.DocumentSchema):
// fields of a newer minor are ignored and named, the snapshot's under
// "snapshot."; the version of what was read is kept.
func TestConfigurationFieldsOfANewerMinorAreIgnoredAndNamed(t *testing.T) {
	newer := nextMinor().String()
	newerSnapshot := strings.Replace(snapshot, `"schemaVersion":"`+discovery.CurrentSchema().String()+`"`, `"schemaVersion":"`+newer+`","shards":2`, 1)
	raw := `{"schemaVersion":"` + newer + `","readPolicy":"all","retryAfterSeconds":7,"snapshot":` + newerSnapshot + `}`
	cfg, err := Parse([]byte(raw))
	if err != nil {
		t.Fatalf("a configuration of schema %s refused: %v", newer, err)
	}
	if want := []string{"readPolicy", "snapshot.shards"}; strings.Join(cfg.Ignored, " ") != strings.Join(want, " ") {
		t.Errorf("ignored %q; want %q", cfg.Ignored, want)
	}
	if cfg.Schema != nextMinor() || cfg.RetryAfterSeconds != 7 {
		t.Errorf("schema %v, retryAfterSeconds %d; want %v and 7", cfg.Schema, cfg.RetryAfterSeconds, nextMinor())
	}

	written, err := Defaults().Marshal([]byte(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Parse(written)
	if err != nil || len(plain.Ignored) != 0 || plain.Schema != discovery.CurrentSchema() {
		t.Errorf("a configuration of this build's version: ignored %q, schema %v, %v", plain.Ignored, plain.Schema, err)
	}
	// Without a version a configuration is of the first one: written before
	// configurations had versions.
	unversioned, err := Parse([]byte(`{"snapshot":` + snapshot + `}`))
	if err != nil || unversioned.Schema != (discovery.SchemaVersion{Major: 1}) {
		t.Errorf("an unversioned configuration: schema %v, %v; want 1.0", unversioned.Schema, err)
	}
}

func TestConfigurationOfAnotherMajorIsRefusedAsASchemaError(t *testing.T) {
	for _, c := range []struct{ members, want string }{
		{`"schemaVersion":"2.0","someFieldOf2":true`, "configuration: schemaVersion: 2.0: this reader implements schema"},
		{`"schemaVersion":"` + nextMinor().String() + `","requiresSchemaVersion":"` + nextMinor().String() + `"`,
			"configuration: requiresSchemaVersion: " + nextMinor().String() + ": the document needs a reader of schema"},
	} {
		_, err := Parse(withFields(c.members))
		var schemaErr *discovery.SchemaError
		if !errors.As(err, &schemaErr) || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: error %v; want a *SchemaError beginning %q", c.members, err, c.want)
		}
	}
	if _, err := Parse(withFields(`"schemaVersion":"one"`)); err == nil || !strings.Contains(err.Error(), `configuration: schemaVersion: must be "MAJOR.MINOR"`) {
		t.Errorf("error %v; want the malformed version named", err)
	}
}

func TestMarshalWritesThisBuildsVersionFirst(t *testing.T) {
	raw, err := Defaults().Marshal([]byte(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"schemaVersion":"` + discovery.CurrentSchema().String() + `",`; !strings.HasPrefix(string(raw), want) {
		t.Errorf("configuration begins %.60s; want %s", raw, want)
	}
}

// wasmModule is a WebAssembly binary with a type, a function and an export
// section exporting that function under each name, then a custom section.
func wasmModule(names ...string) []byte {
	section := func(id byte, body []byte) []byte { return append([]byte{id, byte(len(body))}, body...) }
	m := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	m = append(m, section(1, []byte{1, 0x60, 0, 0})...) // one type: () -> ()
	m = append(m, section(3, []byte{1, 0})...)          // one function of type 0
	exports := []byte{byte(len(names))}
	for _, name := range names {
		exports = append(exports, byte(len(name)))
		exports = append(exports, name...)
		exports = append(exports, 0, 0) // function 0
	}
	m = append(m, section(7, exports)...)
	m = append(m, section(10, []byte{1, 2, 0, 0x0b})...) // its body: end
	return append(m, section(0, []byte{4, 'n', 'o', 't', 'e'})...)
}

func TestModuleSchemaVersionReadsTheAnnouncingExport(t *testing.T) {
	v, err := ModuleSchemaVersion(wasmModule("_initialize", "skewgate_schema_version_3_14", "proxy_abi_version_0_2_0"))
	if err != nil || v != (discovery.SchemaVersion{Major: 3, Minor: 14}) {
		t.Fatalf("ModuleSchemaVersion = %v, %v; want 3.14", v, err)
	}
	for _, c := range []struct {
		name   string
		module []byte
		want   string
	}{
		{"no announcement", wasmModule("_initialize", "proxy_abi_version_0_2_0"), "the module announces no schema version"},
		{"two announcements", wasmModule("skewgate_schema_version_1_0", "skewgate_schema_version_1_1"), "announces 2 schema versions"},
		{"malformed announcement", wasmModule("skewgate_schema_version_1_x"), `export skewgate_schema_version_1_x: must be "MAJOR.MINOR"`},
		{"three numbers", wasmModule("skewgate_schema_version_1_0_0"), "export skewgate_schema_version_1_0_0:"},
		{"not WebAssembly", []byte("#!/bin/sh\n"), "not a WebAssembly module: no WebAssembly 1.0 header"},
		{"truncated", wasmModule("skewgate_schema_version_1_0")[:20], "not a WebAssembly module: section"},
		{"over-long number", append([]byte{0, 'a', 's', 'm', 1, 0, 0, 0, 7}, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01), "longer than 32 bits"},
	} {
		if _, err := ModuleSchemaVersion(c.module); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v; want one containing %q", c.name, err, c.want)
		}
	}
}

func TestCheckModuleSchemaRefusesOnlyAnotherMajor(t *testing.T) {
	for _, ok := range []discovery.SchemaVersion{discovery.CurrentSchema(), {Major: discovery.SchemaMajor}, nextMinor()} {
		if err := CheckModuleSchema(ok); err != nil {
			t.Errorf("module %v: %v", ok, err)
		}
	}
	for _, bad := range []discovery.SchemaVersion{{Major: discovery.SchemaMajor + 1}, {Major: 0, Minor: 9}} {
		if err := CheckModuleSchema(bad); err == nil || !strings.Contains(err.Error(), "the module implements schema "+bad.String()) {
			t.Errorf("module %v: error %v; want the module's version named", bad, err)
		}
	}
}
