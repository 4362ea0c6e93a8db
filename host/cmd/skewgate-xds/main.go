// Command skewgate-xds keeps a fleet of Envoys' skewgate plugin current: its
// controller polls the API servers as skewgate serve's does, and every
// snapshot's plugin configuration is served to the Envoys by an xDS
// management server (go-control-plane; ECDS and ADS, state of the world or
// incremental) over gRPC with mutual TLS.
//
//	skewgate-xds [flags]
//
// It is a command of its own so that skewgate, which runs beside every API
// server in node-local mode, links neither gRPC nor go-control-plane.
package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/shell"
	"github.com/skewgate/skewgate/host/internal/xdscontroller"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	return cmdline.ExitCode("skewgate-xds", serve(args, stderr), stderr)
}

// serve runs the controller and the management server until SIGINT or
// SIGTERM.
func serve(args []string, stderr io.Writer) error {
	cfg := xdscontroller.NewConfig()
	var logs cmdline.LogFlags
	return shell.RunCommand(flags(&cfg, &logs, stderr), &logs, args, func(logger *slog.Logger) (*xdscontroller.Server, error) {
		cfg.Logger = logger
		return xdscontroller.New(cfg)
	})
}

// flags is the command's flag set, its help written to stderr.
func flags(cfg *xdscontroller.Config, logs *cmdline.LogFlags, stderr io.Writer) *pflag.FlagSet {
	fs := cmdline.NewFlagSet("skewgate-xds",
		"skewgate-xds --apiserver URL... --xds-tls-cert-file CERT --xds-tls-private-key-file KEY --xds-client-ca-file CA --envoy-wasm-path PATH [flags]",
		"Polls the API servers' discovery and serves every snapshot's plugin configuration to Envoys over gRPC xDS.\n"+
			"The API server and plugin flags are skewgate serve's; skewgate envoy config --xds-address renders the Envoys' bootstrap.", stderr)
	cfg.AddFlags(fs)
	logs.AddFlags(fs, "info")
	return fs
}
