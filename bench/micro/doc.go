// Package micro holds skewgate's micro benchmarks, each next to its upstream
// Kubernetes equivalent on the same input, so that a ratio measured in one run
// means something on a shared, noisy machine. Inputs are the discovery
// documents captured from real kube-apiservers in fixtures/. The benchmarks of
// the plugin inside wazero live in host/internal/wasmhost (bench_plugin_test.go),
// next to the host internals they drive.
//
// Run them through the harness (make bench) or directly:
//
//	go test -run '^$' -bench . -benchmem ./bench/micro/
package micro
