package envoyconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp/syntax"
	"slices"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlymutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/plugin/config"
)

// envoyTypes resolves exactly the typed configs skewgate's documents may use,
// so a mistyped or unexpected type URL fails decoding.
var envoyTypes = func() *protoregistry.Types {
	var types protoregistry.Types
	for _, m := range []proto.Message{
		&hcmv3.HttpConnectionManager{},
		&routerv3.Router{},
		&wasmfilterv3.Wasm{},
		&tlsv3.DownstreamTlsContext{},
		&tlsv3.UpstreamTlsContext{},
		&upstreamhttpv3.HttpProtocolOptions{},
		&earlymutationv3.HeaderMutation{},
		&previoushostsv3.PreviousHostsPredicate{},
		&corev3.TypedExtensionConfig{},
		&wrapperspb.StringValue{},
	} {
		if err := types.RegisterMessage(m.ProtoReflect().Type()); err != nil {
			panic(err)
		}
	}
	return &types
}()

// decodeEnvoyYAML reads doc the way Envoy does (YAML, then the proto3 JSON
// mapping, unknown fields rejected) into msg, runs the generated validation
// rules on msg and, recursively, on every typed config inside it, and rejects
// deprecated fields and enum values.
func decodeEnvoyYAML(doc []byte, msg proto.Message) error {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return fmt.Errorf("YAML: %w", err)
	}
	if err := (protojson.UnmarshalOptions{Resolver: envoyTypes}).Unmarshal(js, msg); err != nil {
		return fmt.Errorf("proto: %w", err)
	}
	return validateTree(msg)
}

type allValidator interface{ ValidateAll() error }

func validateTree(msg proto.Message) error {
	var errs []error
	if v, ok := msg.(allValidator); ok {
		if err := v.ValidateAll(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", msg.ProtoReflect().Descriptor().FullName(), err))
		}
	}
	inspectFields(msg.ProtoReflect(), &errs)
	return errors.Join(errs...)
}

// inspectFields rejects deprecated fields and enum values set anywhere in m,
// and validates the message inside every Any it reaches.
func inspectFields(m protoreflect.Message, errs *[]error) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{Resolver: envoyTypes})
		if err == nil {
			err = validateTree(inner)
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %w", a.GetTypeUrl(), err))
		}
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if isDeprecated(fd.Options()) {
			*errs = append(*errs, fmt.Errorf("deprecated field %s", fd.FullName()))
		}
		var values []protoreflect.Value
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				values = append(values, mv)
				return true
			})
			fd = fd.MapValue()
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				values = append(values, v.List().Get(i))
			}
		default:
			values = append(values, v)
		}
		for _, value := range values {
			switch {
			case fd.Message() != nil:
				inspectFields(value.Message(), errs)
			case fd.Enum() != nil:
				if ev := fd.Enum().Values().ByNumber(value.Enum()); ev != nil && isDeprecated(ev.Options()) {
					*errs = append(*errs, fmt.Errorf("deprecated value %s of %s", ev.Name(), fd.FullName()))
				}
			}
		}
		return true
	})
}

func isDeprecated(options proto.Message) bool {
	switch o := options.(type) {
	case *descriptorpb.FieldOptions:
		return o.GetDeprecated()
	case *descriptorpb.EnumValueOptions:
		return o.GetDeprecated()
	}
	return false
}

func unpack[T proto.Message](a *anypb.Any) (T, error) {
	var zero T
	if a == nil {
		return zero, errors.New("missing typed config")
	}
	m, err := anypb.UnmarshalNew(a, proto.UnmarshalOptions{Resolver: envoyTypes})
	if err != nil {
		return zero, err
	}
	t, ok := m.(T)
	if !ok {
		return zero, fmt.Errorf("typed config is %s, want %T", a.GetTypeUrl(), zero)
	}
	return t, nil
}

// pluginConfigKeys are the fields an example configuration sets explicitly,
// so no default decides what the rendered files do.
var pluginConfigKeys = []string{"routingHeader", "retryAfterSeconds", "trustPeerProxiedHeader", "identityMode", "discoveryAuthorizationCacheSeconds", "snapshot"}

// parsePluginConfig judges raw by the plugin's own rules (config.Parse, which
// reads the snapshot with discovery's reader) and requires every field to be
// set.
func parsePluginConfig(raw []byte) (*config.Config, error) {
	cfg, err := config.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("plugin %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	for _, k := range pluginConfigKeys {
		if _, ok := top[k]; !ok {
			return nil, fmt.Errorf("plugin configuration: %s missing", k)
		}
	}
	return cfg, nil
}

