package envoyconfig

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"unicode"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/plugin/config"
)

// Type URLs of every typed config the rendered documents use.
const (
	wasmFilterTypeURL       = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
	routerTypeURL           = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
	hcmTypeURL              = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	downstreamTLSTypeURL    = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	upstreamTLSTypeURL      = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	httpProtocolOptionsKey  = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	httpProtocolOptionsURL  = "type.googleapis.com/" + httpProtocolOptionsKey
	earlyHeaderMutationURL  = "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation"
	stringValueTypeURL      = "type.googleapis.com/google.protobuf.StringValue"
	typedExtensionConfigURL = "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"
)

const (
	wasmRuntimeV8            = "envoy.wasm.runtime.v8"
	listenerName             = "apiserver"
	routeConfigName          = "apiserver"
	hcmStatPrefix            = "apiserver"
	unlimitedCircuitBreaking = 1000000

	// Request header bounds, Envoy's defaults.
	maxRequestHeadersKB = uint32(60)
	maxRequestHeaders   = uint32(100)
)

// Render returns the complete static Envoy bootstrap for spec, with the plugin
// configured inline from spec.WasmPath and spec.PluginConfig.
func Render(spec Spec) ([]byte, error) {
	s, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	if err := checkPath(s.WasmPath); err != nil {
		return nil, fmt.Errorf("envoyconfig: invalid spec: wasm path: %w", err)
	}
	if err := s.checkPluginConfig(s.PluginConfig); err != nil {
		return nil, err
	}
	wasm, err := wasmFilterConfig(s.PluginConfig, s.WasmPath)
	if err != nil {
		return nil, err
	}
	return marshalYAML(s.bootstrap(object{
		{"name", FilterName},
		{"typed_config", wasm},
	}, nil))
}

// RenderECDS returns the Envoy bootstrap for spec whose plugin filter is
// delivered by file-based ECDS from ecdsResourcePath: Envoy watches the
// file's directory and reloads the filter when a new file is moved in (see
// WriteECDSFile). Without a default configuration the listener waits for the
// first valid resource, so traffic never passes an unconfigured plugin.
func RenderECDS(spec Spec, ecdsResourcePath string) ([]byte, error) {
	s, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	if err := checkPath(ecdsResourcePath); err != nil {
		return nil, fmt.Errorf("envoyconfig: ECDS resource path: %w", err)
	}
	if path.Dir(ecdsResourcePath) == "/" {
		return nil, errors.New("envoyconfig: ECDS resource path: must be inside a directory Envoy can watch, not /")
	}
	return marshalYAML(s.bootstrap(object{
		{"name", FilterName},
		{"config_discovery", object{
			{"config_source", object{
				{"path_config_source", object{
					{"path", ecdsResourcePath},
					{"watched_directory", object{{"path", path.Dir(ecdsResourcePath)}}},
				}},
				{"resource_api_version", "V3"},
			}},
			{"type_urls", list{wasmFilterTypeURL}},
		}},
	}, nil))
}

// wasmFilterConfig is the envoy.filters.http.wasm typed config, identical for
// the inline and the ECDS variant.
func wasmFilterConfig(pluginConfigJSON []byte, wasmPath string) (object, error) {
	configuration, err := compactJSON(pluginConfigJSON)
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(configuration, "{") {
		return nil, errors.New("envoyconfig: plugin configuration: must be a JSON object")
	}
	wasm := object{
		{"@type", wasmFilterTypeURL},
		{"config", object{
			{"name", FilterName},
			{"root_id", FilterName},
			{"vm_config", object{
				{"vm_id", FilterName},
				{"runtime", wasmRuntimeV8},
				{"code", object{{"local", object{{"filename", wasmPath}}}}},
			}},
			{"configuration", object{
				{"@type", stringValueTypeURL},
				{"value", configuration},
			}},
			// A plugin that cannot run must not let requests bypass skew
			// protection: Envoy answers 503 instead.
			{"failure_policy", "FAIL_CLOSED"},
		}},
	}
	if config.RoutesWritesByBody(pluginConfigJSON) {
		// Without it Envoy turns the plugin's pause for a write's body into
		// StopAllIteration and never hands it the body (Envoy 1.35+).
		filter := wasm[1].value.(object)
		wasm[1].value = append(filter, field{"allow_on_headers_stop_iteration", true})
	}
	return wasm, nil
}

