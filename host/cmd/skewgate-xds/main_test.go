package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/xdscontroller"
)

func runCLI(t *testing.T, args ...string) (code int, stderr string) {
	t.Helper()
	var errOut bytes.Buffer
	code = run(args, &errOut)
	return code, errOut.String()
}

// Every flag has a bad value in this table, and each is refused before
// anything starts by an error that names the flag: a flag added without its
// validation fails here.
func TestEveryFlagRefusesABadValueNamingIt(t *testing.T) {
	dir := t.TempDir()
	in := func(name string) string { return filepath.Join(dir, name) }
	for _, name := range []string{"serving.crt", "serving.key", "ca.crt", "kubeconfig"} {
		if err := os.WriteFile(in(name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := in("missing")
	// Valid, but the empty files are no certificates: the start fails there.
	base := []string{"--apiserver=https://10.0.0.1:6443", "--peer-ca-file=" + in("ca.crt"), "--kubeconfig=" + in("kubeconfig"),
		"--xds-tls-cert-file=" + in("serving.crt"), "--xds-tls-private-key-file=" + in("serving.key"), "--xds-client-ca-file=" + in("ca.crt"),
		"--envoy-wasm-path=/etc/skewgate/skewgate.wasm"}
	const baseFails = "--peer-ca-file: no PEM certificate found"
	if code, stderr := runCLI(t, base...); code != 1 || !strings.Contains(stderr, baseFails) {
		t.Fatalf("the valid base command line: exit %d, %q; want only the empty CA refused", code, stderr)
	}
	bad := map[string][]string{
		"apiserver":                     {"--apiserver=http://10.0.0.2:6443"},
		"peer-ca-file":                  {"--peer-ca-file=" + missing},
		"proxy-client-cert-file":        {"--proxy-client-cert-file=" + missing, "--proxy-client-key-file=" + in("serving.key")},
		"proxy-client-key-file":         {"--proxy-client-cert-file=" + in("serving.crt"), "--proxy-client-key-file=" + missing},
		"kubeconfig":                    {"--kubeconfig=" + missing},
		"peer-server-name":              {"--peer-server-name=kube_a"},
		"poll-interval":                 {"--poll-interval=5"},
		"readiness-interval":            {"--readiness-interval=-1s"},
		"grace-period":                  {"--grace-period=-1s"},
		"apiserver-membership":          {"--apiserver-membership=static"},
		"identity-mode":                 {"--identity-mode=frontproxy"},
		"routing-header":                {"--routing-header=X-Upper"},
		"retry-after-seconds":           {"--retry-after-seconds=0"},
		"discovery-authorization-cache": {"--discovery-authorization-cache=1500ms"},
		"schema-skew-routing":           {"--schema-skew-routing=reads"},
		"route-writes-by-body":          {"--route-writes-by-body=maybe"},
		"xds-bind-address":              {"--xds-bind-address=0.0.0.0"},
		"xds-tls-cert-file":             {"--xds-tls-cert-file=" + missing},
		"xds-tls-private-key-file":      {"--xds-tls-private-key-file=" + missing},
		"xds-client-ca-file":            {"--xds-client-ca-file=" + missing},
		"xds-max-streams":               {"--xds-max-streams=-1"},
		"xds-max-streams-per-client":    {"--xds-max-streams-per-client=-1"},
		"envoy-wasm-path":               {"--envoy-wasm-path=skewgate.wasm"},
		"envoy-wasm-schema-version":     {"--envoy-wasm-schema-version=2.0"},
		"metrics-bind-address":          {"--metrics-bind-address=127.0.0.1"},
		"log-format":                    {"--log-format=xml"},
		"log-level":                     {"--log-level=loud"},
	}
	cfg := xdscontroller.NewConfig()
	flags(&cfg, &cmdline.LogFlags{}, io.Discard).VisitAll(func(f *pflag.Flag) {
		if _, ok := bad[f.Name]; !ok {
			t.Errorf("--%s has no bad value in this table", f.Name)
		}
	})
	for flag, args := range bad {
		t.Run(flag, func(t *testing.T) {
			code, stderr := runCLI(t, append(slices.Clone(base), args...)...)
			names := regexp.MustCompile(`--` + regexp.QuoteMeta(flag) + `([^a-z0-9-]|$)`).MatchString(stderr)
			if code == 0 || !names || strings.Contains(stderr, baseFails) {
				t.Errorf("%q: exit %d, %q; want a refusal naming --%s", args, code, stderr, flag)
			}
		})
	}
}

func TestHelpListsTheSharedAndTheOwnFlags(t *testing.T) {
	code, stderr := runCLI(t, "--help")
	for _, want := range []string{"Usage:\n  skewgate-xds --apiserver URL...", "--routing-header string", "--xds-max-streams-per-client int", "(default \"0.0.0.0:18000\")"} {
		if code != 0 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d; help lacks %q:\n%s", code, want, stderr)
		}
	}
}
