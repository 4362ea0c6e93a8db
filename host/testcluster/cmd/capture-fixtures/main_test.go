package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/host/testcluster"
)

var fixturesDir = filepath.Join("..", "..", "..", "..", "fixtures")

func loadManifest(t *testing.T) Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixturesDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestManifestDescribesEveryFixtureBodyByteForByte(t *testing.T) {
	m := loadManifest(t)
	listed := map[string]Document{}
	docs := slices.Clone(m.Documents)
	for _, mixed := range m.Mixed {
		docs = append(append(docs, mixed.PeerAggregated), mixed.Members...)
	}
	for _, d := range docs {
		listed[d.Path] = d
	}
	var onDisk []string
	err := filepath.WalkDir(fixturesDir, func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(fixturesDir, path)
		if err != nil {
			return err
		}
		// Bodies live in the published per-version and mixed-cluster directories; the top level
		// holds the manifest, the README and files publish leaves alone (the embedding package),
		// and the field-selector tables have their own test.
		if rel = filepath.ToSlash(rel); strings.Contains(rel, "/") && !strings.HasPrefix(rel, fieldSelectorsDir+"/") {
			onDisk = append(onDisk, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != len(listed) {
		t.Errorf("%d fixture bodies on disk, %d in the manifest", len(onDisk), len(listed))
	}
	for _, rel := range onDisk {
		t.Run(rel, func(t *testing.T) {
			d, ok := listed[rel]
			if !ok {
				t.Fatal("not listed in manifest.json")
			}
			body, err := os.ReadFile(filepath.Join(fixturesDir, filepath.FromSlash(rel)))
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(body)
			if got := hex.EncodeToString(sum[:]); got != d.SHA256 || len(body) != d.Bytes {
				t.Errorf("body has sha256 %s and %d bytes; the server sent %s and %d bytes", got, len(body), d.SHA256, d.Bytes)
			}
			if d.ETag == "" || d.ServerID != testcluster.ServerID(d.Hostname) {
				t.Errorf("manifest entry %+v lacks an ETag or a server ID matching its host name", d)
			}
		})
	}
}

func TestManifestDescribesEveryFieldSelectorTable(t *testing.T) {
	m := loadManifest(t)
	tables, err := filepath.Glob(filepath.Join(fixturesDir, fieldSelectorsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(tables) != len(m.FieldSelectors) || len(tables) != len(testcluster.KubeAPIServerVersions) {
		t.Errorf("%d field-selector tables on disk, %d in the manifest, %d pinned versions", len(tables), len(m.FieldSelectors), len(testcluster.KubeAPIServerVersions))
	}
	for _, d := range m.FieldSelectors {
		body, err := os.ReadFile(filepath.Join(fixturesDir, filepath.FromSlash(d.Path)))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); got != d.SHA256 || len(body) != d.Bytes {
			t.Errorf("%s has sha256 %s and %d bytes; the capture wrote %s and %d bytes", d.Path, got, len(body), d.SHA256, d.Bytes)
		}
		if !slices.Contains(testcluster.KubeAPIServerVersions, d.Version) {
			t.Errorf("%s is of version %s, which is not pinned", d.Path, d.Version)
		}
	}
}

func TestManifestRecordsTheSkewThatBreaksRoundRobin(t *testing.T) {
	m := loadManifest(t)
	i := slices.IndexFunc(m.Skew, func(s Skew) bool {
		return s.Older == testcluster.KubeVersion135 && s.Newer == testcluster.KubeVersion136
	})
	if i < 0 {
		t.Fatal("no 1.35 -> 1.36 skew recorded")
	}
	probe := slices.IndexFunc(m.Skew[i].OnlyInNewer, func(p Probe) bool {
		return p.Path == "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies"
	})
	if probe < 0 {
		t.Fatalf("mutatingadmissionpolicies missing from %+v", m.Skew[i].OnlyInNewer)
	}
	if got := m.Skew[i].OnlyInNewer[probe].Status; got[testcluster.KubeVersion135] != 404 || got[testcluster.KubeVersion136] != 200 {
		t.Errorf("recorded statuses %v, want 404 from 1.35 and 200 from 1.36", got)
	}
}

func TestMixedClusterHostnamesGiveTheLeaderTheLowestServerID(t *testing.T) {
	for _, m := range mixedClusters {
		t.Run(m.dir(), func(t *testing.T) {
			names := m.hostnames()
			leader := slices.IndexFunc(m.members, func(mem member) bool { return mem.version == m.leader })
			for i, name := range names {
				if i != leader && testcluster.ServerID(name) < testcluster.ServerID(names[leader]) {
					t.Errorf("%s (%s) sorts before the leader %s (%s)", name, testcluster.ServerID(name), names[leader], testcluster.ServerID(names[leader]))
				}
			}
		})
	}
}

func TestRedactFlagsHidesPerRunValues(t *testing.T) {
	got := redactFlags([]string{
		"--etcd-servers=http://127.0.0.1:2379",
		"--tls-cert-file=run/cluster-1/pki/serving.crt",
		"--secure-port=41234",
		"--peer-advertise-port=41234",
		"--peer-advertise-ip=127.0.0.1",
	}, "run/cluster-1", "http://127.0.0.1:2379")
	want := []string{
		"--etcd-servers=$ETCD_URL",
		"--tls-cert-file=$PKI/serving.crt",
		"--secure-port=$PORT",
		"--peer-advertise-port=$PORT",
		"--peer-advertise-ip=127.0.0.1",
	}
	if !slices.Equal(got, want) {
		t.Errorf("redactFlags = %q, want %q", got, want)
	}
}

func TestSplitFlagsSeparatesSharedFromAdditionalFlags(t *testing.T) {
	common, extra := splitFlags(map[string][]string{
		"a": {"--x", "--y", "--only-a"},
		"b": {"--x", "--only-b", "--y"},
		"c": {"--y", "--x"},
	})
	if want := []string{"--x", "--y"}; !slices.Equal(common, want) {
		t.Errorf("common = %q, want %q", common, want)
	}
	for role, want := range map[string][]string{"a": {"--only-a"}, "b": {"--only-b"}, "c": {}} {
		if !slices.Equal(extra[role], want) {
			t.Errorf("extra[%s] = %q, want %q", role, extra[role], want)
		}
	}
}

func TestParseGVRsListsTopLevelResourcesOnce(t *testing.T) {
	body := []byte(`{"kind":"APIGroupDiscoveryList","apiVersion":"apidiscovery.k8s.io/v2","metadata":{},"items":[
		{"metadata":{"name":"apps"},"versions":[{"version":"v1","resources":[
			{"resource":"deployments","verbs":["get"],"subresources":[{"subresource":"status","verbs":["get"]}]},
			{"resource":"daemonsets","verbs":["get"]}]}]},
		{"metadata":{},"versions":[{"version":"v1","resources":[{"resource":"pods","verbs":["get"]}]}]}]}`)
	got, err := parseGVRs(body)
	if err != nil {
		t.Fatal(err)
	}
	want := []gvr{{"", "v1", "pods"}, {"apps", "v1", "daemonsets"}, {"apps", "v1", "deployments"}}
	if !slices.Equal(got, want) {
		t.Errorf("parseGVRs = %v, want %v", got, want)
	}
	if got := difference(want, got[:1]); !slices.Equal(got, want[1:]) {
		t.Errorf("difference = %v, want %v", got, want[1:])
	}
	if got := groupVersions(want); !slices.Equal(got, []string{"/v1", "apps/v1"}) {
		t.Errorf("groupVersions = %q", got)
	}
	if _, err := parseGVRs([]byte(`{"kind":"APIGroupList","groups":[]}`)); err == nil {
		t.Error("a legacy APIGroupList was accepted as aggregated discovery")
	}
}
