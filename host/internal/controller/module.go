package controller

import (
	"log/slog"

	"github.com/skewgate/skewgate/discovery"
)

// NoteOlderModule says, once, what a module (which, such as "the Envoys'
// plugin module") of an older minor schema version than the configurations
// this build writes leaves out: every command that feeds a module says it
// alike.
func NoteOlderModule(log *slog.Logger, which string, module discovery.SchemaVersion) {
	if !module.Less(discovery.CurrentSchema()) {
		return
	}
	log.Warn(which+" implements an older schema version than the configurations this controller writes: it accepts them, ignores the fields it does not know, counts them in skewgate_plugin_configuration_ignored_fields_total and routes as its version does until it is upgraded",
		"module_schema_version", module.String(), "configuration_schema_version", discovery.CurrentSchema().String())
}
