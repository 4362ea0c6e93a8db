package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/serve"
)

// runServe runs the gateway until SIGINT or SIGTERM.
func runServe(args []string, stderr io.Writer) error {
	cfg := serve.NewConfig()
	var logs cmdline.LogFlags
	fs := serveFlags(&cfg, &logs, stderr)
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	logger, err := logs.Logger(os.Stderr)
	if err != nil {
		return err
	}
	cfg.Logger = logger
	server, err := serve.New(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return server.Run(ctx)
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
