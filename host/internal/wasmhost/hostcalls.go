package wasmhost

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"net"
	"slices"
	"strings"
)

// Host functions of the env namespace. Every guest pointer and length is validated: an out-of-range access
// returns INVALID_MEMORY_ACCESS and never reaches Go memory.

func u32(v uint64) uint32 { return uint32(v) }

// slogLevels maps proxy-wasm log levels (trace..critical) to slog levels.
var slogLevels = [...]slog.Level{slog.LevelDebug - 4, slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelError + 4}

// proxy_log(level, message_data, message_size)
func proxyLog(inst *instance, stack []uint64) {
	level := u32(stack[0])
	if level > logLevelCritical {
		stack[0] = uint64(statusBadArgument)
		return
	}
	msg, ok := inst.read(u32(stack[1]), u32(stack[2]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	inst.guestLog(slogLevels[level], msg, "proxy_log")
	stack[0] = uint64(statusOK)
}

func statusFor(ok bool) status {
	if ok {
		return statusOK
	}
	return statusInvalidMemoryAccess
}

// buffer returns the buffer of type t. VM configuration is always readable; the plugin configuration only while
// proxy_on_configure runs (Envoy keeps it in temp_plugin_ for that call only); an HTTP call's response body only
// while proxy_on_http_call_response runs for it; a stream's request body from its proxy_on_request_body for as
// long as its request is open (cpp-host keeps the body buffer it was handed). Response bodies are not available:
// this host does not process responses.
func (inst *instance) buffer(t uint32) ([]byte, bool) {
	switch t {
	case bufferTypeRequestBody:
		if s := inst.effective.stream; s != nil && s.bodyRead && s.requestOpen {
			return s.body, true
		}
	case bufferTypeVMConfig:
		return inst.host.opts.VMConfiguration, true
	case bufferTypePluginConfig:
		if inst.configuring != nil {
			return inst.configuring.configuration, true
		}
	case bufferTypeHTTPCallResponseBody:
		if c := inst.activeCallResponse(); c != nil {
			return c.body, true
		}
	}
	return nil, false
}

// activeCallResponse is the HTTP call response the effective context may read: one is being delivered to its
// root and the call succeeded.
func (inst *instance) activeCallResponse() *callResponse {
	if c := &inst.callResponse; c.present && c.root == inst.effective.root {
		return c
	}
	return nil
}

// proxy_get_buffer_bytes(type, start, max_size, return_data, return_size)
func proxyGetBufferBytes(inst *instance, stack []uint64) {
	buf, ok := inst.buffer(u32(stack[0]))
	if !ok {
		stack[0] = uint64(statusNotFound)
		return
	}
	start, length := uint64(u32(stack[1])), uint64(u32(stack[2]))
	if start > uint64(len(buf)) {
		stack[0] = uint64(statusBadArgument)
		return
	}
	end := min(start+length, uint64(len(buf)))
	stack[0] = uint64(inst.returnBytes(buf[start:end], u32(stack[3]), u32(stack[4])))
}

// headerMap returns the header map of mapType the effective context may access, and the stream when that map is
// its request headers. Request headers belong to a stream and change only while its request is open; an HTTP
// call response's headers and trailers exist while proxy_on_http_call_response runs for a call that got one.
// Other maps are "not available" (BAD_ARGUMENT), or NOT_FOUND for reads in the log phase, as Envoy answers.
func (inst *instance) headerMap(mapType uint32, mutate bool) (*[][2]string, *stream, status) {
	s := inst.effective.stream
	switch mapType {
	case mapTypeRequestHeaders:
		if s == nil || (mutate && !s.requestOpen) {
			return nil, nil, statusBadArgument
		}
		return &s.headers, s, statusOK
	case mapTypeHTTPCallResponseHeaders, mapTypeHTTPCallResponseTrailer:
		if c := inst.activeCallResponse(); c != nil {
			if mapType == mapTypeHTTPCallResponseHeaders {
				return &c.headers, nil, statusOK
			}
			return &c.trailers, nil, statusOK
		}
	}
	if mapType <= mapTypeLast && s != nil && s.inLog && !mutate {
		return nil, nil, statusNotFound
	}
	return nil, nil, statusBadArgument
}

// equalLower compares a stored (lower-case) key with a guest key case-insensitively, as Envoy lower-cases keys.
func equalLower(stored string, key []byte) bool {
	if len(stored) != len(key) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if stored[i] != c {
			return false
		}
	}
	return true
}

// validHeader rejects what an HTTP codec cannot carry (empty names, NUL, CR, LF) instead of passing it upstream.
func validHeader(key, value []byte) bool {
	return len(key) > 0 && !slices.ContainsFunc(key, badHeaderByte) && !slices.ContainsFunc(value, badHeaderByte)
}

func badHeaderByte(c byte) bool { return c == 0 || c == '\r' || c == '\n' }

func lowerString(b []byte) string { return strings.ToLower(string(b)) }

// readKeyValue reads the key and value views of a header call; ok is false on an out-of-range pointer.
func (inst *instance) readKeyValue(stack []uint64) (key, value []byte, ok bool) {
	key, okKey := inst.read(u32(stack[1]), u32(stack[2]))
	value, okValue := inst.read(u32(stack[3]), u32(stack[4]))
	return key, value, okKey && okValue
}

// proxy_replace_header_map_value(type, key_data, key_size, value_data, value_size): removes every value of the
// key and appends the new one (Envoy setCopy with http_set_copy_replace_all_headers, the default).
func proxyReplaceHeaderMapValue(inst *instance, stack []uint64) {
	key, value, ok := inst.readKeyValue(stack)
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	hm, s, st := inst.headerMap(u32(stack[0]), true)
	if st == statusOK && !validHeader(key, value) {
		st = statusBadArgument
	}
	if st == statusOK {
		*hm = append(removeHeader(*hm, key), [2]string{lowerString(key), string(value)})
		s.mutated()
	}
	stack[0] = uint64(st)
}

// removeHeader drops every value of key in one pass over the map, as Envoy's HeaderMap::remove does.
func removeHeader(headers [][2]string, key []byte) [][2]string {
	return slices.DeleteFunc(headers, func(h [2]string) bool { return equalLower(h[0], key) })
}

// mutated records a change of the stream's request headers: for ABI ≤ 0.2.1 Envoy then clears the route cache.
// s is nil for maps that are not request headers.
func (s *stream) mutated() {
	if s != nil {
		s.routeCacheCleared = true
	}
}

// proxy_get_header_map_pairs(type, return_data, return_size)
func proxyGetHeaderMapPairs(inst *instance, stack []uint64) {
	hm, _, st := inst.headerMap(u32(stack[0]), false)
	if st != statusOK {
		stack[0] = uint64(st)
		return
	}
	inst.scratch = appendPairs(inst.scratch[:0], *hm)
	stack[0] = uint64(inst.returnBytes(inst.scratch, u32(stack[1]), u32(stack[2])))
}

// proxy_set_header_map_pairs(type, data, size): replaces the whole map. A map over cpp-host's limits or
// malformed decodes to an empty map, as cpp-host's PairsUtil::toPairs does, so the headers are cleared.
func proxySetHeaderMapPairs(inst *instance, stack []uint64) {
	data, ok := inst.read(u32(stack[1]), u32(stack[2]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	hm, s, st := inst.headerMap(u32(stack[0]), true)
	if st != statusOK {
		stack[0] = uint64(st)
		return
	}
	pairs := inst.decodeGuestPairs(data, "proxy_set_header_map_pairs")
	for _, p := range pairs {
		if !validHeader([]byte(p[0]), []byte(p[1])) {
			stack[0] = uint64(statusBadArgument)
			return
		}
	}
	*hm = (*hm)[:0]
	for _, p := range pairs {
		*hm = append(*hm, [2]string{strings.ToLower(p[0]), p[1]})
	}
	s.mutated()
	stack[0] = uint64(statusOK)
}

// decodeGuestPairs decodes a guest map, treating an invalid one as empty like cpp-host, with a warning.
func (inst *instance) decodeGuestPairs(data []byte, call string) [][2]string {
	pairs, err := decodePairs(data)
	if err != nil {
		inst.host.logger.Warn("invalid serialized map from plugin treated as empty", "plugin", inst.host.opts.PluginName,
			"call", call, "error", err)
	}
	return pairs
}

// proxy_get_property(path_data, path_size, return_value_data, return_value_size)
func proxyGetProperty(inst *instance, stack []uint64) {
	path, ok := inst.read(u32(stack[0]), u32(stack[1]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	stack[0] = uint64(inst.getProperty(path, u32(stack[2]), u32(stack[3])))
}

// getProperty resolves a NUL-separated attribute path to the attributes Envoy provides.
func (inst *instance) getProperty(path []byte, ptrPtr, sizePtr uint32) status {
	s := inst.effective.stream
	opts := &inst.host.opts
	switch string(path) {
	case "plugin_name":
		return inst.returnString(opts.PluginName, ptrPtr, sizePtr)
	case "plugin_root_id":
		return inst.returnString(opts.RootID, ptrPtr, sizePtr)
	case "plugin_vm_id":
		return inst.returnString(opts.VMID, ptrPtr, sizePtr)
	}
	if s == nil {
		return statusNotFound
	}
	p := s.props
	optional := func(v string) status {
		if v == "" {
			return statusNotFound
		}
		return inst.returnString(v, ptrPtr, sizePtr)
	}
	integer := func(v int64) status {
		if v == 0 {
			return statusNotFound
		}
		inst.scratch = binary.LittleEndian.AppendUint64(inst.scratch[:0], uint64(v))
		return inst.returnBytes(inst.scratch, ptrPtr, sizePtr)
	}
	header := func(name string) status {
		for _, h := range s.headers {
			if h[0] == name {
				return inst.returnString(h[1], ptrPtr, sizePtr)
			}
		}
		return statusNotFound
	}
	switch string(path) {
	case "source\x00address":
		return optional(p.SourceAddress)
	case "source\x00port":
		return integer(p.SourcePort)
	case "destination\x00address":
		if p.Destination == nil {
			return statusNotFound
		}
		return optional(p.Destination.String())
	case "destination\x00port":
		if a, ok := p.Destination.(*net.TCPAddr); ok {
			return integer(int64(a.Port))
		}
		return statusNotFound
	case "request\x00protocol":
		return optional(p.RequestProtocol)
	case "connection\x00mtls":
		inst.scratch = append(inst.scratch[:0], boolByte(p.TLS != nil && p.TLS.PeerCertificatePresented))
		return inst.returnBytes(inst.scratch, ptrPtr, sizePtr)
	case "request\x00path":
		return header(":path")
	case "request\x00method":
		return header(":method")
	case "request\x00host":
		return header(":authority")
	case "request\x00scheme":
		return header(":scheme")
	case "request\x00id":
		return header("x-request-id")
	case "request\x00useragent":
		return header("user-agent")
	case "request\x00referer":
		return header("referer")
	case "request\x00headers":
		inst.scratch = appendPairs(inst.scratch[:0], s.headers)
		return inst.returnBytes(inst.scratch, ptrPtr, sizePtr)
	}
	if p.TLS == nil {
		return statusNotFound
	}
	switch string(path) {
	case "connection\x00subject_peer_certificate":
		return inst.returnString(p.TLS.SubjectPeerCertificate, ptrPtr, sizePtr)
	case "connection\x00sha256_peer_certificate_digest":
		return optional(p.TLS.SHA256PeerCertificateDigest)
	case "connection\x00tls_version":
		return inst.returnString(p.TLS.Version, ptrPtr, sizePtr)
	case "connection\x00requested_server_name":
		return inst.returnString(p.TLS.RequestedServerName, ptrPtr, sizePtr)
	}
	return statusNotFound
}

// localBody is a local reply's body copied out of guest memory, or the previous reply's bytes when they are the same:
// the plugin answers merged discovery with the same document request after request, whose copy cost an allocation of
// its size (about 20 KB) each time.
func (inst *instance) localBody(body []byte) []byte {
	if len(body) == 0 {
		return nil
	}
	if !bytes.Equal(body, inst.lastLocalBody) {
		inst.lastLocalBody = append([]byte(nil), body...)
	}
	return inst.lastLocalBody
}

// proxy_send_local_response(status, details_data, details_size, body_data, body_size, headers_data,
// headers_size, grpc_status): recorded now, sent after the callback returns, and forces a pause. Only the first
// reply of a stream counts, and only while its request is open (the request-headers and request-body callbacks and
// callbacks while the stream waits for HTTP calls), the phases this host runs before the request is answered.
func proxySendLocalResponse(inst *instance, stack []uint64) {
	details, okDetails := inst.read(u32(stack[1]), u32(stack[2]))
	body, okBody := inst.read(u32(stack[3]), u32(stack[4]))
	headers, okHeaders := inst.read(u32(stack[5]), u32(stack[6]))
	if !okDetails || !okBody || !okHeaders {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	s := inst.effective.stream
	if s == nil || s.response != nil || !s.requestOpen {
		stack[0] = uint64(statusBadArgument)
		return
	}
	grpcStatus := int32(u32(stack[7]))
	if grpcStatus < 0 || grpcStatus > 16 {
		grpcStatus = -1
	}
	resp := &LocalResponse{
		Status:     u32(stack[0]),
		Body:       inst.localBody(body),
		Details:    sanitizeDetails(string(details)),
		GRPCStatus: grpcStatus,
	}
	for _, p := range inst.decodeGuestPairs(headers, "proxy_send_local_response") {
		resp.Headers = append(resp.Headers, [2]string{strings.ToLower(p[0]), p[1]})
	}
	s.response = resp
	stack[0] = uint64(statusOK)
}

// proxy_continue_stream(type): resumes the effective stream's request when the callback returns. The response is
// not processed by this host, so continuing it changes nothing; downstream and upstream are network-filter
// streams.
func proxyContinueStream(inst *instance, stack []uint64) {
	s := inst.effective.stream
	switch streamType := u32(stack[0]); {
	case s == nil || streamType > streamTypeResponse:
		stack[0] = uint64(statusBadArgument)
		return
	case streamType == streamTypeRequest:
		s.continueRequested = true
	}
	stack[0] = uint64(statusOK)
}

// proxy_define_metric(type, name_data, name_size, return_id)
func proxyDefineMetric(inst *instance, stack []uint64) {
	kind := u32(stack[0])
	name, ok := inst.read(u32(stack[1]), u32(stack[2]))
	switch {
	case !ok:
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	case kind > uint32(metricHistogram):
		stack[0] = uint64(statusBadArgument)
		return
	}
	if _, ok := inst.read(u32(stack[3]), 4); !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	id := inst.host.metrics.define(metricKind(kind), string(name))
	stack[0] = uint64(statusFor(inst.writeU32(u32(stack[3]), id)))
}

// proxy_increment_metric(id, offset i64): counters need a positive offset; gauges add or subtract.
func proxyIncrementMetric(inst *instance, stack []uint64) {
	m := inst.host.metrics.lookup(u32(stack[0]))
	offset := int64(stack[1])
	switch {
	case m == nil:
		stack[0] = uint64(statusNotFound)
	case m.kind == metricCounter && offset > 0, m.kind == metricGauge:
		m.cells[inst.slot.index].value.Add(offset)
		stack[0] = uint64(statusOK)
	default:
		stack[0] = uint64(statusBadArgument)
	}
}

// proxy_get_metric(id, return_value): a counter's total over instances, or this instance's gauge.
func proxyGetMetric(inst *instance, stack []uint64) {
	m := inst.host.metrics.lookup(u32(stack[0]))
	var value uint64
	switch {
	case m == nil:
		stack[0] = uint64(statusNotFound)
		return
	case m.kind == metricCounter:
		value = m.counterTotal()
	case m.kind == metricGauge:
		value = uint64(m.cells[inst.slot.index].value.Load())
	default:
		stack[0] = uint64(statusBadArgument)
		return
	}
	stack[0] = uint64(statusFor(inst.writeU64(u32(stack[1]), value)))
}

// proxy_call_foreign_function(name_data, name_size, args_data, args_size, return_data, return_size). The only
// function is Envoy's clear_route_cache, which takes no arguments and returns nothing.
func proxyCallForeignFunction(inst *instance, stack []uint64) {
	name, okName := inst.read(u32(stack[0]), u32(stack[1]))
	_, okArgs := inst.read(u32(stack[2]), u32(stack[3]))
	if !okName || !okArgs {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if string(name) != "clear_route_cache" {
		stack[0] = uint64(statusNotFound)
		return
	}
	if s := inst.effective.stream; s != nil {
		s.routeCacheCleared = true
	}
	stack[0] = uint64(inst.returnBytes(nil, u32(stack[4]), u32(stack[5])))
}

// proxy_set_effective_context(context_id)
func proxySetEffectiveContext(inst *instance, stack []uint64) {
	gctx, ok := inst.findContext(u32(stack[0]))
	if !ok {
		stack[0] = uint64(statusBadArgument)
		return
	}
	inst.effective = gctx
	stack[0] = uint64(statusOK)
}
