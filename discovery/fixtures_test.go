package discovery

import (
	"bytes"
	"testing"

	"github.com/skewgate/skewgate/fixtures"
)

// mixedIndex indexes the members of a captured mixed-version cluster, each
// member's documents exactly as it served them.
func mixedIndex(t *testing.T, mixed fixtures.Mixed) *Index {
	t.Helper()
	byID := map[string]*Server{}
	var snap Snapshot
	snap.Generation = 1
	for _, doc := range mixed.Members {
		body, err := doc.Body()
		if err != nil {
			t.Fatal(err)
		}
		list, err := ParseGroupList(body)
		if err != nil {
			t.Fatalf("%s: %v", doc.Path, err)
		}
		srv := byID[doc.ServerID]
		if srv == nil {
			snap.Servers = append(snap.Servers, Server{ID: doc.ServerID, Cluster: doc.ServerID, Version: doc.Version, Healthy: true})
			srv = &snap.Servers[len(snap.Servers)-1]
			byID[doc.ServerID] = srv
		}
		switch doc.Request {
		case "/apis":
			srv.APIs = list
		case "/api":
			srv.Core = list
		default:
			t.Fatalf("%s: unexpected request %q", doc.Path, doc.Request)
		}
	}
	ix, err := NewIndex(&snap)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// The central promise: for the servers of a real mixed-version cluster,
// skewgate serves the bytes and the ETag that upstream's peer-aggregated
// discovery served.
func TestMergedAPIsEqualUpstreamPeerAggregatedDocumentOfRealClusters(t *testing.T) {
	m, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Mixed) == 0 {
		t.Fatal("no mixed-version fixtures")
	}
	for _, mixed := range m.Mixed {
		t.Run(mixed.Dir, func(t *testing.T) {
			want, err := mixed.PeerAggregated.Body()
			if err != nil {
				t.Fatal(err)
			}
			got := mixedIndex(t, mixed).MergedAPIs()
			if !bytes.Equal(got.Body, want) {
				t.Errorf("merged /apis differs from upstream's (%d vs %d bytes)", len(got.Body), len(want))
			}
			if got.ETag != mixed.PeerAggregated.ETag {
				t.Errorf("ETag %s; upstream served %s", got.ETag, mixed.PeerAggregated.ETag)
			}
		})
	}
}

func TestEveryCapturedDocumentParsesAndKeepsItsETag(t *testing.T) {
	m, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range m.Documents {
		body, err := doc.Body()
		if err != nil {
			t.Fatal(err)
		}
		list, err := ParseGroupList(body)
		if err != nil {
			t.Errorf("%s: %v", doc.Path, err)
			continue
		}
		// Older servers (1.30 and 1.31 here) write each group's "creationTimestamp":null, which
		// today's upstream leaves out, and so does the encoding here. Their
		// entity tags hash their own bytes, which no longer come out.
		want := bytes.ReplaceAll(body, []byte(`,"creationTimestamp":null`), nil)
		want = bytes.ReplaceAll(want, []byte(`{"creationTimestamp":null}`), []byte(`{}`))
		if !bytes.Equal(ResponseBody(list), want) {
			t.Errorf("%s: re-encoding changes the document", doc.Path)
		}
		if got := ETag(list); bytes.Equal(want, body) && got != doc.ETag {
			t.Errorf("%s: ETag %s; the server sent %s", doc.Path, got, doc.ETag)
		}
	}
}

func TestSnapshotExampleIsValid(t *testing.T) {
	raw, err := fixtures.FS.ReadFile("snapshot-example.json")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	// The example is a v1.35.4 and a v1.36.3 server: the newer one alone serves
	// mutatingadmissionpolicies, so requests for it are re-routed.
	d := ix.Decide(&Request{Method: "GET", Path: "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"}, 0)
	if d.Action != Route || ix.Servers()[d.Server].Version != "v1.36.3" {
		t.Errorf("decision %+v; want a route to the v1.36.3 server", d)
	}
}
