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
// server healthy.
func capturedIndex(tb testing.TB) *discovery.Index {
	tb.Helper()
	snap, err := discovery.ParseSnapshot(discoverytest.CapturedSnapshotJSON(1, capturedPlane(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}
