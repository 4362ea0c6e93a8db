// Command guest is the proxy-wasm plugin the wasmhost tests run. It is built with
// GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared.
//
// The plugin configuration is a list of key=value pairs separated by ';':
//
//	cluster=NAME      prefix of the x-upstream-cluster header set on the simple path
//	generation=N      value of the config_generation gauge
//	reject=MESSAGE    refuse the configuration, logging MESSAGE at error level
//	reject-nth=K      the K-th instance to start this configuration refuses it (counted in shared data)
//	tick-ms=N         tick period; every tick increments the ticks counter
//	queue=NAME        register a shared queue; every item is copied to shared data key "queue:NAME"
//	simple-only=1     run only the simple path (one header read, one replace, one counter) for benchmarks
//	tick-call=CLUSTER the first tick of the root sends GET /tick to CLUSTER; the response's :status (or the
//	                  dispatch error) is stored in shared data key "tick-call"
//
// The x-test-op request header selects what a request exercises; without it the simple path runs. Every stream
// that ends increments the streams_done counter (except with simple-only).
package main

import (
	"encoding/binary"
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
	queueName  string
	queueID    uint32
	tickCall   string
	requests   proxywasm.MetricCounter
	ticks      proxywasm.MetricCounter
	done       proxywasm.MetricCounter
	headerLen  proxywasm.MetricHistogram
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
	p.ticks = proxywasm.DefineCounterMetric("guest.ticks")
	p.done = proxywasm.DefineCounterMetric("guest.streams_done")
	p.tickCall = cfg["tick-call"]
	p.headerLen = proxywasm.DefineHistogramMetric("guest.header_count")
	generation := proxywasm.DefineGaugeMetric("guest.config_generation")
	if g, err := strconv.ParseInt(cfg["generation"], 10, 64); err == nil {
		generation.Add(g - generation.Value())
	}
	if ms, err := strconv.Atoi(cfg["tick-ms"]); err == nil {
		if err := proxywasm.SetTickPeriodMilliSeconds(uint32(ms)); err != nil {
			proxywasm.LogErrorf("set tick period: %v", err)
			return types.OnPluginStartStatusFailed
		}
	}
	if name := cfg["queue"]; name != "" {
		id, err := proxywasm.RegisterSharedQueue(name)
		if err != nil {
			proxywasm.LogErrorf("register queue: %v", err)
			return types.OnPluginStartStatusFailed
		}
		p.queueName, p.queueID = name, id
	}
	return types.OnPluginStartStatusOK
}

// startsCounted increments and returns the number of instances that started configuration config.
func startsCounted(config string) string {
	key := "starts:" + config
	for {
		value, cas, err := proxywasm.GetSharedData(key)
		n := uint64(0)
		if err == nil {
			n = binary.LittleEndian.Uint64(value)
		}
		err = proxywasm.SetSharedData(key, binary.LittleEndian.AppendUint64(nil, n+1), cas)
		if err == nil {
			return strconv.FormatUint(n+1, 10)
		}
		if err != types.ErrorStatusCasMismatch {
			panic(err)
		}
	}
}

func (p *pluginContext) OnTick() {
	p.ticks.Increment(1)
	if p.tickCall == "" {
		return
	}
	cluster := p.tickCall
	p.tickCall = ""
	headers := [][2]string{{":method", "GET"}, {":path", "/tick"}, {":authority", "tick.local"}}
	_, err := proxywasm.DispatchHttpCall(cluster, headers, nil, nil, 0, func(int, int, int) {
		status := "no response"
		if hs, err := proxywasm.GetHttpCallResponseHeaders(); err == nil {
			status = pairValue(hs, ":status")
		}
		mustNot(proxywasm.SetSharedData("tick-call", []byte(status), 0))
	})
	if err != nil {
		mustNot(proxywasm.SetSharedData("tick-call", []byte("dispatch: "+err.Error()), 0))
	}
}