// checkWasmFilter checks the skewgate Wasm filter config and returns its
// parsed plugin configuration.
func checkWasmFilter(w *wasmfilterv3.Wasm) (*config.Config, error) {
	c := w.GetConfig()
	vm := c.GetVmConfig()
	switch {
	case c.GetName() != FilterName || c.GetRootId() != FilterName || vm.GetVmId() != FilterName:
		return nil, fmt.Errorf("wasm: name/root_id/vm_id = %q/%q/%q, want %q", c.GetName(), c.GetRootId(), vm.GetVmId(), FilterName)
	case vm.GetRuntime() != wasmRuntimeV8:
		return nil, fmt.Errorf("wasm: runtime %q", vm.GetRuntime())
	case c.GetFailurePolicy() != wasmv3.FailurePolicy_FAIL_CLOSED:
		return nil, fmt.Errorf("wasm: failure_policy %s, want FAIL_CLOSED", c.GetFailurePolicy())
	case !path.IsAbs(vm.GetCode().GetLocal().GetFilename()):
		return nil, fmt.Errorf("wasm: code must be a local absolute file, got %v", vm.GetCode())
	}
	configuration, err := unpack[*wrapperspb.StringValue](c.GetConfiguration())
	if err != nil {
		return nil, fmt.Errorf("wasm: configuration: %w", err)
	}
	return parsePluginConfig([]byte(configuration.GetValue()))
}

// checkECDSResource checks a file-based ECDS DiscoveryResponse and returns
// the Wasm filter config it delivers.
func checkECDSResource(doc []byte) (*wasmfilterv3.Wasm, error) {
	var resp discoveryv3.DiscoveryResponse
	if err := decodeEnvoyYAML(doc, &resp); err != nil {
		return nil, err
	}
	if resp.GetVersionInfo() == "" || len(resp.GetResources()) != 1 {
		return nil, fmt.Errorf("ECDS: want a version and one resource, got %q and %d", resp.GetVersionInfo(), len(resp.GetResources()))
	}
	ext, err := unpack[*corev3.TypedExtensionConfig](resp.GetResources()[0])
	if err != nil {
		return nil, fmt.Errorf("ECDS resource: %w", err)
	}
	if ext.GetName() != FilterName {
		return nil, fmt.Errorf("ECDS resource name %q, want the filter name %q", ext.GetName(), FilterName)
	}
	wasm, err := unpack[*wasmfilterv3.Wasm](ext.GetTypedConfig())
	if err != nil {
		return nil, fmt.Errorf("ECDS resource: %w", err)
	}
	_, err = checkWasmFilter(wasm)
	return wasm, err
}

