package testcluster

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestServerIDMatchesIdentityLeasesWrittenByRealServers(t *testing.T) {
	// Each pair was read from the identity Lease of a kube-apiserver running under that host name.
	for _, tc := range []struct {
		hostname, want string
	}{
		{"upgrade-a", "apiserver-fvtqsjc4pggionp2qqxf3ukzra"},
		{"auth-a", "apiserver-jbb4cj77wvzfzfm5pbvgjm3uim"},
		{"baseline-1-35", "apiserver-ycojy3cxxga2il6s6zt7xo2j6e"},
		{"baseline-1-36", "apiserver-updoopcycw4ushqi6b3zcpn2ue"},
		{"baseline-1-36-extra", "apiserver-di5wzciss3erbkxfbnqas7nj2y"},
	} {
		t.Run(tc.hostname, func(t *testing.T) {
			if got := ServerID(tc.hostname); got != tc.want {
				t.Errorf("ServerID(%q) = %q, want %q", tc.hostname, got, tc.want)
			}
		})
	}
}

func TestServerIDMatchesEveryServerThatProducedAFixture(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	type document struct{ Hostname, ServerID string }
	var manifest struct {
		Documents []document
		Mixed     []struct {
			PeerAggregated document
			Members        []document
		}
	}
	if err := json.Unmarshal(data, &manifest); err != nil {
		t.Fatal(err)
	}
	docs := manifest.Documents
	for _, m := range manifest.Mixed {
		docs = append(append(docs, m.PeerAggregated), m.Members...)
	}
	if len(manifest.Documents) == 0 || len(manifest.Mixed) == 0 {
		t.Fatal("manifest lists no documents")
	}
	for _, d := range docs {
		if got := ServerID(d.Hostname); got != d.ServerID {
			t.Errorf("ServerID(%q) = %q, the server's lease said %q", d.Hostname, got, d.ServerID)
		}
	}
}
