package micro

import (
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/fixtures"
)

// capturedVersions are the servers of the benchmark control plane: the default
// API set of each pinned kube-apiserver version, captured from real servers.
var capturedVersions = []string{"v1.35.4", "v1.36.3", "v1.37.2"}

// capturedPlane returns the captured servers in capturedVersions order.
func capturedPlane(tb testing.TB) []fixtures.Server {
	tb.Helper()
	servers, err := fixtures.Servers("default", capturedVersions...)
	if err != nil {
		tb.Fatal(err)
	}
	return servers
}

// capturedIndex is the index the plugin builds for the captured plane, every
// server healthy, with capturedFieldData.
func capturedIndex(tb testing.TB) *discovery.Index {
	tb.Helper()
	snap, err := discovery.ParseSnapshot(discoverytest.CapturedSnapshotJSON(1, capturedPlane(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	for i := range snap.Servers {
		capturedFieldData(&snap.Servers[i])
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}

// capturedFieldData is what the field-level comparison of the captured
// servers finds: resource slices accept spec.pool.name as a field-selector
// label from v1.37 on, and the older servers' schemas of jobs (among other
// kinds) lack fields v1.37.2's has.
func capturedFieldData(srv *discovery.Server) {
	labels := []string{"metadata.name", "spec.driver", "spec.nodeName"}
	if srv.Version == "v1.37.2" {
		srv.FieldSelectors = map[string][]string{"resource.k8s.io/v1/resourceslices": append(labels, "spec.pool.name")}
		return
	}
	srv.FieldSelectors = map[string][]string{"resource.k8s.io/v1/resourceslices": labels}
	srv.MissingFields = map[string][]string{"batch/v1/jobs": {"spec.template.spec.containers[].lifecycle.postStart.httpGet.protocol"}}
}