// checkBootstrap decodes and validates a rendered bootstrap and checks
// skewgate's invariants. ecdsWasm is the filter config delivered by ECDS,
// or nil when the bootstrap must carry it inline.
func checkBootstrap(doc []byte, ecdsWasm *wasmfilterv3.Wasm) error {
	var b bootstrapv3.Bootstrap
	if err := decodeEnvoyYAML(doc, &b); err != nil {
		return err
	}
	if got := b.GetAdmin().GetAddress().GetSocketAddress().GetAddress(); got != "127.0.0.1" {
		return fmt.Errorf("admin listens on %q, want 127.0.0.1", got)
	}
	listeners := b.GetStaticResources().GetListeners()
	if len(listeners) != 1 || len(listeners[0].GetFilterChains()) != 1 {
		return fmt.Errorf("want one listener with one filter chain, got %d listeners", len(listeners))
	}
	chain := listeners[0].GetFilterChains()[0]
	downstream, err := unpack[*tlsv3.DownstreamTlsContext](chain.GetTransportSocket().GetTypedConfig())
	if err != nil {
		return fmt.Errorf("listener TLS: %w", err)
	}
	if err := checkDownstreamTLS(downstream); err != nil {
		return err
	}
	if len(chain.GetFilters()) != 1 {
		return fmt.Errorf("want only the HTTP connection manager, got %d network filters", len(chain.GetFilters()))
	}
	hcm, err := unpack[*hcmv3.HttpConnectionManager](chain.GetFilters()[0].GetTypedConfig())
	if err != nil {
		return fmt.Errorf("network filter: %w", err)
	}
	plugin, err := checkHTTPConnectionManager(hcm, ecdsWasm)
	if err != nil {
		return err
	}
	if plugin.IdentityMode == config.IdentityFrontProxy && !downstream.GetRequireClientCertificate().GetValue() {
		return errors.New("front-proxy identity needs verified client certificates")
	}
	steered, balanced, err := checkRoutes(hcm.GetRouteConfig(), plugin.RoutingHeader)
	if err != nil {
		return err
	}
	mode := plugin.IdentityMode
	clusters := map[string]*clusterv3.Cluster{}
	var perServer int
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == XDSClusterName {
			if err := checkXDSCluster(c); err != nil {
				return fmt.Errorf("cluster %s: %w", c.GetName(), err)
			}
			continue
		}
		if err := checkCluster(c, mode); err != nil {
			return fmt.Errorf("cluster %s: %w", c.GetName(), err)
		}
		clusters[c.GetName()] = c
		if c.GetName() != balanced && !strings.HasSuffix(c.GetName(), discovery.FrontProxyClusterSuffix) {
			perServer++
		}
	}
	if all := clusters[balanced]; all == nil || len(all.GetLoadAssignment().GetEndpoints()) != 1 ||
		len(all.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()) != perServer {
		return fmt.Errorf("the default route's cluster %q must exist and hold every API server", balanced)
	}
	for _, r := range hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		if r.GetRoute().GetCluster() == balanced && r.GetRoute().GetRetryPolicy().GetNumRetries().GetValue() != uint32(perServer-1) {
			return fmt.Errorf("route %s retries %d times, want each of the other %d servers once", r.GetName(),
				r.GetRoute().GetRetryPolicy().GetNumRetries().GetValue(), perServer-1)
		}
	}
	for name, c := range clusters {
		if base, ok := strings.CutSuffix(name, discovery.FrontProxyClusterSuffix); ok {
			if err := checkFrontProxyTwin(clusters[base], c); err != nil {
				return fmt.Errorf("cluster %s: %w", name, err)
			}
		}
	}
	for _, srv := range plugin.Snapshot.Servers {
		if c := clusters[srv.Cluster]; c == nil || srv.Cluster == balanced {
			return fmt.Errorf("snapshot server %s steers to %q, which is not a per-server cluster", srv.ID, srv.Cluster)
		}
		if twin := srv.Cluster + discovery.FrontProxyClusterSuffix; mode == config.IdentityFrontProxy && clusters[twin] == nil {
			return fmt.Errorf("snapshot server %s has no cluster %q for the requests whose identity the plugin asserts", srv.ID, twin)
		}
	}
	if steered != plugin.RoutingHeader {
		return fmt.Errorf("route reads %q, plugin writes %q", steered, plugin.RoutingHeader)
	}
	if err := checkManagementServer(&b, hcm); err != nil {
		return err
	}
	return checkExplicitNotFoundCode(doc)
}

// checkManagementServer requires that a plugin filter delivered over gRPC
// reaches the management server's cluster, directly or through ADS, and that
// a bootstrap without one has neither that cluster nor an ADS stream.
func checkManagementServer(b *bootstrapv3.Bootstrap, hcm *hcmv3.HttpConnectionManager) error {
	source := hcm.GetHttpFilters()[0].GetConfigDiscovery().GetConfigSource()
	var cluster *clusterv3.Cluster
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == XDSClusterName {
			cluster = c
		}
	}
	dynamic := b.GetDynamicResources()
	switch {
	case source.GetAds() == nil && dynamic != nil:
		return errors.New("dynamic_resources without a plugin filter delivered through ADS")
	case source.GetAds() != nil:
		if dynamic.GetLdsConfig() != nil || dynamic.GetCdsConfig() != nil {
			return errors.New("ADS must deliver the plugin filter only: listeners and clusters stay static")
		}
		if err := checkGRPCSource(dynamic.GetAdsConfig()); err != nil {
			return fmt.Errorf("ads_config: %w", err)
		}
	}
	overGRPC := source.GetApiConfigSource() != nil || source.GetAds() != nil
	switch {
	case overGRPC && cluster == nil:
		return fmt.Errorf("the plugin filter comes over gRPC but there is no cluster %s", XDSClusterName)
	case !overGRPC && cluster != nil:
		return fmt.Errorf("cluster %s is there but the plugin filter does not come over gRPC", XDSClusterName)
	}
	return nil
}

// checkGRPCSource requires the v3 gRPC stream to the management server's
// cluster.
func checkGRPCSource(api *corev3.ApiConfigSource) error {
	services := api.GetGrpcServices()
	switch {
	case api == nil:
		return errors.New("missing")
	case api.GetApiType() != corev3.ApiConfigSource_GRPC:
		return fmt.Errorf("api_type %s, want GRPC", api.GetApiType())
	case api.GetTransportApiVersion() != corev3.ApiVersion_V3:
		return fmt.Errorf("transport_api_version %s, want V3", api.GetTransportApiVersion())
	case len(services) != 1 || services[0].GetEnvoyGrpc().GetClusterName() != XDSClusterName:
		return fmt.Errorf("grpc_services %v, want Envoy's gRPC client to cluster %s", services, XDSClusterName)
	}
	return nil
}

