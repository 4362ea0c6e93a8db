package envoyconfig

import (
	"bytes"
	"encoding/json"
	"flag"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/plugin/config"
)

var update = flag.Bool("update", false, "rewrite the rendered files in plugin/envoy from the example spec")

// shippedDir holds the checked-in deliverables, relative to this package.
const shippedDir = "../../../plugin/envoy"

type renderedFile struct {
	name    string // relative to shippedDir
	content []byte
}

func renderShippedFiles(t *testing.T) []renderedFile {
	t.Helper()
	spec := exampleSpec()
	bootstrap, err := Render(spec)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	ecdsBootstrap, err := RenderECDS(spec, exampleECDSResourcePath)
	if err != nil {
		t.Fatalf("RenderECDS: %v", err)
	}
	resource, err := RenderECDSResource(spec.PluginConfig, spec.WasmPath, exampleECDSVersion)
	if err != nil {
		t.Fatalf("RenderECDSResource: %v", err)
	}
	xdsBootstrap, err := RenderXDS(spec, exampleXDSSource())
	if err != nil {
		t.Fatalf("RenderXDS: %v", err)
	}
	return []renderedFile{
		{"envoy.yaml", bootstrap},
		{"envoy-ecds.yaml", ecdsBootstrap},
		{"ecds/skewgate.yaml", resource},
		{"envoy-xds.yaml", xdsBootstrap},
	}
}

func readShipped(t *testing.T, name string) []byte {
	t.Helper()
	content, err := os.ReadFile(filepath.Join(shippedDir, filepath.FromSlash(name)))
	if err != nil {
		t.Fatalf("reading shipped file: %v", err)
	}
	return content
}

