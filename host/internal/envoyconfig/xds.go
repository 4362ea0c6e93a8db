package envoyconfig

import (
	"errors"
	"fmt"
	"net/netip"
)

// XDSClusterName is the bootstrap cluster that reaches skewgate's management
// server; no API server cluster may be named so.
const XDSClusterName = "skewgate_xds"

// XDSSource is the management server (`skewgate-xds --xds-bind-address`)
// an Envoy rendered by RenderXDS receives the plugin filter from. Paths are
// paths on the Envoy host and must be absolute.
type XDSSource struct {
	// Address is the management server's IP address or DNS name; a name
	// resolving to several controller replicas is fine, they serve the same
	// versions.
	Address string
	Port    uint32
	// ServerName is sent as SNI and must be a DNS name in the management
	// server's certificate; default Address, which must then be a DNS name.
	ServerName string
	// CAPath verifies the management server's serving certificate.
	CAPath string
	// ClientCertPath and ClientKeyPath are the certificate Envoy presents:
	// the management server accepts only clients its --xds-client-ca-file
	// signed, because the configuration describes every API server.
	ClientCertPath, ClientKeyPath string
	// ADS subscribes through the aggregated discovery stream
	// (dynamic_resources.ads_config) instead of a stream of the
	// ExtensionConfigDiscoveryService of its own.
	ADS bool
}

// RenderXDS returns the Envoy bootstrap for spec whose plugin filter is
// delivered over gRPC by source. As with RenderECDS there is no default
// configuration: the listener waits for the first resource, and a resource
// Envoy rejects leaves the previous one in force.
func RenderXDS(spec Spec, source XDSSource) ([]byte, error) {
	s, err := spec.normalized()
	if err != nil {
		return nil, err
	}
	if err := source.validate(&s); err != nil {
		return nil, err
	}
	if source.ServerName == "" {
		source.ServerName = source.Address
	}
	return marshalYAML(s.bootstrap(object{
		{"name", FilterName},
		{"config_discovery", object{
			{"config_source", source.configSource()},
			{"type_urls", list{wasmFilterTypeURL}},
		}},
	}, &source))
}

func (x *XDSSource) validate(s *Spec) error {
	var errs []error
	if err := checkAddress(x.Address); err != nil {
		errs = append(errs, fmt.Errorf("address: %w", err))
	}
	if err := checkPort(x.Port); err != nil {
		errs = append(errs, fmt.Errorf("port: %w", err))
	}
	name := x.ServerName
	if name == "" {
		name = x.Address
	}
	if _, err := netip.ParseAddr(name); err == nil {
		errs = append(errs, fmt.Errorf("server name %q: must be a DNS name in the management server's certificate, not an IP address", name))
	} else if err := checkAddress(name); err != nil {
		errs = append(errs, fmt.Errorf("server name: %w", err))
	}
	for _, f := range []struct{ name, path string }{
		{"CA", x.CAPath},
		{"client certificate", x.ClientCertPath},
		{"client key", x.ClientKeyPath},
	} {
		if err := checkPath(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s path: %w", f.name, err))
		}
	}
	if s.AllServersCluster == XDSClusterName {
		errs = append(errs, fmt.Errorf("all-servers cluster: %q is the management server's cluster", XDSClusterName))
	}
	for i, srv := range s.Servers {
		if srv.Cluster == XDSClusterName {
			errs = append(errs, fmt.Errorf("servers[%d]: cluster %q is the management server's cluster", i, XDSClusterName))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("envoyconfig: invalid xDS source: %w", err)
	}
	return nil
}

func (x *XDSSource) configSource() object {
	if x.ADS {
		return object{{"ads", object{}}, {"resource_api_version", "V3"}}
	}
	return object{{"api_config_source", x.apiConfigSource()}, {"resource_api_version", "V3"}}
}

// apiConfigSource is the gRPC stream to the management server. The node
// travels in the first request only: the server keeps it for the stream.
func (x *XDSSource) apiConfigSource() object {
	return object{
		{"api_type", "GRPC"},
		{"transport_api_version", "V3"},
		{"grpc_services", list{object{{"envoy_grpc", object{{"cluster_name", XDSClusterName}}}}}},
		{"set_node_on_first_message_only", true},
	}
}

func (x *XDSSource) cluster() object {
	discovery := "STRICT_DNS"
	if _, err := netip.ParseAddr(x.Address); err == nil {
		discovery = "STATIC"
	}
	return object{
		{"name", XDSClusterName},
		{"type", discovery},
		{"connect_timeout", "5s"},
		{"load_assignment", object{
			{"cluster_name", XDSClusterName},
			{"endpoints", list{object{{"lb_endpoints", list{
				object{{"endpoint", object{{"address", socketAddress(x.Address, x.Port)}}}},
			}}}}},
		}},
		// gRPC is HTTP/2 only. Pings find a management server that vanished
		// without closing the connection, so Envoy moves to another replica.
		{"typed_extension_protocol_options", object{{httpProtocolOptionsKey, object{
			{"@type", httpProtocolOptionsURL},
			{"explicit_http_config", object{{"http2_protocol_options", object{
				{"connection_keepalive", object{{"interval", "30s"}, {"timeout", "15s"}}},
			}}}},
		}}}},
		{"upstream_connection_options", upstreamTCPKeepalive},
		{"transport_socket", object{
			{"name", "envoy.transport_sockets.tls"},
			{"typed_config", object{
				{"@type", upstreamTLSTypeURL},
				{"sni", x.ServerName},
				{"common_tls_context", object{
					{"tls_params", object{{"tls_minimum_protocol_version", "TLSv1_2"}}},
					// gRPC servers refuse TLS connections that do not
					// negotiate h2.
					{"alpn_protocols", list{"h2"}},
					{"tls_certificates", list{certificate(x.ClientCertPath, x.ClientKeyPath)}},
					{"validation_context", object{
						{"trusted_ca", object{{"filename", x.CAPath}}},
						{"match_typed_subject_alt_names", list{object{
							{"san_type", "DNS"},
							{"matcher", object{{"exact", x.ServerName}}},
						}}},
					}},
				}},
			}},
		}},
	}
}