// checkXDSCluster requires HTTP/2 over TLS that verifies the management
// server by name and presents a client certificate, which it demands.
func checkXDSCluster(c *clusterv3.Cluster) error {
	tls, err := unpack[*tlsv3.UpstreamTlsContext](c.GetTransportSocket().GetTypedConfig())
	if err != nil {
		return fmt.Errorf("upstream TLS: %w", err)
	}
	common := tls.GetCommonTlsContext()
	validation := common.GetValidationContext()
	sans := validation.GetMatchTypedSubjectAltNames()
	switch {
	case tls.GetSni() == "":
		return errors.New("no SNI")
	case validation.GetTrustedCa().GetFilename() == "":
		return errors.New("no CA verifies the management server")
	case len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_DNS || sans[0].GetMatcher().GetExact() != tls.GetSni():
		return fmt.Errorf("SAN check %v, want DNS %s", sans, tls.GetSni())
	case len(common.GetTlsCertificates()) != 1:
		return fmt.Errorf("%d client certificates, want the one the management server requires", len(common.GetTlsCertificates()))
	case common.GetTlsParams().GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2:
		return errors.New("TLS minimum must be TLSv1_2")
	case !slices.Equal(common.GetAlpnProtocols(), []string{"h2"}):
		return fmt.Errorf("ALPN %q, want h2: gRPC servers refuse connections without it", common.GetAlpnProtocols())
	}
	options, err := unpack[*upstreamhttpv3.HttpProtocolOptions](c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey])
	if err != nil {
		return fmt.Errorf("HTTP protocol options: %w", err)
	}
	if options.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		return errors.New("gRPC needs explicit HTTP/2")
	}
	return nil
}

func checkDownstreamTLS(tls *tlsv3.DownstreamTlsContext) error {
	common := tls.GetCommonTlsContext()
	switch {
	case common.GetTlsParams().GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2:
		return fmt.Errorf("listener TLS minimum %s, want TLSv1_2", common.GetTlsParams().GetTlsMinimumProtocolVersion())
	case !slices.Equal(common.GetAlpnProtocols(), []string{"h2", "http/1.1"}):
		return fmt.Errorf("listener ALPN %q", common.GetAlpnProtocols())
	case len(common.GetTlsCertificates()) != 1:
		return errors.New("listener needs exactly one serving certificate")
	}
	ca := common.GetValidationContext().GetTrustedCa().GetFilename()
	if (ca != "") != tls.GetRequireClientCertificate().GetValue() {
		return fmt.Errorf("client CA %q but require_client_certificate=%v", ca, tls.GetRequireClientCertificate().GetValue())
	}
	return nil
}

// checkHTTPConnectionManager checks the HCM and returns the plugin
// configuration of its Wasm filter.
func checkHTTPConnectionManager(hcm *hcmv3.HttpConnectionManager, ecdsWasm *wasmfilterv3.Wasm) (*config.Config, error) {
	if hcm.GetForwardClientCertDetails() != hcmv3.HttpConnectionManager_SANITIZE {
		return nil, fmt.Errorf("forward_client_cert_details %s, want SANITIZE", hcm.GetForwardClientCertDetails())
	}
	if !hcm.GetNormalizePath().GetValue() || hcm.GetPathWithEscapedSlashesAction() != hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD {
		return nil, errors.New("normalize_path and path_with_escaped_slashes_action UNESCAPE_AND_FORWARD: the routes, the plugin and the API servers must split a path alike")
	}
	if !hcm.GetUseRemoteAddress().GetValue() || hcm.GetXffNumTrustedHops() != 0 || hcm.GetSkipXffAppend() {
		return nil, errors.New("use_remote_address must be set at the edge, trusting no client X-Forwarded-For hop and appending the peer")
	}
	if got := hcm.GetMaxRequestHeadersKb().GetValue(); got != maxRequestHeadersKB {
		return nil, fmt.Errorf("max_request_headers_kb %d, want %d", got, maxRequestHeadersKB)
	}
	if got := hcm.GetCommonHttpProtocolOptions().GetMaxHeadersCount().GetValue(); got != maxRequestHeaders {
		return nil, fmt.Errorf("common_http_protocol_options.max_headers_count %d, want %d", got, maxRequestHeaders)
	}
	var upgrades []string
	for _, u := range hcm.GetUpgradeConfigs() {
		upgrades = append(upgrades, u.GetUpgradeType())
	}
	if !slices.Contains(upgrades, "websocket") || !slices.Contains(upgrades, "spdy/3.1") {
		return nil, fmt.Errorf("upgrades %q, want websocket and spdy/3.1", upgrades)
	}
	filters := hcm.GetHttpFilters()
	if len(filters) != 2 || filters[0].GetName() != FilterName {
		var names []string
		for _, f := range filters {
			names = append(names, f.GetName())
		}
		return nil, fmt.Errorf("http_filters %q, want the %s filter then the router", names, FilterName)
	}
	if _, err := unpack[*routerv3.Router](filters[1].GetTypedConfig()); err != nil {
		return nil, fmt.Errorf("last HTTP filter: %w", err)
	}
	wasm := ecdsWasm
	if discovery := filters[0].GetConfigDiscovery(); discovery != nil {
		if ecdsWasm == nil {
			return nil, errors.New("filter uses ECDS but no ECDS resource was given")
		}
		if err := checkConfigDiscovery(discovery); err != nil {
			return nil, err
		}
	} else {
		inline, err := unpack[*wasmfilterv3.Wasm](filters[0].GetTypedConfig())
		if err != nil {
			return nil, fmt.Errorf("plugin filter: %w", err)
		}
		wasm = inline
	}
	plugin, err := checkWasmFilter(wasm)
	if err != nil {
		return nil, err
	}
	return plugin, checkEarlyRemovals(hcm, plugin.RoutingHeader)
}

