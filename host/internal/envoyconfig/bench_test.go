package envoyconfig

import (
	"fmt"
	"testing"
)

// largePluginConfig is a snapshot the size of a real control plane's:
// servers × groups × versions of discovery, roughly 1 KiB per resource.
func largePluginConfig(b *testing.B, servers, groups int) []byte {
	b.Helper()
	var sb []byte
	sb = fmt.Appendf(sb, `{"routingHeader":%q,"retryAfterSeconds":5,"trustPeerProxiedHeader":false,"identityMode":"front-proxy","discoveryAuthorizationCacheSeconds":10,"snapshot":{"generation":7,"servers":[`, DefaultRoutingHeader)
	for s := range servers {
		if s > 0 {
			sb = append(sb, ',')
		}
		sb = fmt.Appendf(sb, `{"id":"apiserver-%04d","cluster":"apiserver-%c","version":"v1.36.3","healthy":true,"apis":{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[`, s, 'a'+s)
		for g := range groups {
			if g > 0 {
				sb = append(sb, ',')
			}
			sb = fmt.Appendf(sb, `{"metadata":{"name":"group%d.example.io","creationTimestamp":null},"versions":[{"version":"v1","freshness":"Current","resources":[`, g)
			for r := range 8 {
				if r > 0 {
					sb = append(sb, ',')
				}
				sb = fmt.Appendf(sb, `{"resource":"things%d","responseKind":{"group":"","version":"","kind":"Thing%d"},"scope":"Namespaced","singularResource":"thing%d","verbs":["create","delete","deletecollection","get","list","patch","update","watch"],"subresources":[{"subresource":"status","responseKind":{"group":"","version":"","kind":"Thing%d"},"verbs":["get","patch","update"]}]}`, r, r, r, r)
			}
			sb = append(sb, "]}]}"...)
		}
		sb = append(sb, `]},"api":{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[]}}`...)
	}
	return append(sb, "]}}"...)
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