// bootstrap is the whole document; with xds, it also reaches the management
// server that delivers the plugin filter.
func (s *Spec) bootstrap(pluginFilter object, xds *XDSSource) object {
	clusters := make(list, 0, 2*len(s.Servers)+1)
	for _, srv := range s.Servers {
		clusters = append(clusters, s.cluster(srv.Cluster, "ROUND_ROBIN", []Server{srv}, false))
		// The API servers authenticate the front-proxy certificate, and may
		// even map it to a user of its own, so only the requests whose
		// identity the plugin asserts go where it is presented.
		if s.IdentityMode == config.IdentityFrontProxy {
			clusters = append(clusters, s.cluster(srv.Cluster+discovery.FrontProxyClusterSuffix, "ROUND_ROBIN", []Server{srv}, true))
		}
	}
	clusters = append(clusters, s.cluster(s.AllServersCluster, "LEAST_REQUEST", s.Servers, false))
	if xds != nil {
		clusters = append(clusters, xds.cluster())
	}
	doc := object{
		{"node", object{{"id", s.NodeID}, {"cluster", s.NodeID}}},
		{"admin", object{{"address", socketAddress("127.0.0.1", s.AdminPort)}}},
		{"static_resources", object{
			{"listeners", list{s.listener(pluginFilter)}},
			{"clusters", clusters},
		}},
	}
	if xds != nil && xds.ADS {
		doc = append(doc, field{"dynamic_resources", object{{"ads_config", xds.apiConfigSource()}}})
	}
	return doc
}

func socketAddress(addr string, port uint32) object {
	return object{{"socket_address", object{{"address", addr}, {"port_value", port}}}}
}

func (s *Spec) listener(pluginFilter object) object {
	return object{
		{"name", listenerName},
		{"address", socketAddress(s.ListenAddress, s.ListenPort)},
		{"filter_chains", list{object{
			{"transport_socket", object{
				{"name", "envoy.transport_sockets.tls"},
				{"typed_config", s.downstreamTLS()},
			}},
			{"filters", list{object{
				{"name", "envoy.filters.network.http_connection_manager"},
				{"typed_config", s.httpConnectionManager(pluginFilter)},
			}}},
		}}},
	}
}

func (s *Spec) downstreamTLS() object {
	common := object{
		{"tls_params", object{{"tls_minimum_protocol_version", "TLSv1_2"}}},
		{"alpn_protocols", list{"h2", "http/1.1"}},
		{"tls_certificates", list{certificate(s.ServingCertPath, s.ServingKeyPath)}},
	}
	tls := object{{"@type", downstreamTLSTypeURL}}
	if s.ClientCAPath != "" {
		common = append(common, field{"validation_context", object{
			{"trusted_ca", object{{"filename", s.ClientCAPath}}},
		}})
		tls = append(tls, field{"require_client_certificate", true})
	}
	return append(tls, field{"common_tls_context", common})
}

func certificate(certPath, keyPath string) object {
	return object{
		{"certificate_chain", object{{"filename", certPath}}},
		{"private_key", object{{"filename", keyPath}}},
	}
}

// timeoutStatusBody is kube-apiserver's answer to a request that did not
// complete within --request-timeout.
const timeoutStatusBody = `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: request did not complete within the allotted timeout","reason":"Timeout","details":{},"code":504}`

