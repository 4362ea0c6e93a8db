package main

import (
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/serve"
	"github.com/skewgate/skewgate/host/internal/shell"
)

// runServe runs the gateway until SIGINT or SIGTERM.
func runServe(args []string, stderr io.Writer) error {
	cfg := serve.NewConfig()
	var logs cmdline.LogFlags
	return shell.RunCommand(serveFlags(&cfg, &logs, stderr), &logs, args, func(logger *slog.Logger) (*serve.Server, error) {
		cfg.Logger = logger
		return serve.New(cfg)
	})
}

// serveFlags is serve's flag set, its help written to stderr.
func serveFlags(cfg *serve.Config, logs *cmdline.LogFlags, stderr io.Writer) *pflag.FlagSet {
	fs := cmdline.NewFlagSet("skewgate serve", "skewgate serve [flags]",
		"Runs the gateway in front of the API servers: it polls every server's discovery, runs the plugin on each request\n"+
			"and proxies to the server the plugin chose.", stderr)
	cfg.AddFlags(fs)
	logs.AddFlags(fs, "info")
	return fs
}