func checkConfigDiscovery(d *corev3.ExtensionConfigSource) error {
	source := d.GetConfigSource()
	file := source.GetPathConfigSource()
	switch {
	case !slices.Equal(d.GetTypeUrls(), []string{wasmFilterTypeURL}):
		return fmt.Errorf("ECDS type_urls %q", d.GetTypeUrls())
	case d.GetDefaultConfig() != nil:
		return errors.New("ECDS must not fall back to a default plugin configuration")
	case source.GetResourceApiVersion() != corev3.ApiVersion_V3:
		return fmt.Errorf("ECDS resource_api_version %s, want V3", source.GetResourceApiVersion())
	case file != nil:
		if path.Dir(file.GetPath()) != file.GetWatchedDirectory().GetPath() {
			return fmt.Errorf("ECDS file %q is not in the watched directory %q", file.GetPath(), file.GetWatchedDirectory().GetPath())
		}
	case source.GetApiConfigSource() != nil:
		return checkGRPCSource(source.GetApiConfigSource())
	case source.GetAds() == nil:
		return errors.New("ECDS must use a path_config_source, or the management server over gRPC (api_config_source or ads)")
	}
	return nil
}

// checkEarlyRemovals requires that a client's copies of the routing header
// and of the client-address headers other than X-Forwarded-For are removed
// before routing.
func checkEarlyRemovals(hcm *hcmv3.HttpConnectionManager, routingHeader string) error {
	var removed []string
	for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
		m, err := unpack[*earlymutationv3.HeaderMutation](ext.GetTypedConfig())
		if err != nil {
			return fmt.Errorf("early header mutation: %w", err)
		}
		for _, mut := range m.GetMutations() {
			if mut.GetRemoveOnMatch() != nil {
				return errors.New("early header mutation: remove_on_match needs Envoy 1.36, above the supported floor")
			}
			removed = append(removed, mut.GetRemove())
		}
	}
	for _, h := range []string{routingHeader, "x-real-ip", "forwarded"} {
		if !slices.Contains(removed, h) {
			return fmt.Errorf("early removals %q must cover %q", removed, h)
		}
	}
	return nil
}

