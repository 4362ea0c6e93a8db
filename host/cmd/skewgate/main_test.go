package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/skewgate/skewgate/discovery"
	"github.com/skewgate/skewgate/discovery/discoverytest"
	"github.com/skewgate/skewgate/host/internal/cmdline"
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
		{"no files", []string{"discovery", "merge"}, cmdline.ExitUsage},
		{"two files with one server ID", []string{"discovery", "merge", apis, dup}, 1},
		{"/api mixed with /apis", []string{"discovery", "merge", apis, core}, 1},
		{"malformed document", []string{"discovery", "merge", apis, broken}, 1},
		{"more IDs than files", []string{"discovery", "merge", "--id", "x", "--id", "y", apis}, 1},
		{"snapshot and files", []string{"discovery", "merge", "--snapshot", apis, apis}, cmdline.ExitUsage},
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
			[]string{"apiserver-10-0-0-12-6443", "/etc/skewgate/skewgate.wasm", "deployments"}},
		{"ECDS resource", []string{"--snapshot", snapshot, "--ecds-resource"}, 0,
			[]string{"version_info: '7'", "envoy.config.core.v3.TypedExtensionConfig", `"schemaSkewRouting":"reads-and-writes"`}},
		{"ECDS resource routing only writes by schema", []string{"--snapshot", snapshot, "--ecds-resource", "--schema-skew-routing", "writes"}, 0,
			[]string{`"schemaSkewRouting":"writes"`}},
		{"schema skew routing without a snapshot", []string{"--envoy-ecds-file", "/etc/skewgate/ecds/skewgate.yaml", "--schema-skew-routing", "writes"}, 1, nil},
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
		if code, _, _ := runCLI(t, args...); code != cmdline.ExitUsage {
			t.Errorf("skewgate %q: exit %d, want %d", args, code, cmdline.ExitUsage)
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

func TestServeRefusesEveryBadFlagValueAtStartNamingTheFlag(t *testing.T) {
	_, serveBase := startFiles(t)
	if code, _, stderr := runCLI(t, serveBase...); code != 1 || !strings.Contains(stderr, "--wasm") || strings.Count(stderr, "--") != 1 {
		t.Fatalf("the valid base command line: exit %d, %q; want only the module missing", code, stderr)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"negative retry after", []string{"--retry-after-seconds=-1"}, 1, "--retry-after-seconds -1: must be an integer from 1 to 3600"},
		{"retry after over an hour", []string{"--retry-after-seconds=3601"}, 1, "--retry-after-seconds 3601: must be an integer from 1 to 3600"},
		{"retry after not a number", []string{"--retry-after-seconds=soon"}, cmdline.ExitUsage, `invalid argument "soon" for "--retry-after-seconds"`},
		{"upper-case routing header", []string{"--routing-header=X-Upper"}, 1, `--routing-header "X-Upper": not a lower-case HTTP header name`},
		{"pseudo-header as routing header", []string{"--routing-header=:authority"}, 1, `--routing-header ":authority": not a lower-case HTTP header name`},
		{"identity header as routing header", []string{"--routing-header=x-remote-user"}, 1, `--routing-header "x-remote-user": reserved by the plugin`},
		{"peer-proxied header as routing header", []string{"--routing-header=x-kubernetes-peer-proxied"}, 1, `--routing-header "x-kubernetes-peer-proxied": reserved by the plugin`},
		{"misspelt identity mode", []string{"--identity-mode=frontproxy"}, 1, `--identity-mode "frontproxy": must be "passthrough" or "front-proxy"`},
		{"upper-case identity mode", []string{"--identity-mode=Passthrough"}, 1, `--identity-mode "Passthrough": must be "passthrough" or "front-proxy"`},
		{"misspelt schema skew routing", []string{"--schema-skew-routing=reads"}, 1, `--schema-skew-routing "reads": must be "reads-and-writes" or "writes"`},
		{"front-proxy without its certificate", []string{"--identity-mode=front-proxy", "--client-ca-file=ca"}, 1, "--identity-mode=front-proxy needs --proxy-client-cert-file and --proxy-client-key-file"},
		{"front-proxy without a client CA", []string{"--identity-mode=front-proxy", "--proxy-client-cert-file=p", "--proxy-client-key-file=k"}, 1, "--identity-mode=front-proxy needs --client-ca-file"},
		{"no controller credentials", []string{"--kubeconfig="}, 1, "no credentials for the API servers: give --proxy-client-cert-file and --proxy-client-key-file, or --kubeconfig"},
		{"half a proxy key pair", []string{"--proxy-client-cert-file=p"}, 1, "--proxy-client-cert-file and --proxy-client-key-file go together"},
		{"fractional authorization cache", []string{"--discovery-authorization-cache=1500ms"}, 1, "--discovery-authorization-cache 1.5s: must be whole seconds, at most 5m0s"},
		{"authorization cache too long", []string{"--discovery-authorization-cache=6m"}, 1, "--discovery-authorization-cache 6m0s: must be whole seconds, at most 5m0s"},
		{"duration without a unit", []string{"--poll-interval=5"}, cmdline.ExitUsage, `invalid argument "5" for "--poll-interval"`},
		{"plain-http API server", []string{"--apiserver=http://10.0.0.2:6443"}, 1, `--apiserver "http://10.0.0.2:6443": must be an https:// URL`},
		{"API server with a path", []string{"--apiserver=https://10.0.0.2:6443/api"}, 1, `--apiserver "https://10.0.0.2:6443/api": must be https://host:port with nothing after the port`},
		{"API server with credentials", []string{"--apiserver=https://admin@10.0.0.2:6443"}, 1, `--apiserver "https://admin@10.0.0.2:6443": must be https://host:port`},
		{"API server that is no DNS name", []string{"--apiserver=https://kube_b:6443"}, 1, `--apiserver "https://kube_b:6443": host "kube_b" is neither an IP address nor a DNS name`},
		{"API server on port zero", []string{"--apiserver=https://10.0.0.2:0"}, 1, `--apiserver "https://10.0.0.2:0": port must be 1 to 65535`},
		{"API server listed twice", []string{"--apiserver=https://10.0.0.1:6443/"}, 1, `--apiserver "https://10.0.0.1:6443/": listed twice (as 10.0.0.1:6443)`},
		{"local API server over http", []string{"--local-apiserver=http://10.0.0.2:6443", "--bind-address=127.0.0.1"}, 1, `--local-apiserver "http://10.0.0.2:6443": must be an https:// URL`},
		{"node-local on a public address", []string{"--local-apiserver=https://10.0.0.2:6443", "--bind-address=0.0.0.0"}, 1, "--bind-address 0.0.0.0: node-local mode"},
		{"secure port out of range", []string{"--secure-port=70000"}, 1, "--secure-port 70000: must be 1 to 65535"},
		{"metrics address without a port", []string{"--metrics-bind-address=127.0.0.1"}, 1, `--metrics-bind-address "127.0.0.1": must be host:port`},
		{"negative in-flight limit", []string{"--max-requests-inflight=-1"}, 1, "--max-requests-inflight -1: must not be negative"},
		{"negative mutating in-flight limit", []string{"--max-mutating-requests-inflight=-5"}, 1, "--max-mutating-requests-inflight -5: must not be negative"},
		{"negative body buffer", []string{"--max-buffered-request-bytes=-1"}, 1, "--max-buffered-request-bytes -1: must be positive"},
		{"client share beyond the body buffer", []string{"--max-buffered-request-bytes=1048576", "--max-buffered-request-bytes-per-client=2097152"}, 1,
			"--max-buffered-request-bytes-per-client 2097152: must be positive and at most --max-buffered-request-bytes (1048576)"},
		{"in-flight limit not a number", []string{"--max-requests-inflight=many"}, cmdline.ExitUsage, `invalid argument "many" for "--max-requests-inflight"`},
		{"bad log level", []string{"--log-level=loud"}, 1, "--log-level"},
		{"bad log format", []string{"--log-format=xml"}, 1, `--log-format "xml": must be text or json`},
		{"unknown flag", []string{"--retry-after=5"}, cmdline.ExitUsage, "unknown flag: --retry-after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(slices.Clone(serveBase), tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, %q; want exit %d and an error containing %s", code, stderr, tc.code, tc.want)
			}
			for _, goAPI := range []string{"controller:", "gateway:", "configuration:", "Options", "RESTConfig"} {
				if strings.Contains(stderr, goAPI) {
					t.Errorf("the error speaks of %q, not of flags: %s", goAPI, stderr)
				}
			}
		})
	}
}

