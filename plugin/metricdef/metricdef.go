// Package metricdef defines every metric skewgate exports: its name, type,
// labels and help, once. The plugin defines its metrics by these names through
// the proxy-wasm ABI, the host builds its collectors from these definitions,
// and the metrics reference in host/deploy/monitoring/README.md, the shipped
// alerting rules and the Grafana dashboard are checked against All.
//
// Names follow the Prometheus conventions: one prefix (skewgate_), then the
// part that exports the metric (plugin, gateway, wasm, controller, xds, ...),
// units in the name (_seconds, _bytes), and counters, only they, end in
// _total.
//
// The package is linked into the plugin, so it depends only on the standard
// library, and nothing in it runs at initialisation: the plugin links only the
// definitions it names.
package metricdef

// Type is a metric's Prometheus type.
type Type string

const (
	Counter   Type = "counter"
	Gauge     Type = "gauge"
	Histogram Type = "histogram"
)

// Exporter is where a metric is exported, as the metrics reference groups
// them.
type Exporter string

const (
	// Plugin metrics are defined by the module: Envoy exports them (its
	// wasmcustom namespace stripped, so under these names) and so does
	// skewgate serve.
	Plugin Exporter = "plugin"
	// The others are exported by the processes that run the part: skewgate
	// serve all but the xDS management server's, skewgate-xds the
	// controller's, the certificates', the xDS server's and skewgate_ready.
	Gateway      Exporter = "gateway"
	WasmHost     Exporter = "wasm"
	Controller   Exporter = "controller"
	XDS          Exporter = "xds"
	Certificates Exporter = "certificates"
	Serve        Exporter = "serve"
)

// Metric is one metric's definition.
type Metric struct {
	Name     string
	Type     Type
	Exporter Exporter
	Labels   []string
	Help     string
	// Buckets are a histogram's upper bounds.
	Buckets []float64
}

// Lookup returns the definition named name.
func Lookup(name string) (*Metric, bool) {
	for _, m := range All {
		if m.Name == name {
			return m, true
		}
	}
	return nil, false
}

// All is every definition, in the order of the metrics reference.
var All = []*Metric{
	&PluginReroutedRequests, &PluginUnavailableResponses, &PluginMergedDiscoveryServed, &PluginMergedDiscoveryNotModified,
	&PluginNoPeerDiscoveryForwarded, &PluginWritesRoutedByBody, &PluginWriteBodiesUnreadable, &PluginConfigurationRejections, &PluginConfigurationSchemaRejections,
	&PluginConfigurationIgnoredFields, &PluginClientCertificatesRefused, &PluginDiscoveryAuthorizationsChecked,
	&PluginDiscoveryAuthorizationCacheHits, &PluginDiscoveryAuthorizationsDenied, &PluginDiscoveryAuthorizationFailures,
	&PluginSnapshotGeneration,

	&ServeReady, &ServeECDSWrites, &ServeECDSWriteFailures,

	&GatewayRequests, &GatewayRequestDuration, &GatewayUpstreamErrors, &GatewayRetries, &GatewayPluginFailures,
	&GatewayRejectedRequests, &GatewayUnbufferedRequestBodies, &GatewayRequestsInFlight, &GatewayBackendInFlight,
	&GatewayBufferedRequestBytes, &GatewayRefusedConnections, &GatewayOpenConnections,

	&WasmTraps, &WasmInstanceRecreations, &WasmInstanceRecreationFailures, &WasmCrashLoopBackoffs,
	&WasmConfigurationsApplied, &WasmFailedRequests, &WasmPoolWaits, &WasmPoolWaitSeconds, &WasmPoolTimeouts,
	&WasmHTTPCalls, &WasmHTTPCallFailures, &WasmHTTPCallsCancelled, &WasmInstancesLive,

	&ControllerServers, &ControllerServersHealthy, &ControllerMembers, &ControllerMembershipDifferences, &ControllerSnapshotGeneration, &ControllerSnapshotServers,
	&ControllerPublishErrors, &ControllerInvalidSnapshots, &ControllerFetchErrors, &ControllerLastSuccessfulPoll,
	&ControllerFrontProxyCertificateAuthenticates, &ControllerOpenAPIDocumentsFetched, &ControllerOpenAPIDocumentBytes,
	&ControllerOpenAPIDocumentErrors, &ControllerOpenAPIDocuments, &ControllerOpenAPIFieldPaths,

	&XDSStreams, &XDSPushes, &XDSAcks, &XDSNacks, &XDSVersionInfo, &XDSRefusedStreams, &XDSPublishFailures,

	&CertificateReloads, &CertificateReloadFailures,
}

