package envoyconfig

import (
	"fmt"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/config"
)

// largePluginConfig is a snapshot the size of a real control plane's:
// servers × groups × versions of discovery, roughly 1 KiB per resource.
func largePluginConfig(b *testing.B, servers, groups int) []byte {
	b.Helper()
	var members []discovery.Server
	for s := range servers {
		apis := []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[`)
		for g := range groups {
			if g > 0 {
				apis = append(apis, ',')
			}
			apis = fmt.Appendf(apis, `{"metadata":{"name":"group%d.example.io","creationTimestamp":null},"versions":[{"version":"v1","freshness":"Current","resources":[`, g)
			for r := range 8 {
				if r > 0 {
					apis = append(apis, ',')
				}
				apis = fmt.Appendf(apis, `{"resource":"things%d","responseKind":{"group":"","version":"","kind":"Thing%d"},"scope":"Namespaced","singularResource":"thing%d","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"subresources":[{"subresource":"status","responseKind":{"group":"","version":"","kind":"Thing%d"},"verbs":["get","patch","update"]}]}`, r, r, r, r)
			}
			apis = append(apis, "]}]}"...)
		}
		apis = append(apis, "]}"...)
		core := []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[]}`)
		members = append(members, discoverytest.ServerOf(fmt.Sprintf("apiserver-%04d", s), fmt.Sprintf("apiserver-%c", 'a'+s), "v1.36.3", true, apis, core, nil))
	}
	raw, err := config.Options{
		RoutingHeader: DefaultRoutingHeader, RetryAfterSeconds: 5, IdentityMode: config.IdentityFrontProxy, DiscoveryAuthorizationCacheSeconds: 10,
		SchemaSkewRouting: config.DefaultSchemaSkewRouting,
	}.Marshal(discoverytest.Encode(7, "", members...))
	if err != nil {
		b.Fatal(err)
	}
	return raw
}

func BenchmarkRenderECDSResource(b *testing.B) {
	config := largePluginConfig(b, 3, 60)
	b.SetBytes(int64(len(config)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RenderECDSResource(config, exampleWasmPath, "7"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRender(b *testing.B) {
	spec := exampleSpec()
	spec.PluginConfig = largePluginConfig(b, 3, 60)
	b.SetBytes(int64(len(spec.PluginConfig)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Render(spec); err != nil {
			b.Fatal(err)
		}
	}
}
