package check

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOptionsValidateNamesEveryFlagGivenWrongly(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"no target: give --to VERSION, --to-server URL or --to-fixtures DIR"}},
		{[]string{"--to", "v1.36.3", "--to-fixtures", "dir"}, []string{"--to, --to-fixtures: give exactly one target"}},
		{[]string{"--to-server", "http://10.0.0.1:6443"}, []string{`--to-server "http://10.0.0.1:6443": must be https://host[:port]`}},
		{[]string{"--to", "v1.36", "--from-skewgate", "localhost:9090", "-o", "wide", "--chunk-size", "0", "--request-timeout", "0s"}, []string{
			`--from-skewgate "localhost:9090": must be http://host:port, the metrics listener of skewgate serve`,
			`--output "wide": must be table, json or yaml`,
			"--chunk-size 0: must be at least 1",
			"--request-timeout 0s: must be positive",
		}},
		{[]string{"--to", "v1.36", "--from-skewgate", "http://127.0.0.1:9090"}, nil},
	} {
		o := NewOptions()
		if err := newTestFlagSet(o).Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, err := range o.Validate() {
			got = append(got, err.Error())
		}
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%v:\n got %q\nwant %q", tc.args, got, tc.want)
		}
	}
}

// TestBadInputIsExitTwoNamingTheFlag: every input the check cannot work
// from ends it with exit status 2, nothing on stdout, and an error naming the
// flag and the cause.
func TestBadInputIsExitTwoNamingTheFlag(t *testing.T) {
	f := newFakeServer(t, "v1.35.4", "default")
	good := f.kubeconfig(fakeToken)
	empty := t.TempDir()
	onlyAPIs := t.TempDir()
	if err := os.WriteFile(filepath.Join(onlyAPIs, "apis.json"), f.apis, 0o600); err != nil {
		t.Fatal(err)
	}
	malformed := t.TempDir()
	for _, name := range []string{"apis.json", "api.json"} {
		if err := os.WriteFile(filepath.Join(malformed, name), []byte(`{"items":[{"versions":"v1"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	closed := closedAddress(t)
	unreachable := newFakeServer(t, "v1.35.4", "default")
	unreachableConfig := strings.Replace(readFile(t, unreachable.kubeconfig(fakeToken)), unreachable.server.URL, "https://"+closed, 1)
	unreachablePath := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachablePath, []byte(unreachableConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	forbidden := newFakeServer(t, "v1.35.4", "default")
	forbidden.failing["/api/v1/configmaps"] = http.StatusForbidden
	forbidden.add("/api/v1/configmaps", meta("a", "1"), meta("a", "2"))
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"unknown version", []string{"--kubeconfig", good, "--to", "v1.99.0"},
			[]string{"--to v1.99.0: no documents are built in for Kubernetes 1.99", "v1.35.4, v1.36.3, v1.37.2"}},
		{"not a version", []string{"--kubeconfig", good, "--to", "latest"}, []string{`--to "latest": not a Kubernetes version`}},
		{"directory without documents", []string{"--kubeconfig", good, "--to-fixtures", empty},
			[]string{"--to-fixtures " + empty + ": no apis.json"}},
		{"directory without api.json", []string{"--kubeconfig", good, "--to-fixtures", onlyAPIs},
			[]string{"--to-fixtures " + onlyAPIs + ": no api.json"}},
		{"malformed documents", []string{"--kubeconfig", good, "--to-fixtures", malformed},
			[]string{"--to-fixtures " + malformed + ": apis.json:"}},
		{"missing kubeconfig", []string{"--kubeconfig", filepath.Join(empty, "nope"), "--to", "v1.36.3"}, []string{"--kubeconfig:"}},
		{"unreachable cluster", []string{"--kubeconfig", unreachablePath, "--to", "v1.36.3"},
			[]string{"--kubeconfig (https://" + closed + "): the server is unreachable"}},
		{"refused credentials", []string{"--kubeconfig", f.kubeconfig("wrong"), "--to", "v1.36.3"},
			[]string{"--kubeconfig (" + f.server.URL + "): reading /version: the server refused the credentials (401 Unauthorized)"}},
		{"missing permission", []string{"--kubeconfig", forbidden.kubeconfig(fakeToken), "--to", "v1.36.3"},
			[]string{"listing v1 configmaps: forbidden (403: injected failure)", "host/deploy/check/rbac.yaml"}},
		{"unreachable target server", []string{"--kubeconfig", good, "--to-server", "https://" + closed}, []string{"--to-server (https://" + closed + "): the server is unreachable"}},
		{"unreachable skewgate", []string{"--kubeconfig", good, "--to", "v1.36.3", "--from-skewgate", "http://" + closed},
			[]string{"--from-skewgate http://" + closed + ": unreachable"}},
		{"not skewgate", []string{"--kubeconfig", good, "--to", "v1.36.3", "--from-skewgate", f.server.URL},
			[]string{"--from-skewgate " + f.server.URL + ": "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, tc.args...)
			if code != ExitError || out != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
}

func closedAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func readFile(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