// The plugin's metrics. They carry no labels: the proxy-wasm ABI has none.
var (
	PluginReroutedRequests = Metric{Name: "skewgate_plugin_rerouted_requests_total", Type: Counter, Exporter: Plugin,
		Help: "Resource requests sent to a server that serves them because not every server does (a skewed API)."}
	PluginUnavailableResponses = Metric{Name: "skewgate_plugin_unavailable_responses_total", Type: Counter, Exporter: Plugin,
		Help: "Requests the module answered 503: no healthy server serves what they ask for (a skewed API during an upgrade), or they could not continue as they are."}
	PluginMergedDiscoveryServed = Metric{Name: "skewgate_plugin_merged_discovery_served_total", Type: Counter, Exporter: Plugin,
		Help: "Aggregated discovery documents answered merged over every server."}
	PluginMergedDiscoveryNotModified = Metric{Name: "skewgate_plugin_merged_discovery_not_modified_total", Type: Counter, Exporter: Plugin,
		Help: "Merged discovery requests answered 304 Not Modified."}
	PluginNoPeerDiscoveryForwarded = Metric{Name: "skewgate_plugin_nopeer_discovery_forwarded_total", Type: Counter, Exporter: Plugin,
		Help: "Discovery requests for one server's own documents (profile=nopeer), forwarded instead of merged."}
	PluginWritesRoutedByBody = Metric{Name: "skewgate_plugin_writes_routed_by_body_total", Type: Counter, Exporter: Plugin,
		Help: "Writes of a resource whose schemas differ between the servers, sent to the servers whose schema has every field their body sets."}
	PluginWriteBodiesUnreadable = Metric{Name: "skewgate_plugin_write_bodies_unreadable_total", Type: Counter, Exporter: Plugin,
		Help: "Writes of a resource whose schemas differ whose body was not read (protobuf, CBOR, YAML that is not JSON, over 1 MiB or of unknown length, malformed): sent to the servers lacking no field, else to the newest minor's."}
	PluginConfigurationRejections = Metric{Name: "skewgate_plugin_configuration_rejections_total", Type: Counter, Exporter: Plugin,
		Help: "Configurations the module rejected; it keeps the one it had, so later snapshots are lost until one is accepted."}
	PluginConfigurationSchemaRejections = Metric{Name: "skewgate_plugin_configuration_schema_rejections_total", Type: Counter, Exporter: Plugin,
		Help: "Configurations of a schema version the module cannot honour (another major, or a newer required version); also counted as rejections."}
	PluginConfigurationIgnoredFields = Metric{Name: "skewgate_plugin_configuration_ignored_fields_total", Type: Counter, Exporter: Plugin,
		Help: "Members of a newer minor schema version the module ignored in configurations it accepted."}
	PluginClientCertificatesRefused = Metric{Name: "skewgate_plugin_client_certificates_refused_total", Type: Counter, Exporter: Plugin,
		Help: "Requests answered 401 because their client certificate, verified by the gateway, cannot be asserted to an API server."}
	PluginDiscoveryAuthorizationsChecked = Metric{Name: "skewgate_plugin_discovery_authorizations_checked_total", Type: Counter, Exporter: Plugin,
		Help: "Calls made to an API server to learn whether a client may read the merged discovery documents."}
	PluginDiscoveryAuthorizationCacheHits = Metric{Name: "skewgate_plugin_discovery_authorization_cache_hits_total", Type: Counter, Exporter: Plugin,
		Help: "Discovery authorization answers taken from the cache."}
	PluginDiscoveryAuthorizationsDenied = Metric{Name: "skewgate_plugin_discovery_authorizations_denied_total", Type: Counter, Exporter: Plugin,
		Help: "Discovery authorizations answered 401 or 403, by an API server or from the cache."}
	PluginDiscoveryAuthorizationFailures = Metric{Name: "skewgate_plugin_discovery_authorization_failures_total", Type: Counter, Exporter: Plugin,
		Help: "Discovery authorization calls without a usable answer."}
	PluginSnapshotGeneration = Metric{Name: "skewgate_plugin_snapshot_generation", Type: Gauge, Exporter: Plugin,
		Help: "Generation of the snapshot the module routes with; behind skewgate_controller_snapshot_generation while a new one is applied, or when it was rejected."}
)

