package wasmhost

import (
	"encoding/binary"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/skewgate/skewgate/host/envoyabi"
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

// proxy_get_log_level(return_level): the lowest level the host logger records.
func proxyGetLogLevel(inst *instance, stack []uint64) {
	level := uint32(logLevelCritical)
	for l, sl := range slogLevels {
		if inst.host.logger.Enabled(inst.callCtx, sl) {
			level = uint32(l)
			break
		}
	}
	stack[0] = uint64(statusFor(inst.writeU32(u32(stack[0]), level)))
}

func statusFor(ok bool) status {
	if ok {
		return statusOK
	}
	return statusInvalidMemoryAccess
}

// proxy_get_current_time_nanoseconds(return_time)
func proxyGetCurrentTimeNanoseconds(inst *instance, stack []uint64) {
	stack[0] = uint64(statusFor(inst.writeU64(u32(stack[0]), uint64(time.Now().UnixNano()))))
}

// proxy_set_tick_period_milliseconds(period): per root context, 0 disables.
func proxySetTickPeriodMilliseconds(inst *instance, stack []uint64) {
	root := inst.effective.root
	if root == nil {
		stack[0] = uint64(statusBadArgument)
		return
	}
	root.tickPeriod = time.Duration(u32(stack[0])) * time.Millisecond
	root.nextTick = time.Now().Add(root.tickPeriod)
	inst.host.wakeScheduler()
	stack[0] = uint64(statusOK)
}

// proxy_get_configuration(return_data, return_size), ABI 0.1.0: the plugin configuration during
// proxy_on_configure, empty otherwise (Envoy).
func proxyGetConfiguration(inst *instance, stack []uint64) {
	var data []byte
	if inst.configuring != nil {
		data = inst.configuring.configuration
	}
	stack[0] = uint64(inst.returnBytes(data, u32(stack[0]), u32(stack[1])))
}

// buffer returns the buffer of type t. VM configuration is always readable; the plugin configuration only while
// proxy_on_configure runs (Envoy keeps it in temp_plugin_ for that call only); an HTTP call's response body only
// while proxy_on_http_call_response runs for it. Request and response bodies are not available to this
// headers-only host.
func (inst *instance) buffer(t uint32) ([]byte, bool) {
	switch t {
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

// proxy_get_buffer_status(type, return_length, return_flags)
func proxyGetBufferStatus(inst *instance, stack []uint64) {
	buf, ok := inst.buffer(u32(stack[0]))
	if !ok {
		stack[0] = uint64(statusNotFound)
		return
	}
	ok = inst.writeU32(u32(stack[1]), uint32(len(buf))) && inst.writeU32(u32(stack[2]), 0)
	stack[0] = uint64(statusFor(ok))
}

// proxy_set_buffer_bytes(type, start, length, data, size): the buffers this host has (configuration, an HTTP call
// response body) are read-only.
func proxySetBufferBytes(inst *instance, stack []uint64) {
	if _, ok := inst.read(u32(stack[3]), u32(stack[4])); !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if _, ok := inst.buffer(u32(stack[0])); !ok {
		stack[0] = uint64(statusNotFound)
		return
	}
	stack[0] = uint64(statusBadArgument)
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

// proxy_get_header_map_value(type, key_data, key_size, return_value_data, return_value_size): the first value.
func proxyGetHeaderMapValue(inst *instance, stack []uint64) {
	key, ok := inst.read(u32(stack[1]), u32(stack[2]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	hm, _, st := inst.headerMap(u32(stack[0]), false)
	if st != statusOK {
		stack[0] = uint64(st)
		return
	}
	for _, h := range *hm {
		if equalLower(h[0], key) {
			stack[0] = uint64(inst.returnString(h[1], u32(stack[3]), u32(stack[4])))
			return
		}
	}
	if inst.host.abi == envoyabi.ABI010 {
		stack[0] = uint64(inst.returnString("", u32(stack[3]), u32(stack[4])))
		return
	}
	stack[0] = uint64(statusNotFound)
}

// proxy_add_header_map_value(type, key_data, key_size, value_data, value_size): appends a value, as a field of
// its own (Envoy addCopy).
func proxyAddHeaderMapValue(inst *instance, stack []uint64) { writeHeaderMapValue(inst, stack, false) }

// proxy_replace_header_map_value(type, key_data, key_size, value_data, value_size): removes every value of the
// key and appends the new one (Envoy setCopy with http_set_copy_replace_all_headers, the default).
func proxyReplaceHeaderMapValue(inst *instance, stack []uint64) {
	writeHeaderMapValue(inst, stack, true)
}

func writeHeaderMapValue(inst *instance, stack []uint64, replace bool) {
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
		if replace {
			*hm = removeHeader(*hm, key)
		}
		*hm = append(*hm, [2]string{lowerString(key), string(value)})
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

// proxy_remove_header_map_value(type, key_data, key_size): removing an absent key succeeds.
func proxyRemoveHeaderMapValue(inst *instance, stack []uint64) {
	key, ok := inst.read(u32(stack[1]), u32(stack[2]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	hm, s, st := inst.headerMap(u32(stack[0]), true)
	if st == statusOK {
		*hm = removeHeader(*hm, key)
		s.mutated()
	}
	stack[0] = uint64(st)
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

// proxy_get_header_map_size(type, return_size): the map's byte size (keys and values), as Envoy's byteSize.
func proxyGetHeaderMapSize(inst *instance, stack []uint64) {
	hm, _, st := inst.headerMap(u32(stack[0]), false)
	if st != statusOK {
		stack[0] = uint64(st)
		return
	}
	size := 0
	for _, h := range *hm {
		size += len(h[0]) + len(h[1])
	}
	stack[0] = uint64(statusFor(inst.writeU32(u32(stack[1]), uint32(size))))
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

// getProperty resolves a NUL-separated attribute path. Values set with proxy_set_property come first, then the
// caller's extra properties, then the built-in attributes.
func (inst *instance) getProperty(path []byte, ptrPtr, sizePtr uint32) status {
	gctx := inst.effective
	s := gctx.stream
	var overlays [3][]Property
	if s != nil {
		overlays[0], overlays[2] = s.properties, s.props.Extra
	}
	if gctx.root != nil {
		overlays[1] = gctx.root.properties
	}
	for _, props := range overlays {
		for _, p := range props {
			if matchPath(path, p.Path) {
				return inst.returnBytes(p.Value, ptrPtr, sizePtr)
			}
		}
	}
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
		return optional(p.DestinationAddress)
	case "destination\x00port":
		return integer(p.DestinationPort)
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

// proxy_set_property(path_data, path_size, value_data, value_size): stored on the effective context (Envoy keeps
// it in the stream's filter state) and readable back with proxy_get_property.
func proxySetProperty(inst *instance, stack []uint64) {
	path, okPath := inst.read(u32(stack[0]), u32(stack[1]))
	value, okValue := inst.read(u32(stack[2]), u32(stack[3]))
	if !okPath || !okValue {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if len(path) == 0 {
		stack[0] = uint64(statusBadArgument)
		return
	}
	prop := Property{Path: strings.Split(string(path), "\x00"), Value: append([]byte(nil), value...)}
	var target *[]Property
	switch gctx := inst.effective; {
	case gctx.stream != nil:
		target = &gctx.stream.properties
	case gctx.root != nil:
		target = &gctx.root.properties
	default:
		stack[0] = uint64(statusBadArgument)
		return
	}
	*target = slices.DeleteFunc(*target, func(p Property) bool { return slices.Equal(p.Path, prop.Path) })
	*target = append(*target, prop)
	stack[0] = uint64(statusOK)
}

// proxy_send_local_response(status, details_data, details_size, body_data, body_size, headers_data,
// headers_size, grpc_status): recorded now, sent after the callback returns, and forces a pause. Only the first
// reply of a stream counts, and only while its request is open (the request-headers callback and callbacks while
// the stream waits for HTTP calls), the phases this host runs before the request is answered.
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
		Body:       append([]byte(nil), body...),
		Details:    sanitizeDetails(string(details)),
		GRPCStatus: grpcStatus,
	}
	for _, p := range inst.decodeGuestPairs(headers, "proxy_send_local_response") {
		resp.Headers = append(resp.Headers, [2]string{strings.ToLower(p[0]), p[1]})
	}
	s.response = resp
	stack[0] = uint64(statusOK)
}

// streamAction applies proxy_continue_stream / proxy_close_stream to the effective stream; they take effect when
// the callback returns.
func streamAction(inst *instance, streamType uint32, closeStream bool) status {
	s := inst.effective.stream
	if s == nil || streamType > streamTypeUpstream {
		return statusBadArgument
	}
	switch streamType {
	case streamTypeRequest:
		if closeStream {
			s.resetRequested = true
		} else {
			s.continueRequested = true
		}
	case streamTypeResponse:
		// The response is not processed by this host; closing it still aborts the stream.
		if closeStream {
			s.resetRequested = true
		}
	default:
		// Downstream and upstream are network-filter streams.
		return statusBadArgument
	}
	return statusOK
}

// proxy_continue_stream(type)
func proxyContinueStream(inst *instance, stack []uint64) {
	stack[0] = uint64(streamAction(inst, u32(stack[0]), false))
}

// proxy_close_stream(type)
func proxyCloseStream(inst *instance, stack []uint64) {
	stack[0] = uint64(streamAction(inst, u32(stack[0]), true))
}

// proxy_continue_request(), ABI 0.1.0
func proxyContinueRequest(inst *instance, stack []uint64) {
	stack[0] = uint64(streamAction(inst, streamTypeRequest, false))
}

// proxy_continue_response(), ABI 0.1.0
func proxyContinueResponse(inst *instance, stack []uint64) {
	stack[0] = uint64(streamAction(inst, streamTypeResponse, false))
}

// proxy_clear_route_cache(), ABI 0.1.0
func proxyClearRouteCache(inst *instance, stack []uint64) {
	if s := inst.effective.stream; s != nil {
		s.routeCacheCleared = true
	}
	stack[0] = uint64(statusOK)
}

// proxy_get_shared_data(key_data, key_size, return_value_data, return_value_size, return_cas)
func proxyGetSharedData(inst *instance, stack []uint64) {
	key, ok := inst.read(u32(stack[0]), u32(stack[1]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	value, cas, found := inst.host.shared.get(inst.host.opts.VMID, key)
	if !found {
		stack[0] = uint64(statusNotFound)
		return
	}
	if !inst.writeU32(u32(stack[4]), cas) {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	stack[0] = uint64(inst.returnBytes(value, u32(stack[2]), u32(stack[3])))
}

// proxy_set_shared_data(key_data, key_size, value_data, value_size, cas)
func proxySetSharedData(inst *instance, stack []uint64) {
	key, okKey := inst.read(u32(stack[0]), u32(stack[1]))
	value, okValue := inst.read(u32(stack[2]), u32(stack[3]))
	if !okKey || !okValue {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	if !inst.host.shared.Set(inst.host.opts.VMID, string(key), value, u32(stack[4])) {
		stack[0] = uint64(statusCasMismatch)
		return
	}
	stack[0] = uint64(statusOK)
}

// proxy_register_shared_queue(name_data, name_size, return_token): owned by the effective root context.
func proxyRegisterSharedQueue(inst *instance, stack []uint64) {
	name, ok := inst.read(u32(stack[0]), u32(stack[1]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	root := inst.effective.root
	if root == nil {
		stack[0] = uint64(statusBadArgument)
		return
	}
	if _, ok := inst.read(u32(stack[2]), 4); !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	token := inst.host.queues.register(inst.host.opts.VMID, string(name), inst, root.id)
	stack[0] = uint64(statusFor(inst.writeU32(u32(stack[2]), token)))
}

// proxy_resolve_shared_queue(vm_id_data, vm_id_size, name_data, name_size, return_token)
func proxyResolveSharedQueue(inst *instance, stack []uint64) {
	vmID, okVM := inst.read(u32(stack[0]), u32(stack[1]))
	name, okName := inst.read(u32(stack[2]), u32(stack[3]))
	if !okVM || !okName {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	token, found := inst.host.queues.resolve(string(vmID), string(name))
	if !found {
		stack[0] = uint64(statusNotFound)
		return
	}
	stack[0] = uint64(statusFor(inst.writeU32(u32(stack[4]), token)))
}

// proxy_enqueue_shared_queue(token, data, size): proxy_on_queue_ready reaches the owner asynchronously.
func proxyEnqueueSharedQueue(inst *instance, stack []uint64) {
	data, ok := inst.read(u32(stack[1]), u32(stack[2]))
	if !ok {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	token := u32(stack[0])
	owner, root, notify, found := inst.host.queues.enqueue(token, data)
	if !found {
		stack[0] = uint64(statusNotFound)
		return
	}
	if notify {
		inst.host.deliverQueueReady(owner, root, token)
	}
	stack[0] = uint64(statusOK)
}

// proxy_dequeue_shared_queue(token, return_data, return_size)
func proxyDequeueSharedQueue(inst *instance, stack []uint64) {
	if !inst.writableSlots(u32(stack[1]), u32(stack[2])) {
		stack[0] = uint64(statusInvalidMemoryAccess)
		return
	}
	data, st := inst.host.queues.dequeue(u32(stack[0]))
	if st != statusOK {
		stack[0] = uint64(st)
		return
	}
	stack[0] = uint64(inst.returnBytes(data, u32(stack[1]), u32(stack[2])))
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

// proxy_record_metric(id, value u64): counters add, gauges set, histograms record.
func proxyRecordMetric(inst *instance, stack []uint64) {
	m := inst.host.metrics.lookup(u32(stack[0]))
	if m == nil {
		stack[0] = uint64(statusNotFound)
		return
	}
	cell := &m.cells[inst.slot.index]
	switch m.kind {
	case metricCounter:
		cell.value.Add(int64(stack[1]))
	case metricGauge:
		cell.value.Store(int64(stack[1]))
	case metricHistogram:
		cell.hist.record(stack[1])
	}
	stack[0] = uint64(statusOK)
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

// proxy_done(): a draining root context finished; it is deleted after the current callback.
func proxyDone(inst *instance, stack []uint64) {
	root := inst.effective.root
	if root == nil || !root.draining || slices.Contains(inst.pendingDelete, root) {
		stack[0] = uint64(statusNotFound)
		return
	}
	inst.pendingDelete = append(inst.pendingDelete, root)
	stack[0] = uint64(statusOK)
}

// pthread_equal(a, b)
func pthreadEqual(_ *instance, stack []uint64) {
	if u32(stack[0]) == u32(stack[1]) {
		stack[0] = 1
	} else {
		stack[0] = 0
	}
}