// checkRoutes requires the routes in pairs that match alike but for the
// routing header, steered route first, with equal timeouts: none at all for
// long-running requests, kube-apiserver's request timeout for the others. The
// last pair must catch every request and time out. Every regex must load in
// Envoy. It returns the steering header and the balanced cluster.
func checkRoutes(rc *routev3.RouteConfiguration, routingHeader string) (steered, balanced string, err error) {
	if !slices.Contains(rc.GetRequestHeadersToRemove(), routingHeader) {
		return "", "", fmt.Errorf("routing header %q must not reach the API servers", routingHeader)
	}
	hosts := rc.GetVirtualHosts()
	if len(hosts) != 1 {
		return "", "", errors.New("want one virtual host")
	}
	routes := hosts[0].GetRoutes()
	if len(routes) == 0 || len(routes)%2 != 0 {
		return "", "", fmt.Errorf("want routes in steered and balanced pairs, got %d routes", len(routes))
	}
	for i := 0; i < len(routes); i += 2 {
		s, b := routes[i], routes[i+1]
		match := proto.Clone(s.GetMatch()).(*routev3.RouteMatch)
		at := slices.IndexFunc(match.GetHeaders(), func(h *routev3.HeaderMatcher) bool {
			return h.GetName() == routingHeader && h.GetPresentMatch() && !h.GetInvertMatch()
		})
		if at < 0 {
			return "", "", fmt.Errorf("route %s must match presence of %q", s.GetName(), routingHeader)
		}
		match.Headers = slices.Delete(match.Headers, at, at+1)
		if !proto.Equal(match, b.GetMatch()) {
			return "", "", fmt.Errorf("route %s must match as route %s but for the routing header", s.GetName(), b.GetName())
		}
		action := s.GetRoute()
		if action.GetClusterHeader() != routingHeader || action.GetClusterNotFoundResponseCode() != routev3.RouteAction_SERVICE_UNAVAILABLE {
			return "", "", fmt.Errorf("route %s must use cluster_header and answer 503 for unknown clusters", s.GetName())
		}
		if b.GetRoute().GetCluster() == "" || (balanced != "" && b.GetRoute().GetCluster() != balanced) {
			return "", "", fmt.Errorf("route %s must send everything unsteered to the one balanced cluster", b.GetName())
		}
		balanced = b.GetRoute().GetCluster()
		sTimeouts, sLong, err := routeTimeouts(s)
		if err != nil {
			return "", "", err
		}
		bTimeouts, _, err := routeTimeouts(b)
		if err != nil {
			return "", "", err
		}
		if sTimeouts != bTimeouts {
			return "", "", fmt.Errorf("routes %s and %s must have the same timeouts", s.GetName(), b.GetName())
		}
		if err := checkRetryPolicy(s, true); err != nil {
			return "", "", err
		}
		if err := checkRetryPolicy(b, false); err != nil {
			return "", "", err
		}
		if last := i == len(routes)-2; last {
			m := b.GetMatch()
			if m.GetPrefix() != "/" || len(m.GetHeaders()) != 0 || len(m.GetQueryParameters()) != 0 {
				return "", "", errors.New("the last routes must catch every request")
			}
			if sLong {
				return "", "", fmt.Errorf("the catch-all routes must time out after %s", requestTimeout)
			}
		}
	}
	if err := checkRouteRegexes(rc); err != nil {
		return "", "", err
	}
	return routingHeader, balanced, nil
}

// retryableFailures are the failures Envoy tells that prove a request never
// reached a server: the connection failed, the server refused the stream, or
// the stream was reset before a byte of the request went out.
var retryableFailures = map[string]bool{"connect-failure": true, "refused-stream": true, "reset-before-request": true}

// checkRetryPolicy requires a route to retry what provably never reached a
// server and nothing else (no status code, header or plain reset), as
// skewgate serve does. A balanced route retries on a server it has not tried
// (previous_hosts) and a steered one, whose cluster holds one server, only
// what the server never saw, never a connection failure there again.
func checkRetryPolicy(r *routev3.Route, steered bool) error {
	p := r.GetRoute().GetRetryPolicy()
	if p == nil {
		return fmt.Errorf("route %s has no retry policy", r.GetName())
	}
	on := strings.Split(p.GetRetryOn(), ",")
	for _, condition := range on {
		if !retryableFailures[condition] {
			return fmt.Errorf("route %s retries on %q, which a request that reached a server can meet", r.GetName(), condition)
		}
	}
	if len(p.GetRetriableStatusCodes()) != 0 || len(p.GetRetriableHeaders()) != 0 || len(p.GetRetriableRequestHeaders()) != 0 {
		return fmt.Errorf("route %s retries by status code or header", r.GetName())
	}
	if p.GetNumRetries() == nil || p.GetNumRetries().GetValue() == 0 {
		return fmt.Errorf("route %s: num_retries must be explicit and positive", r.GetName())
	}
	previousHosts := len(p.GetRetryHostPredicate()) == 1 && p.GetRetryHostPredicate()[0].GetName() == "envoy.retry_host_predicates.previous_hosts"
	switch {
	case steered && slices.Contains(on, "connect-failure"):
		return fmt.Errorf("steered route %s retries a connection failure on the one server that just failed", r.GetName())
	case steered && (p.GetNumRetries().GetValue() != 1 || len(p.GetRetryHostPredicate()) != 0):
		return fmt.Errorf("steered route %s: want one retry on its one server", r.GetName())
	case !steered && (!previousHosts || p.GetHostSelectionRetryMaxAttempts() < 2):
		return fmt.Errorf("balanced route %s must retry on a server it has not tried (previous_hosts, several host selection attempts)", r.GetName())
	case !steered && !slices.Contains(on, "connect-failure"):
		return fmt.Errorf("balanced route %s must retry a connection failure on another server, as skewgate serve does", r.GetName())
	}
	return nil
}

