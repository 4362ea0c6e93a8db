package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/skewgate/skewgate/host/internal/demo"
)

// runDemo starts the demo control plane, skewgate and a plain proxy, prints
// the comparison and keeps running until interrupted.
func runDemo(args []string, stdout, stderr io.Writer) error {
	var opts demo.Options
	var fixtures string
	var logs logFlags
	fs := flag.NewFlagSet("skewgate demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&opts.Requests, "requests", 300, "scripted requests sent through each proxy")
	fs.BoolVar(&opts.ExitAfterReport, "exit-after-report", false, "stop once the report is printed")
	fs.StringVar(&opts.WasmPath, "wasm", "", "plugin module (default: as for serve)")
	fs.StringVar(&fixtures, "fixtures", "", "directory of captured discovery documents (default: the ones built into the binary)")
	fs.StringVar(&opts.GatewayAddress, "listen", "127.0.0.1:0", "host:port skewgate's gateway listens on")
	fs.StringVar(&opts.MetricsAddress, "metrics-listen", "127.0.0.1:0", "host:port of skewgate's status page and metrics")
	fs.StringVar(&opts.CompilationCacheDir, "compilation-cache-dir", "", "directory caching the compiled plugin across runs")
	logs.register(fs, "warn")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if fixtures != "" {
		opts.Source = demo.FixtureSource(os.DirFS(fixtures))
	}
	logger, err := logs.logger(stderr)
	if err != nil {
		return err
	}
	opts.Logger, opts.Out = logger, stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	_, err = demo.Run(ctx, opts)
	return err
}