// skewgate serve's own.
var (
	ServeReady = Metric{Name: "skewgate_ready", Type: Gauge, Exporter: Serve,
		Help: "1 once a snapshot was accepted by the plugin VMs (skewgate-xds: once a plugin configuration was published)."}
	ServeECDSWrites = Metric{Name: "skewgate_ecds_writes_total", Type: Counter, Exporter: Serve,
		Help: "Envoy ECDS files written."}
	ServeECDSWriteFailures = Metric{Name: "skewgate_ecds_write_failures_total", Type: Counter, Exporter: Serve,
		Help: "Envoy ECDS files that could not be written."}
)

// requestBuckets span a local answer of the plugin (about a millisecond) to
// the default request timeout.
var requestBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// The gateway of skewgate serve.
var (
	GatewayRequests = Metric{Name: "skewgate_gateway_requests_total", Type: Counter, Exporter: Gateway, Labels: []string{"verdict", "code"},
		Help: "Requests by the plugin's verdict (none: answered before the plugin ran) and the status code sent (101: protocol switched, 499: client left)."}
	GatewayRequestDuration = Metric{Name: "skewgate_gateway_request_duration_seconds", Type: Histogram, Exporter: Gateway, Labels: []string{"verdict", "upstream"},
		Help: "Time from a request's arrival to its response headers (a watch or an upgraded connection counts until it started), " +
			"by the plugin's verdict and the cluster of the API server that answered (upstream; empty when the gateway or the plugin answered).",
		Buckets: requestBuckets}
	GatewayUpstreamErrors = Metric{Name: "skewgate_gateway_upstream_errors_total", Type: Counter, Exporter: Gateway, Labels: []string{"backend", "kind"},
		Help: "Failed attempts to reach an API server, by backend cluster and kind (connect, tls, timeout, transport; shutting_down: the server refused the request while shutting down; abandoned: a read left unanswered by a server that turned unhealthy)."}
	GatewayRetries = Metric{Name: "skewgate_gateway_retries_total", Type: Counter, Exporter: Gateway,
		Help: "Requests sent again to another API server because the previous one provably did not process them (unreachable, or shutting down), or, for reads, lost the connection or turned unhealthy before answering."}
	GatewayPluginFailures = Metric{Name: "skewgate_gateway_plugin_failures_total", Type: Counter, Exporter: Gateway,
		Help: "Requests the plugin failed on, answered by the failure policy; those no plugin VM became free for are rejected requests (plugin_busy) instead."}
	GatewayRejectedRequests = Metric{Name: "skewgate_gateway_rejected_requests_total", Type: Counter, Exporter: Gateway, Labels: []string{"reason"},
		Help: "Requests answered 429 by the gateway's own limits: max_requests_inflight, max_mutating_requests_inflight, " +
			"max_requests_inflight_per_client, max_long_running_requests, max_long_running_requests_per_client, " +
			"or plugin_busy (no plugin VM became free while the request could queue)."}
	GatewayUnbufferedRequestBodies = Metric{Name: "skewgate_gateway_unbuffered_request_bodies_total", Type: Counter, Exporter: Gateway, Labels: []string{"reason"},
		Help: "Request bodies small enough to buffer for a retry that streamed instead, because the buffer budget " +
			"(budget) or the client's share of it (client_share) was taken; their requests are not retried."}
	GatewayRequestsInFlight = Metric{Name: "skewgate_gateway_requests_in_flight", Type: Gauge, Exporter: Gateway, Labels: []string{"request_kind"},
		Help: "Requests being served, by kind: readOnly and mutating (not long-running), as --max-requests-inflight and --max-mutating-requests-inflight count them, " +
			"and longRunning, as --max-long-running-requests counts them."}
	GatewayBackendInFlight = Metric{Name: "skewgate_gateway_backend_in_flight", Type: Gauge, Exporter: Gateway, Labels: []string{"backend"},
		Help: "Requests being proxied to each API server, open watches and upgraded connections included."}
	GatewayRefusedConnections = Metric{Name: "skewgate_gateway_refused_connections_total", Type: Counter, Exporter: Gateway, Labels: []string{"reason"},
		Help: "Client connections closed as soon as they were accepted because the gateway held as many as it may: " +
			"max_connections (in all) or max_connections_per_client (from the connection's source address)."}
	GatewayOpenConnections = Metric{Name: "skewgate_gateway_open_connections", Type: Gauge, Exporter: Gateway,
		Help: "Client connections open, as --max-connections counts them."}
	GatewayBufferedRequestBytes = Metric{Name: "skewgate_gateway_buffered_request_bytes", Type: Gauge, Exporter: Gateway,
		Help: "Bytes of request bodies held for retries, as --max-buffered-request-bytes counts them."}
)

