// An external test: discoverytest and fixtures build on discovery, so a
// test of the package that uses them cannot be inside it.
package discovery_test

import (
	"bytes"
	"strings"
	"testing"

	. "github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

func TestParseSnapshotRejectsMalformedInputNamingServerAndField(t *testing.T) {
	valid := string(discoverytest.SnapshotJSON(3, discoverytest.SkewedControlPlane()))
	replace := func(old, new string) string {
		if !strings.Contains(valid, old) {
			t.Fatalf("test input lacks %q", old)
		}
		return strings.Replace(valid, old, new, 1)
	}
	cases := []struct {
		name, doc, want string
	}{
		{"empty", ``, "not valid JSON"},
		{"truncated", valid[:len(valid)/2], "not valid JSON"},
		{"array", `[]`, "must be a JSON object"},
		{"no generation", `{"servers":[]}`, "generation: must be a positive integer, got nothing"},
		{"zero generation", replace(`"generation":3`, `"generation":0`), "generation: must be a positive integer"},
		{"fractional generation", replace(`"generation":3`, `"generation":3.5`), "generation: must be a positive integer"},
		{"string generation", replace(`"generation":3`, `"generation":"3"`), "generation: must be a positive integer"},
		{"negative generation", replace(`"generation":3`, `"generation":-3`), "generation: must be a positive integer"},
		{"servers not array", `{"generation":1,"servers":{}}`, "servers: must be an array"},
		{"no servers", `{"generation":1,"servers":[]}`, "need 1 to 64 servers, got 0"},
		{"server not object", `{"generation":1,"servers":[1]}`, "servers[0]: must be an object"},
		{"missing id", replace(`"id":"apiserver-bbb",`, ``), "servers[1]: id: must be a string, got nothing"},
		{"empty id", replace(`"id":"apiserver-bbb"`, `"id":""`), "servers[1]: id: must not be empty"},
		{"id with space", replace(`"id":"apiserver-bbb"`, `"id":"api server"`), `servers[1]: id: "api server": character ' ' is not allowed`},
		{"duplicate id", replace(`"id":"apiserver-bbb"`, `"id":"apiserver-aaa"`), "servers[1] (apiserver-aaa): id: duplicates servers[0]"},
		{"duplicate cluster", replace(`"cluster":"kube-c"`, `"cluster":"kube-a"`), `servers[2] (apiserver-ccc): cluster: "kube-a" is also used by servers[0]`},
		{"cluster with plus", replace(`"cluster":"kube-c"`, `"cluster":"kube-a+front-proxy"`), `servers[2] (apiserver-ccc): cluster: "kube-a+front-proxy": character '+' is not allowed`},
		{"cluster with newline", replace(`"cluster":"kube-c"`, `"cluster":"kube\nc"`), "servers[2] (apiserver-ccc): cluster:"},
		{"numeric version", replace(`"version":"v1.35.4"`, `"version":1.35`), "servers[0] (apiserver-aaa): version: must be a string"},
		{"healthy as string", replace(`"healthy":true`, `"healthy":"yes"`), `servers[0] (apiserver-aaa): healthy: must be true or false, got "yes"`},
		{"missing apis", replace(`"apis":`, `"apiz":`), "servers[0] (apiserver-aaa): apis: must be an APIGroupDiscoveryList object, got nothing"},
		{"apis not object", `{"generation":1,"servers":[{"id":"a","cluster":"b","version":"v","healthy":true,"apis":[],"api":{}}]}`, "servers[0] (a): apis: must be an APIGroupDiscoveryList object, got []"},
		{"bad group list", replace(`"versions":[{"version":"v1"`, `"versions":[{"version":7`), "servers[0] (apiserver-aaa): apis: items["},
		{"core group in apis", replace(`"metadata":{"name":"admissionregistration.k8s.io"}`, `"metadata":{}`), "servers[0] (apiserver-aaa): apis: items[0]: the core group belongs in /api"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			snap, err := ParseSnapshot([]byte(c.doc))
			if err == nil {
				t.Fatalf("accepted: %+v", snap)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q; want it to contain %q", err, c.want)
			}
		})
	}
}

func TestParseSnapshotRejectsMoreThanMaxServers(t *testing.T) {
	valid, err := ParseSnapshot(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane()))
	if err != nil {
		t.Fatal(err)
	}
	var servers []Server
	for i := range MaxServers + 1 {
		s := valid.Servers[0]
		s.ID = "apiserver-" + strings.Repeat("x", i+1)
		s.Cluster = "kube-" + strings.Repeat("x", i+1)
		servers = append(servers, s)
	}
	tooMany := &Snapshot{Generation: 1, Servers: servers}
	if _, err := ParseSnapshot(tooMany.AppendJSON(nil)); err == nil || !strings.Contains(err.Error(), "more than 64 servers") {
		t.Fatalf("error %v; want the server limit named", err)
	}
	if _, err := NewSnapshot(1, "", servers); err == nil || !strings.Contains(err.Error(), "need 1 to 64 servers, got 65") {
		t.Fatalf("building: error %v; want the server limit named", err)
	}
	limit, err := NewSnapshot(1, "", servers[:MaxServers])
	if err != nil {
		t.Fatalf("exactly %d servers refused: %v", MaxServers, err)
	}
	if _, err := ParseSnapshot(limit.AppendJSON(nil)); err != nil {
		t.Fatalf("exactly %d servers rejected: %v", MaxServers, err)
	}
}

func TestParseSnapshotKeepsEveryServerField(t *testing.T) {
	servers := discoverytest.SkewedControlPlane()
	servers[2].Healthy = false
	snap, err := ParseSnapshot(discoverytest.SnapshotJSON(9, servers))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Generation != 9 || len(snap.Servers) != 3 {
		t.Fatalf("generation %d, %d servers", snap.Generation, len(snap.Servers))
	}
	for i, want := range servers {
		got := snap.Servers[i]
		if got.ID != want.ID || got.Cluster != want.Cluster || got.Version != want.Version || got.Healthy != want.Healthy {
			t.Errorf("server %d = %+v; want %+v", i, got, want)
		}
		if len(got.Core.Items) != 1 || got.Core.Items[0].Name() != "" {
			t.Errorf("server %d core list %+v; want the core group only", i, got.Core.Items)
		}
	}
}

func FuzzParseSnapshot(f *testing.F) {
	f.Add([]byte(discoverytest.SnapshotJSON(1, discoverytest.SkewedControlPlane())))
	f.Add([]byte(`{"generation":1,"servers":[{"id":"a","cluster":"b","version":"v1","healthy":true,"apis":{"items":[]},"api":{"items":[]}}]}`))
	f.Add([]byte(`{"generation":18446744073709551615,"servers":[]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		snap, err := ParseSnapshot(doc)
		if err != nil {
			return
		}
		// Whatever parses must index and merge without failing.
		if _, err := NewIndex(snap); err != nil {
			t.Fatalf("parsed snapshot does not index: %v", err)
		}
		// And what the writer makes of it reads back as the same snapshot.
		encoded := snap.AppendJSON(nil)
		again, err := ParseSnapshot(encoded)
		if err != nil {
			t.Fatalf("the encoding of a parsed snapshot does not parse: %v", err)
		}
		if !bytes.Equal(again.AppendJSON(nil), encoded) {
			t.Fatal("encode(parse(encode(s))) differs from encode(s)")
		}
	})
}
