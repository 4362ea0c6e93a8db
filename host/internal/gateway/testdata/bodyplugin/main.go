// Command bodyplugin is the proxy-wasm plugin the gateway's body tests run,
// built like the plugin (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared).
// It pauses the request headers of every request with a body, unless it
// carries x-stream-body, and so asks for the body as skewgate's plugin asks
// for the bodies of the writes it routes by. Once the body is in, it sets
// x-body-size and, unless the request carries x-no-digest, x-body-sha256 from
// what it read, and acts on a JSON body's
// directives: "respond" answers with that status from the body callback,
// "route" sets the routing header (the plugin configuration's routingHeader)
// to that cluster.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm"
	"github.com/proxy-wasm/proxy-wasm-go-sdk/proxywasm/types"
)

func main() {}

func init() {
	proxywasm.SetVMContext(&vmContext{})
}

type vmContext struct {
	types.DefaultVMContext
}

func (*vmContext) NewPluginContext(uint32) types.PluginContext {
	return &pluginContext{}
}

type pluginContext struct {
	types.DefaultPluginContext
	routingHeader string
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		proxywasm.LogErrorf("reading plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	var cfg struct {
		RoutingHeader string `json:"routingHeader"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil || cfg.RoutingHeader == "" {
		proxywasm.LogErrorf("the configuration names no routingHeader: %v", err)
		return types.OnPluginStartStatusFailed
	}
	p.routingHeader = cfg.RoutingHeader
	return types.OnPluginStartStatusOK
}

func (p *pluginContext) NewHttpContext(uint32) types.HttpContext {
	return &httpContext{plugin: p}
}

type httpContext struct {
	types.DefaultHttpContext
	plugin   *pluginContext
	noDigest bool
}

func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) types.Action {
	if endOfStream {
		return types.ActionContinue
	}
	// The whole map, as skewgate's plugin reads it: the host implements no
	// single-header read.
	headers, err := proxywasm.GetHttpRequestHeaders()
	must(err)
	for _, kv := range headers {
		switch kv[0] {
		case "x-stream-body":
			return types.ActionContinue
		case "x-no-digest":
			h.noDigest = true
		}
	}
	return types.ActionPause
}

func (h *httpContext) OnHttpRequestBody(size int, endOfStream bool) types.Action {
	if !endOfStream {
		return types.ActionPause
	}
	// The SDK reads an empty body as NotFound.
	body, _ := proxywasm.GetHttpRequestBody(0, size)
	must(proxywasm.ReplaceHttpRequestHeader("x-body-size", strconv.Itoa(len(body))))
	if !h.noDigest {
		sum := sha256.Sum256(body)
		must(proxywasm.ReplaceHttpRequestHeader("x-body-sha256", hex.EncodeToString(sum[:])))
	}
	var directives struct {
		Respond uint32 `json:"respond"`
		Route   string `json:"route"`
	}
	if json.Unmarshal(body, &directives) != nil {
		return types.ActionContinue
	}
	if directives.Respond != 0 {
		must(proxywasm.SendHttpResponse(directives.Respond, [][2]string{{"content-type", "text/plain"}}, []byte("answered from the body callback"), -1))
		return types.ActionPause
	}
	if directives.Route != "" {
		must(proxywasm.ReplaceHttpRequestHeader(h.plugin.routingHeader, directives.Route))
		_, err := proxywasm.CallForeignFunction("clear_route_cache", nil)
		must(err)
	}
	return types.ActionContinue
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
