// Command guest is the proxy-wasm plugin the wasmhost tests run. It is built with
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared, and imports no host function skewgate's plugin does not
// import, since the host implements no other.
//
// The plugin configuration is a list of key=value pairs separated by ';':
//
//	cluster=NAME           prefix of the x-upstream-cluster header set on the simple path
//	generation=N           value of the config_generation gauge
//	reject=MESSAGE         refuse the configuration, logging MESSAGE at error level
//	reject-nth=K           the K-th instance to start this configuration refuses it (counted in a counter metric,
//	                       which the host sums over its instances)
//	simple-only=1          run only the simple path (one header read, one replace, one counter) for benchmarks
//	configure-call=CLUSTER the root sends GET /configure to CLUSTER while it starts and logs "configure-call: "
//	                       with the response's :status, or the dispatch error, at info level
//
// The x-test-op request header selects what a request exercises; without it the simple path runs. Every stream
// that ends increments the streams_done counter (except with simple-only).
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	cluster    string
	simpleOnly bool
	requests   proxywasm.MetricCounter
	done       proxywasm.MetricCounter
}

func parseConfig(data []byte) map[string]string {
	cfg := map[string]string{}
	for _, item := range strings.Split(string(data), ";") {
		if k, v, ok := strings.Cut(item, "="); ok {
			cfg[k] = v
		}
	}
	return cfg
}

func (p *pluginContext) OnPluginStart(int) types.OnPluginStartStatus {
	data, err := proxywasm.GetPluginConfiguration()
	if err != nil && err != types.ErrorStatusNotFound {
		proxywasm.LogErrorf("reading plugin configuration: %v", err)
		return types.OnPluginStartStatusFailed
	}
	cfg := parseConfig(data)
	if msg, ok := cfg["reject"]; ok {
		proxywasm.LogError(msg)
		return types.OnPluginStartStatusFailed
	}
	if nth, ok := cfg["reject-nth"]; ok && startsCounted(string(data)) == nth {
		proxywasm.LogErrorf("instance number %s refuses the configuration", nth)
		return types.OnPluginStartStatusFailed
	}
	p.cluster = cfg["cluster"]
	p.simpleOnly = cfg["simple-only"] == "1"
	p.requests = proxywasm.DefineCounterMetric("guest.requests")
	p.done = proxywasm.DefineCounterMetric("guest.streams_done")
	generation := proxywasm.DefineGaugeMetric("guest.config_generation")
	if g, err := strconv.ParseInt(cfg["generation"], 10, 64); err == nil {
		generation.Add(g - generation.Value())
	}
	if cluster := cfg["configure-call"]; cluster != "" {
		configureCall(cluster)
	}
	return types.OnPluginStartStatusOK
}

// startsCounted increments and returns the number of instances that started configuration config.
func startsCounted(config string) string {
	starts := proxywasm.DefineCounterMetric("guest.starts:" + config)
	starts.Increment(1)
	return strconv.FormatUint(starts.Value(), 10)
}

// configureCall sends an HTTP call from the root context and logs what reaches the root.
func configureCall(cluster string) {
	headers := [][2]string{{":method", "GET"}, {":path", "/configure"}, {":authority", "configure.local"}}
	_, err := proxywasm.DispatchHttpCall(cluster, headers, nil, nil, 0, func(int, int, int) {
		status := "no response"
		if hs, err := proxywasm.GetHttpCallResponseHeaders(); err == nil {
			status = pairValue(hs, ":status")
		}
		proxywasm.LogInfof("configure-call: %s", status)
	})
	if err != nil {
		proxywasm.LogInfof("configure-call: dispatch: %v", err)
	}
}

func (p *pluginContext) NewHttpContext(contextID uint32) types.HttpContext {
	return &httpContext{plugin: p, id: contextID}
}

type httpContext struct {
	types.DefaultHttpContext
	plugin *pluginContext
	id     uint32
	// then is what the HTTP call response callback does (x-call-then).
	then string
	// bodyThen is what the request body callback does (x-body-then); bodyInHeaders is what reading the body
	// from the request headers callback returned.
	bodyThen, bodyInHeaders string
}

// garbage keeps recent GC-stress allocations reachable for a while so that the collector has work to do.
var garbage [8][]byte

