// Package plugintest is the plugin's behaviour suite, written once and run
// against every host the plugin meets: natively and as the built module under
// proxytest (plugin/), and as the built module in skewgate's Envoy-faithful
// wazero host (host/internal/wasmhost).
//
// Only this module's tests import it, yet it is not internal: those tests live
// under plugin/ and host/, and Go lets a package under an internal/ directory
// be imported only from that directory's parent, which for both is the module
// root, which keeps no internal/ directory. Nothing shipped links it.
package plugintest
