package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
)

const fixtures = "../../../fixtures"

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// mixedFixture is the captured 1.35/1.36 cluster: its members' own documents
// and the peer-aggregated document the 1.36 server served, with its ETag.
type mixedFixture struct {
	Dir            string `json:"dir"`
	PeerAggregated struct {
		Path     string `json:"path"`
		ServerID string `json:"serverID"`
		ETag     string `json:"etag"`
	} `json:"peerAggregated"`
	Members []struct {
		Path     string `json:"path"`
		ServerID string `json:"serverID"`
	} `json:"members"`
}

func loadMixedFixture(t *testing.T) mixedFixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(fixtures, "manifest.json"))
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	var manifest struct {
		Mixed []mixedFixture `json:"mixed"`
	}
	if err := json.Unmarshal(raw, &manifest); err != nil {
		t.Fatal(err)
	}
	if len(manifest.Mixed) == 0 {
		t.Fatal("fixtures/manifest.json lists no mixed cluster")
	}
	return manifest.Mixed[0]
}

func TestDiscoveryMergeReproducesUpstreamPeerAggregatedDiscovery(t *testing.T) {
	mixed := loadMixedFixture(t)
	// The aggregating server merges with itself as "local"; giving it the
	// lowest ID makes skewgate's choice of local the same server.
	args := []string{"discovery", "merge"}
	var files []string
	for _, m := range mixed.Members {
		if filepath.Base(m.Path) != "apis.json" {
			continue
		}
		id := m.ServerID
		if id == mixed.PeerAggregated.ServerID {
			id = "0-" + id
		}
		args = append(args, "--id", id)
		files = append(files, filepath.Join(fixtures, m.Path))
	}
	if len(files) < 2 {
		t.Fatalf("the mixed fixture has %d /apis members", len(files))
	}
	code, stdout, stderr := runCLI(t, append(args, files...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want, err := os.ReadFile(filepath.Join(fixtures, mixed.PeerAggregated.Path))
	if err != nil {
		t.Fatal(err)
	}
	if stdout != string(want) {
		t.Errorf("merged document differs from what kube-apiserver served (%d bytes vs %d)", len(stdout), len(want))
	}
	if got := strings.TrimSpace(stderr); got != "ETag: "+mixed.PeerAggregated.ETag {
		t.Errorf("stderr %q, want the served ETag %s", got, mixed.PeerAggregated.ETag)
	}
}

func TestDiscoveryMergeOfSnapshotIsTheGatewaysDocument(t *testing.T) {
	raw := discoverytest.SnapshotJSON(3, discoverytest.SkewedControlPlane())
	path := filepath.Join(t.TempDir(), "snapshot.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	snap, err := discovery.ParseSnapshot(raw)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := discovery.NewIndex(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want *discovery.Document
	}{
		{"apis", []string{"discovery", "merge", "--snapshot", path}, ix.MergedAPIs()},
		{"api", []string{"discovery", "merge", "--snapshot", path, "--core"}, ix.MergedCoreAPI()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != 0 || stdout != string(tc.want.Body) || strings.TrimSpace(stderr) != "ETag: "+tc.want.ETag {
				t.Errorf("exit %d, stderr %q; document equal: %v", code, stderr, stdout == string(tc.want.Body))
			}
		})
	}
}

func TestDiscoveryMergeRefusesAmbiguousInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, content []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	groups := map[string][]string{"/v1": {"pods"}, "apps/v1": {"deployments"}}
	apis := write("a.json", discoverytest.GroupListJSON(groups, false))
	core := write("core.json", discoverytest.GroupListJSON(groups, true))
	sameName := write("sub-a.json", discoverytest.GroupListJSON(groups, false))
	broken := write("broken.json", []byte(`{"kind":"APIGroupDiscoveryList","items":[{`))
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	dup := filepath.Join(dir, "sub", "a.json")
	if err := os.Rename(sameName, dup); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
	}{
		{"no files", []string{"discovery", "merge"}, exitUsage},
		{"two files with one server ID", []string{"discovery", "merge", apis, dup}, 1},
		{"/api mixed with /apis", []string{"discovery", "merge", apis, core}, 1},
		{"malformed document", []string{"discovery", "merge", apis, broken}, 1},
		{"more IDs than files", []string{"discovery", "merge", "--id", "x", "--id", "y", apis}, 1},
		{"snapshot and files", []string{"discovery", "merge", "--snapshot", apis, apis}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, stdout, _ := runCLI(t, tc.args...); code != tc.wantCode || stdout != "" {
				t.Errorf("exit %d with output %q, want exit %d and no document", code, stdout, tc.wantCode)
			}
		})
	}
	if code, stdout, _ := runCLI(t, "discovery", "merge", "--id", "one", "--id", "two", apis, dup); code != 0 || !strings.Contains(stdout, `"deployments"`) {
		t.Errorf("distinct --id values: exit %d", code)
	}
}