func TestEnvoyConfigRefusesBadFlagValuesNamingTheFlag(t *testing.T) {
	base := []string{"envoy", "config", "--tls-cert-file", "/tls/serving.crt", "--tls-private-key-file", "/tls/serving.key",
		"--peer-ca-file", "/tls/cluster-ca.crt", "--envoy-ecds-file", "/ecds/skewgate.yaml"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"misspelt identity mode", []string{"--apiserver", "https://10.0.0.11:6443", "--identity-mode", "frontproxy"}, `--identity-mode "frontproxy": must be "passthrough" or "front-proxy"`},
		{"misspelt schema skew routing", []string{"--apiserver", "https://10.0.0.11:6443", "--schema-skew-routing", "write"}, `--schema-skew-routing "write": must be "reads-and-writes" or "writes"`},
		{"plain-http API server", []string{"--apiserver", "http://10.0.0.11:6443"}, `--apiserver "http://10.0.0.11:6443": must be an https:// URL`},
		{"API server with a fragment", []string{"--apiserver", "https://10.0.0.11:6443#x"}, `--apiserver "https://10.0.0.11:6443#x": must be https://host:port with nothing after the port`},
		{"API server on an unspecified address", []string{"--apiserver", "https://0.0.0.0:6443"}, `--apiserver "https://0.0.0.0:6443": 0.0.0.0 is not a unicast address`},
		{"API server listed twice", []string{"--apiserver", "https://10.0.0.11:6443", "--apiserver", "https://10.0.0.11:6443/"}, `--apiserver "https://10.0.0.11:6443/": listed twice`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append(slices.Clone(base), tc.args...)...)
			if code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, %q; want exit 1 and an error containing %s", code, stderr, tc.want)
			}
		})
	}
}