func (s *Spec) httpConnectionManager(pluginFilter object) object {
	return object{
		{"@type", hcmTypeURL},
		{"stat_prefix", hcmStatPrefix},
		{"codec_type", "AUTO"},
		// Envoy is the edge: the peer address is the client. With no
		// internal_address_config no client is internal (Envoy >= 1.33), so
		// none can set x-envoy-* control headers. xff_num_trusted_hops stays
		// 0: no address a client put in X-Forwarded-For is trusted, and Envoy
		// appends the peer, so the source IPs kube-apiserver audits always
		// include the real client after whatever the client claimed.
		{"use_remote_address", true},
		{"forward_client_cert_details", "SANITIZE"},
		// The plugin and the API servers must see the same path, and so must
		// the routes: an escaped slash (%2F) splits a path into more segments
		// for the API server, which decodes it, than for a route regex.
		{"normalize_path", true},
		{"path_with_escaped_slashes_action", "UNESCAPE_AND_FORWARD"},
		{"request_headers_timeout", "10s"},
		// Envoy answers a passed route timeout itself, in plain text; clients
		// decode a Kubernetes Status, so the answer is the one kube-apiserver's
		// timeout filter sends. The plugin never answers 504 itself.
		{"local_reply_config", object{{"mappers", list{object{
			{"filter", object{{"status_code_filter", object{{"comparison", object{
				{"op", "EQ"},
				{"value", object{{"default_value", uint32(504)}, {"runtime_key", "skewgate.local_reply.timeout_status"}}},
			}}}}}},
			{"body", object{{"inline_string", timeoutStatusBody}}},
			{"body_format_override", object{
				{"text_format_source", object{{"inline_string", "%LOCAL_REPLY_BODY%"}}},
				{"content_type", "application/json"},
			}},
		}}}}},
		// Envoy's defaults, stated so the bound is explicit and equal to the
		// standalone gateway's: larger or more request headers are refused
		// (431, or a stream reset for too many headers over HTTP/2) before
		// any filter runs.
		{"max_request_headers_kb", maxRequestHeadersKB},
		{"common_http_protocol_options", object{{"max_headers_count", maxRequestHeaders}}},
		// kube-apiserver allows 1000 streams per HTTP/2 connection; clients
		// multiplex many watches over one connection.
		{"http2_protocol_options", object{{"max_concurrent_streams", uint32(1000)}}},
		// Removed before the first route match and before any filter runs:
		// a client's copy of the routing header, even if a pushed plugin
		// configuration names another header, and the client-address headers
		// other than X-Forwarded-For, which kube-apiserver would record as
		// source IPs (X-Real-Ip) or nobody here vouches for (Forwarded). (The
		// plugin itself strips all X-Remote-* identity headers; removal by
		// prefix would need Envoy 1.36.)
		{"early_header_mutation_extensions", list{object{
			{"name", "envoy.http.early_header_mutation.header_mutation"},
			{"typed_config", object{
				{"@type", earlyHeaderMutationURL},
				{"mutations", list{
					object{{"remove", s.RoutingHeader}},
					object{{"remove", "x-real-ip"}},
					object{{"remove", "forwarded"}},
				}},
			}},
		}}},
		// exec, attach and port-forward: WebSocket (current clients) and SPDY.
		{"upgrade_configs", list{
			object{{"upgrade_type", "websocket"}},
			object{{"upgrade_type", "spdy/3.1"}},
		}},
		{"route_config", s.routeConfig()},
		{"http_filters", list{
			pluginFilter,
			object{
				{"name", "envoy.filters.http.router"},
				{"typed_config", object{
					{"@type", routerTypeURL},
					{"suppress_envoy_headers", true},
				}},
			},
		}},
	}
}

func (s *Spec) routeConfig() object {
	routes := make(list, 0, 2*len(routeClasses))
	for _, c := range routeClasses {
		routes = append(routes, s.route(c, true), s.route(c, false))
	}
	return object{
		{"name", routeConfigName},
		// The API servers need not see where the plugin steered.
		{"request_headers_to_remove", list{s.RoutingHeader}},
		{"virtual_hosts", list{object{
			{"name", "apiserver"},
			{"domains", list{"*"}},
			{"routes", routes},
		}}},
	}
}

// requestTimeout is kube-apiserver's --request-timeout default: the deadline
// for a request that is not long-running, so one sent to a server that stopped
// answering fails instead of hanging.
const requestTimeout = "60s"

// A routeClass is a set of requests with the same timeouts. Each is rendered
// twice, steered by the routing header and balanced, and the first class that
// matches a request wins.
type routeClass struct {
	name        string
	path        field // the path specifier
	headers     list
	query       list
	longRunning bool
}

