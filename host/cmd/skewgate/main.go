// Command skewgate makes Kubernetes API-server rolling upgrades safe at the
// load balancer.
//
//	skewgate serve [flags]              run the standalone gateway
//	skewgate discovery merge FILE...    merge servers' own /apis (or /api) documents
//	skewgate envoy config [flags]       render an Envoy configuration for the plugin
//	skewgate version                    print the build's version
//
// The demo (`make demo`) is the separate command skewgate-demo, so that its
// fake servers and fixtures are not part of this binary.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `Usage:
  skewgate serve [flags]              run the standalone gateway
  skewgate discovery merge FILE...    merge servers' own /apis (or /api) documents
  skewgate envoy config [flags]       render an Envoy configuration for the plugin
  skewgate version                    print the build's version

Run "skewgate COMMAND -h" for a command's flags.
`

// exitUsage is the exit code for a command-line mistake.
const exitUsage = 2

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	var err error
	switch cmd, rest := args[0], args[1:]; {
	case cmd == "serve":
		err = runServe(rest, stderr)
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
		return exitUsage
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		return exitUsage
	}
	fmt.Fprintf(stderr, "skewgate: %v\n", err)
	return 1
}

// errUsage marks a command-line mistake that the flag set already reported.
var errUsage = errors.New("usage")

// parseFlags parses args, turning a flag error into errUsage (the flag set has
// printed it) and rejecting stray arguments when positional is false.
func parseFlags(fs *flag.FlagSet, args []string, positional bool) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if !positional && fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return errUsage
	}
	return nil
}

// stringList is a repeatable flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// logFlags are the logging flags every long-running command has.
type logFlags struct {
	format, level string
}

func (l *logFlags) register(fs *flag.FlagSet, defaultLevel string) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", defaultLevel, "minimum log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: must be text or json", l.format)
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