func (p *pluginContext) OnQueueReady(queueID uint32) {
	for {
		item, err := proxywasm.DequeueSharedQueue(queueID)
		if err != nil {
			return
		}
		if err := proxywasm.SetSharedData("queue:"+p.queueName, item, 0); err != nil {
			proxywasm.LogErrorf("store queue item: %v", err)
		}
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
}

// garbage keeps recent GC-stress allocations reachable for a while so that the collector has work to do.
var garbage [8][]byte

var garbageNext int

// spins is global so that the "spin" loop is not optimised away.
var spins int64

func (h *httpContext) OnHttpRequestHeaders(numHeaders int, _ bool) types.Action {
	if h.plugin.simpleOnly {
		return h.simple()
	}
	op, err := proxywasm.GetHttpRequestHeader("x-test-op")
	if err != nil {
		return h.simple()
	}
	switch op {
	case "headers":
		return h.headers()
	case "props":
		return h.properties()
	case "shared":
		return h.shared()
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
		time.Sleep(time.Millisecond)
		return types.ActionContinue
	case "spin":
		for spins = 0; spins >= 0; spins++ {
		}
		return types.ActionContinue
	case "enqueue":
		id, err := proxywasm.ResolveSharedQueue("test-vm", "events")
		mustNot(err)
		mustNot(proxywasm.EnqueueSharedQueue(id, []byte("event-"+strconv.Itoa(int(h.id)))))
		return types.ActionContinue
	case "metrics":
		h.plugin.requests.Increment(1)
		h.plugin.headerLen.Record(uint64(numHeaders))
		return types.ActionContinue
	case "call":
		h.then = requestHeaderOr("x-call-then", "respond")
		return h.dispatch("/check")
	}
	return h.simple()
}

func requestHeaderOr(name, fallback string) string {
	if v, err := proxywasm.GetHttpRequestHeader(name); err == nil {
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
		mustNot(proxywasm.AddHttpRequestHeader("x-call-summary", summary))
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
	tenant, err := proxywasm.GetHttpRequestHeader("x-tenant")
	if err != nil {
		mustNot(proxywasm.SendHttpResponse(403, [][2]string{{"content-type", "text/plain"}}, []byte("missing x-tenant"), -1))
		return types.ActionPause
	}
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-upstream-cluster", h.plugin.cluster+"-"+tenant))
	h.plugin.requests.Increment(1)
	return types.ActionContinue
}

func (h *httpContext) headers() types.Action {
	mustNot(proxywasm.AddHttpRequestHeader("X-Added", "one"))
	mustNot(proxywasm.AddHttpRequestHeader("x-added", "two"))
	mustNot(proxywasm.RemoveHttpRequestHeader("x-remove-me"))
	mustNot(proxywasm.ReplaceHttpRequestHeader("x-replace", "new"))
	_, err := proxywasm.GetHttpRequestHeader("x-absent")
	mustNot(proxywasm.AddHttpRequestHeader("x-absent-error", fmt.Sprint(err)))
	mixed, err := proxywasm.GetHttpRequestHeader("X-MIXED-CASE")
	mustNot(err)
	mustNot(proxywasm.AddHttpRequestHeader("x-mixed-seen", mixed))
	all, err := proxywasm.GetHttpRequestHeaders()
	mustNot(err)
	mustNot(proxywasm.AddHttpRequestHeader("x-header-count", strconv.Itoa(len(all))))
	_, err = proxywasm.GetHttpResponseHeader("content-type")
	mustNot(proxywasm.AddHttpRequestHeader("x-response-header-error", fmt.Sprint(err)))
	return types.ActionContinue
}

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
		mustNot(proxywasm.AddHttpRequestHeader("x-prop-"+strings.Join(path, "."), out))
	}
	mtls, err := proxywasm.GetProperty([]string{"connection", "mtls"})
	mustNot(err)
	mustNot(proxywasm.AddHttpRequestHeader("x-prop-connection.mtls", fmt.Sprint(mtls)))
	return types.ActionContinue
}

func (h *httpContext) shared() types.Action {
	mustNot(proxywasm.SetSharedData("counter", []byte("first"), 0))
	_, cas, err := proxywasm.GetSharedData("counter")
	mustNot(err)
	mustNot(proxywasm.SetSharedData("counter", []byte("value-"+strconv.Itoa(int(h.id))), cas))
	stale := proxywasm.SetSharedData("counter", []byte("stale"), cas)
	value, _, err := proxywasm.GetSharedData("counter")
	mustNot(err)
	mustNot(proxywasm.AddHttpRequestHeader("x-shared-value", string(value)))
	mustNot(proxywasm.AddHttpRequestHeader("x-stale-cas-error", fmt.Sprint(stale)))
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
	big, err := proxywasm.GetHttpRequestHeader("x-big")
	mustNot(err)
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
	if _, err := proxywasm.GetHttpRequestHeader(":path"); err != nil {
		proxywasm.LogErrorf("request headers unreadable in log phase: %v", err)
	}
}

func mustNot(err error) {
	if err != nil {
		panic(err)
	}
}
