package micro

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/fixtures"
)

// capturedVersions are the servers of the benchmark control plane: the default
// API set of each pinned kube-apiserver version, captured from real servers.
var capturedVersions = []string{"v1.35.4", "v1.36.3", "v1.37.2"}

// capturedServer is one real API server's own (nopeer) discovery documents.
type capturedServer struct {
	id, version string
	apis, api   []byte
}

// capturedPlane returns the captured servers in capturedVersions order.
func capturedPlane(tb testing.TB) []capturedServer {
	tb.Helper()
	manifest, err := fixtures.Load()
	if err != nil {
		tb.Fatal(err)
	}
	servers := make([]capturedServer, len(capturedVersions))
	for _, doc := range manifest.Documents {
		i := slices.Index(capturedVersions, doc.Version)
		if i < 0 || doc.Profile != "default" {
			continue
		}
		body, err := doc.Body()
		if err != nil {
			tb.Fatal(err)
		}
		servers[i].id, servers[i].version = doc.ServerID, doc.Version
		switch {
		case strings.HasSuffix(doc.Path, "/apis.json"):
			servers[i].apis = body
		case strings.HasSuffix(doc.Path, "/api.json"):
			servers[i].api = body
		}
	}
	for i, s := range servers {
		if s.apis == nil || s.api == nil {
			tb.Fatalf("fixtures: the default /apis and /api documents of %s are missing", capturedVersions[i])
		}
	}
	return servers
}

// capturedIndex is the index the plugin builds for the captured plane, every
// server healthy.
func capturedIndex(tb testing.TB) *discovery.Index {
	tb.Helper()
	type server struct {
		ID      string          `json:"id"`
		Cluster string          `json:"cluster"`
		Version string          `json:"version"`
		Healthy bool            `json:"healthy"`
		APIs    json.RawMessage `json:"apis"`
		API     json.RawMessage `json:"api"`
	}
	var list []server
	for _, s := range capturedPlane(tb) {
		list = append(list, server{s.id, "kube-" + s.version, s.version, true, s.apis, s.api})
	}
	raw, err := json.Marshal(map[string]any{"generation": 1, "servers": list})
	if err != nil {
		tb.Fatal(err)
	}
	snap, err := discovery.ParseSnapshot(raw)
	if err != nil {
		tb.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		tb.Fatal(err)
	}
	return ix
}
