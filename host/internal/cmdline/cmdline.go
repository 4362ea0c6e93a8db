// Package cmdline is the command-line convention of skewgate's commands:
// pflag flag sets whose help reads as a Kubernetes component's (a synopsis,
// what the command does, then every flag as --name type, its usage and its
// default), flags accepted before and after positional arguments, -h and
// --help printing that help, and a mistake reported with it.
package cmdline

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// ErrUsage marks a command-line mistake that Parse has reported with the
// command's help; commands exit with status 2 for it.
var ErrUsage = errors.New("usage")

// ExitUsage is the exit status of a command-line mistake.
const ExitUsage = 2

// ExitCode is the exit status of a command that ended with err: 0 for none or
// for help asked for, ExitUsage for a mistake Parse has already reported, and
// 1 for any other error, written to stderr after the command's name.
func ExitCode(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil, errors.Is(err, pflag.ErrHelp):
		return 0
	case errors.Is(err, ErrUsage):
		return ExitUsage
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}

// usageError is a mistake Parse found itself, such as stray arguments: it
// says what, and is ErrUsage.
type usageError struct{ msg string }

func (e usageError) Error() string        { return e.msg }
func (e usageError) Is(target error) bool { return target == ErrUsage }

// NewFlagSet is the flag set of the command name ("skewgate serve"): its help,
// written to output, is synopsis (one or more lines such as "skewgate serve
// [flags]"), description (may be empty) and the flags.
func NewFlagSet(name, synopsis, description string, output io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		var b strings.Builder
		b.WriteString("Usage:\n")
		for line := range strings.Lines(strings.TrimSpace(synopsis)) {
			b.WriteString("  " + line)
		}
		b.WriteString("\n\n")
		if description = strings.TrimSpace(description); description != "" {
			b.WriteString(description + "\n\n")
		}
		b.WriteString("Flags:\n" + fs.FlagUsages())
		fmt.Fprint(fs.Output(), b.String())
	}
	return fs
}

// Parse parses args. -h or --help prints the help and returns pflag.ErrHelp;
// a bad flag, or any positional argument unless positional, is printed with
// the help and returned as an error that is ErrUsage.
func Parse(fs *pflag.FlagSet, args []string, positional bool) error {
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		return err
	case err != nil:
		err = usageError{err.Error()}
	case !positional && fs.NArg() > 0:
		err = usageError{"unexpected arguments: " + strings.Join(fs.Args(), " ")}
	default:
		return nil
	}
	fmt.Fprintf(fs.Output(), "%s: %v\n\n", fs.Name(), err)
	fs.Usage()
	return err
}

// LogFlags are the logging flags of every long-running command.
type LogFlags struct {
	format, level string
}

// AddFlags registers --log-format and --log-level.
func (l *LogFlags) AddFlags(fs *pflag.FlagSet, defaultLevel string) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", defaultLevel, "minimum log level: debug, info, warn or error")
}

// Logger is the logger the flags ask for, writing to w.
func (l *LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
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
