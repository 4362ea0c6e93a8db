// Command skewgate-demo shows, in one process, what skewgate fixes: three fake
// API servers of a rolling upgrade, a plain round-robin proxy and skewgate in
// front of them, the same scripted requests through both and the false-404
// rate of each (`make demo`). It is a command of its own so that its fake
// servers, development PKI and embedded fixtures stay out of bin/skewgate.
//
//	skewgate-demo [flags]
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
	"github.com/skewgate/skewgate/host/internal/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run starts the demo control plane, skewgate and a plain proxy, prints the
// comparison and keeps running until ctx ends.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var opts demo.Options
	var fixtures string
	var logs cmdline.LogFlags
	fs := cmdline.NewFlagSet("skewgate-demo", "skewgate-demo [flags]",
		"Runs three fake API servers of a rolling upgrade, a plain round-robin proxy and skewgate in front of\n"+
			"them, sends the same scripted requests through both and reports each one's false-404 rate.", stderr)
	fs.IntVar(&opts.Requests, "requests", 300, "scripted requests sent through each proxy")
	fs.BoolVar(&opts.ExitAfterReport, "exit-after-report", false, "stop once the report is printed")
	fs.StringVar(&opts.WasmPath, "wasm", "", "plugin module (default: as for skewgate serve)")
	fs.StringVar(&fixtures, "fixtures", "", "directory of captured discovery documents (default: the ones built into the binary)")
	fs.StringVar(&opts.GatewayAddress, "listen", "127.0.0.1:0", "host:port skewgate's gateway listens on")
	fs.StringVar(&opts.MetricsAddress, "metrics-listen", "127.0.0.1:0", "host:port of skewgate's status page and metrics")
	fs.StringVar(&opts.CompilationCacheDir, "compilation-cache-dir", "", "directory caching the compiled plugin across runs")
	logs.AddFlags(fs, "warn")
	if err := cmdline.Parse(fs, args, false); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return cmdline.ExitUsage
	}
	if fixtures != "" {
		opts.Source = demo.FixtureSource(os.DirFS(fixtures))
	}
	logger, err := logs.Logger(stderr)
	if err == nil {
		opts.Logger, opts.Out = logger, stdout
		_, err = demo.Run(ctx, opts)
	}
	if err != nil {
		fmt.Fprintf(stderr, "skewgate-demo: %v\n", err)
		return 1
	}
	return 0
}
