package serve

import (
	"fmt"
	"path/filepath"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/host/internal/controller"
	pluginconfig "github.com/skewgate/skewgate/plugin/config"
)

// checkModuleSchemas makes sure the controller never sends a module a
// configuration it would refuse: it reads the schema version of the module
// the gateway loads (--wasm) from the file, and takes the Envoys' module to
// be the same unless --envoy-wasm-schema-version says otherwise (the
// Envoys' file is theirs, not this host's). A module of another major
// version refuses every configuration this build writes, and stops the
// start; one of an older minor accepts them, ignoring and counting what it
// does not know, which is said here once.
func (s *Server) checkModuleSchemas() error {
	own, err := pluginconfig.ModuleSchemaVersion(s.wasm)
	if err == nil {
		err = pluginconfig.CheckModuleSchema(own)
	}
	if err != nil {
		return fmt.Errorf("--wasm %s: %w", s.cfg.WasmPath, err)
	}
	controller.NoteOlderModule(s.log, "the plugin module (--wasm)", own)
	if s.cfg.EnvoyECDSFile == "" {
		return nil
	}
	envoy := own
	if s.cfg.EnvoyWasmSchemaVersion != "" {
		// Config.validate checked it.
		envoy, _ = discovery.ParseSchemaVersion(s.cfg.EnvoyWasmSchemaVersion)
	} else if wasm, err := filepath.Abs(s.cfg.WasmPath); err != nil || wasm != s.cfg.EnvoyWasmPath {
		s.log.Info("the Envoys' plugin module is taken to implement the schema version the --wasm module announces; give --envoy-wasm-schema-version when they run another build",
			"envoy_wasm_path", s.cfg.EnvoyWasmPath, "schema_version", own.String())
	}
	controller.NoteOlderModule(s.log, "the Envoys' plugin module", envoy)
	return nil
}