var garbageNext int

// spins is global so that the "spin" loop is not optimised away.
var spins int64

func (h *httpContext) OnHttpRequestHeaders(int, bool) types.Action {
	if h.plugin.simpleOnly {
		return h.simple()
	}
	op, ok := requestHeader("x-test-op")
	if !ok {
		return h.simple()
	}
	switch op {
	case "headers":
		return h.headers()
	case "props":
		return h.properties()
	case "foreign":
		return h.foreign()
	case "foreign-unknown":
		return h.foreignUnknown()
	case "local":
		// A local response forces a pause even though the callback returns Continue.
		mustNot(proxywasm.SendHttpResponse(418, [][2]string{{"x-teapot", "yes"}}, []byte("short and stout"), -1))
		return types.ActionContinue
	case "pause":
		return types.ActionPause
	case "pause-resume":
		mustNot(proxywasm.ResumeHttpRequest())
		return types.ActionPause
	case "trap":
		panic("deliberate trap requested by x-test-op")
	case "gc":
		return h.gcStress()
	case "sleep":
		// Long enough that the runtime still has to wait when it first looks
		// at its timers, even on a loaded machine: only then does it call
		// poll_oneoff.
		time.Sleep(100 * time.Millisecond)
		return types.ActionContinue
	case "spin":
		for spins = 0; spins >= 0; spins++ {
		}
		return types.ActionContinue
	case "metrics":
		h.plugin.requests.Increment(1)
		return types.ActionContinue
	case "call":
		h.then = requestHeaderOr("x-call-then", "respond")
		return h.dispatch("/check")
	case "body":
		// Pausing a request with a body asks for the body; nothing is changed here, so that what the body
		// callback changes shows alone.
		_, err := proxywasm.GetHttpRequestBody(0, 1)
		h.bodyInHeaders = fmt.Sprint(err)
		h.bodyThen = requestHeaderOr("x-body-then", "summary")
		return types.ActionPause
	}
	return h.simple()
}

// OnHttpRequestBody acts on the whole body as x-body-then says: summary forwards the request with
// x-body-summary (the size it was called with, end_of_stream, and the size and SHA-256 of what it read) and
// x-body-in-headers; plain forwards it unchanged; foreign only calls clear_route_cache; respond answers 201 with
// the body it read; call sends GET /check and continues after its response (continue-with-body); pause does
// nothing; trap panics.
func (h *httpContext) OnHttpRequestBody(size int, endOfStream bool) types.Action {
	if !endOfStream {
		return types.ActionPause
	}
	body, err := proxywasm.GetHttpRequestBody(0, size)
	if size > 0 {
		// The SDK reads an empty buffer as NotFound, in Envoy too, which returns no bytes for it.
		mustNot(err)
	}
	switch h.bodyThen {
	case "summary":
		mustNot(proxywasm.ReplaceHttpRequestHeader("x-body-summary", bodySummary(size, endOfStream, body)))
		mustNot(proxywasm.ReplaceHttpRequestHeader("x-body-in-headers", h.bodyInHeaders))
	case "foreign":
		_, err := proxywasm.CallForeignFunction("clear_route_cache", nil)
		mustNot(err)
	case "respond":
		mustNot(proxywasm.SendHttpResponse(201, [][2]string{{"x-body-size", strconv.Itoa(len(body))}}, body, -1))
	case "call":
		h.then = "continue-with-body"
		return h.dispatch("/check")
	case "pause":
		return types.ActionPause
	case "trap":
		panic("deliberate trap in the request body callback")
	}
	return types.ActionContinue
}

func bodySummary(size int, endOfStream bool, body []byte) string {
	sum := sha256.Sum256(body)
	return fmt.Sprintf("size=%d end=%v read=%d sha256=%s", size, endOfStream, len(body), hex.EncodeToString(sum[:]))
}

