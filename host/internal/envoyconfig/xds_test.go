package envoyconfig

import (
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	"google.golang.org/protobuf/proto"
)

func exampleECDSWasm(t *testing.T) *wasmfilterv3.Wasm {
	t.Helper()
	spec := exampleSpec()
	resource, err := RenderECDSResource(spec.PluginConfig, spec.WasmPath, exampleECDSVersion)
	if err != nil {
		t.Fatal(err)
	}
	wasm, err := checkECDSResource(resource)
	if err != nil {
		t.Fatal(err)
	}
	return wasm
}

func TestXDSBootstrapsPassEnvoyValidationAndInvariants(t *testing.T) {
	wasm := exampleECDSWasm(t)
	for _, tc := range []struct {
		name   string
		source func(*XDSSource)
	}{
		{"ExtensionConfigDiscoveryService", func(*XDSSource) {}},
		{"ADS", func(x *XDSSource) { x.ADS = true }},
		{"management server by IP address", func(x *XDSSource) { x.Address, x.ServerName = "10.0.0.20", "skewgate-xds.kube-system.svc" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := exampleXDSSource()
			tc.source(&source)
			doc, err := RenderXDS(exampleSpec(), source)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkBootstrap(doc, wasm); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The xDS bootstrap is the file-based ECDS one with another config source
// and the management server's cluster: everything that decides requests is
// the same.
func TestXDSBootstrapDiffersFromTheECDSOneOnlyInWhereThePluginComesFrom(t *testing.T) {
	spec := exampleSpec()
	for _, ads := range []bool{false, true} {
		t.Run(map[bool]string{false: "ExtensionConfigDiscoveryService", true: "ADS"}[ads], func(t *testing.T) {
			ecdsDoc, err := RenderECDS(spec, exampleECDSResourcePath)
			if err != nil {
				t.Fatal(err)
			}
			source := exampleXDSSource()
			source.ADS = ads
			xdsDoc, err := RenderXDS(spec, source)
			if err != nil {
				t.Fatal(err)
			}
			ecds, xds := decodeBootstrapForTest(t, ecdsDoc), decodeBootstrapForTest(t, xdsDoc)
			ecdsHCM, xdsHCM := httpConnectionManagerOf(t, ecds), httpConnectionManagerOf(t, xds)
			if got := xdsHCM.GetHttpFilters()[0].GetConfigDiscovery().GetConfigSource(); (got.GetAds() != nil) != ads || (got.GetApiConfigSource() != nil) == ads {
				t.Errorf("config source %v, want ADS=%v", got, ads)
			}
			ecdsHCM.HttpFilters[0].GetConfigDiscovery().ConfigSource = nil
			xdsHCM.HttpFilters[0].GetConfigDiscovery().ConfigSource = nil
			if !proto.Equal(ecdsHCM, xdsHCM) {
				t.Error("the connection managers differ beyond the plugin's config source")
			}
			var management *clusterv3.Cluster
			clusters := xds.GetStaticResources().GetClusters()
			for i, c := range clusters {
				if c.GetName() == XDSClusterName {
					management = c
					clusters = append(clusters[:i:i], clusters[i+1:]...)
					break
				}
			}
			if management == nil {
				t.Fatalf("no cluster %s", XDSClusterName)
			}
			if len(clusters) != len(ecds.GetStaticResources().GetClusters()) {
				t.Fatalf("%d API server clusters, the ECDS bootstrap has %d", len(clusters), len(ecds.GetStaticResources().GetClusters()))
			}
			for i, c := range clusters {
				if !proto.Equal(c, ecds.GetStaticResources().GetClusters()[i]) {
					t.Errorf("cluster %s differs", c.GetName())
				}
			}
			if (xds.GetDynamicResources() != nil) != ads {
				t.Errorf("dynamic_resources %v with ADS=%v", xds.GetDynamicResources(), ads)
			}
		})
	}
}

// RenderExtensionConfig is exactly the resource in the ECDS file, so the
// management server and the file deliver the same filter.
func TestExtensionConfigIsTheECDSFilesResource(t *testing.T) {
	spec := exampleSpec()
	doc, err := RenderExtensionConfig(spec.PluginConfig, spec.WasmPath)
	if err != nil {
		t.Fatal(err)
	}
	var ext corev3.TypedExtensionConfig
	if err := decodeEnvoyYAML(doc, &ext); err != nil {
		t.Fatal(err)
	}
	if ext.GetName() != FilterName {
		t.Errorf("name %q, want %q", ext.GetName(), FilterName)
	}
	wasm, err := unpack[*wasmfilterv3.Wasm](ext.GetTypedConfig())
	if err != nil {
		t.Fatal(err)
	}
	if want := exampleECDSWasm(t); !proto.Equal(wasm, want) {
		t.Errorf("the extension config delivers\n%v\nthe ECDS file\n%v", wasm, want)
	}
	again, err := RenderExtensionConfig(spec.PluginConfig, spec.WasmPath)
	if err != nil || string(again) != string(doc) {
		t.Errorf("a second render differs (%v)", err)
	}
	if _, err := RenderExtensionConfig(spec.PluginConfig, "skewgate.wasm"); !errorContains(err, "wasm path") {
		t.Errorf("relative wasm path: %v", err)
	}
}

func TestRenderXDSRejectsUnverifiableOrCollidingSources(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*Spec, *XDSSource)
		want   string
	}{
		{"no address", func(_ *Spec, x *XDSSource) { x.Address = "" }, "address"},
		{"no port", func(_ *Spec, x *XDSSource) { x.Port = 0 }, "port"},
		{"IP address without a server name", func(_ *Spec, x *XDSSource) { x.Address = "10.0.0.20" }, `server name "10.0.0.20": must be a DNS name`},
		{"IP address as the server name", func(_ *Spec, x *XDSSource) { x.ServerName = "10.0.0.20" }, "not an IP address"},
		{"relative CA path", func(_ *Spec, x *XDSSource) { x.CAPath = "tls/xds-ca.crt" }, "CA path"},
		{"no client certificate", func(_ *Spec, x *XDSSource) { x.ClientCertPath = "" }, "client certificate path: missing"},
		{"no client key", func(_ *Spec, x *XDSSource) { x.ClientKeyPath = "" }, "client key path: missing"},
		{"API server cluster named like the management server's", func(s *Spec, _ *XDSSource) { s.Servers[0].Cluster = XDSClusterName }, `cluster "skewgate_xds" is the management server's cluster`},
		{"all-servers cluster named like the management server's", func(s *Spec, _ *XDSSource) { s.AllServersCluster = XDSClusterName }, "all-servers cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, source := exampleSpec(), exampleXDSSource()
			tc.modify(&spec, &source)
			_, err := RenderXDS(spec, source)
			if !errorContains(err, tc.want) {
				t.Fatalf("RenderXDS = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestValidatorRejectsBrokenXDSBootstraps proves the xDS checks bite: each
// case breaks the rendered example in one way.
func TestValidatorRejectsBrokenXDSBootstraps(t *testing.T) {
	wasm := exampleECDSWasm(t)
	render := func(ads bool) string {
		source := exampleXDSSource()
		source.ADS = ads
		doc, err := RenderXDS(exampleSpec(), source)
		if err != nil {
			t.Fatal(err)
		}
		return string(doc)
	}
	for _, tc := range []struct {
		name, old, new, want string
		ads                  bool
	}{
		{name: "no ALPN", old: "            alpn_protocols:\n              - h2\n", want: "ALPN"},
		{name: "no client certificate", old: "            tls_certificates:\n              - certificate_chain:\n                  filename: /etc/skewgate/tls/xds-client.crt\n                private_key:\n                  filename: /etc/skewgate/tls/xds-client.key\n", want: "client certificates"},
		{name: "another name verified than sent", old: "exact: skewgate-xds.kube-system.svc", new: "exact: skewgate", want: "SAN check"},
		{name: "HTTP/1.1 to a gRPC server", old: "explicit_http_config:\n            http2_protocol_options:\n              connection_keepalive:\n                interval: '30s'\n                timeout: '15s'\n", new: "explicit_http_config:\n            http_protocol_options: {}\n", want: "explicit HTTP/2"},
		{name: "stream to another cluster", old: "cluster_name: skewgate_xds\n                          set_node", new: "cluster_name: apiserver-all\n                          set_node", want: "grpc_services"},
		{name: "REST polling", old: "api_type: GRPC\n                          transport", new: "api_type: REST\n                          transport", want: "api_type REST"},
		{name: "ADS without ads_config", old: "dynamic_resources:\n  ads_config:\n    api_type: GRPC\n    transport_api_version: V3\n    grpc_services:\n      - envoy_grpc:\n          cluster_name: skewgate_xds\n    set_node_on_first_message_only: true\n", ads: true, want: "ads_config: missing"},
		{name: "ADS also delivering clusters", old: "dynamic_resources:\n", new: "dynamic_resources:\n  cds_config:\n    ads: {}\n    resource_api_version: V3\n", ads: true, want: "listeners and clusters stay static"},
		{name: "ADS stream to another cluster", old: "          cluster_name: skewgate_xds\n", new: "          cluster_name: apiserver-all\n", ads: true, want: "ads_config: grpc_services"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := render(tc.ads)
			if !strings.Contains(content, tc.old) {
				t.Fatalf("the rendered bootstrap does not contain %q", tc.old)
			}
			err := checkBootstrap([]byte(strings.Replace(content, tc.old, tc.new, 1)), wasm)
			if !errorContains(err, tc.want) {
				t.Fatalf("validation error %v, want one containing %q", err, tc.want)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

// The management server's cluster goes with a filter that uses it, and only
// then.
func TestValidatorRequiresTheManagementClusterExactlyWhenThePluginComesOverGRPC(t *testing.T) {
	wasm := exampleECDSWasm(t)
	source := exampleXDSSource()
	source.ADS = true
	ads, err := RenderXDS(exampleSpec(), source)
	if err != nil {
		t.Fatal(err)
	}
	ecds, err := RenderECDS(exampleSpec(), exampleECDSResourcePath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(ads)
	start, end := strings.Index(doc, "    - name: skewgate_xds\n"), strings.Index(doc, "dynamic_resources:\n")
	if start < 0 || end < start {
		t.Fatal("the ADS bootstrap does not end with the management cluster and dynamic_resources")
	}
	for _, tc := range []struct{ name, doc, want string }{
		{"filter over gRPC without the cluster", doc[:start] + doc[end:], "no cluster skewgate_xds"},
		{"cluster without a filter over gRPC", string(ecds) + doc[start:end], "does not come over gRPC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkBootstrap([]byte(tc.doc), wasm)
			if !errorContains(err, tc.want) {
				t.Fatalf("validation error %v, want one containing %q", err, tc.want)
			}
			t.Logf("rejected: %v", err)
		})
	}
}