func TestShippedEnvoyFilesEqualRenderOfTheExampleSpec(t *testing.T) {
	for _, f := range renderShippedFiles(t) {
		t.Run(f.name, func(t *testing.T) {
			path := filepath.Join(shippedDir, filepath.FromSlash(f.name))
			if *update {
				if err := os.WriteFile(path, f.content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got := readShipped(t, f.name); !bytes.Equal(got, f.content) {
				t.Errorf("%s differs from the rendered example; run: go test ./host/internal/envoyconfig -run TestShippedEnvoyFilesEqualRender -update", f.name)
			}
		})
	}
}

func TestShippedEnvoyFilesPassEnvoyValidationAndInvariants(t *testing.T) {
	ecdsWasm, err := checkECDSResource(readShipped(t, "ecds/skewgate.yaml"))
	if err != nil {
		t.Fatalf("ecds/skewgate.yaml: %v", err)
	}
	for _, tc := range []struct {
		name     string
		ecdsWasm *wasmfilterv3.Wasm
	}{
		{"envoy.yaml", nil},
		{"envoy-ecds.yaml", ecdsWasm},
		{"envoy-xds.yaml", ecdsWasm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkBootstrap(readShipped(t, tc.name), tc.ecdsWasm); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func decodeBootstrapForTest(t *testing.T, doc []byte) *bootstrapv3.Bootstrap {
	t.Helper()
	var b bootstrapv3.Bootstrap
	if err := decodeEnvoyYAML(doc, &b); err != nil {
		t.Fatal(err)
	}
	return &b
}

func httpConnectionManagerOf(t *testing.T, b *bootstrapv3.Bootstrap) *hcmv3.HttpConnectionManager {
	t.Helper()
	hcm, err := unpack[*hcmv3.HttpConnectionManager](b.GetStaticResources().GetListeners()[0].GetFilterChains()[0].GetFilters()[0].GetTypedConfig())
	if err != nil {
		t.Fatal(err)
	}
	return hcm
}

func TestECDSResourceCarriesExactlyTheInlineFilterConfig(t *testing.T) {
	files := renderShippedFiles(t)
	hcm := httpConnectionManagerOf(t, decodeBootstrapForTest(t, files[0].content))
	inline, err := unpack[*wasmfilterv3.Wasm](hcm.GetHttpFilters()[0].GetTypedConfig())
	if err != nil {
		t.Fatal(err)
	}
	delivered, err := checkECDSResource(files[2].content)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(inline, delivered) {
		t.Errorf("ECDS delivers\n%v\ninline is\n%v", delivered, inline)
	}
	// The ECDS bootstrap must differ from the inline one only in the filter.
	ecdsHCM := httpConnectionManagerOf(t, decodeBootstrapForTest(t, files[1].content))
	ecdsHCM.HttpFilters[0], hcm.HttpFilters[0] = nil, nil
	if !proto.Equal(hcm, ecdsHCM) {
		t.Error("the ECDS bootstrap's connection manager differs beyond the plugin filter")
	}
}

func TestRenderOutputDoesNotDependOnServerOrder(t *testing.T) {
	want, err := Render(exampleSpec())
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(6, 6))
	for range 20 {
		spec := exampleSpec()
		rng.Shuffle(len(spec.Servers), func(i, j int) { spec.Servers[i], spec.Servers[j] = spec.Servers[j], spec.Servers[i] })
		got, err := Render(spec)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("server order %v changed the output", spec.Servers)
		}
	}
}

func passthroughSpec() Spec {
	spec := exampleSpec()
	spec.IdentityMode = config.IdentityPassthrough
	spec.ClientCAPath, spec.FrontProxyCertPath, spec.FrontProxyKeyPath = "", "", ""
	spec.PluginConfig = examplePluginConfig(config.IdentityPassthrough)
	return spec
}

func TestPassthroughModePresentsNoClientCertificateUpstream(t *testing.T) {
	doc, err := Render(passthroughSpec())
	if err != nil {
		t.Fatal(err)
	}
	// checkBootstrap requires zero upstream client certificates in
	// passthrough mode and no client CA without require_client_certificate.
	if err := checkBootstrap(doc, nil); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(doc, []byte("front-proxy")) || bytes.Contains(doc, []byte("require_client_certificate")) {
		t.Error("passthrough output mentions client certificates")
	}
}

// TestFrontProxyCertificateOnlyOnTheFrontProxyClusters: the API servers may
// authenticate the front-proxy certificate by itself, so only the clusters the
// plugin names for asserted identities present it.
func TestFrontProxyCertificateOnlyOnTheFrontProxyClusters(t *testing.T) {
	spec := exampleSpec()
	doc, err := Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	certificates := map[string][]string{}
	for _, c := range decodeBootstrapForTest(t, doc).GetStaticResources().GetClusters() {
		tls, err := unpack[*tlsv3.UpstreamTlsContext](c.GetTransportSocket().GetTypedConfig())
		if err != nil {
			t.Fatal(err)
		}
		certificates[c.GetName()] = []string{}
		for _, cert := range tls.GetCommonTlsContext().GetTlsCertificates() {
			certificates[c.GetName()] = append(certificates[c.GetName()], cert.GetCertificateChain().GetFilename(), cert.GetPrivateKey().GetFilename())
		}
	}
	want := map[string][]string{DefaultAllServersCluster: {}}
	for _, srv := range spec.Servers {
		want[srv.Cluster] = []string{}
		want[srv.Cluster+discovery.FrontProxyClusterSuffix] = []string{spec.FrontProxyCertPath, spec.FrontProxyKeyPath}
	}
	if !maps.EqualFunc(certificates, want, slices.Equal) {
		t.Errorf("client certificate and key per cluster:\n got %v\nwant %v", certificates, want)
	}
}

func TestDNSNamedServersGetStrictDNSClustersAndIPsStatic(t *testing.T) {
	spec := exampleSpec()
	spec.Servers[0].Address = "apiserver-a.control-plane.example"
	doc, err := Render(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBootstrap(doc, nil); err != nil {
		t.Fatal(err)
	}
	want := map[string]clusterv3.Cluster_DiscoveryType{
		"apiserver-a":             clusterv3.Cluster_STRICT_DNS,
		"apiserver-a+front-proxy": clusterv3.Cluster_STRICT_DNS,
		"apiserver-b":             clusterv3.Cluster_STATIC,
		"apiserver-b+front-proxy": clusterv3.Cluster_STATIC,
		"apiserver-c":             clusterv3.Cluster_STATIC,
		"apiserver-c+front-proxy": clusterv3.Cluster_STATIC,
		DefaultAllServersCluster:  clusterv3.Cluster_STRICT_DNS,
	}
	clusters := decodeBootstrapForTest(t, doc).GetStaticResources().GetClusters()
	if len(clusters) != len(want) {
		t.Errorf("%d clusters, want %d", len(clusters), len(want))
	}
	for _, c := range clusters {
		if got, ok := want[c.GetName()]; !ok || c.GetType() != got {
			t.Errorf("cluster %s is %s, want %s", c.GetName(), got, want[c.GetName()])
		}
	}
}

// editedSnapshot is the plugin configuration raw with its snapshot edited,
// written by discovery's writer, checked or not.
func editedSnapshot(t *testing.T, raw []byte, edit func(*discovery.Snapshot)) []byte {
	t.Helper()
	cfg, err := config.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	edit(cfg.Snapshot)
	out, err := cfg.Options.Marshal(cfg.Snapshot.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRenderRejectsInconsistentOrUnsafeSpecs(t *testing.T) {
	withSnapshot := func(edit func(*discovery.Snapshot)) func(*Spec) {
		return func(s *Spec) { s.PluginConfig = editedSnapshot(t, s.PluginConfig, edit) }
	}
	withPluginConfig := func(edit func(map[string]any)) func(*Spec) {
		return func(s *Spec) {
			var doc map[string]any
			if err := json.Unmarshal(s.PluginConfig, &doc); err != nil {
				t.Fatal(err)
			}
			edit(doc)
			raw, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			s.PluginConfig = raw
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
		want string
	}{
		{"no servers", func(s *Spec) { s.Servers = nil }, "at least one API server"},
		{"duplicate cluster", func(s *Spec) { s.Servers[1].Cluster = s.Servers[0].Cluster }, "used twice"},
		{"cluster named like the all-servers cluster", func(s *Spec) { s.Servers[0].Cluster = DefaultAllServersCluster }, "used twice"},
		{"cluster name with upper case", func(s *Spec) { s.Servers[0].Cluster = "API-a" }, "only lower-case"},
		{"address with port", func(s *Spec) { s.Servers[0].Address = "10.0.0.11:6443" }, "neither an IP address nor a DNS name"},
		{"port zero", func(s *Spec) { s.Servers[0].Port = 0 }, "not a TCP port"},
		{"port too large", func(s *Spec) { s.Servers[0].Port = 70000 }, "not a TCP port"},
		{"listen and admin port collide", func(s *Spec) { s.ListenPort = 9901 }, "both 9901"},
		{"listen address is a name", func(s *Spec) { s.ListenAddress = "localhost" }, "listen address"},
		{"relative serving certificate", func(s *Spec) { s.ServingCertPath = "tls/serving.crt" }, "clean absolute path"},
		{"missing cluster CA", func(s *Spec) { s.ClusterCAPath = "" }, "cluster CA path: missing"},
		{"front-proxy without client CA", func(s *Spec) { s.ClientCAPath = "" }, "needs a client CA"},
		{"front-proxy without its key", func(s *Spec) { s.FrontProxyKeyPath = "" }, "front-proxy key path: missing"},
		{"passthrough presenting the front-proxy certificate", func(s *Spec) {
			s.IdentityMode = config.IdentityPassthrough
			s.PluginConfig = examplePluginConfig(config.IdentityPassthrough)
		}, "must not present a front-proxy client certificate"},
		{"unknown identity mode", func(s *Spec) { s.IdentityMode = "impersonate" }, "identity mode"},
		{"routing header in the identity namespace", func(s *Spec) { s.RoutingHeader = "x-remote-cluster" }, "reserved by the plugin"},
		{"routing header with upper case", func(s *Spec) { s.RoutingHeader = "X-Skewgate-Upstream" }, "not a lower-case HTTP header name"},
		{"missing wasm path", func(s *Spec) { s.WasmPath = "" }, "wasm path: missing"},
		{"plugin configuration is not JSON", func(s *Spec) { s.PluginConfig = []byte("{routingHeader") }, "not valid JSON"},
		{"plugin configuration is an array", func(s *Spec) { s.PluginConfig = []byte("[]") }, "must be a JSON object"},
		{"plugin configuration is null", func(s *Spec) { s.PluginConfig = []byte("null") }, "must be a JSON object"},
		{"plugin steers with another header", withPluginConfig(func(d map[string]any) { d["routingHeader"] = "x-other" }), "differs from the routed header"},
		{"plugin default header differs from the spec's", func(s *Spec) {
			s.RoutingHeader = "x-other"
			withPluginConfig(func(d map[string]any) { delete(d, "routingHeader") })(s)
		}, "differs from the routed header"},
		{"plugin identity mode differs", withPluginConfig(func(d map[string]any) { d["identityMode"] = "passthrough" }), "identityMode"},
		{"plugin defaults to passthrough", withPluginConfig(func(d map[string]any) { delete(d, "identityMode") }), "identityMode"},
		{"plugin field unknown", withPluginConfig(func(d map[string]any) { d["routingheader"] = "x" }), "unknown field"},
		{"plugin without snapshot", withPluginConfig(func(d map[string]any) { delete(d, "snapshot") }), "snapshot: must be an object"},
		{"plugin without servers", withSnapshot(func(s *discovery.Snapshot) { s.Servers = nil }), "need 1 to 64 servers, got 0"},
		{"plugin steers to an unknown cluster", withSnapshot(func(s *discovery.Snapshot) { s.Servers[0].Cluster = "apiserver-z" }),
			"not one of the rendered per-server clusters"},
		{"plugin steers to the all-servers cluster", withSnapshot(func(s *discovery.Snapshot) { s.Servers[0].Cluster = DefaultAllServersCluster }),
			"not one of the rendered per-server clusters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := exampleSpec()
			tc.edit(&spec)
			_, err := Render(spec)
			if !errorContains(err, tc.want) {
				t.Fatalf("Render error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestECDSFlowNeedsNoInlinePluginButChecksEachPush follows a controller: the
// ECDS bootstrap is rendered without plugin code or configuration, and every
// configuration it pushes later is checked against the same spec.
func TestECDSFlowNeedsNoInlinePluginButChecksEachPush(t *testing.T) {
	spec := exampleSpec()
	spec.WasmPath, spec.PluginConfig = "", nil
	if _, err := RenderECDS(spec, exampleECDSResourcePath); err != nil {
		t.Fatal(err)
	}
	if err := spec.CheckPluginConfig(examplePluginConfig(config.IdentityFrontProxy)); err != nil {
		t.Fatalf("matching configuration rejected: %v", err)
	}
	if err := spec.CheckPluginConfig(examplePluginConfig(config.IdentityPassthrough)); !errorContains(err, "identityMode") {
		t.Fatalf("configuration with another identity mode: got %v", err)
	}
}

func TestRenderECDSRejectsUnwatchableResourcePaths(t *testing.T) {
	for _, p := range []string{"", "skewgate.yaml", "/skewgate.yaml", "/etc/../skewgate.yaml"} {
		if _, err := RenderECDS(exampleSpec(), p); err == nil {
			t.Errorf("RenderECDS accepted resource path %q", p)
		}
	}
}

func TestRenderECDSResourceRejectsBadInput(t *testing.T) {
	config := examplePluginConfig(config.IdentityFrontProxy)
	for _, tc := range []struct {
		name, wasmPath, version string
		config                  []byte
	}{
		{"relative wasm path", "skewgate.wasm", "1", config},
		{"empty version", exampleWasmPath, "", config},
		{"version with a newline", exampleWasmPath, "1\n2", config},
		{"configuration not JSON", exampleWasmPath, "1", []byte("{")},
		{"configuration not an object", exampleWasmPath, "1", []byte(`"x"`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := RenderECDSResource(tc.config, tc.wasmPath, tc.version); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// dig walks a decoded JSON document by map keys and list indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v
}

func asMap(v any) map[string]any { return v.(map[string]any) }

func hcmOf(doc map[string]any) map[string]any {
	return asMap(dig(doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"))
}

func routesOf(doc map[string]any) []any {
	return dig(hcmOf(doc), "route_config", "virtual_hosts", 0, "routes").([]any)
}

func clusterNamed(doc map[string]any, name string) map[string]any {
	for _, c := range dig(doc, "static_resources", "clusters").([]any) {
		if asMap(c)["name"] == name {
			return asMap(c)
		}
	}
	panic("no cluster " + name)
}

// presentFrontProxyCertificate makes the named cluster present the
// front-proxy certificate of the example.
func presentFrontProxyCertificate(doc map[string]any, name string) {
	certificates := dig(clusterNamed(doc, "apiserver-a+front-proxy"), "transport_socket", "typed_config", "common_tls_context", "tls_certificates")
	asMap(dig(clusterNamed(doc, name), "transport_socket", "typed_config", "common_tls_context"))["tls_certificates"] = certificates
}

func firstCluster(doc map[string]any) map[string]any {
	return asMap(dig(doc, "static_resources", "clusters", 0))
}

func wasmConfigOf(doc map[string]any) map[string]any {
	return asMap(dig(hcmOf(doc), "http_filters", 0, "typed_config", "config"))
}

func editPluginConfig(t *testing.T, doc map[string]any, edit func(map[string]any)) {
	t.Helper()
	configuration := asMap(wasmConfigOf(doc)["configuration"])
	var plugin map[string]any
	if err := json.Unmarshal([]byte(configuration["value"].(string)), &plugin); err != nil {
		t.Fatal(err)
	}
	edit(plugin)
	raw, err := json.Marshal(plugin)
	if err != nil {
		t.Fatal(err)
	}
	configuration["value"] = string(raw)
}

// TestValidatorRejectsBrokenBootstraps proves the validation bites: each case
// breaks the rendered example in one way and must be rejected for that reason.
func TestValidatorRejectsBrokenBootstraps(t *testing.T) {
	rendered, err := Render(exampleSpec())
	if err != nil {
		t.Fatal(err)
	}
	if err := checkBootstrap(rendered, nil); err != nil {
		t.Fatalf("the unbroken document must pass: %v", err)
	}
	for _, tc := range []struct {
		name string
		raw  string                   // a literal document, or
		edit func(doc map[string]any) // a change to the rendered one
		want string
	}{
		{name: "YAML indented with a tab", raw: "static_resources:\n\tclusters: []\n", want: "YAML"},
		{name: "YAML with a duplicate key", raw: "node: {id: a}\nnode: {id: b}\n", want: "YAML"},
		{name: "misspelt field", edit: func(d map[string]any) { hcmOf(d)["stat_prefx"] = "x" }, want: "stat_prefx"},
		{name: "type URL nobody registered", edit: func(d map[string]any) {
			asMap(dig(hcmOf(d), "http_filters", 1, "typed_config"))["@type"] = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"
		}, want: "envoy.extensions.filters.http.lua.v3.Lua"},
		{name: "unknown failure policy", edit: func(d map[string]any) { wasmConfigOf(d)["failure_policy"] = "FAIL_SOMETIMES" }, want: "FAIL_SOMETIMES"},
		{name: "health check without interval", edit: func(d map[string]any) {
			delete(asMap(dig(firstCluster(d), "health_checks", 0)), "interval")
		}, want: "Interval"},
		{name: "negative connect timeout", edit: func(d map[string]any) { firstCluster(d)["connect_timeout"] = "-1s" }, want: "ConnectTimeout"},
		{name: "empty cluster header", edit: func(d map[string]any) {
			asMap(dig(hcmOf(d), "route_config", "virtual_hosts", 0, "routes", 0, "route"))["cluster_header"] = ""
		}, want: "ClusterHeader"},
		{name: "health check without a path", edit: func(d map[string]any) {
			asMap(dig(firstCluster(d), "health_checks", 0, "http_health_check"))["path"] = ""
		}, want: "Path"},
		{name: "deprecated cluster field", edit: func(d map[string]any) {
			firstCluster(d)["http2_protocol_options"] = map[string]any{}
		}, want: "deprecated field envoy.config.cluster.v3.Cluster.http2_protocol_options"},
		{name: "cluster without TLS", edit: func(d map[string]any) { delete(firstCluster(d), "transport_socket") }, want: "upstream TLS"},
		{name: "cluster with another SNI", edit: func(d map[string]any) {
			asMap(dig(firstCluster(d), "transport_socket", "typed_config"))["sni"] = "apiserver-a"
		}, want: "SNI"},
		{name: "cluster without a CA", edit: func(d map[string]any) {
			delete(asMap(dig(firstCluster(d), "transport_socket", "typed_config", "common_tls_context", "validation_context")), "trusted_ca")
		}, want: "no CA"},
		{name: "front-proxy cluster without the front-proxy certificate", edit: func(d map[string]any) {
			delete(asMap(dig(clusterNamed(d, "apiserver-b+front-proxy"), "transport_socket", "typed_config", "common_tls_context")), "tls_certificates")
		}, want: "0 client certificates on a front-proxy cluster"},
		{name: "plain server cluster presenting the front-proxy certificate", edit: func(d map[string]any) {
			presentFrontProxyCertificate(d, "apiserver-b")
		}, want: "identity the plugin does not assert"},
		{name: "balanced cluster presenting the front-proxy certificate", edit: func(d map[string]any) {
			presentFrontProxyCertificate(d, DefaultAllServersCluster)
		}, want: "identity the plugin does not assert"},
		{name: "server without a front-proxy cluster", edit: func(d map[string]any) {
			clusters := asMap(d["static_resources"])["clusters"].([]any)
			asMap(d["static_resources"])["clusters"] = slices.DeleteFunc(clusters, func(c any) bool { return asMap(c)["name"] == "apiserver-c+front-proxy" })
		}, want: `no cluster "apiserver-c+front-proxy"`},
		{name: "front-proxy cluster reaching another server", edit: func(d map[string]any) {
			endpoint := dig(clusterNamed(d, "apiserver-a+front-proxy"), "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
			asMap(endpoint)["address"] = "10.0.0.12"
		}, want: "beyond its name and client certificate"},
		{name: "front-proxy cluster trusting another CA", edit: func(d map[string]any) {
			ca := dig(clusterNamed(d, "apiserver-a+front-proxy"), "transport_socket", "typed_config", "common_tls_context", "validation_context", "trusted_ca")
			asMap(ca)["filename"] = "/etc/skewgate/tls/other-ca.crt"
		}, want: "beyond its name and client certificate"},
		{name: "front-proxy cluster without its plain twin", edit: func(d map[string]any) {
			asMap(clusterNamed(d, "apiserver-a+front-proxy"))["name"] = "apiserver-z+front-proxy"
			asMap(dig(clusterNamed(d, "apiserver-z+front-proxy"), "load_assignment"))["cluster_name"] = "apiserver-z+front-proxy"
		}, want: "no plain cluster"},
		{name: "plugin fails open", edit: func(d map[string]any) { wasmConfigOf(d)["failure_policy"] = "FAIL_OPEN" }, want: "FAIL_CLOSED"},
		{name: "router before the plugin", edit: func(d map[string]any) {
			filters := hcmOf(d)["http_filters"].([]any)
			filters[0], filters[1] = filters[1], filters[0]
		}, want: "then the router"},
		{name: "not-found code left to the default", edit: func(d map[string]any) {
			delete(asMap(dig(hcmOf(d), "route_config", "virtual_hosts", 0, "routes", 0, "route")), "cluster_not_found_response_code")
		}, want: "explicitly"},
		{name: "long-running route left to the default timeout", edit: func(d map[string]any) {
			delete(asMap(dig(routesOf(d)[1], "route")), "timeout")
		}, want: "timeouts"},
		{name: "steered and balanced twins with different timeouts", edit: func(d map[string]any) {
			route := asMap(dig(routesOf(d)[0], "route"))
			route["timeout"] = requestTimeout
			delete(route, "idle_timeout")
		}, want: "the same timeouts"},
		{name: "catch-all routes without a timeout", edit: func(d map[string]any) {
			routes := routesOf(d)
			for _, r := range routes[len(routes)-2:] {
				asMap(asMap(r)["route"])["timeout"] = "0s"
				asMap(asMap(r)["route"])["idle_timeout"] = "0s"
			}
		}, want: "catch-all routes must time out"},
		{name: "no catch-all routes", edit: func(d map[string]any) {
			vhost := asMap(dig(hcmOf(d), "route_config", "virtual_hosts", 0))
			vhost["routes"] = routesOf(d)[:len(routesOf(d))-2]
		}, want: "catch every request"},
		{name: "routes not in pairs", edit: func(d map[string]any) {
			vhost := asMap(dig(hcmOf(d), "route_config", "virtual_hosts", 0))
			vhost["routes"] = routesOf(d)[:len(routesOf(d))-1]
		}, want: "pairs"},
		{name: "steered route matching other paths than its balanced twin", edit: func(d map[string]any) {
			asMap(dig(routesOf(d)[0], "match", "safe_regex"))["regex"] = "/api/v1/.+"
		}, want: "but for the routing header"},
		{name: "unsteered requests balanced over another cluster", edit: func(d map[string]any) {
			asMap(dig(routesOf(d)[1], "route"))["cluster"] = "apiserver-a"
		}, want: "one balanced cluster"},
		{name: "route regex matching any character", edit: func(d map[string]any) {
			for _, r := range routesOf(d)[:2] {
				asMap(dig(r, "match", "safe_regex"))["regex"] = "/api/.+/exec"
			}
		}, want: "non-ASCII"},
		// RE2 compiles this one to 110 instructions.
		{name: "route regex beyond RE2's program size limit", edit: func(d map[string]any) {
			for _, r := range routesOf(d)[:2] {
				asMap(dig(r, "match", "safe_regex"))["regex"] = `/api(?:/[a-z0-9]+|s/[a-z0-9.]+/[a-z0-9]+)(?:/namespaces/[a-z0-9-]+)?/[a-z0-9.]+/[a-z0-9.-]+` +
					`/(?:exec|attach|portforward|proxy|log|status|scale|binding|eviction)(?:/[!-~]*)?`
			}
		}, want: "instructions"},
		{name: "admin reachable from the network", edit: func(d map[string]any) {
			asMap(dig(d, "admin", "address", "socket_address"))["address"] = "0.0.0.0"
		}, want: "admin"},
		{name: "client certificates optional", edit: func(d map[string]any) {
			delete(asMap(dig(d, "static_resources", "listeners", 0, "filter_chains", 0, "transport_socket", "typed_config")), "require_client_certificate")
		}, want: "require_client_certificate"},
		{name: "no websocket upgrades", edit: func(d map[string]any) {
			hcmOf(d)["upgrade_configs"] = []any{map[string]any{"upgrade_type": "spdy/3.1"}}
		}, want: "websocket"},
		{name: "client routing header reaches routing", edit: func(d map[string]any) { delete(hcmOf(d), "early_header_mutation_extensions") }, want: "early removals"},
		{name: "client X-Real-Ip reaches the API servers", edit: func(d map[string]any) {
			mutations := dig(hcmOf(d), "early_header_mutation_extensions", 0, "typed_config").(map[string]any)
			mutations["mutations"] = slices.DeleteFunc(mutations["mutations"].([]any), func(m any) bool { return asMap(m)["remove"] == "x-real-ip" })
		}, want: `"x-real-ip"`},
		{name: "client Forwarded reaches the API servers", edit: func(d map[string]any) {
			mutations := dig(hcmOf(d), "early_header_mutation_extensions", 0, "typed_config").(map[string]any)
			mutations["mutations"] = slices.DeleteFunc(mutations["mutations"].([]any), func(m any) bool { return asMap(m)["remove"] == "forwarded" })
		}, want: `"forwarded"`},
		{name: "a client X-Forwarded-For hop trusted", edit: func(d map[string]any) { hcmOf(d)["xff_num_trusted_hops"] = 1 }, want: "X-Forwarded-For"},
		{name: "peer not appended to X-Forwarded-For", edit: func(d map[string]any) { hcmOf(d)["skip_xff_append"] = true }, want: "X-Forwarded-For"},
		{name: "request header size left to the runtime", edit: func(d map[string]any) { delete(hcmOf(d), "max_request_headers_kb") }, want: "max_request_headers_kb"},
		{name: "request header size raised", edit: func(d map[string]any) { hcmOf(d)["max_request_headers_kb"] = 8192 }, want: "max_request_headers_kb"},
		{name: "request header count left to the runtime", edit: func(d map[string]any) { delete(hcmOf(d), "common_http_protocol_options") }, want: "max_headers_count"},
		{name: "request header count raised", edit: func(d map[string]any) {
			asMap(hcmOf(d)["common_http_protocol_options"])["max_headers_count"] = 30000
		}, want: "max_headers_count"},
		{name: "escaped slashes kept", edit: func(d map[string]any) { delete(hcmOf(d), "path_with_escaped_slashes_action") }, want: "UNESCAPE_AND_FORWARD"},
		{name: "a route retrying 503s", edit: func(d map[string]any) {
			policy := asMap(dig(routesOf(d)[1], "route", "retry_policy"))
			policy["retry_on"] = "connect-failure,5xx"
		}, want: `retries on "5xx"`},
		{name: "a route retrying any reset", edit: func(d map[string]any) {
			policy := asMap(dig(routesOf(d)[0], "route", "retry_policy"))
			policy["retry_on"] = "reset"
		}, want: `retries on "reset"`},
		{name: "a steered route retrying a connection failure on its one server", edit: func(d map[string]any) {
			policy := asMap(dig(routesOf(d)[0], "route", "retry_policy"))
			policy["retry_on"] = "connect-failure,refused-stream"
		}, want: "on the one server that just failed"},
		{name: "a balanced retry that may pick the server it tried", edit: func(d map[string]any) {
			delete(asMap(dig(routesOf(d)[1], "route", "retry_policy")), "retry_host_predicate")
		}, want: "previous_hosts"},
		{name: "a route without retries", edit: func(d map[string]any) {
			delete(asMap(dig(routesOf(d)[3], "route")), "retry_policy")
		}, want: "no retry policy"},
		{name: "Envoy's default panic threshold", edit: func(d map[string]any) {
			delete(firstCluster(d), "common_lb_config")
		}, want: "healthy_panic_threshold"},
		{name: "plugin writes another header", edit: func(d map[string]any) {
			editPluginConfig(t, d, func(p map[string]any) { p["routingHeader"] = "x-other" })
		}, want: "x-other"},
		{name: "plugin configuration with an unknown field", edit: func(d map[string]any) {
			editPluginConfig(t, d, func(p map[string]any) { p["retryAfter"] = 5 })
		}, want: "unknown field"},
		{name: "plugin steers to a missing cluster", edit: func(d map[string]any) {
			configuration := asMap(wasmConfigOf(d)["configuration"])
			configuration["value"] = string(editedSnapshot(t, []byte(configuration["value"].(string)), func(s *discovery.Snapshot) {
				s.Servers[1].Cluster = "apiserver-z"
			}))
		}, want: "apiserver-z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(tc.raw)
			if tc.edit != nil {
				js, err := yaml.YAMLToJSON(rendered)
				if err != nil {
					t.Fatal(err)
				}
				var generic map[string]any
				if err := json.Unmarshal(js, &generic); err != nil {
					t.Fatal(err)
				}
				tc.edit(generic)
				if doc, err = json.Marshal(generic); err != nil {
					t.Fatal(err)
				}
			}
			err := checkBootstrap(doc, nil)
			if !errorContains(err, tc.want) {
				t.Fatalf("validation error %v, want one containing %q", err, tc.want)
			}
			t.Logf("rejected: %v", err)
		})
	}
}

func TestValidatorRejectsBrokenECDSFiles(t *testing.T) {
	files := renderShippedFiles(t)
	for _, tc := range []struct {
		name, old, new, want string
		file                 int
	}{
		{"resource named differently from the filter", "    name: skewgate\n    typed_config:", "    name: wasm\n    typed_config:", "filter name", 2},
		{"resource claiming another filter type", "envoy.extensions.filters.http.wasm.v3.Wasm\n      config:", "envoy.extensions.filters.http.router.v3.Router\n      config:", `unknown field "config"`, 2},
		{"resource without version", "version_info: '1'\n", "", "version", 2},
		{"filter accepting any type", "type_urls:\n", "type_urls:\n                        - type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n", "type_urls", 1},
		{"resource outside the watched directory", "watched_directory:\n                            path: /etc/skewgate/ecds", "watched_directory:\n                            path: /etc/skewgate", "watched directory", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := string(files[tc.file].content)
			if !strings.Contains(content, tc.old) {
				t.Fatalf("%s does not contain %q", files[tc.file].name, tc.old)
			}
			broken := []byte(strings.Replace(content, tc.old, tc.new, 1))
			var err error
			if tc.file == 2 {
				_, err = checkECDSResource(broken)
			} else {
				var wasm *wasmfilterv3.Wasm
				if wasm, err = checkECDSResource(files[2].content); err != nil {
					t.Fatal(err)
				}
				err = checkBootstrap(broken, wasm)
			}
			if !errorContains(err, tc.want) {
				t.Fatalf("validation error %v, want one containing %q", err, tc.want)
			}
			t.Logf("rejected: %v", err)
		})
	}
}