// The Wasm host of skewgate serve, which runs the plugin's VMs.
var (
	WasmTraps = Metric{Name: "skewgate_wasm_traps_total", Type: Counter, Exporter: WasmHost,
		Help: "Plugin calls that trapped; the instance is recreated."}
	WasmInstanceRecreations = Metric{Name: "skewgate_wasm_instance_recreations_total", Type: Counter, Exporter: WasmHost,
		Help: "Instances recreated after a trap."}
	WasmInstanceRecreationFailures = Metric{Name: "skewgate_wasm_instance_recreation_failures_total", Type: Counter, Exporter: WasmHost,
		Help: "Attempts to recreate an instance that failed; retried with backoff."}
	WasmCrashLoopBackoffs = Metric{Name: "skewgate_wasm_crash_loop_backoffs_total", Type: Counter, Exporter: WasmHost,
		Help: "Recreations delayed beyond the first because the instance kept trapping."}
	WasmConfigurationsApplied = Metric{Name: "skewgate_wasm_configurations_applied_total", Type: Counter, Exporter: WasmHost,
		Help: "Plugin configurations every instance accepted."}
	WasmFailedRequests = Metric{Name: "skewgate_wasm_failed_requests_total", Type: Counter, Exporter: WasmHost,
		Help: "Requests the Wasm host gave the failure policy: those the plugin failed on, and those that found no free instance."}
	WasmPoolWaits = Metric{Name: "skewgate_wasm_pool_waits_total", Type: Counter, Exporter: WasmHost,
		Help: "Requests that waited for a free instance."}
	WasmPoolWaitSeconds = Metric{Name: "skewgate_wasm_pool_wait_seconds_total", Type: Counter, Exporter: WasmHost,
		Help: "Time requests spent waiting for a free instance."}
	WasmPoolTimeouts = Metric{Name: "skewgate_wasm_pool_timeouts_total", Type: Counter, Exporter: WasmHost,
		Help: "Requests that found no free instance within the pool timeout."}
	WasmHTTPCalls = Metric{Name: "skewgate_wasm_http_calls_total", Type: Counter, Exporter: WasmHost,
		Help: "HTTP calls the plugin dispatched."}
	WasmHTTPCallFailures = Metric{Name: "skewgate_wasm_http_call_failures_total", Type: Counter, Exporter: WasmHost,
		Help: "HTTP calls delivered to the plugin without a response (error or timeout)."}
	WasmHTTPCallsCancelled = Metric{Name: "skewgate_wasm_http_calls_cancelled_total", Type: Counter, Exporter: WasmHost,
		Help: "HTTP calls abandoned because their stream ended first."}
	WasmInstancesLive = Metric{Name: "skewgate_wasm_instances_live", Type: Gauge, Exporter: WasmHost,
		Help: "Instances running; fewer than configured while trapped ones are recreated."}
)

