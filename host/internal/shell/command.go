package shell

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/skewgate/skewgate/host/internal/cmdline"
)

// Runner is a command's process, as its New returns it.
type Runner interface {
	Run(ctx context.Context) error
}

// RunCommand parses args with fs, whose logging flags logs holds, has build
// make the process with the logger they ask for, and runs it until SIGINT or
// SIGTERM.
func RunCommand[R Runner](fs *pflag.FlagSet, logs *cmdline.LogFlags, args []string, build func(*slog.Logger) (R, error)) error {
	if err := cmdline.Parse(fs, args, false); err != nil {
		return err
	}
	logger, err := logs.Logger(os.Stderr)
	if err != nil {
		return err
	}
	process, err := build(logger)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return process.Run(ctx)
}
