package envoyconfig

import (
	"encoding/json"
	"fmt"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/plugin/config"
)

// The example deployment behind the checked-in files in plugin/envoy/: three
// API servers in the middle of a rolling upgrade, front-proxy identity.
const (
	exampleWasmPath         = "/etc/skewgate/skewgate.wasm"
	exampleECDSResourcePath = "/etc/skewgate/ecds/skewgate.yaml"
	exampleECDSVersion      = "1"
)

type exampleServer struct {
	id, cluster, address, version string
	// newerGroup is served only from this version on: the skew the plugin
	// exists for.
	newerGroup bool
}

var exampleServers = []exampleServer{
	{"apiserver-3f1c9a7e52d04b6b", "apiserver-a", "10.0.0.11", "v1.35.4", false},
	{"apiserver-8d2e6b1f40c37a95", "apiserver-b", "10.0.0.12", "v1.36.3", false},
	{"apiserver-c47a0e9d8b15f263", "apiserver-c", "10.0.0.13", "v1.37.2", true},
}

// exampleXDSSource is the controller's management server, reached through a
// Service in front of its replicas.
func exampleXDSSource() XDSSource {
	return XDSSource{
		Address:        "skewgate-xds.kube-system.svc",
		Port:           18000,
		CAPath:         "/etc/skewgate/tls/xds-ca.crt",
		ClientCertPath: "/etc/skewgate/tls/xds-client.crt",
		ClientKeyPath:  "/etc/skewgate/tls/xds-client.key",
	}
}

func exampleSpec() Spec {
	spec := Spec{
		ServingCertPath:    "/etc/skewgate/tls/serving.crt",
		ServingKeyPath:     "/etc/skewgate/tls/serving.key",
		ClientCAPath:       "/etc/skewgate/tls/client-ca.crt",
		ClusterCAPath:      "/etc/skewgate/tls/cluster-ca.crt",
		FrontProxyCertPath: "/etc/skewgate/tls/front-proxy-client.crt",
		FrontProxyKeyPath:  "/etc/skewgate/tls/front-proxy-client.key",
		IdentityMode:       config.IdentityFrontProxy,
		WasmPath:           exampleWasmPath,
		PluginConfig:       examplePluginConfig(config.IdentityFrontProxy),
	}
	for _, s := range exampleServers {
		spec.Servers = append(spec.Servers, Server{Cluster: s.cluster, Address: s.address, Port: 6443})
	}
	return spec
}

// The JSON shapes below follow apidiscovery.k8s.io/v2; field order follows
// kube-apiserver's encoding.
type (
	groupDiscoveryList struct {
		Kind       string           `json:"kind"`
		APIVersion string           `json:"apiVersion"`
		Metadata   struct{}         `json:"metadata"`
		Items      []groupDiscovery `json:"items"`
	}
	groupDiscovery struct {
		Metadata struct {
			Name              string `json:"name,omitempty"`
			CreationTimestamp any    `json:"creationTimestamp"`
		} `json:"metadata"`
		Versions []versionDiscovery `json:"versions"`
	}
	versionDiscovery struct {
		Version   string              `json:"version"`
		Resources []resourceDiscovery `json:"resources"`
		Freshness string              `json:"freshness"`
	}
	resourceDiscovery struct {
		Resource         string                 `json:"resource"`
		ResponseKind     groupVersionKind       `json:"responseKind"`
		Scope            string                 `json:"scope"`
		SingularResource string                 `json:"singularResource"`
		Verbs            []string               `json:"verbs"`
		ShortNames       []string               `json:"shortNames,omitempty"`
		Categories       []string               `json:"categories,omitempty"`
		Subresources     []subresourceDiscovery `json:"subresources,omitempty"`
	}
	subresourceDiscovery struct {
		Subresource  string           `json:"subresource"`
		ResponseKind groupVersionKind `json:"responseKind"`
		Verbs        []string         `json:"verbs"`
	}
	groupVersionKind struct {
		Group   string `json:"group"`
		Version string `json:"version"`
		Kind    string `json:"kind"`
	}
)

var allVerbs = []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}