// routeClasses are rendered from discovery.LongRunning, the classification
// skewgate serve applies too (discovery.Target.Class), as far as Envoy can
// tell it from the request line and headers. A request is long-running when
//   - its path is /api/V or /apis/G/V, optionally /namespaces/NS, then
//     /RESOURCE/NAME/SUBRESOURCE[/...] with a long-running subresource;
//   - its path is /api/V/VERB/... (or the same under /apis/G/V) with a
//     long-running verb that the path can name (watch, proxy);
//   - its path starts with the long-running non-resource prefix;
//   - it is an upgrade (WebSocket or SPDY, exec/attach/port-forward clients);
//   - or its first watch query parameter is neither "0" nor "false" in any
//     ASCII case.
//
// Every other request is not long-running. Path segments are matched as
// printable ASCII, which keeps each regex small for RE2's program size limit
// (normalize_path leaves no other bytes in a path). The approximation errs
// only towards long-running, withholding a deadline: Envoy sees neither
// whether a watch parameter is on a list nor which word of a path names a
// namespace, so a namespaced resource named like a subresource
// (/api/v1/namespaces/NS/log) or a watch parameter on a get matches too.
// routes_test.go checks this against discovery.Target.Class on the requests
// discoverytest.LongRunningProbes lists.
var routeClasses = longRunningRouteClasses(discovery.LongRunning())

func longRunningRouteClasses(lr discovery.LongRunningRequests) []routeClass {
	var pathVerbs []string
	watchQuery := false
	for _, verb := range lr.Verbs {
		expressed := false
		if discovery.IsPathVerb(verb) {
			pathVerbs = append(pathVerbs, verb)
			expressed = true
		}
		if verb == discovery.WatchParameter {
			// A list becomes a watch through the parameter named like the verb.
			watchQuery, expressed = true, true
		}
		if !expressed {
			panic("envoyconfig: no route can tell the long-running verb " + verb)
		}
	}
	classes := []routeClass{
		{name: "subresource", path: safeRegexPath(apiPrefixRegex + `(?:/namespaces/` + segmentRegex + `)?/` + segmentRegex + `/` + segmentRegex +
			`/` + alternation(lr.Subresources) + `(?:/[!-~]*)?`), longRunning: true},
		{name: "verb-path", path: safeRegexPath(apiPrefixRegex + `/` + alternation(pathVerbs) + `/[!-~]+`), longRunning: true},
		// Outside resource paths the verb is the lowercased method.
		{name: "verb-method", path: field{"prefix", "/"}, headers: list{object{
			{"name", ":method"},
			{"string_match", object{{"safe_regex", object{{"regex", asciiCaseInsensitive(lr.Verbs)}}}}},
		}}, longRunning: true},
		{name: "profiling", path: field{"prefix", lr.PathPrefix}, longRunning: true},
		{name: "upgrade", path: field{"prefix", "/"}, headers: list{presentHeader("upgrade")}, longRunning: true},
	}
	if watchQuery {
		classes = append(classes,
			routeClass{name: "not-watch", path: field{"prefix", "/"}, query: list{object{
				{"name", discovery.WatchParameter},
				// ASCII case only: a value RE2 would fold onto "false" from
				// outside ASCII (falſe) is a watch to kube-apiserver in
				// some cases, and a deadline must never cut a watch.
				{"string_match", object{{"safe_regex", object{{"regex", `0|[Ff][Aa][Ll][Ss][Ee]`}}}}},
			}}},
			routeClass{name: "watch", path: field{"prefix", "/"}, query: list{object{{"name", discovery.WatchParameter}, {"present_match", true}}}, longRunning: true})
	}
	return append(classes, routeClass{name: "default", path: field{"prefix", "/"}})
}