// requestHeader is the first value of a request header, read from the whole map as skewgate's plugin reads it.
func requestHeader(name string) (string, bool) {
	headers, err := proxywasm.GetHttpRequestHeaders()
	mustNot(err)
	for _, kv := range headers {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

func requestHeaderOr(name, fallback string) string {
	if v, ok := requestHeader(name); ok {
		return v
	}
	return fallback
}

// dispatch sends GET path to the cluster named by x-call-cluster (default "auth") with the timeout in
// milliseconds of x-call-timeout, the request's authorization header, and, if x-call-body is set, that body and
// an x-call-trailer trailer; x-call-omit names a pseudo-header to leave out. A refused dispatch is answered 500
// with the error as the body.
func (h *httpContext) dispatch(path string) types.Action {
	timeout, _ := strconv.Atoi(requestHeaderOr("x-call-timeout", "0"))
	omit := requestHeaderOr("x-call-omit", "")
	var headers [][2]string
	for _, kv := range [][2]string{{":method", "GET"}, {":path", path}, {":authority", "auth.local"},
		{"Authorization", requestHeaderOr("authorization", "none")}} {
		if kv[0] != omit {
			headers = append(headers, kv)
		}
	}
	var body []byte
	var trailers [][2]string
	if b := requestHeaderOr("x-call-body", ""); b != "" {
		body, trailers = []byte(b), [][2]string{{"x-call-trailer", "t"}}
	}
	_, err := proxywasm.DispatchHttpCall(requestHeaderOr("x-call-cluster", "auth"), headers, body, trailers,
		uint32(timeout), h.onCallResponse)
	if err != nil {
		mustNot(proxywasm.SendHttpResponse(500, nil, []byte("dispatch: "+err.Error()), -1))
	}
	return types.ActionPause
}

// onCallResponse acts as x-call-then says: respond answers 200 with the call's body and a summary of what the
// guest read, continue resumes the request with the summary as x-call-summary, again sends GET /again and
// continues after its response, pause does nothing, trap panics.
func (h *httpContext) onCallResponse(numHeaders, bodySize, numTrailers int) {
	summary, body := callSummary(numHeaders, bodySize, numTrailers)
	switch h.then {
	case "respond":
		mustNot(proxywasm.SendHttpResponse(200, [][2]string{{"x-call-summary", summary}}, body, -1))
	case "again":
		h.then = "continue"
		h.dispatch("/again")
	case "continue":
		mustNot(proxywasm.ReplaceHttpRequestHeader("x-call-summary", summary))
		mustNot(proxywasm.ResumeHttpRequest())
	case "continue-with-body":
		body, err := proxywasm.GetHttpRequestBody(0, 1<<20)
		read := fmt.Sprint(err)
		if err == nil {
			read = bodySummary(len(body), true, body)
		}
		mustNot(proxywasm.ReplaceHttpRequestHeader("x-call-request-body", read))
		mustNot(proxywasm.ResumeHttpRequest())
	case "trap":
		panic("deliberate trap in the HTTP call response callback")
	}
}

// callSummary reads the call's response as the guest sees it: "counts=H,B,T headers=... body=... trailers=...",
// each part either its content or the error reading it.
func callSummary(numHeaders, bodySize, numTrailers int) (string, []byte) {
	pairs := func(kv [][2]string, err error) string {
		if err != nil {
			return "error(" + err.Error() + ")"
		}
		var parts []string
		for _, p := range kv {
			parts = append(parts, p[0]+":"+p[1])
		}
		return strings.Join(parts, ",")
	}
	headers, errHeaders := proxywasm.GetHttpCallResponseHeaders()
	trailers, errTrailers := proxywasm.GetHttpCallResponseTrailers()
	body, err := proxywasm.GetHttpCallResponseBody(0, bodySize)
	bodyText := string(body)
	if err != nil {
		bodyText = "error(" + err.Error() + ")"
	}
	return fmt.Sprintf("counts=%d,%d,%d headers=%s body=%s trailers=%s", numHeaders, bodySize, numTrailers,
		pairs(headers, errHeaders), bodyText, pairs(trailers, errTrailers)), body
}

func pairValue(kv [][2]string, name string) string {
	for _, p := range kv {
		if p[0] == name {
			return p[1]
		}
	}
	return ""
}

// simple is the reference plugin's path: answer 403 without x-tenant, else route by tenant.
func (h *httpContext) simple() types.Action {
	tenant, ok := requestHeader("x-tenant")
	if !ok {
		mustNot(proxywasm.SendHttpResponse(403, [][2]string{{"content-type", "text/plain"}}, []byte("missing x-tenant"), -1))
		return types.ActionPause
	}
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-upstream-cluster", h.plugin.cluster+"-"+tenant))
	h.plugin.requests.Increment(1)
	return types.ActionContinue
}

// headers rewrites the map with set_header_map_pairs (dropping x-remove-me, adding X-Added twice and
// x-mixed-seen with the value of X-MIXED-CASE), then replaces x-replace and records the map's size as the guest
// first read it.
func (h *httpContext) headers() types.Action {
	all, err := proxywasm.GetHttpRequestHeaders()
	mustNot(err)
	var out [][2]string
	for _, kv := range all {
		if kv[0] != "x-remove-me" {
			out = append(out, kv)
		}
	}
	mixed, _ := requestHeader("x-mixed-case")
	out = append(out, [2]string{"X-Added", "one"}, [2]string{"x-added", "two"}, [2]string{"X-Mixed-Seen", mixed})
	mustNot(proxywasm.ReplaceHttpRequestHeaders(out))
	mustNot(proxywasm.ReplaceHttpRequestHeader("X-Replace", "new"))
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-header-count", strconv.Itoa(len(all))))
	_, err = proxywasm.GetHttpResponseHeaders()
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-response-header-error", fmt.Sprint(err)))
	return types.ActionContinue
}

// properties adds a request header per property it reads.
func (h *httpContext) properties() types.Action {
	for _, path := range [][]string{
		{"plugin_name"}, {"plugin_root_id"}, {"plugin_vm_id"}, {"source", "address"}, {"request", "protocol"},
		{"connection", "subject_peer_certificate"}, {"request", "path"}, {"xds", "cluster_name"},
	} {
		value, err := proxywasm.GetProperty(path)
		out := string(value)
		if err != nil {
			out = "error: " + err.Error()
		}
		mustNot(proxywasm.ReplaceHttpRequestHeader("x-prop-"+strings.Join(path, "."), out))
	}
	mtls, err := proxywasm.GetProperty([]string{"connection", "mtls"})
	mustNot(err)
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-prop-connection.mtls", fmt.Sprint(mtls)))
	return types.ActionContinue
}

// foreign clears the route cache without touching a header, so the clear can only come from the foreign call.
func (h *httpContext) foreign() types.Action {
	_, err := proxywasm.CallForeignFunction("clear_route_cache", nil)
	mustNot(err)
	mustNot(proxywasm.SetEffectiveContext(h.id))
	return types.ActionContinue
}

// foreignUnknown answers with the error an unknown foreign function returns.
func (h *httpContext) foreignUnknown() types.Action {
	_, err := proxywasm.CallForeignFunction("no_such_function", []byte("x"))
	mustNot(proxywasm.SendHttpResponse(200, nil, []byte(fmt.Sprint(err)), -1))
	return types.ActionPause
}

// gcStress reads a large header and leaves garbage behind so that the Go collector runs inside callbacks and
// inside proxy_on_memory_allocate.
func (h *httpContext) gcStress() types.Action {
	big, _ := requestHeader("x-big")
	buf := make([]byte, 32<<10)
	copy(buf, big)
	garbage[garbageNext%len(garbage)] = buf
	garbageNext++
	all, err := proxywasm.GetHttpRequestHeaders()
	mustNot(err)
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-gc-seen", strconv.Itoa(len(big)+len(all))))
	return types.ActionContinue
}

func (h *httpContext) OnHttpStreamDone() {
	if h.plugin.simpleOnly {
		return
	}
	h.plugin.done.Increment(1)
	// Runs from proxy_on_log: request headers are still readable, as in Envoy's access-log phase.
	if _, err := proxywasm.GetHttpRequestHeaders(); err != nil {
		proxywasm.LogErrorf("request headers unreadable in log phase: %v", err)
	}
	// Once the request is forwarded or answered, its body is no longer the plugin's to read.
	if _, err := proxywasm.GetHttpRequestBody(0, 1); err == nil {
		proxywasm.LogError("request body readable in log phase")
	}
}

func mustNot(err error) {
	if err != nil {
		panic(err)
	}
}
