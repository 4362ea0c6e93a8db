package main

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/serve"
)

// startFiles are the files a command reads at start, each existing but empty:
// every flag naming one is valid, and serve then fails reading the module.
func startFiles(t *testing.T) (dir string, serveBase []string) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"serving.crt", "serving.key", "ca.crt", "kubeconfig", "skewgate.wasm"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	in := func(name string) string { return filepath.Join(dir, name) }
	return dir, []string{"serve", "--tls-cert-file=" + in("serving.crt"), "--tls-private-key-file=" + in("serving.key"),
		"--peer-ca-file=" + in("ca.crt"), "--apiserver=https://10.0.0.1:6443", "--kubeconfig=" + in("kubeconfig"), "--wasm=" + in("skewgate.wasm")}
}

// namesFlag matches an error that names the flag, not merely a longer flag
// the name begins.
func namesFlag(stderr, flag string) bool {
	return regexp.MustCompile(`--` + regexp.QuoteMeta(flag) + `([^a-z0-9-]|$)`).MatchString(stderr)
}

// Every flag of every command has a bad value in this table, and each is
// refused, before anything starts, by an error that names the flag: a flag
// added without its validation fails here.
func TestEveryFlagRefusesABadValueNamingIt(t *testing.T) {
	dir, serveBase := startFiles(t)
	in := func(name string) string { return filepath.Join(dir, name) }
	missing := in("missing")
	envoyBase := []string{"envoy", "config", "--tls-cert-file=/tls/serving.crt", "--tls-private-key-file=/tls/serving.key",
		"--peer-ca-file=/tls/ca.crt", "--apiserver=https://10.0.0.11:6443", "--envoy-ecds-file=/ecds/skewgate.yaml"}

	for _, command := range []struct {
		name string
		// flags is the command's flag set, as it parses it.
		flags func() *pflag.FlagSet
		base  []string
		// baseFails is what the valid base command line fails on, if it does.
		baseFails string
		bad       map[string][]string
	}{
		{
			name: "serve",
			flags: func() *pflag.FlagSet {
				cfg := serve.NewConfig()
				return serveFlags(&cfg, &cmdline.LogFlags{}, io.Discard)
			},
			base:      serveBase,
			baseFails: "--wasm " + in("skewgate.wasm"),
			bad: map[string][]string{
				"bind-address":                          {"--bind-address=localhost"},
				"secure-port":                           {"--secure-port=70000"},
				"tls-cert-file":                         {"--tls-cert-file=" + missing},
				"tls-private-key-file":                  {"--tls-private-key-file=" + missing},
				"client-ca-file":                        {"--client-ca-file=" + missing},
				"apiserver":                             {"--apiserver=http://10.0.0.2:6443"},
				"peer-ca-file":                          {"--peer-ca-file=" + missing},
				"proxy-client-cert-file":                {"--proxy-client-cert-file=" + missing, "--proxy-client-key-file=" + in("serving.key")},
				"proxy-client-key-file":                 {"--proxy-client-cert-file=" + in("serving.crt"), "--proxy-client-key-file=" + missing},
				"kubeconfig":                            {"--kubeconfig=" + missing},
				"peer-server-name":                      {"--peer-server-name=kube_a"},
				"poll-interval":                         {"--poll-interval=5"},
				"readiness-interval":                    {"--readiness-interval=-1s"},
				"grace-period":                          {"--grace-period=-1s"},
				"apiserver-membership":                  {"--apiserver-membership=static"},
				"identity-mode":                         {"--identity-mode=frontproxy"},
				"routing-header":                        {"--routing-header=X-Upper"},
				"retry-after-seconds":                   {"--retry-after-seconds=0"},
				"discovery-authorization-cache":         {"--discovery-authorization-cache=1500ms"},
				"schema-skew-routing":                   {"--schema-skew-routing=reads"},
				"route-writes-by-body":                  {"--route-writes-by-body=maybe"},
				"local-apiserver":                       {"--local-apiserver=http://10.0.0.2:6443"},
				"metrics-bind-address":                  {"--metrics-bind-address=127.0.0.1"},
				"profiling":                             {"--profiling=maybe"},
				"debug-handlers":                        {"--debug-handlers=maybe"},
				"request-log-window":                    {"--request-log-window=0s"},
				"envoy-ecds-file":                       {"--envoy-ecds-file=" + filepath.Join(missing, "skewgate.yaml")},
				"envoy-wasm-path":                       {"--envoy-wasm-path=skewgate.wasm"},
				"envoy-wasm-schema-version":             {"--envoy-ecds-file=" + in("ecds.yaml"), "--envoy-wasm-schema-version=one"},
				"wasm":                                  {"--wasm=" + missing},
				"instances":                             {"--instances=-1"},
				"go-memory-limit-bytes":                 {"--go-memory-limit-bytes=-1"},
				"compilation-cache-dir":                 {"--compilation-cache-dir=" + in("kubeconfig")},
				"request-timeout":                       {"--request-timeout=-1s"},
				"max-requests-inflight":                 {"--max-requests-inflight=-1"},
				"max-requests-inflight-per-client":      {"--max-requests-inflight-per-client=-1"},
				"max-long-running-requests":             {"--max-long-running-requests=-1"},
				"max-long-running-requests-per-client":  {"--max-long-running-requests-per-client=-1"},
				"max-connections":                       {"--max-connections=-1"},
				"max-connections-per-client":            {"--max-connections-per-client=-1"},
				"stalled-stream-timeout":                {"--stalled-stream-timeout=0s"},
				"max-mutating-requests-inflight":        {"--max-mutating-requests-inflight=-1"},
				"max-buffered-request-bytes":            {"--max-buffered-request-bytes=0"},
				"max-buffered-request-bytes-per-client": {"--max-buffered-request-bytes-per-client=0"},
				"plugin-call-timeout":                   {"--plugin-call-timeout=-1s"},
				"shutdown-delay-duration":               {"--shutdown-delay-duration=-1s"},
				"shutdown-timeout":                      {"--shutdown-timeout=-1s"},
				"log-format":                            {"--log-format=xml"},
				"log-level":                             {"--log-level=loud"},
			},
		},
		{
			name: "envoy config",
			flags: func() *pflag.FlagSet {
				o := newEnvoyConfigOptions()
				return envoyConfigFlags(&o, io.Discard)
			},
			base: envoyBase,
			bad: map[string][]string{
				"bind-address":                  {"--bind-address=localhost"},
				"secure-port":                   {"--secure-port=0"},
				"tls-cert-file":                 {"--tls-cert-file=tls/serving.crt"},
				"tls-private-key-file":          {"--tls-private-key-file=tls/serving.key"},
				"client-ca-file":                {"--client-ca-file=tls/client-ca.crt"},
				"apiserver":                     {"--apiserver=http://10.0.0.12:6443"},
				"peer-ca-file":                  {"--peer-ca-file=tls/ca.crt"},
				"proxy-client-cert-file":        {"--proxy-client-cert-file=/tls/proxy.crt", "--proxy-client-key-file=/tls/proxy.key"},
				"proxy-client-key-file":         {"--proxy-client-key-file=/tls/proxy.key"},
				"identity-mode":                 {"--identity-mode=frontproxy"},
				"routing-header":                {"--routing-header=X-Upper"},
				"retry-after-seconds":           {"--retry-after-seconds=0"},
				"discovery-authorization-cache": {"--discovery-authorization-cache=1500ms"},
				"schema-skew-routing":           {"--schema-skew-routing=reads"},
				"route-writes-by-body":          {"--route-writes-by-body=maybe"},
				"admin-port":                    {"--admin-port=70000"},
				"wasm":                          {"--wasm=skewgate.wasm"},
				"envoy-ecds-file":               {"--envoy-ecds-file=ecds/skewgate.yaml"},
				"snapshot":                      {"--envoy-ecds-file=", "--snapshot=" + missing},
				"ecds-resource":                 {"--ecds-resource=maybe"},
				"xds-address":                   {"--envoy-ecds-file=", "--xds-address=skewgate"},
				"xds-server-name":               {"--xds-server-name=kube_a"},
				"xds-ca-file":                   {"--xds-ca-file=xds/ca.crt"},
				"xds-client-cert-file":          {"--xds-client-cert-file=xds/envoy.crt"},
				"xds-client-key-file":           {"--xds-client-key-file=xds/envoy.key"},
				"xds-ads":                       {"--xds-ads=maybe"},
			},
		},
	} {
		t.Run(command.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, command.base...)
			if command.baseFails == "" && code != 0 || command.baseFails != "" && (code != 1 || !strings.Contains(stderr, command.baseFails)) {
				t.Fatalf("the valid base command line: exit %d, %q", code, stderr)
			}
			command.flags().VisitAll(func(f *pflag.Flag) {
				if _, ok := command.bad[f.Name]; !ok {
					t.Errorf("--%s has no bad value in this table", f.Name)
				}
			})
			for flag, args := range command.bad {
				t.Run(flag, func(t *testing.T) {
					code, _, stderr := runCLI(t, append(slices.Clone(command.base), args...)...)
					if code == 0 || !namesFlag(stderr, flag) || command.baseFails != "" && strings.Contains(stderr, command.baseFails) {
						t.Errorf("%q: exit %d, %q; want a refusal naming --%s", args, code, stderr, flag)
					}
				})
			}
		})
	}
}

// The Envoy configuration routes on the header the plugin sets, which serve's
// --routing-header names: envoy config takes the same flag.
func TestEnvoyConfigRoutesOnServesRoutingHeader(t *testing.T) {
	code, stdout, stderr := runCLI(t, "envoy", "config", "--tls-cert-file=/tls/serving.crt", "--tls-private-key-file=/tls/serving.key",
		"--peer-ca-file=/tls/ca.crt", "--apiserver=https://10.0.0.11:6443", "--envoy-ecds-file=/ecds/skewgate.yaml", "--routing-header=x-chosen-upstream")
	if code != 0 || !strings.Contains(stdout, "cluster_header: x-chosen-upstream") || strings.Contains(stdout, "x-skewgate-upstream") {
		t.Errorf("exit %d, %s: want a route on x-chosen-upstream only\n%s", code, stderr, stdout)
	}
}