// The controller, which watches the API servers and publishes snapshots.
var (
	ControllerServers = Metric{Name: "skewgate_controller_servers", Type: Gauge, Exporter: Controller,
		Help: "API servers known and probed."}
	ControllerServersHealthy = Metric{Name: "skewgate_controller_servers_healthy", Type: Gauge, Exporter: Controller,
		Help: "API servers considered healthy: /readyz last answered 200, no connection was refused since, and fewer consecutive probes than the failure threshold timed out or lost their connection since."}
	ControllerMembers = Metric{Name: "skewgate_controller_members", Type: Gauge, Exporter: Controller, Labels: []string{"source"},
		Help: "API servers that are members (probed, and routed to while healthy), by what names them: listed (--apiserver), local (--local-apiserver), " +
			"lease (an identity Lease), endpointslice (the kubernetes Service's EndpointSlices); a member several name counts under each."}
	ControllerMembershipDifferences = Metric{Name: "skewgate_controller_membership_differences", Type: Gauge, Exporter: Controller,
		Help: "API servers listed (--apiserver, --local-apiserver) that the cluster does not announce, plus those it announces that --apiserver, when it lists any, does not; " +
			"0 until the cluster's membership has been read, and without --kubeconfig."}
	ControllerSnapshotGeneration = Metric{Name: "skewgate_controller_snapshot_generation", Type: Gauge, Exporter: Controller,
		Help: "Generation of the last published snapshot."}
	ControllerSnapshotServers = Metric{Name: "skewgate_controller_snapshot_servers", Type: Gauge, Exporter: Controller,
		Help: "API servers in the last published snapshot."}
	ControllerPublishErrors = Metric{Name: "skewgate_controller_publish_errors_total", Type: Counter, Exporter: Controller,
		Help: "Snapshots not taken where they are published (in skewgate serve: the plugin VMs rejected the configuration made of it); " +
			"the previous one stays and the snapshot is offered again on the next poll."}
	ControllerInvalidSnapshots = Metric{Name: "skewgate_controller_invalid_snapshots_total", Type: Counter, Exporter: Controller,
		Help: "Built snapshots that failed validation and were not published."}
	ControllerFetchErrors = Metric{Name: "skewgate_controller_fetch_errors_total", Type: Counter, Exporter: Controller, Labels: []string{"server", "path", "reason"},
		Help: "Failed requests to API servers, by server address, path and reason."}
	ControllerLastSuccessfulPoll = Metric{Name: "skewgate_controller_last_successful_poll_timestamp_seconds", Type: Gauge, Exporter: Controller,
		Help: "End of the last poll after which at least one server was healthy and the published snapshot was up to date."}
	ControllerFrontProxyCertificateAuthenticates = Metric{Name: "skewgate_controller_front_proxy_certificate_authenticates", Type: Gauge, Exporter: Controller,
		Help: "1 when an API server authenticated the front-proxy client certificate alone, without X-Remote-User, as a user: its --client-ca-file trusts it."}
	ControllerOpenAPIDocumentsFetched = Metric{Name: "skewgate_controller_openapi_documents_fetched_total", Type: Counter, Exporter: Controller,
		Help: "OpenAPI v3 group-version documents fetched and reduced to field paths: those of a group version whose hash differs between servers, once per hash."}
	ControllerOpenAPIDocumentBytes = Metric{Name: "skewgate_controller_openapi_document_bytes_total", Type: Counter, Exporter: Controller,
		Help: "Bytes of the OpenAPI v3 documents fetched; each is dropped once reduced."}
	ControllerOpenAPIDocumentErrors = Metric{Name: "skewgate_controller_openapi_document_errors_total", Type: Counter, Exporter: Controller, Labels: []string{"reason"},
		Help: "OpenAPI v3 group-version documents that could not be fetched or read, by reason; retried on later polls."}
	ControllerOpenAPIDocuments = Metric{Name: "skewgate_controller_openapi_documents", Type: Gauge, Exporter: Controller,
		Help: "Reduced OpenAPI v3 documents held: one per hash of a group version whose hash differs between servers."}
	ControllerOpenAPIFieldPaths = Metric{Name: "skewgate_controller_openapi_field_paths", Type: Gauge, Exporter: Controller,
		Help: "Field paths held by the reduced OpenAPI v3 documents, over all their kinds."}
)

// The xDS management server, which sends Envoys the plugin configuration.
var (
	XDSStreams = Metric{Name: "skewgate_xds_streams", Type: Gauge, Exporter: XDS,
		Help: "Open xDS streams."}
	XDSPushes = Metric{Name: "skewgate_xds_pushes_total", Type: Counter, Exporter: XDS,
		Help: "Plugin configurations sent to Envoys."}
	XDSAcks = Metric{Name: "skewgate_xds_acks_total", Type: Counter, Exporter: XDS,
		Help: "Plugin configurations Envoys accepted."}
	XDSNacks = Metric{Name: "skewgate_xds_nacks_total", Type: Counter, Exporter: XDS,
		Help: "Plugin configurations Envoys rejected; each kept the one it had."}
	XDSVersionInfo = Metric{Name: "skewgate_xds_version_info", Type: Gauge, Exporter: XDS, Labels: []string{"version"},
		Help: "The version served: replicas given the same snapshot serve the same one."}
	XDSRefusedStreams = Metric{Name: "skewgate_xds_refused_streams_total", Type: Counter, Exporter: XDS, Labels: []string{"reason"},
		Help: "Streams refused or ended by a limit, by reason: client_stream_limit, server_stream_limit, request_too_large, node_id_too_long, unserved_request."}
	XDSPublishFailures = Metric{Name: "skewgate_xds_publish_failures_total", Type: Counter, Exporter: XDS,
		Help: "Plugin configurations the xDS management server could not be given, the plugin's parser refusing them included; the previous configuration stayed."}
)

// The certificate, key and CA files watched for rotation.
var (
	CertificateReloads = Metric{Name: "skewgate_certificate_reloads_total", Type: Counter, Exporter: Certificates, Labels: []string{"files"},
		Help: "New content of certificate, key or CA files taken into use, by the flags naming the files."}
	CertificateReloadFailures = Metric{Name: "skewgate_certificate_reload_failures_total", Type: Counter, Exporter: Certificates, Labels: []string{"files"},
		Help: "New content of certificate, key or CA files rejected (the previous material stays), by the flags naming the files."}
)
