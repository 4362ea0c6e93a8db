package config

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/skewgate/skewgate/discovery"
)

// ModuleSchemaExportPrefix begins the name of the function a plugin module
// exports to announce the schema version it implements:
// skewgate_schema_version_<major>_<minor>, as proxy-wasm modules announce
// their ABI (proxy_abi_version_0_2_0).
const ModuleSchemaExportPrefix = "skewgate_schema_version_"

// ModuleSchemaVersion is the schema version a plugin module announces, read
// from the export section of its file without running it: what a host, or
// the controller that configures a fleet of Envoys, needs before it
// configures the module. Used by hosts only; the module itself does not
// link it.
func ModuleSchemaVersion(module []byte) (discovery.SchemaVersion, error) {
	names, err := wasmExportNames(module)
	if err != nil {
		return discovery.SchemaVersion{}, fmt.Errorf("not a WebAssembly module: %w", err)
	}
	var announced []string
	for _, name := range names {
		if version, ok := strings.CutPrefix(name, ModuleSchemaExportPrefix); ok {
			announced = append(announced, version)
		}
	}
	switch len(announced) {
	case 0:
		return discovery.SchemaVersion{}, fmt.Errorf("the module announces no schema version (it exports no %sMAJOR_MINOR function): "+
			"it is not skewgate's plugin, or was built before the configuration had versions", ModuleSchemaExportPrefix)
	case 1:
	default:
		return discovery.SchemaVersion{}, fmt.Errorf("the module announces %d schema versions (%s...): it must announce one", len(announced), ModuleSchemaExportPrefix)
	}
	major, minor, _ := strings.Cut(announced[0], "_")
	v, err := discovery.ParseSchemaVersion(major + "." + minor)
	if err != nil {
		return v, fmt.Errorf("export %s%s: %w", ModuleSchemaExportPrefix, announced[0], err)
	}
	return v, nil
}

// CheckModuleSchema reports why a module implementing schema module would
// refuse the configurations this build writes, nil if it accepts them: a
// module of the same major version accepts them (one of an older minor
// ignores the newer fields and counts them), one of another major refuses
// every one.
func CheckModuleSchema(module discovery.SchemaVersion) error {
	if module.Major != discovery.SchemaMajor {
		return fmt.Errorf("the module implements schema %s, and refuses the configurations of schema %s this build writes (another major version)",
			module, discovery.CurrentSchema())
	}
	return nil
}

var errTruncated = errors.New("truncated")

// wasmExportNames lists the names in a WebAssembly binary's export section
// (WebAssembly core specification, "Binary Format": the magic and version,
// then sections of an id byte and a LEB128 size; section 7 is a vector of
// name, kind byte and LEB128 index).
func wasmExportNames(module []byte) ([]string, error) {
	header := []byte{0, 'a', 's', 'm', 1, 0, 0, 0}
	if !bytes.HasPrefix(module, header) {
		return nil, errors.New("no WebAssembly 1.0 header")
	}
	r := wasmReader{b: module[len(header):]}
	for len(r.b) > 0 {
		id, err := r.byte()
		if err != nil {
			return nil, err
		}
		size, err := r.u32()
		if err != nil {
			return nil, err
		}
		if uint64(size) > uint64(len(r.b)) {
			return nil, fmt.Errorf("section %d: %w", id, errTruncated)
		}
		body := wasmReader{b: r.b[:size]}
		r.b = r.b[size:]
		if id == 7 {
			return body.exportNames()
		}
	}
	return nil, nil
}

type wasmReader struct{ b []byte }

func (r *wasmReader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, errTruncated
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

// u32 reads an unsigned LEB128 number of at most 32 bits.
func (r *wasmReader) u32() (uint32, error) {
	var n uint32
	for shift := 0; shift < 35; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		n |= uint32(c&0x7f) << shift
		if c&0x80 == 0 {
			return n, nil
		}
	}
	return 0, errors.New("LEB128 number longer than 32 bits")
}

func (r *wasmReader) exportNames() ([]string, error) {
	count, err := r.u32()
	if err != nil {
		return nil, err
	}
	var names []string
	for range count {
		length, err := r.u32()
		if err != nil {
			return nil, err
		}
		if uint64(length) > uint64(len(r.b)) {
			return nil, fmt.Errorf("export name: %w", errTruncated)
		}
		names = append(names, string(r.b[:length]))
		r.b = r.b[length:]
		if _, err := r.byte(); err != nil { // kind
			return nil, err
		}
		if _, err := r.u32(); err != nil { // index
			return nil, err
		}
	}
	return names, nil
}