func TestHelpListsEveryFlagWithTwoDashesAndExitsCleanly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "--help"}, []string{"Usage:\n  skewgate serve [flags]", "      --grace-period duration", "--apiserver stringArray", `(default "x-skewgate-upstream")`, "--retry-after-seconds int", "(default 5)"}},
		{[]string{"serve", "-h"}, []string{"Usage:\n  skewgate serve [flags]", "      --grace-period duration"}},
		{[]string{"envoy", "config", "--help"}, []string{"skewgate envoy config --apiserver URL...", "--xds-ads", `--identity-mode string`}},
		{[]string{"discovery", "merge", "-h"}, []string{"skewgate discovery merge [--id ID]... FILE...\n  skewgate discovery merge --snapshot FILE [--core]", "--id stringArray"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != 0 || stdout != "" {
				t.Errorf("exit %d with output %q; want exit 0 and the help on stderr", code, stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("help lacks %q:\n%s", w, stderr)
				}
			}
			for line := range strings.Lines(stderr) {
				if f := strings.TrimSpace(line); strings.HasPrefix(f, "-") && !strings.HasPrefix(f, "--") {
					t.Errorf("a flag with one dash: %q", line)
				}
			}
		})
	}
}

// Flags may follow positional arguments, as in Kubernetes' commands.
func TestFlagsAfterPositionalArgumentsCount(t *testing.T) {
	dir := t.TempDir()
	groups := map[string][]string{"/v1": {"pods"}, "apps/v1": {"deployments"}}
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "sub-a.json")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, discoverytest.GroupListJSON(groups, false), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, first, _ := runCLI(t, "discovery", "merge", "--id", "one", "--id", "two", a, b)
	code, after, stderr := runCLI(t, "discovery", "merge", a, b, "--id", "one", "--id", "two")
	if code != 0 || after != first || first == "" {
		t.Errorf("flags after the files: exit %d, %s; want the document the flags before them give", code, stderr)
	}
	if code, _, stderr := runCLI(t, "serve", "--tls-cert-file=c", "stray", "--peer-ca-file=ca"); code != cmdline.ExitUsage || !strings.Contains(stderr, "unexpected arguments: stray") {
		t.Errorf("a stray argument between flags: exit %d, %q", code, stderr)
	}
}