// asciiCaseInsensitive is a regex matching any of words in any ASCII case,
// as strings.ToLower lowers a method onto them (no other character lowers
// onto an ASCII letter of a verb).
func asciiCaseInsensitive(words []string) string {
	folded := make([]string, len(words))
	for i, w := range words {
		var b strings.Builder
		for _, c := range w {
			if upper := unicode.ToUpper(c); upper != c && upper < unicode.MaxASCII {
				b.WriteString("[" + string(upper) + string(c) + "]")
			} else {
				b.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		folded[i] = b.String()
	}
	return strings.Join(folded, "|")
}

// alternation is a regex matching exactly one of words.
func alternation(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = regexp.QuoteMeta(w)
	}
	return `(?:` + strings.Join(quoted, "|") + `)`
}

const (
	// segmentRegex is one path segment: printable ASCII but '/', or nothing,
	// as kube-apiserver splits "//" into an empty segment.
	segmentRegex = `[!-.0-~]*`
	// apiPrefixRegex is the group-version prefix of every resource path,
	// after the leading slashes kube-apiserver trims.
	apiPrefixRegex = `/+api(?:/` + segmentRegex + `|s/` + segmentRegex + `/` + segmentRegex + `)`
)

func safeRegexPath(regex string) field {
	return field{"safe_regex", object{{"regex", regex}}}
}

func presentHeader(name string) object {
	return object{{"name", name}, {"present_match", true}}
}

func (s *Spec) route(c routeClass, steered bool) object {
	name := c.name + "-balanced"
	headers := c.headers
	action := object{{"cluster", s.AllServersCluster}}
	if steered {
		name = c.name + "-steered"
		headers = append(slices.Clone(headers), presentHeader(s.RoutingHeader))
		action = object{
			{"cluster_header", s.RoutingHeader},
			// Explicit because Envoy's documentation (404) and the enum
			// default (503) disagree; a steer to a server that just went away
			// is a transient unavailability.
			{"cluster_not_found_response_code", "SERVICE_UNAVAILABLE"},
		}
	}
	match := object{c.path}
	if len(headers) > 0 {
		match = append(match, field{"headers", headers})
	}
	if len(c.query) > 0 {
		match = append(match, field{"query_parameters", c.query})
	}
	if c.longRunning {
		// Watches last up to an hour and may be silent throughout, and exec
		// or port-forward sessions idle for as long as the user likes: no
		// route timeout and no stream idle timeout. Dead peers are detected
		// by TCP and HTTP/2 keepalives instead.
		action = append(action, field{"timeout", "0s"}, field{"idle_timeout", "0s"})
	} else {
		// The connection manager's stream idle timeout (5 min) still bounds a
		// client that stalls while sending.
		action = append(action, field{"timeout", requestTimeout})
	}
	if retry := s.retryPolicy(steered); retry != nil {
		action = append(action, field{"retry_policy", retry})
	}
	return object{{"name", name}, {"match", match}, {"route", action}}
}

// Retries are limited to what provably never reached a server, as skewgate
// serve retries (RATIONALE.md): a connection or TLS handshake that failed, a
// stream the server refused (REFUSED_STREAM, as after a GOAWAY), and a stream
// reset before any byte of the request went out. Envoy cannot read a
// response body, so the shutting-down server's 429 and 503, which only their
// bodies tell from priority and fairness or any other 503, are not retried.
// Envoy buffers a request body for a retry up to the listener's buffer
// limit, 1 MiB by default, as skewgate serve does.
const (
	retryOnNotSent = "refused-stream,reset-before-request"
	// retryOnUnreached adds connection failures, worth retrying only on
	// another server.
	retryOnUnreached = "connect-failure," + retryOnNotSent
	// hostSelectionAttempts bounds how often Envoy draws a host again when
	// it drew one the request already tried; enough that a fresh one is all
	// but certain among 64 servers with most of them tried.
	hostSelectionAttempts = uint32(20)
	previousHostsTypeURL  = "type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
)

// retryPolicy is a route's retry policy, or nil for none. A balanced request
// may go to any server, so a retry goes to one it has not tried, each other
// server at most once. A steered request goes to the one server the plugin
// chose, and Envoy cannot choose another cluster: it is sent again there only
// when the server never saw it, on a new stream, as Go's transport does for
// skewgate serve.
func (s *Spec) retryPolicy(steered bool) object {
	if steered {
		return object{{"retry_on", retryOnNotSent}, {"num_retries", uint32(1)}}
	}
	if len(s.Servers) < 2 {
		return nil
	}
	return object{
		{"retry_on", retryOnUnreached},
		{"num_retries", uint32(len(s.Servers) - 1)},
		{"retry_host_predicate", list{object{
			{"name", "envoy.retry_host_predicates.previous_hosts"},
			{"typed_config", object{{"@type", previousHostsTypeURL}}},
		}}},
		{"host_selection_retry_max_attempts", hostSelectionAttempts},
	}
}

func (s *Spec) cluster(name, lbPolicy string, servers []Server, frontProxy bool) object {
	discovery := "STRICT_DNS"
	if allIPs(servers) {
		discovery = "STATIC"
	}
	endpoints := make(list, 0, len(servers))
	for _, srv := range servers {
		endpoints = append(endpoints, object{{"endpoint", object{{"address", socketAddress(srv.Address, srv.Port)}}}})
	}
	return object{
		{"name", name},
		{"type", discovery},
		{"connect_timeout", "5s"},
		{"lb_policy", lbPolicy},
		// Balance over the healthy servers, or over all of them only while
		// none is healthy, as every choice of a server does (discovery's
		// Routable): Envoy's default panics below 50% healthy and would
		// send a share of requests to servers known to be down. One percent
		// is less than one server of the at most 64 (discovery.MaxServers).
		{"common_lb_config", object{{"healthy_panic_threshold", object{{"value", uint32(1)}}}}},
		{"load_assignment", object{
			{"cluster_name", name},
			{"endpoints", list{object{{"lb_endpoints", endpoints}}}},
		}},
		// Envoy's default of 1024 concurrent requests would cap the number of
		// open watches; the API servers' own priority and fairness does the
		// admission control.
		{"circuit_breakers", object{{"thresholds", list{object{
			{"max_connections", uint32(unlimitedCircuitBreaking)},
			{"max_pending_requests", uint32(unlimitedCircuitBreaking)},
			{"max_requests", uint32(unlimitedCircuitBreaking)},
		}}}}},
		{"typed_extension_protocol_options", object{{httpProtocolOptionsKey, object{
			{"@type", httpProtocolOptionsURL},
			// Same protocol as the client: HTTP/2 for API calls, HTTP/1.1 for
			// WebSocket and SPDY upgrades, which kube-apiserver serves over
			// HTTP/1.1 only. Envoy offers the matching ALPN per connection.
			{"use_downstream_protocol_config", object{
				{"http_protocol_options", object{}},
				{"http2_protocol_options", object{
					{"connection_keepalive", object{{"interval", "30s"}, {"timeout", "15s"}}},
				}},
			}},
		}}}},
		{"upstream_connection_options", upstreamTCPKeepalive},
		{"transport_socket", object{
			{"name", "envoy.transport_sockets.tls"},
			{"typed_config", s.upstreamTLS(frontProxy)},
		}},
		{"health_checks", list{object{
			{"timeout", "2s"},
			{"interval", "3s"},
			// Per-server clusters see traffic only when the plugin steers;
			// they must still notice a server going away promptly.
			{"no_traffic_interval", "3s"},
			{"unhealthy_threshold", uint32(2)},
			{"healthy_threshold", uint32(2)},
			{"http_health_check", object{
				{"host", APIServerSNI},
				{"path", "/readyz"},
			}},
		}}},
		// Eject on connection failures and gateway errors only: API server
		// 5xx answers are often about one resource, not the server.
		{"outlier_detection", object{
			{"enforcing_consecutive_5xx", uint32(0)},
			{"consecutive_gateway_failure", uint32(3)},
			{"enforcing_consecutive_gateway_failure", uint32(100)},
			{"enforcing_success_rate", uint32(0)},
			{"interval", "5s"},
			{"base_ejection_time", "15s"},
			{"max_ejection_percent", uint32(50)},
		}},
	}
}

// upstreamTLS verifies the API server and, for a front-proxy cluster only,
// presents the front-proxy client certificate.
func (s *Spec) upstreamTLS(frontProxy bool) object {
	common := object{
		{"tls_params", object{{"tls_minimum_protocol_version", "TLSv1_2"}}},
	}
	if frontProxy {
		common = append(common, field{"tls_certificates", list{certificate(s.FrontProxyCertPath, s.FrontProxyKeyPath)}})
	}
	common = append(common, field{"validation_context", object{
		{"trusted_ca", object{{"filename", s.ClusterCAPath}}},
		{"match_typed_subject_alt_names", list{object{
			{"san_type", "DNS"},
			{"matcher", object{{"exact", APIServerSNI}}},
		}}},
	}})
	return object{
		{"@type", upstreamTLSTypeURL},
		{"sni", APIServerSNI},
		{"common_tls_context", common},
	}
}

// upstreamTCPKeepalive finds a dead upstream connection within a minute: a
// watch or an xDS stream is otherwise silent for as long as nothing changes.
var upstreamTCPKeepalive = object{{"tcp_keepalive", object{
	{"keepalive_probes", uint32(3)},
	{"keepalive_time", uint32(30)},
	{"keepalive_interval", uint32(10)},
}}}