// routeTimeouts describes a route's timeouts; long is true when the route
// disables both the route and the stream idle timeout.
func routeTimeouts(r *routev3.Route) (desc string, long bool, err error) {
	a := r.GetRoute()
	want, err := time.ParseDuration(requestTimeout)
	if err != nil {
		return "", false, err
	}
	switch {
	case a.GetTimeout() != nil && a.GetTimeout().AsDuration() == 0 && a.GetIdleTimeout() != nil && a.GetIdleTimeout().AsDuration() == 0:
		return "none", true, nil
	case a.GetTimeout() != nil && a.GetTimeout().AsDuration() == want && a.GetIdleTimeout() == nil:
		return requestTimeout, false, nil
	}
	return "", false, fmt.Errorf("route %s must either disable the route and idle timeouts (long-running) or time out after %s, got timeout %v and idle_timeout %v",
		r.GetName(), requestTimeout, a.GetTimeout().AsDuration(), a.GetIdleTimeout().AsDuration())
}

// maxRegexInstructions bounds the Go-compiled size of a route regex. Envoy
// refuses a regex whose RE2 program exceeds 100 instructions
// (re2.max_program_size.error_level). For a pattern whose classes are all
// ASCII, RE2 counts each class as one instruction, as Go does, plus a few for
// its unanchored search; non-ASCII classes, '.' included, cost RE2 a dozen
// instructions each for their UTF-8 byte sequences, so they are refused.
const maxRegexInstructions = 85

// checkRouteRegexes applies maxRegexInstructions to every regex in rc.
func checkRouteRegexes(rc *routev3.RouteConfiguration) error {
	var errs []error
	eachMessage(rc.ProtoReflect(), func(m protoreflect.Message) {
		rm, ok := m.Interface().(*matcherv3.RegexMatcher)
		if !ok {
			return
		}
		if err := checkRegexSize(rm.GetRegex()); err != nil {
			errs = append(errs, fmt.Errorf("regex %q: %w", rm.GetRegex(), err))
		}
	})
	return errors.Join(errs...)
}

func checkRegexSize(regex string) error {
	re, err := syntax.Parse(regex, syntax.Perl)
	if err != nil {
		return err
	}
	var nonASCII bool
	var walk func(*syntax.Regexp)
	walk = func(r *syntax.Regexp) {
		switch r.Op {
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			nonASCII = true
		case syntax.OpCharClass:
			nonASCII = nonASCII || r.Rune[len(r.Rune)-1] > 0x7f
		case syntax.OpLiteral:
			nonASCII = nonASCII || slices.ContainsFunc(r.Rune, func(c rune) bool { return c > 0x7f })
		}
		for _, sub := range r.Sub {
			walk(sub)
		}
	}
	walk(re)
	if nonASCII {
		return errors.New("matches non-ASCII characters, which RE2 compiles to large programs")
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return err
	}
	if len(prog.Inst) > maxRegexInstructions {
		return fmt.Errorf("compiles to %d instructions, more than %d fit Envoy's RE2 program size limit", len(prog.Inst), maxRegexInstructions)
	}
	return nil
}

// eachMessage calls fn for m and every message nested in it.
func eachMessage(m protoreflect.Message, fn func(protoreflect.Message)) {
	fn(m)
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() == nil || fd.IsMap() {
			return true
		}
		if fd.IsList() {
			for i := 0; i < v.List().Len(); i++ {
				eachMessage(v.List().Get(i).Message(), fn)
			}
			return true
		}
		eachMessage(v.Message(), fn)
		return true
	})
}

// checkFrontProxyTwin requires that the front-proxy cluster of a server
// differs from the server's plain cluster in its name and client certificate
// only.
func checkFrontProxyTwin(plain, frontProxy *clusterv3.Cluster) error {
	if plain == nil {
		return errors.New("no plain cluster of the same server")
	}
	plainTLS, err := unpack[*tlsv3.UpstreamTlsContext](plain.GetTransportSocket().GetTypedConfig())
	if err != nil {
		return err
	}
	frontProxyTLS, err := unpack[*tlsv3.UpstreamTlsContext](frontProxy.GetTransportSocket().GetTypedConfig())
	if err != nil {
		return err
	}
	if frontProxyTLS.GetCommonTlsContext() != nil {
		frontProxyTLS.CommonTlsContext.TlsCertificates = nil
	}
	a, b := proto.Clone(plain).(*clusterv3.Cluster), proto.Clone(frontProxy).(*clusterv3.Cluster)
	for _, c := range []*clusterv3.Cluster{a, b} {
		c.Name, c.TransportSocket = "", nil
		if c.LoadAssignment != nil {
			c.LoadAssignment.ClusterName = ""
		}
	}
	if !proto.Equal(a, b) || !proto.Equal(plainTLS, frontProxyTLS) {
		return fmt.Errorf("differs from cluster %s beyond its name and client certificate", plain.GetName())
	}
	return nil
}