func discoveryList(groups ...groupDiscovery) groupDiscoveryList {
	return groupDiscoveryList{Kind: "APIGroupDiscoveryList", APIVersion: "apidiscovery.k8s.io/v2", Items: groups}
}

func group(name string, versions ...versionDiscovery) groupDiscovery {
	g := groupDiscovery{Versions: versions}
	g.Metadata.Name = name
	return g
}

func version(v string, resources ...resourceDiscovery) versionDiscovery {
	return versionDiscovery{Version: v, Resources: resources, Freshness: "Current"}
}

func exampleAPIs(s exampleServer) groupDiscoveryList {
	deployments := resourceDiscovery{
		Resource: "deployments", ResponseKind: groupVersionKind{Kind: "Deployment"}, Scope: "Namespaced",
		SingularResource: "deployment", Verbs: allVerbs, ShortNames: []string{"deploy"}, Categories: []string{"all"},
		Subresources: []subresourceDiscovery{
			{Subresource: "scale", ResponseKind: groupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, Verbs: []string{"get", "patch", "update"}},
			{Subresource: "status", ResponseKind: groupVersionKind{Kind: "Deployment"}, Verbs: []string{"get", "patch", "update"}},
		},
	}
	leases := resourceDiscovery{
		Resource: "leases", ResponseKind: groupVersionKind{Kind: "Lease"}, Scope: "Namespaced",
		SingularResource: "lease", Verbs: allVerbs,
	}
	coordination := group("coordination.k8s.io", version("v1", leases))
	if s.newerGroup {
		candidates := resourceDiscovery{
			Resource: "leasecandidates", ResponseKind: groupVersionKind{Kind: "LeaseCandidate"}, Scope: "Namespaced",
			SingularResource: "leasecandidate", Verbs: allVerbs,
		}
		coordination.Versions = append(coordination.Versions, version("v1beta1", candidates))
	}
	return discoveryList(group("apps", version("v1", deployments)), coordination)
}

func exampleCoreAPI() groupDiscoveryList {
	namespaces := resourceDiscovery{
		Resource: "namespaces", ResponseKind: groupVersionKind{Kind: "Namespace"}, Scope: "Cluster",
		SingularResource: "namespace", Verbs: []string{"create", "delete", "get", "list", "patch", "update", "watch"},
		ShortNames: []string{"ns"},
	}
	pods := resourceDiscovery{
		Resource: "pods", ResponseKind: groupVersionKind{Kind: "Pod"}, Scope: "Namespaced",
		SingularResource: "pod", Verbs: allVerbs, ShortNames: []string{"po"}, Categories: []string{"all"},
		Subresources: []subresourceDiscovery{
			{Subresource: "exec", ResponseKind: groupVersionKind{Kind: "PodExecOptions"}, Verbs: []string{"create", "get"}},
			{Subresource: "log", ResponseKind: groupVersionKind{Kind: "Pod"}, Verbs: []string{"get"}},
		},
	}
	return discoveryList(group("", version("v1", namespaces, pods)))
}

// examplePluginConfig is the plugin configuration for the example servers.
func examplePluginConfig(mode IdentityMode) []byte {
	mustMarshal := func(v any) []byte {
		raw, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("example plugin configuration: %v", err))
		}
		return raw
	}
	var servers []discovery.Server
	for _, s := range exampleServers {
		servers = append(servers, discoverytest.ServerOf(s.id, s.cluster, s.version, true,
			mustMarshal(exampleAPIs(s)), mustMarshal(exampleCoreAPI()), nil))
	}
	raw, err := config.Options{
		RoutingHeader:                      DefaultRoutingHeader,
		RetryAfterSeconds:                  5,
		IdentityMode:                       mode,
		DiscoveryAuthorizationCacheSeconds: 10,
		SchemaSkewRouting:                  config.DefaultSchemaSkewRouting,
		RouteWritesByBody:                  true,
	}.Marshal(discoverytest.Encode(1, "", servers...))
	if err != nil {
		panic(fmt.Sprintf("example plugin configuration: %v", err))
	}
	return raw
}