func TestEnvoyConfigNamesClustersAsTheControllerDoes(t *testing.T) {
	common := []string{"envoy", "config",
		"--apiserver", "https://10.0.0.11:6443", "--apiserver", "https://10.0.0.12:6443",
		"--tls-cert-file", "/etc/skewgate/tls/serving.crt", "--tls-private-key-file", "/etc/skewgate/tls/serving.key",
		"--peer-ca-file", "/etc/skewgate/tls/cluster-ca.crt", "--wasm", "/etc/skewgate/skewgate.wasm"}
	servers := []discoverytest.Server{
		{ID: "apiserver-10-0-0-11-6443", Cluster: "apiserver-10-0-0-11-6443", Version: "v1.35.4", Healthy: true, Groups: map[string][]string{"/v1": {"pods"}}},
		{ID: "apiserver-10-0-0-12-6443", Cluster: "apiserver-10-0-0-12-6443", Version: "v1.36.3", Healthy: true, Groups: map[string][]string{"/v1": {"pods"}, "apps/v1": {"deployments"}}},
	}
	snapshot := filepath.Join(t.TempDir(), "snapshot.json")
	if err := os.WriteFile(snapshot, discoverytest.SnapshotJSON(7, servers), 0o600); err != nil {
		t.Fatal(err)
	}
	stranger := filepath.Join(t.TempDir(), "stranger.json")
	servers[1].Cluster = "elsewhere"
	if err := os.WriteFile(stranger, discoverytest.SnapshotJSON(8, servers), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		extra    []string
		wantCode int
		want     []string
	}{
		{"ECDS bootstrap", []string{"--envoy-ecds-file", "/etc/skewgate/ecds/skewgate.yaml"}, 0,
			[]string{"apiserver-10-0-0-11-6443", "apiserver-10-0-0-12-6443", "config_discovery", "/etc/skewgate/ecds/skewgate.yaml"}},
		{"inline plugin configuration", []string{"--snapshot", snapshot}, 0,
			[]string{"apiserver-10-0-0-12-6443", "/etc/skewgate/skewgate.wasm", `"generation":7`}},
		{"ECDS resource", []string{"--snapshot", snapshot, "--ecds-resource"}, 0,
			[]string{"version_info: '7'", "envoy.config.core.v3.TypedExtensionConfig"}},
		{"xDS bootstrap", []string{"--xds-address", "skewgate.kube-system.svc:18000", "--xds-ca-file", "/etc/skewgate/xds/ca.crt",
			"--xds-client-cert-file", "/etc/skewgate/xds/envoy.crt", "--xds-client-key-file", "/etc/skewgate/xds/envoy.key"}, 0,
			[]string{"apiserver-10-0-0-12-6443", "skewgate_xds", "skewgate.kube-system.svc", "/etc/skewgate/xds/envoy.crt", "config_discovery"}},
		{"xDS address without port", []string{"--xds-address", "skewgate.kube-system.svc"}, 1, nil},
		{"xDS and ECDS file", []string{"--xds-address", "skewgate:18000", "--envoy-ecds-file", "/etc/skewgate/ecds/skewgate.yaml"}, 1, nil},
		{"snapshot naming another cluster", []string{"--snapshot", stranger}, 1, nil},
		{"neither ECDS nor snapshot", nil, 1, nil},
		{"relative path", []string{"--envoy-ecds-file", "ecds/skewgate.yaml"}, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, append(append([]string{}, common...), tc.extra...)...)
			if code != tc.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tc.wantCode, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stdout, w) {
					t.Errorf("output lacks %q", w)
				}
			}
		})
	}
}

func TestCommandLineMistakesExitWithUsage(t *testing.T) {
	for _, args := range [][]string{nil, {"frobnicate"}, {"discovery"}, {"serve", "--no-such-flag"}, {"serve", "stray"}} {
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("skewgate %q: exit %d, want %d", args, code, exitUsage)
		}
	}
	if code, _, stderr := runCLI(t, "serve"); code != 1 || !strings.Contains(stderr, "--peer-ca-file is required") {
		t.Errorf("serve without flags: exit %d, %q", code, stderr)
	}
}

func TestVersionNamesTheBuild(t *testing.T) {
	code, stdout, _ := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(stdout, "skewgate ") || !strings.Contains(stdout, "go1.") {
		t.Errorf("exit %d: %q", code, stdout)
	}
}

func TestServeRefusesNegativeDurationsNamingTheFlag(t *testing.T) {
	for _, flag := range []string{"--poll-interval", "--readiness-interval", "--grace-period", "--request-timeout", "--discovery-authorization-cache",
		"--plugin-call-timeout", "--shutdown-delay-duration", "--shutdown-timeout"} {
		t.Run(flag, func(t *testing.T) {
			code, _, stderr := runCLI(t, "serve", flag+"=-1s")
			if code != 1 || !strings.Contains(stderr, flag+" -1s: must not be negative") {
				t.Errorf("exit %d, %q; want an error naming %s", code, stderr, flag)
			}
		})
	}
}
