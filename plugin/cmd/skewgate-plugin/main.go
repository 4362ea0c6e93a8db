// Command skewgate-plugin is the proxy-wasm module skewgate and Envoy load
// (build/skewgate.wasm): package plugin registered with the SDK.
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -ldflags="-s -w" ./plugin/cmd/skewgate-plugin
package main

import (
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"

	"github.com/skewgate/skewgate/plugin"
)

func main() {}

func init() {
	proxywasm.SetVMContext(plugin.NewVMContext())
}
