// Command decide is the plugin's decision core alone, compiled to Wasm as the
// plugin is (upstream Go, wasip1 reactor): BenchmarkPluginRequestHeaders runs
// it in wazero beside the native decision and the plugin's whole callback, to
// tell what upstream Go's Wasm code costs from what crossing into the guest
// costs.
package main

import (
	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/fixtures"
)

func main() {}

// requests are BenchmarkPluginRequestHeaders' request shapes, in its order.
var requests = []struct {
	method, target, accept string
	ifNoneMatchAPIs        bool
}{
	{method: "GET", target: "/apis/apps/v1/namespaces/default/deployments/web"},
	{method: "GET", target: "/apis/certificates.k8s.io/v1/clustertrustbundles?watch=true&resourceVersion=1"},
	{method: "GET", target: "/apis", accept: "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
		ifNoneMatchAPIs: true},
}

var index *discovery.Index

// setup builds the index of the benchmark's control plane, the captured
// v1.35.4, v1.36.3 and v1.37.2 servers; 0 on success.
//
//go:wasmexport setup
func setup() int32 {
	servers, err := fixtures.Servers("default", "v1.35.4", "v1.36.3", "v1.37.2")
	if err != nil {
		return 1
	}
	snap, err := discovery.ParseSnapshot(discoverytest.CapturedSnapshotJSON(1, servers))
	if err != nil {
		return 2
	}
	if index, err = discovery.NewIndex(snap); err != nil {
		return 3
	}
	return 0
}

// decide decides request shape kind n times, as the native benchmark does,
// and returns the last decision's action.
//
//go:wasmexport decide
func decide(kind, n int32) int32 {
	r := requests[kind]
	req := discovery.Request{Method: r.method, Accept: r.accept}
	if r.ifNoneMatchAPIs {
		req.IfNoneMatch = index.MergedAPIs().ETag
	}
	var action discovery.Action
	for i := range n {
		path, _, ok := discovery.SplitRequestTarget(r.target)
		if !ok {
			return -1
		}
		req.Path = path
		action = index.Decide(&req, uint64(i)).Action
	}
	return int32(action)
}
