// Command skewgate makes Kubernetes API-server rolling upgrades safe at the
// load balancer.
//
//	skewgate serve [flags]              run the standalone gateway
//	skewgate check --to VERSION [flags] find what an upgrade to VERSION would break
//	skewgate discovery merge FILE...    merge servers' own /apis (or /api) documents
//	skewgate envoy config [flags]       render an Envoy configuration for the plugin
//	skewgate version                    print the build's version
//
// The demo (`make demo`) is the separate command skewgate-demo, so that its
// fake servers and fixtures are not part of this binary; the xDS management
// server for a fleet of Envoys is skewgate-xds, so that no gRPC is.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/skewgate/skewgate/host/internal/cmdline"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage:
  skewgate serve [flags]              run the standalone gateway
  skewgate check --to VERSION [flags] find what an upgrade to VERSION would break
  skewgate discovery merge FILE...    merge servers' own /apis (or /api) documents
  skewgate envoy config [flags]       render an Envoy configuration for the plugin
  skewgate version                    print the build's version

Run "skewgate COMMAND --help" for a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return cmdline.ExitUsage
	}
	var err error
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "serve":
		err = runServe(rest, stderr)
	case cmd == "check":
		return runCheck(rest, stdout, stderr)
	case cmd == "discovery" && len(rest) > 0 && rest[0] == "merge":
		err = runDiscoveryMerge(rest[1:], stdout, stderr)
	case cmd == "envoy" && len(rest) > 0 && rest[0] == "config":
		err = runEnvoyConfig(rest[1:], stdout, stderr)
	case cmd == "version":
		fmt.Fprintln(stdout, versionString())
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "skewgate: unknown command %q\n\n%s", strings.Join(args, " "), usage)
		return cmdline.ExitUsage
	}
	return cmdline.ExitCode("skewgate", err, stderr)
}

// versionString names the build: module version, VCS revision, Go version
// and platform.
func versionString() string {
	version, revision := "(devel)", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		var modified bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if len(revision) > 12 {
			revision = revision[:12]
		}
		if revision != "" && modified {
			revision += "-dirty"
		}
	}
	out := "skewgate " + version
	if revision != "" {
		out += " (" + revision + ")"
	}
	return out + " " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}
