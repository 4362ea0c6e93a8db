package plugin

// The module announces the schema version of the configuration it reads
// (discovery.CurrentSchema) as proxy-wasm modules announce their ABI version
// (proxy_abi_version_0_2_0): by the name of an exported function that does
// nothing. Hosts read it from the module file's export section, without
// running the module and before configuring it (config.ModuleSchemaVersion);
// Envoy ignores exports it does not know. The name must spell
// discovery.SchemaMajor and SchemaMinor, which the module's tests check.
//
//go:wasmexport skewgate_schema_version_1_3
func announceSchemaVersion() {}