func checkCluster(c *clusterv3.Cluster, mode IdentityMode) error {
	tls, err := unpack[*tlsv3.UpstreamTlsContext](c.GetTransportSocket().GetTypedConfig())
	if err != nil {
		return fmt.Errorf("upstream TLS: %w", err)
	}
	common := tls.GetCommonTlsContext()
	validation := common.GetValidationContext()
	sans := validation.GetMatchTypedSubjectAltNames()
	switch {
	case tls.GetSni() != APIServerSNI:
		return fmt.Errorf("SNI %q", tls.GetSni())
	case validation.GetTrustedCa().GetFilename() == "":
		return errors.New("no CA verifies the API server")
	case len(sans) != 1 || sans[0].GetSanType() != tlsv3.SubjectAltNameMatcher_DNS || sans[0].GetMatcher().GetExact() != APIServerSNI:
		return fmt.Errorf("SAN check %v, want DNS %s", sans, APIServerSNI)
	case common.GetTlsParams().GetTlsMinimumProtocolVersion() != tlsv3.TlsParameters_TLSv1_2:
		return errors.New("upstream TLS minimum must be TLSv1_2")
	}
	// Only the clusters of asserted identities present the front-proxy
	// certificate, and only in front-proxy mode.
	frontProxy := strings.HasSuffix(c.GetName(), discovery.FrontProxyClusterSuffix)
	if frontProxy && mode != config.IdentityFrontProxy {
		return fmt.Errorf("a front-proxy cluster in %s identity mode", mode)
	}
	if got := len(common.GetTlsCertificates()); got != 0 && !frontProxy {
		return fmt.Errorf("%d client certificates on a cluster for requests whose identity the plugin does not assert", got)
	} else if got != 1 && frontProxy {
		return fmt.Errorf("%d client certificates on a front-proxy cluster, want the front-proxy certificate", got)
	}
	options, err := unpack[*upstreamhttpv3.HttpProtocolOptions](c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsKey])
	if err != nil {
		return fmt.Errorf("HTTP protocol options: %w", err)
	}
	if options.GetUseDownstreamProtocolConfig() == nil {
		return errors.New("upstream protocol must follow the client's (HTTP/1.1 for upgrades)")
	}
	checks := c.GetHealthChecks()
	if len(checks) != 1 || checks[0].GetHttpHealthCheck().GetPath() != "/readyz" {
		return errors.New("want one active /readyz health check")
	}
	if c.GetOutlierDetection() == nil {
		return errors.New("no outlier detection")
	}
	// Every server while none is healthy, never a share of the servers known
	// to be down while one is healthy (discovery's Routable).
	if threshold := c.GetCommonLbConfig().GetHealthyPanicThreshold(); threshold == nil || threshold.GetValue() <= 0 ||
		threshold.GetValue() >= 100.0/discovery.MaxServers {
		return fmt.Errorf("healthy_panic_threshold %v: want a percentage above 0 and below one server of %d", threshold, discovery.MaxServers)
	}
	return nil
}

// checkExplicitNotFoundCode looks at the document itself: proto3 cannot tell
// an explicit SERVICE_UNAVAILABLE from the default.
func checkExplicitNotFoundCode(doc []byte) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	var generic any
	if err := json.Unmarshal(js, &generic); err != nil {
		return err
	}
	var found, explicit int
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["cluster_header"]; ok {
				found++
				if v["cluster_not_found_response_code"] == "SERVICE_UNAVAILABLE" {
					explicit++
				}
			}
			for _, child := range v {
				walk(child)
			}
		case []any:
			for _, child := range v {
				walk(child)
			}
		}
	}
	walk(generic)
	if found == 0 || explicit != found {
		return fmt.Errorf("%d of %d cluster_header routes set cluster_not_found_response_code: SERVICE_UNAVAILABLE explicitly", explicit, found)
	}
	return nil
}

func errorContains(err error, want string) bool {
	return err != nil && strings.Contains(err.Error(), want)
}
