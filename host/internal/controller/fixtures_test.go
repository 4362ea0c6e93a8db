package controller

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fixtureDocument reads a discovery document captured from a real API server.
func fixtureDocument(t testing.TB, dir, name string) fakeDocument {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("..", "..", "..", "fixtures", dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return fakeDocument{status: http.StatusOK, contentType: aggregatedContentType, body: body, etag: etagOf(body)}
}

// capturedPlane is a control plane mid-upgrade, as the fixtures captured it.
var capturedPlane = []struct{ dir, version string }{
	{"1.35.4/default", "v1.35.4"},
	{"1.36.3/extra", "v1.36.3"},
	{"1.37.2/default", "v1.37.2"},
}

func TestCapturedServerDocumentsPassThroughUnchanged(t *testing.T) {
	pki := newTestPKI(t)
	var servers []*fakeAPIServer
	for _, p := range capturedPlane {
		srv := newFakeAPIServer(t, pki, p.version, nil)
		srv.setDocument(pathAPIs, fixtureDocument(t, p.dir, "apis.json"))
		srv.setDocument(pathCore, fixtureDocument(t, p.dir, "api.json"))
		servers = append(servers, srv)
	}
	rec := &recorder{}
	c := startController(t, testOptions(pki, rec, servers...))

	waitUntil(t, "Ready", c.Ready)
	raw, snap := c.Current()
	if len(snap.Servers) != len(capturedPlane) {
		t.Fatalf("servers = %v, want all %d", snapshotIDs(snap), len(capturedPlane))
	}
	for i, srv := range servers {
		s := serverByID(snap, ClusterName(srv.address))
		if s == nil || s.Version != capturedPlane[i].version || len(s.APIs.Items) < 20 {
			t.Errorf("%s: %+v", capturedPlane[i].dir, s)
			continue
		}
		for _, path := range []string{pathAPIs, pathCore} {
			if !bytes.Contains(raw, bytes.TrimSpace(srv.document(path).body)) {
				t.Errorf("%s%s is not embedded byte for byte", capturedPlane[i].dir, path)
			}
		}
	}
	if !slices.IsSorted(snapshotIDs(snap)) {
		t.Errorf("servers not sorted by ID: %v", snapshotIDs(snap))
	}
}

// capturedServers are the states a poll leaves for the captured plane.
func capturedServers(b *testing.B) []*serverState {
	var servers []*serverState
	for _, p := range capturedPlane {
		s := completeServer(ClusterName(p.version+":6443"), true,
			fixtureDocument(b, p.dir, "apis.json").body, fixtureDocument(b, p.dir, "api.json").body)
		servers = append(servers, s)
	}
	return servers
}

// BenchmarkUnchangedPoll is what every poll costs beyond the network when
// nothing changed: encode the servers and compare with the last snapshot.
func BenchmarkUnchangedPoll(b *testing.B) {
	servers := capturedServers(b)
	c := &Controller{schemas: newSchemas()}
	if !c.changed(c.unnumbered(servers)) {
		b.Fatal("the first snapshot is no change")
	}
	b.SetBytes(int64(len(c.lastContent)))
	b.ReportAllocs()
	for b.Loop() {
		if c.changed(c.unnumbered(servers)) {
			b.Fatal("encoding is not deterministic")
		}
	}
}

// BenchmarkNewSnapshot is the cost of a change: encode, number and validate.
func BenchmarkNewSnapshot(b *testing.B) {
	servers := capturedServers(b)
	c := &Controller{log: discardLogger(), metrics: newMetrics(), schemas: newSchemas()}
	b.SetBytes(int64(len(c.unnumbered(servers).AppendJSON(nil))))
	b.ReportAllocs()
	for b.Loop() {
		unnumbered := c.unnumbered(servers)
		c.lastContent = nil
		if !c.changed(unnumbered) || c.build(servers, unnumbered) == nil {
			b.Fatal("invalid snapshot")
		}
	}
}
